"""``nonfinite``: a NaN or Inf appeared; the finding names the origin (see :mod:`xray_tb.health.nonfinite`)."""

from __future__ import annotations

import math

from xray_tb.health.findings import Hit
from xray_tb.health.rules.base import Rule, RuleInput


class NonFiniteRule(Rule):
    name = "nonfinite"
    defaults: dict = {}

    def check(self, block: RuleInput) -> list[Hit]:
        origin = block.first_nonfinite
        return [] if origin is None else [Hit(origin.layer, origin.step, math.nan)]

    def message(self, hit: Hit) -> str:
        return (
            f"the first non-finite value appeared in {hit.layer} at step {hit.step} (see xray.first_nonfinite): "
            "lower the learning rate, clip gradients, or look for a log/division of zero in the loss"
        )
