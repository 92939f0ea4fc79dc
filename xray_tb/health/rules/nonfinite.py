"""``nonfinite``: a NaN or Inf appeared; the finding names the origin (see :mod:`xray_tb.health.nonfinite`)."""

from __future__ import annotations

import math

from xray_tb.health.findings import Hit
from xray_tb.health.rules.base import Rule, RuleInput


class NonFiniteRule(Rule):
    name = "nonfinite"
    defaults: dict = {}

    def __init__(self, **settings):
        super().__init__(**settings)
        self._from_inputs: set[int] = set()  # steps whose batch held the NaN/Inf

    def check(self, block: RuleInput) -> list[Hit]:
        origin = block.first_nonfinite
        self._from_inputs |= block.nonfinite_inputs
        return [] if origin is None else [Hit(origin.layer, origin.step, math.nan)]

    def message(self, hit: Hit) -> str:
        where = f"the first non-finite value appeared in {hit.layer} at step {hit.step} (see xray.first_nonfinite): "
        if hit.step in self._from_inputs:
            return where + ("the batch of that step held NaN or Inf values, which entered there: check the data "
                            "(a corrupt sample, a division by zero or a log of zero in preprocessing)")
        return where + "lower the learning rate, clip gradients, or look for a log/division of zero in the loss"
