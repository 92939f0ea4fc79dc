"""``update_ratio`` = ‖Δw‖ / ‖w‖: the size of one optimizer update relative to the weight.

Measured between consecutive training iterations, on one measured iteration in ``every``: the weights
are copied at iteration i, and iteration i + 1 is then measured too (whatever the pace of the other
statistics), filing ‖w(i+1) − w(i)‖ / ‖w(i)‖ under its step. Other steps have no value. Both norms are
columns (``update_l2``, ``update_base_l2``), divided on the host, so that the norms of a sharded
weight's shards combine before the division.

The copy lives for that one iteration only: it is dropped once the ratio is taken, so between two
measurements Xray holds no copy of the weights (a copy kept for reuse would hold the model's size in
memory for the whole run: 500 MB on a GPT-2 small).
"""

from __future__ import annotations

import operator
from typing import Optional, Union

import numpy as np
import torch

from xray_tb.health import reductions
from xray_tb.health.stats.base import IterationStatistic, IterationView


_SHAPE = operator.attrgetter("shape")


class UpdateRatio(IterationStatistic):
    columns = ("update_l2", "update_base_l2")
    shard_ops = {"update_l2": "l2", "update_base_l2": "l2"}

    def __init__(self, layers: list[str], every: int):
        super().__init__(layers)
        self._every = every
        self._previous: Optional[tuple[list[torch.Tensor], torch.Tensor]] = None
        self._summaries = reductions.Summaries()

    def compute(self, view: IterationView) -> dict[str, Union[list, torch.Tensor]]:
        """Both norms as vectors at the iteration after a copy; lists of None (no value) otherwise."""
        updates: Union[list, torch.Tensor] = [None] * len(view.weights)
        bases: Union[list, torch.Tensor] = list(updates)
        if self._previous is not None:
            before, norms = self._previous
            if list(map(_SHAPE, before)) == list(map(_SHAPE, view.weights)):  # compared in C: no Python per layer
                torch._foreach_sub_(before, view.weights)  # in place on the kept copy: no new allocation
                updates, bases = self._summaries(before, ("l2",), view.weights)["l2"], norms
            self._previous = None
        if view.index % self._every == 0:
            with torch.no_grad():  # one multi-tensor op, whatever the number of layers (x * 1.0 is x, bit for bit)
                copies = list(torch._foreach_mul(view.weights, 1.0))
            self._previous = (copies, self._summaries(copies, ("l2",), view.weights)["l2"])
        return {"update_l2": updates, "update_base_l2": bases}

    def finalize(self, columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with np.errstate(all="ignore"):
            return {"update_ratio": columns["update_l2"] / columns["update_base_l2"]}

    @property
    def pending(self) -> bool:
        """Whether a copy waits for the next iteration, which must then be measured."""
        return self._previous is not None

    def forget(self) -> None:
        """Drop the kept copy (the weights were replaced, e.g. by pruning)."""
        self._previous = None
