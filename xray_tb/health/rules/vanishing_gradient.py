"""``vanishing_gradient``: a layer's gradient far smaller than the largest layer's, sustained.

Gradients are compared per element (RMS = grad_l2 / sqrt(n)), so layer sizes do not matter. It holds
for a layer when its RMS is below ``ratio`` × the largest layer's RMS on ``patience`` consecutive
iterations. The value is that ratio.
"""

from __future__ import annotations

import numpy as np

from xray_tb.health.findings import Hit
from xray_tb.health.rules.base import Rule, RuleInput, Streaks, first_hits


class VanishingGradientRule(Rule):
    name = "vanishing_gradient"
    defaults = {"ratio": 1e-3, "patience": 20}

    def __init__(self, **settings):
        super().__init__(**settings)
        self._streaks = Streaks()
        self._seen: set = set()

    def validate(self) -> None:
        self.require("ratio", 0 < self.settings["ratio"] < 1, "a ratio in (0, 1) of the largest layer's gradient")

    def check(self, block: RuleInput) -> list[Hit]:
        if "grad_l2" not in block.stats or not block.stats["grad_l2"].size:
            return []
        with np.errstate(all="ignore"):
            rms = block.stats["grad_l2"] / np.sqrt(block.sizes)[None, :]
            largest = np.max(np.where(np.isfinite(rms), rms, -np.inf), axis=1, keepdims=True)
            ratio = rms / largest
        below = np.isfinite(ratio) & (largest > 0) & (ratio < self.settings["ratio"])
        runs = self._streaks.update(below)
        return first_hits(runs >= self.settings["patience"], block.steps, block.layers, ratio, self._seen)

    def message(self, hit: Hit) -> str:
        return (
            f"{hit.layer}'s gradient is {hit.value:.1e} of the largest layer's (per element), sustained: it barely learns; "
            "try ReLU-family activations, a normalisation layer, residual connections or a better initialisation"
        )
