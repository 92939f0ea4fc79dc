"""``exploding_gradient``: a layer's gradient norm past a bound, or growing fast.

It holds when grad_l2 exceeds ``max_norm``, or exceeds ``growth`` × its median over the previous
``window`` iterations (once that many were seen). The value is grad_l2.
"""

from __future__ import annotations

import warnings

import numpy as np

from xray_tb.health.findings import Hit
from xray_tb.health.rules.base import Rule, RuleInput, first_hits


class ExplodingGradientRule(Rule):
    name = "exploding_gradient"
    defaults = {"max_norm": 1e3, "growth": 100.0, "window": 20}

    def __init__(self, **settings):
        super().__init__(**settings)
        self._tail = None  # the last `window` rows of grad_l2, across blocks
        self._seen: set = set()

    def validate(self) -> None:
        self.require("max_norm", self.settings["max_norm"] > 0, "a gradient norm > 0")
        self.require("growth", self.settings["growth"] > 1, "a factor > 1 (of the recent median norm)")

    def check(self, block: RuleInput) -> list[Hit]:
        if "grad_l2" not in block.stats or not block.stats["grad_l2"].size:
            return []
        norms = block.stats["grad_l2"]
        window = self.settings["window"]
        if self._tail is None or self._tail.shape[1] != norms.shape[1]:
            self._tail = np.empty((0, norms.shape[1]))
        history = np.concatenate([self._tail, norms])
        start = len(self._tail)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN windows (layers without gradients)
            fast = np.zeros(norms.shape, dtype=bool)
            if len(history) > window:
                # windows[k] holds history rows k .. k + window - 1: the window before row k + window
                windows = np.lib.stride_tricks.sliding_window_view(history[:-1], window, axis=0)
                medians = np.nanmedian(windows, axis=2) if np.isnan(windows).any() else np.median(windows, axis=2)
                rows = np.arange(start, len(history))
                valid = rows - window >= 0
                previous = np.full(norms.shape, np.nan)
                previous[valid] = medians[rows[valid] - window]
                fast = np.isfinite(norms) & (previous > 0) & (norms > self.settings["growth"] * previous)
            held = (np.isfinite(norms) & (norms > self.settings["max_norm"])) | fast
        self._tail = history[-window:]
        return first_hits(held, block.steps, block.layers, norms, self._seen)

    def message(self, hit: Hit) -> str:
        return (
            f"{hit.layer}'s gradient norm reached {hit.value:.3g}: gradients are exploding; "
            "lower the learning rate, clip gradients (torch.nn.utils.clip_grad_norm_) or add normalisation"
        )
