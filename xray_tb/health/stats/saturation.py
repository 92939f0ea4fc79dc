"""``saturation``: the share of an activation's values that sit at its bounds, by activation type.

* sigmoid (and hardsigmoid): within ``margin`` of 0 or 1; tanh (and softsign): within ``margin`` of -1 or 1;
* hardtanh: at ``min_val`` or ``max_val``; ReLU6: at 6 (its zeros count under dead units);
* softmax: the share of rows (along its ``dim``) whose largest value is within ``margin`` of 1.

Other activations (ReLU and the like) have no saturation: no value is written for them.
"""

from __future__ import annotations

from typing import Optional

import torch

from xray_tb.capture.shared_reductions import SharedReductions
from xray_tb.health.stats.base import ActivationStatistic, ActivationValue


def saturated_fraction(activation: str, params: dict, tensor: torch.Tensor, margin: float,
                       reductions: Optional[SharedReductions] = None) -> Optional[torch.Tensor]:
    """The saturated share of ``tensor`` (0-d, on its device), or None when the activation has no bounds.
    On a CPU, through ``reductions``: none when the tensor's extremes (shared with the frames and the
    non-finite checks) lie inside the bounds, else two counting passes."""
    found = bounds(activation, params, margin)
    if found is not None and reductions is not None and tensor.numel() and tensor.dtype != torch.float64:  # torch compares in float32
        count = reductions.count_outside(tensor, *found)
        if count is not None:
            return torch.tensor(count / tensor.numel(), dtype=torch.float32)
    hit = saturated(activation, params, tensor, margin)
    return None if hit is None else hit.float().mean()


def bounds(activation: str, params: dict, margin: float) -> Optional[tuple[Optional[float], float]]:
    """``(low, high)``: a value is saturated when at or below ``low`` (None: no lower bound) or at or
    above ``high``; None for softmax (saturation by rows) and for activations without bounds."""
    kind = activation.lower()
    if kind in ("sigmoid", "hardsigmoid"):
        return margin, 1 - margin
    if kind in ("tanh", "softsign"):
        return -(1 - margin), 1 - margin
    if kind == "hardtanh":
        return params.get("min_val", -1.0), params.get("max_val", 1.0)
    if kind == "relu6":
        return None, 6.0
    return None


def saturated(activation: str, params: dict, tensor: torch.Tensor, margin: float) -> Optional[torch.Tensor]:
    """Which values (rows, for softmax) of ``tensor`` are saturated, or None when the activation has no bounds."""
    values = tensor.float()
    if activation.lower() == "softmax":
        dim = params.get("dim")
        return values.amax(dim=values.dim() - 1 if dim is None else dim) >= 1 - margin
    found = bounds(activation, params, margin)
    if found is None:
        return None
    low, high = found
    hit = values >= high
    return hit if low is None else hit | (values <= low)


class Saturation(ActivationStatistic):
    columns = ("saturation",)

    def __init__(self, layers: list[str], margin: float):
        super().__init__(layers)
        self.margin = margin

    def compute(self, values: list[ActivationValue], nan: torch.Tensor) -> dict[str, list[torch.Tensor]]:
        out = []
        for value in values:
            result = None
            if value.activation is not None and value.activation.is_floating_point() and value.activation.numel():
                result = saturated_fraction(value.layer.activation, value.layer.params, value.activation, self.margin,
                                            value.reductions)
            out.append(result)
        return {"saturation": out}

    def share(self, values: list[ActivationValue]) -> Optional[torch.Tensor]:
        """(saturated count, count) per layer: saturation over the global batch is their sums' ratio."""
        parts = []
        for value in values:
            hit = None
            if value.activation is not None and value.activation.is_floating_point() and value.activation.numel():
                hit = saturated(value.layer.activation, value.layer.params, value.activation, self.margin)
            parts.append(torch.zeros(2, dtype=torch.float64) if hit is None else
                         torch.stack([hit.sum(dtype=torch.float64), torch.tensor(float(hit.numel()), dtype=torch.float64, device=hit.device)]).cpu())
        return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)

    def compute_shared(self, gathered: torch.Tensor, nan: torch.Tensor) -> dict[str, list[torch.Tensor]]:
        sums = gathered.sum(dim=0).view(-1, 2)
        return {"saturation": [None if total == 0 else (count / total).float() for count, total in sums]}
