"""``saturation``: at a health step, more than ``fraction`` of a layer's activation values saturated
(see :mod:`xray_tb.health.stats.saturation`). The value is the saturated share."""

from __future__ import annotations

import numpy as np

from xray_tb.health.findings import Hit
from xray_tb.health.rules.base import SHARE, Rule, RuleInput, first_hits


class SaturationRule(Rule):
    name = "saturation"
    defaults = {"fraction": 0.5}

    def __init__(self, **settings):
        super().__init__(**settings)
        self._seen: set = set()

    def validate(self) -> None:
        self.require("fraction", 0 <= self.settings["fraction"] < 1, SHARE)

    def check(self, block: RuleInput) -> list[Hit]:
        values = block.health_stats.get("saturation")
        if values is None or not len(block.health_steps):
            return []
        held = np.isfinite(values) & (values > self.settings["fraction"])
        return first_hits(held, block.health_steps, block.health_layers, values, self._seen)

    def message(self, hit: Hit) -> str:
        return (
            f"{hit.value:.0%} of {hit.layer}'s activations are saturated, where their gradient vanishes: "
            "scale the inputs, add normalisation before the activation, or lower the initial weights"
        )
