"""Variance across channels: for each index along a chosen dimension of the activation (by default the
unit dimension: a conv's channels, a linear layer's features), the variance (n - 1) of the activation
over every other dimension. The per-channel vector is stored whole at each health step (for the tab to
draw), and its mean is the ``channel_var`` statistic."""

from __future__ import annotations

from typing import Optional

import torch

from xray_tb.health.stats.base import ActivationStatistic, ActivationValue


def channel_variances(tensor: torch.Tensor, dim: int) -> torch.Tensor:
    """The variance of ``tensor`` over every dimension but ``dim``, one value per index along ``dim``."""
    moved = tensor.float().movedim(dim, 0)
    return moved.reshape(moved.shape[0], -1).var(dim=1)


class ChannelVariance(ActivationStatistic):
    columns = ("channel_var",)

    def __init__(self, layers: list[str], dim: Optional[int]):
        super().__init__(layers)
        self.dim = dim
        self._last: list[Optional[torch.Tensor]] = [None] * len(layers)

    def compute(self, values: list[ActivationValue], nan: torch.Tensor) -> dict[str, list[torch.Tensor]]:
        means = []
        for i, value in enumerate(values):
            tensor = value.activation
            vector = None
            if tensor is not None and tensor.dim() >= 2 and tensor.is_floating_point():
                dim = value.layer.unit_dim(tensor) if self.dim is None else self.dim
                if -tensor.dim() <= dim < tensor.dim() and tensor.numel() > tensor.shape[dim]:
                    vector = channel_variances(tensor, dim)
            self._last[i] = vector
            means.append(None if vector is None else vector.mean())
        return {"channel_var": means}

    def vectors(self) -> dict[str, list[torch.Tensor]]:
        return {"channel_var": list(self._last)}
