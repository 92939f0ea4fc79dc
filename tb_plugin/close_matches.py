"""Close matches of a mistyped name, for error messages ("did you mean 'conv1', 'conv2'?"), and the
recorded steps nearest a step that was not recorded."""

from __future__ import annotations

import bisect
import difflib
from collections.abc import Iterable


def close_matches(word: str, candidates: Iterable[str], n: int = 5, cutoff: float = 0.5) -> list[str]:
    """Up to ``n`` of ``candidates`` at least ``cutoff`` alike ``word`` (difflib's ratio), most alike
    first; equally alike ones keep the candidates' order (``difflib.get_close_matches`` puts them in
    reverse alphabetical order: 'conv2' before 'conv1')."""
    matcher = difflib.SequenceMatcher()
    matcher.set_seq2(word)
    scored = []
    for index, candidate in enumerate(candidates):
        matcher.set_seq1(candidate)
        if matcher.real_quick_ratio() >= cutoff and matcher.quick_ratio() >= cutoff and matcher.ratio() >= cutoff:
            scored.append((-matcher.ratio(), index, candidate))
    return [candidate for _, _, candidate in sorted(scored)[:n]]


def nearest_steps(steps: list[int], step: int, n: int = 4) -> list[int]:
    """The ``n`` of the ascending ``steps`` around ``step`` (half before it, half from it on)."""
    at = bisect.bisect_left(steps, step)
    return steps[max(at - n // 2, 0): at + n // 2]
