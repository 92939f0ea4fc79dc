"""``update_ratio``: the median of a layer's last ``window`` measured update ratios (‖Δw‖ / ‖w‖) above
``high`` or below ``low``; about 1e-3 is usual. The value is that median."""

from __future__ import annotations

import numpy as np

from xray_tb.health.findings import Hit
from xray_tb.health.rules.base import Rule, RuleInput


class UpdateRatioRule(Rule):
    name = "update_ratio"
    defaults = {"low": 1e-6, "high": 0.1, "window": 10}

    def __init__(self, **settings):
        super().__init__(**settings)
        self._recent: dict[str, np.ndarray] = {}  # each layer's last window - 1 measured ratios

    def validate(self) -> None:
        low, high = self.settings["low"], self.settings["high"]
        self.require("low", low >= 0, "a ratio >= 0")
        self.require("high", high > low, f"a ratio above low ({low!r})")

    def check(self, block: RuleInput) -> list[Hit]:
        ratios = block.stats.get("update_ratio")
        if ratios is None:
            return []
        hits = []
        window, low, high = self.settings["window"], self.settings["low"], self.settings["high"]
        for column, layer in enumerate(block.layers):
            rows = np.flatnonzero(np.isfinite(ratios[:, column]))
            if not rows.size:
                continue
            carried = self._recent.get(layer, np.zeros(0))
            series = np.concatenate([carried, ratios[rows, column]])
            self._recent[layer] = series[len(series) - (window - 1):] if window > 1 else series[:0]
            if len(series) < window:
                continue
            ends = np.arange(window - 1, len(series))  # the series index each window ends at
            medians = np.median(np.lib.stride_tricks.sliding_window_view(series, window), axis=1)
            new = ends >= len(carried)
            ends, medians = ends[new], medians[new]
            outside = np.flatnonzero((medians > high) | (medians < low))
            for k in dict.fromkeys((outside[0], outside[-1])) if outside.size else ():
                hits.append(Hit(layer, int(block.steps[rows[ends[k] - len(carried)]]), float(medians[k])))
        return hits

    def message(self, hit: Hit) -> str:
        direction = "large" if hit.value > self.settings["high"] else "small"
        advice = "lower the learning rate" if direction == "large" else "raise the learning rate, or check the layer is meant to train"
        return f"{hit.layer}'s updates are {hit.value:.1e} of its weight per step, far {direction}er than the usual ~1e-3: {advice}"
