"""What a finding rule is: a class with a ``name``, documented ``defaults`` (overridable through
``HealthOptions(rules={name: {...}})``, their types judged from the defaults, their ranges checked by the
rule's ``validate()``), and ``check(block)`` returning where it holds.

Rules see the statistics as they reach the host, one block at a time, with every step in it, so a
finding's step is the step where the rule first held even though it is judged later. A rule keeps what
it needs of earlier blocks (streaks, trailing windows) itself.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any, Optional

import numpy as np

from tb_plugin.close_matches import close_matches
from xray_tb.numeric import is_number, plain_number, whole
from xray_tb.health.findings import Hit, NonFinite


@dataclasses.dataclass
class RuleInput:
    """One block of statistics on the host: per-iteration ones (steps × weighted layers) and health-step
    ones (health steps × activation layers), NaN where absent."""

    steps: np.ndarray
    layers: list[str]
    stats: dict[str, np.ndarray]
    sizes: np.ndarray
    health_steps: np.ndarray
    health_layers: list[str]
    health_stats: dict[str, np.ndarray]
    first_nonfinite: Optional[NonFinite]
    #: The health layers whose activation maps every value <= 0 to 0 (ReLU, ReLU6): there a unit that
    #: stays at or below 0 passes no gradient, so it is dead; a Tanh unit below 0 still learns.
    zero_clamped: frozenset = frozenset()
    #: The steps whose batch held a NaN or Inf (seen on a CPU where the sentinel found one: health/forward_replay.py).
    nonfinite_inputs: frozenset = frozenset()


class Rule:
    """A finding rule. A rule whose settings have a range checks them in :meth:`validate`."""

    name = ""
    defaults: dict[str, Any] = {}

    def __init__(self, **settings: Any):
        unknown = sorted(set(settings) - set(self.defaults))
        if unknown and not self.defaults:
            raise ValueError(f"rule {self.name!r} takes no settings, got {', '.join(map(repr, unknown))}: it can only be "
                             f"switched off, with HealthOptions(rules={{{self.name!r}: False}})")
        if unknown:
            raise ValueError(f"rule {self.name!r} has no setting {unknown_names(unknown, self.defaults)}; "
                             f"its settings: {', '.join(self.defaults)}")
        for key, value in settings.items():
            expected = _expected(self.defaults[key], value)
            if expected:
                raise ValueError(_refused(self.name, key, value, expected))
        self.settings = {**self.defaults, **{key: plain_number(value) for key, value in settings.items()}}
        self.validate()

    def validate(self) -> None:
        """Check the settings' ranges with :meth:`require` (their types are checked already)."""

    def require(self, key: str, ok: bool, allowed: str) -> None:
        """Raise, naming the rule, setting ``key``, its value and what it takes (``allowed``), unless ``ok``."""
        if not ok:
            raise ValueError(_refused(self.name, key, self.settings[key], allowed))

    def check(self, block: RuleInput) -> list[Hit]:
        raise NotImplementedError

    def message(self, hit: Hit) -> str:
        raise NotImplementedError


def unknown_names(unknown: Iterable[str], known: Iterable[str]) -> str:
    """``'a', 'b' (did you mean 'c'?)``: the ``unknown`` names, and the ``known`` ones close to them, if any
    (only the closest where it is a likely typo)."""
    known = list(known)
    close = dict.fromkeys(match for name in unknown
                          for match in close_matches(name, known, n=1, cutoff=0.8) or close_matches(name, known, n=3))
    return ", ".join(map(repr, unknown)) + (f" (did you mean {', '.join(map(repr, close))}?)" if close else "")


#: What a ``fraction`` setting takes.
SHARE = "a share in [0, 1) (False switches the rule off)"


def _refused(rule: str, key: str, value: Any, allowed: str) -> str:
    return f"HealthOptions(rules={{{rule!r}: {{{key!r}: ...}}}}) takes {allowed}, got {value!r}"


def _expected(default: Any, value: Any) -> str:
    """What a setting takes, judged from its default, when ``value`` is not that; "" when it is. An int
    default (a count of steps) takes a whole number >= 1, a float one any finite number, a None one
    (``after``) None or a whole number >= 1."""
    count = whole(value)
    if isinstance(default, bool):
        return "" if isinstance(value, bool) else "True or False"
    if isinstance(default, int) or default is None:
        ok = (count is not None and count >= 1) or (default is None and value is None)
        return "" if ok else "a whole number >= 1" + (" or None" if default is None else "")
    if isinstance(default, float):
        return "" if is_number(value) and math.isfinite(value) else "a finite number"
    return ""


def streaks(flags: np.ndarray, carry: np.ndarray) -> np.ndarray:
    """Length of the run of True ending at each row, per column, continuing ``carry`` (the runs ending
    at the previous block's last row)."""
    flags = flags.astype(bool)
    counts = np.cumsum(flags, axis=0)
    resets = np.maximum.accumulate(np.where(~flags, counts, 0), axis=0)
    runs = counts - resets
    unbroken = ~np.maximum.accumulate(~flags, axis=0)
    return runs + np.where(unbroken, carry[None, :], 0)


class Streaks:
    """:func:`streaks` carried from block to block (per column; a change in the number of columns
    starts over)."""

    def __init__(self):
        self._carry: Optional[np.ndarray] = None

    def update(self, flags: np.ndarray) -> np.ndarray:
        """The run lengths of this block's rows, continuing the previous block's."""
        if self._carry is None or self._carry.shape[0] != flags.shape[1]:
            self._carry = np.zeros(flags.shape[1], dtype=np.int64)
        runs = streaks(flags, self._carry)
        self._carry = runs[-1].copy()
        return runs


def first_hits(condition: np.ndarray, steps: np.ndarray, layers: list[str], values: np.ndarray, seen: set) -> list[Hit]:
    """Per layer where ``condition`` holds: for a layer not in ``seen`` (updated), a hit at the first such
    row; then, for every layer, one at the last such row (so a finding's latest value is kept current,
    however long the block)."""
    hits = []
    for column in np.flatnonzero(condition.any(axis=0)):
        rows = np.flatnonzero(condition[:, column])
        chosen = [rows[-1]] if layers[column] in seen else list(dict.fromkeys((rows[0], rows[-1])))
        seen.add(layers[column])
        hits.extend(Hit(layers[column], int(steps[row]), float(values[row, column])) for row in chosen)
    return hits
