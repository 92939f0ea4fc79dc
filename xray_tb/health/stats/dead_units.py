"""Dead units: a unit (a conv channel, a linear feature) is dead when its activation stays at or below
a threshold for every sample and position seen over a window of recent health steps (until the window
fills, over the health steps seen so far). ``dead_fraction`` is the share of a layer's units that are dead.

Each health step keeps, on the device, the largest activation of every unit; a unit is dead at a
threshold when the largest of those over the window is at or below it, so :meth:`DeadUnits.dead`
answers for any threshold without recomputing anything.
"""

from __future__ import annotations

import collections
from typing import Optional

import numpy as np
import torch

from xray_tb.health.stats.base import ActivationStatistic, ActivationValue


def unit_maxima(value: ActivationValue) -> Optional[torch.Tensor]:
    """The largest activation of each unit over the batch and every position, as float32."""
    tensor = value.activation
    if tensor is None or tensor.dim() == 0 or tensor.numel() == 0 or not tensor.is_floating_point():
        return None
    dim = value.layer.unit_dim(tensor)
    others = [d for d in range(tensor.dim()) if d != dim]
    return (tensor.amax(dim=others) if others else tensor).float()


class DeadUnits(ActivationStatistic):
    columns = ("dead_fraction",)

    def __init__(self, layers: list[str], window: int, threshold: float):
        super().__init__(layers)
        self.threshold = threshold
        self._windows: list[collections.deque] = [collections.deque(maxlen=window) for _ in layers]

    def compute(self, values: list[ActivationValue], nan: torch.Tensor) -> dict[str, list[torch.Tensor]]:
        fractions = []
        for window, value in zip(self._windows, values):
            maxima = unit_maxima(value)
            if maxima is not None:
                if window and window[-1].shape != maxima.shape:
                    window.clear()
                window.append(maxima)
            fractions.append((self._window_maxima(window) <= self.threshold).float().mean() if window else None)
        return {"dead_fraction": fractions}

    @staticmethod
    def _window_maxima(window: collections.deque) -> torch.Tensor:
        return window[0] if len(window) == 1 else torch.stack(tuple(window)).amax(dim=0)

    def dead(self, threshold: Optional[float] = None) -> dict[str, list[int]]:
        """``{layer: sorted dead unit indices}`` for layers with at least one dead unit (one host sync)."""
        threshold = self.threshold if threshold is None else float(threshold)
        found = {}
        for layer, window in zip(self.layers, self._windows):
            if window:
                maxima = self._window_maxima(window).cpu().numpy()
                units = np.flatnonzero(maxima <= threshold)
                if units.size:
                    found[layer] = [int(u) for u in units]
        return found

    def reset(self, layer: str) -> None:
        """Forget what was seen of ``layer`` (its units changed, e.g. by pruning)."""
        self._windows[self.layers.index(layer)].clear()
