"""Per-iteration L2 norm of each layer's weight (``weight_l2``), as the iteration's forward used it."""

from __future__ import annotations

import torch

from xray_tb.health import reductions
from xray_tb.health.stats.base import IterationStatistic, IterationView


class WeightNorm(IterationStatistic):
    columns = ("weight_l2",)
    nonfinite_kinds = {"weight_l2": "weight"}
    shard_ops = {"weight_l2": "l2"}

    def __init__(self, layers: list[str]):
        super().__init__(layers)
        self._summaries = reductions.Summaries()

    def compute(self, view: IterationView) -> dict[str, torch.Tensor]:
        return {"weight_l2": self._summaries(view.weights, ("l2",), view.weights)["l2"]}
