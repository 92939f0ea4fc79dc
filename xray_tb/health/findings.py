"""Findings: what training health names as wrong, each once per rule and layer, with the step first seen."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional


@dataclasses.dataclass(frozen=True)
class NonFinite:
    """Where non-finite values started: the step, the layer, and the kind (weight, bias, output,
    activation, weight_grad or bias_grad) in which the origin was seen."""

    step: int
    layer: str
    kind: str


@dataclasses.dataclass
class Finding:
    """One problem a rule found: ``rule``, ``layer``, ``step`` (first seen), ``value`` (at the latest
    step it held), ``message`` (what it means and what to try) and ``last_step`` (latest step it held)."""

    rule: str
    layer: str
    step: int
    value: float
    message: str
    last_step: Optional[int] = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Finding":
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in fields})


@dataclasses.dataclass(frozen=True)
class Hit:
    """A rule holding for a layer at a step, with the value that made it hold."""

    layer: str
    step: int
    value: float


class FindingBook:
    """The findings so far, in the order first seen; :attr:`changed` until the next :meth:`written`."""

    def __init__(self):
        self._by_key: dict[tuple[str, str], Finding] = {}
        self.changed = False

    def add(self, rule: str, hit: Hit, message: str) -> None:
        key = (rule, hit.layer)
        found = self._by_key.get(key)
        if found is None:
            self._by_key[key] = Finding(rule, hit.layer, int(hit.step), float(hit.value), message, int(hit.step))
            self.changed = True
        elif hit.step >= (found.last_step or found.step) and (hit.step != found.last_step or not _same(hit.value, found.value)):
            found.last_step, found.value, found.message = int(hit.step), float(hit.value), message
            self.changed = True

    def findings(self) -> list[Finding]:
        return [dataclasses.replace(finding) for finding in self._by_key.values()]

    def inherit(self, earlier: list[dict[str, Any]], before: int) -> None:
        """Keep the findings of an earlier process first seen before step ``before`` (the steps from
        ``before`` on are recorded again), ahead of this one's; marks the book changed either way."""
        kept = {}
        for data in earlier:
            try:
                finding = Finding.from_dict(data)
            except TypeError:
                continue
            if isinstance(finding.step, int) and finding.step < before:
                if finding.last_step is not None and finding.last_step >= before:
                    finding.last_step = before - 1  # held until the resumed steps at least
                kept[(finding.rule, finding.layer)] = finding
        kept.update(self._by_key)
        self._by_key = kept
        self.changed = True

    def written(self) -> None:
        self.changed = False


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))
