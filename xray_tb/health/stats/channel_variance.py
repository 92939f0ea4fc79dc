"""Variance across channels: for each index along a chosen dimension of the activation (by default the
unit dimension: a conv's channels, a linear layer's features), the variance (n - 1) of the activation
over every other dimension. The per-channel vector is stored whole at each health step (for the tab to
draw), and its mean is the ``channel_var`` statistic."""

from __future__ import annotations

import warnings
from typing import Optional

import numpy as np
import torch

from xray_tb.capture.shared_reductions import SharedReductions
from xray_tb.health.stats.base import ActivationStatistic, ActivationValue
from xray_tb.user_frame import user_stacklevel


def channel_variances(tensor: torch.Tensor, dim: int, reductions: Optional[SharedReductions] = None) -> torch.Tensor:
    """The variance of ``tensor`` over every dimension but ``dim``, one value per index along ``dim``.

    On a CPU, for float32 and float64, one pass: per-channel sums and sums of squares, each reduced
    first along the contiguous dimensions after ``dim`` (a conv's positions) or over a few rows at a
    time (a linear layer's features) (half the time of two passes; through ``reductions``, whose sums
    the frame statistics of the same tensor reuse), falling back to two passes where a channel's mean
    is large against its spread (cancellation) or a value is not finite. Otherwise, and on an
    accelerator (where that check would cost a sync), two passes (the mean, then the squared
    deviations from it): as stable as ``Tensor.var`` and faster than its multi-dimension reduction.
    """
    dim = dim % tensor.dim()
    sums = (SharedReductions() if reductions is None else reductions).channel_sums(tensor, dim)  # float32 and float64 only
    if sums is not None:
        variances = _one_pass(*sums)
        if variances is not None:
            return variances
    values = tensor.float()
    others = [d for d in range(tensor.dim()) if d != dim]
    deviations = values - values.mean(dim=others, keepdim=True)
    return deviations.square_().sum(dim=others) / (values.numel() // values.shape[dim] - 1)


def _one_pass(sums: np.ndarray, square_sums: np.ndarray, count: int) -> Optional[torch.Tensor]:
    if count < 2:
        return None
    with np.errstate(all="ignore"):
        mean = sums / count
        variances = (square_sums - sums * mean) / (count - 1)
        if not (variances * 100.0 >= mean * mean).all():  # cancellation, or a value not finite
            return None
    return torch.from_numpy(np.maximum(variances, 0.0).astype(np.float32))


class ChannelVariance(ActivationStatistic):
    columns = ("channel_var",)

    def __init__(self, layers: list[str], dim: Optional[int]):
        super().__init__(layers)
        self.dim = dim
        self._last: list[Optional[torch.Tensor]] = [None] * len(layers)
        self._warned = False

    def compute(self, values: list[ActivationValue], nan: torch.Tensor) -> dict[str, list[torch.Tensor]]:
        if self.dim is not None and not self._warned:
            self._warn_out_of_range(values)
        means = []
        for i, value in enumerate(values):
            found = self._measured(value)
            vector = None if found is None else channel_variances(*found, value.reductions)
            self._last[i] = vector
            means.append(None if vector is None else vector.mean())
        return {"channel_var": means}

    def _warn_out_of_range(self, values: list[ActivationValue]) -> None:
        """Once: the layers whose activation has no dimension ``channel_dim`` (not measured there)."""
        outside = [f"{v.layer.name} ({v.activation.dim()}-D)" for v in values
                   if v.activation is not None and not -v.activation.dim() <= self.dim < v.activation.dim()]
        if outside:
            self._warned = True
            warnings.warn(f"HealthOptions(channel_dim={self.dim}) is not a dimension of the activations of {', '.join(outside[:5])}"
                          f"{', ...' if len(outside) > 5 else ''}: their channel variance is not measured. Pass a dimension "
                          "they have, or None (the unit dimension of each layer)", stacklevel=user_stacklevel())

    def _measured(self, value: ActivationValue) -> Optional[tuple[torch.Tensor, int]]:
        """The activation and the dimension of its channels, when it has a variance to measure."""
        tensor = value.activation
        if tensor is not None and tensor.dim() >= 2 and tensor.is_floating_point():
            dim = value.layer.unit_dim(tensor) if self.dim is None else self.dim
            if -tensor.dim() <= dim < tensor.dim() and tensor.numel() > tensor.shape[dim]:
                return tensor, dim % tensor.dim()
        return None

    def share(self, values: list[ActivationValue]) -> Optional[torch.Tensor]:
        """Per layer: the channel count c, then this rank's count n, the c channel means and the c sums of
        squared deviations (Chan's parallel formula combines them exactly; c = 0 for a layer not measured)."""
        parts = []
        for value in values:
            found = self._measured(value)
            if found is None:
                parts.append(torch.zeros(1, dtype=torch.float64))
                continue
            tensor, dim = found
            others = [d for d in range(tensor.dim()) if d != dim]
            values_ = tensor.double()
            mean = values_.mean(dim=others)
            squares = (values_ - values_.mean(dim=others, keepdim=True)).square_().sum(dim=others)
            count = tensor.numel() // tensor.shape[dim]
            parts.append(torch.cat([torch.tensor([float(tensor.shape[dim]), float(count)], dtype=torch.float64), mean.cpu(), squares.cpu()]))
        return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)

    def compute_shared(self, gathered: torch.Tensor, nan: torch.Tensor) -> dict[str, list[torch.Tensor]]:
        means, start = [], 0
        for i in range(len(self.layers)):
            channels = int(gathered[:, start].max())
            if not channels:
                self._last[i] = None
                means.append(None)
                start += 1
                continue
            block = gathered[:, start + 1:start + 2 + 2 * channels]  # ranks × (n, means, squares)
            start += 2 + 2 * channels
            counts, rank_means, squares = block[:, :1], block[:, 1:1 + channels], block[:, 1 + channels:]
            total = counts.sum()
            mean = (counts * rank_means).sum(dim=0) / total
            spread = squares.sum(dim=0) + (counts * (rank_means - mean).square()).sum(dim=0)
            vector = (spread / (total - 1)).float().to(nan.device)
            self._last[i] = vector
            means.append(vector.mean())
        return {"channel_var": means}

    def vectors(self) -> dict[str, list[torch.Tensor]]:
        last, self._last = self._last, [None] * len(self.layers)  # handed over: nothing held between health steps
        return {"channel_var": last}
