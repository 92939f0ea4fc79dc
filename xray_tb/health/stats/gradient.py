"""Per-iteration statistics of each layer's weight gradient: grad_mean, grad_absmax, grad_var (n - 1),
grad_l1 (sum of |g|) and grad_l2.

On the device, four batched reductions per (device, dtype) group, a fixed number of launches whatever
the number of layers and no copy of the gradients (:mod:`xray_tb.health.reductions`): the L1, L2 and
inf norms (``_foreach_norm``) and the signed sums. On a CPU, small gradients of one shape are reduced
together (:mod:`xray_tb.health.cpu_batches`). The mean and the variance follow on the host, in
float64: mean = sum / n, var = (l2² - n·mean²) / (n - 1).
"""

from __future__ import annotations

import numpy as np
import torch

from xray_tb.health import reductions
from xray_tb.health.stats.base import IterationStatistic, IterationView, present, scatter


class GradientStatistics(IterationStatistic):
    columns = ("grad_sum", "grad_l1", "grad_l2", "grad_absmax")
    nonfinite_kinds = {"grad_absmax": "weight_grad"}
    shard_ops = {"grad_sum": "sum", "grad_l1": "sum", "grad_l2": "l2", "grad_absmax": "max"}

    def __init__(self, layers: list[str], sizes: list[int]):
        super().__init__(layers)
        self._sizes = np.asarray(sizes, dtype=np.float64)
        self._summaries = reductions.Summaries()

    def compute(self, view: IterationView) -> dict[str, list[torch.Tensor]]:
        indices, grads = present(view.grads)
        size = len(view.grads)
        if not grads:
            return {column: [None] * size for column in self.columns}
        weights = view.weights  # a gradient has its weight's shape, dtype and device: the CPU plan is kept for them
        owners = weights if len(indices) == len(weights) else [weights[i] for i in indices]
        results = self._summaries(grads, ("sum", "l1", "l2", "absmax"), owners)
        return {column: scatter(results[column[len("grad_"):]], indices, size) for column in self.columns}

    def finalize(self, columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        n = self._sizes
        l2 = columns["grad_l2"]
        mean = columns["grad_sum"] / n
        with np.errstate(all="ignore"):
            var = np.where(n > 1, np.maximum(l2 * l2 - n * mean * mean, 0.0) / np.maximum(n - 1, 1), np.nan)
            var = np.where(np.isfinite(l2) & np.isfinite(mean), var, np.nan)  # a NaN or Inf gradient: NaN, as torch.var
        return {"grad_mean": mean, "grad_absmax": columns["grad_absmax"], "grad_var": var, "grad_l1": columns["grad_l1"], "grad_l2": l2}
