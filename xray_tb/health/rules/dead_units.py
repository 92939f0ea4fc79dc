"""``dead_units``: a layer's dead fraction over ``fraction``, judged once ``after`` health steps were seen
(by default the dead-unit window, so a unit is not called dead on one batch). The value is the fraction.
Only for layers whose activation maps every value <= 0 to 0 (ReLU, ReLU6), where such a unit passes no
gradient: a Tanh or GELU unit that stays below 0 still learns (``xray.dead_units()`` lists it all the same)."""

from __future__ import annotations

import numpy as np

from xray_tb.health.findings import Hit
from xray_tb.health.rules.base import SHARE, Rule, RuleInput, first_hits


class DeadUnitsRule(Rule):
    name = "dead_units"
    defaults = {"fraction": 0.1, "after": None}

    def __init__(self, window: int = 1, **settings):
        super().__init__(**settings)
        self._after = self.settings["after"] if self.settings["after"] is not None else window
        self._counts = None
        self._seen: set = set()

    def validate(self) -> None:
        self.require("fraction", 0 <= self.settings["fraction"] < 1, SHARE)

    def check(self, block: RuleInput) -> list[Hit]:
        fractions = block.health_stats.get("dead_fraction")
        if fractions is None or not len(block.health_steps):
            return []
        seen = np.isfinite(fractions)
        if self._counts is None or self._counts.shape[0] != seen.shape[1]:
            self._counts = np.zeros(seen.shape[1], dtype=np.int64)
        counts = self._counts[None, :] + np.cumsum(seen, axis=0)
        self._counts = counts[-1].copy()
        clamped = np.asarray([layer in block.zero_clamped for layer in block.health_layers], dtype=bool)
        held = seen & (counts >= self._after) & (fractions > self.settings["fraction"]) & clamped[None, :]
        return first_hits(held, block.health_steps, block.health_layers, fractions, self._seen)

    def message(self, hit: Hit) -> str:
        if hit.value >= 1.0:
            return (
                f"every unit of {hit.layer} is dead over the recent health steps: nothing flows through it, and the "
                "gradients of the layers before it are zero. Do not prune it (that would cut the network there): "
                "lower the learning rate (a too-large step kills ReLU layers), or change the initialisation, the "
                "inputs' scale or the activation (LeakyReLU)"
            )
        return (
            f"{hit.value:.0%} of {hit.layer}'s units never fired over the recent health steps: "
            "see xray.dead_units(); prune them with xray.prune(dry_run=False), or try a lower learning rate, "
            "LeakyReLU or another initialisation"
        )
