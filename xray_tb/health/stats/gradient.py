"""Per-iteration statistics of each layer's weight gradient: grad_mean, grad_absmax, grad_var (n - 1),
grad_l1 (sum of |g|) and grad_l2.

On the device, four batched reductions per (device, dtype) group, a fixed number of launches whatever
the number of layers and no copy of the gradients (:mod:`xray_tb.health.reductions`): the L1, L2 and
inf norms (``_foreach_norm``) and the signed sums. On a CPU, small gradients of one shape are reduced
together (:mod:`xray_tb.health.cpu_batches`). The mean and the variance follow on the host, in
float64: mean = sum / n, var = (l2² - n·mean²) / (n - 1), where n counts the values of the weights that
have a gradient: a layer with a frozen weight (an LSTM's ``weight_hh_l0``) or a weight that missed one
backward is taken over the weights that have one (``grad_count``, kept on the device as one cached vector).
"""

from __future__ import annotations

import numpy as np
import torch

from xray_tb.health import reductions
from xray_tb.health.stats.base import IterationStatistic, IterationView, present, scatter


class GradientStatistics(IterationStatistic):
    columns = ("grad_sum", "grad_count", "grad_l1", "grad_l2", "grad_absmax")
    nonfinite_kinds = {"grad_absmax": "weight_grad"}
    shard_ops = {"grad_sum": "sum", "grad_count": "sum", "grad_l1": "sum", "grad_l2": "l2", "grad_absmax": "max"}

    def __init__(self, layers: list[str], sizes: list[int]):
        super().__init__(layers)
        self._sizes = np.asarray(sizes, dtype=np.float64)
        self._summaries = reductions.Summaries()
        self._counts: tuple = (None, None, None)  # (weights list, positions or None for all, count vector)

    def compute(self, view: IterationView) -> dict[str, list[torch.Tensor]]:
        indices, grads = present(view.grads)
        size = len(view.grads)
        if not grads:
            return {column: [None] * size for column in self.columns}
        weights = view.weights  # a gradient has its weight's shape, dtype and device: the CPU plan is kept for them
        every = len(indices) == len(weights)
        owners = weights if every else [weights[i] for i in indices]
        results = self._summaries(grads, ("sum", "l1", "l2", "absmax"), owners)
        results["count"] = self._count(weights, owners, None if every else tuple(indices))
        return {column: scatter(results[column[len("grad_"):]], indices, size) for column in self.columns}

    def _count(self, weights: list, owners: list, positions) -> torch.Tensor:
        """The values of each weight with a gradient (a sparse one's too: its mean is over its whole size),
        as one vector on their device, made again only when the weights or the positions change."""
        cached_weights, cached_positions, counts = self._counts
        if cached_weights is not weights or cached_positions != positions:
            counts = torch.tensor([float(weight.numel()) for weight in owners], device=owners[0].device)
            self._counts = (weights, positions, counts)
        return counts

    def finalize(self, columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        counted = columns.get("grad_count")
        n = self._sizes if counted is None else np.where(np.isfinite(counted) & (counted > 0), counted, self._sizes)
        l2 = columns["grad_l2"]
        mean = columns["grad_sum"] / n
        with np.errstate(all="ignore"):
            var = np.where(n > 1, np.maximum(l2 * l2 - n * mean * mean, 0.0) / np.maximum(n - 1, 1), np.nan)
            var = np.where(np.isfinite(l2) & np.isfinite(mean), var, np.nan)  # a NaN or Inf gradient: NaN, as torch.var
        return {"grad_mean": mean, "grad_absmax": columns["grad_absmax"], "grad_var": var, "grad_l1": columns["grad_l1"], "grad_l2": l2}
