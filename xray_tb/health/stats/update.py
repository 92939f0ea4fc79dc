"""``update_ratio`` = ‖Δw‖ / ‖w‖: the size of one optimizer update relative to the weight.

Measured between consecutive training iterations, on one measured iteration in ``every``: the weights
are copied at iteration i (one copy, kept for one iteration only), and iteration i + 1 is then measured
too (whatever the pace of the other statistics), filing ‖w(i+1) − w(i)‖ / ‖w(i)‖ under its step. Other
steps have no value.
"""

from __future__ import annotations

from typing import Optional

import torch

from xray_tb.health.stats.base import IterationStatistic, IterationView


class UpdateRatio(IterationStatistic):
    columns = ("update_ratio",)

    def __init__(self, layers: list[str], every: int):
        super().__init__(layers)
        self._every = every
        self._previous: Optional[tuple[list[torch.Tensor], list[torch.Tensor]]] = None

    def compute(self, view: IterationView) -> dict[str, list[torch.Tensor]]:
        ratios: list = [None] * len(view.weights)
        if self._previous is not None:
            before, norms = self._previous
            if len(before) == len(view.weights) and all(b.shape == w.shape for b, w in zip(before, view.weights)):
                ratios = list(torch._foreach_div(torch._foreach_norm(torch._foreach_sub(view.weights, before)), norms))
            self._previous = None
        if view.index % self._every == 0:
            with torch.no_grad():
                copies = [w.detach().clone() for w in view.weights]
            self._previous = (copies, list(torch._foreach_norm(copies)))
        return {"update_ratio": ratios}

    @property
    def pending(self) -> bool:
        """Whether a copy waits for the next iteration, which must then be measured."""
        return self._previous is not None

    def forget(self) -> None:
        """Drop the kept copy (the weights were replaced, e.g. by pruning)."""
        self._previous = None
