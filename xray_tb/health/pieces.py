"""Layers with several weights (an LSTM's ``weight_ih_l0`` and ``weight_hh_l0``, a weight-normed layer's
magnitude and direction): every weight is one piece of the flat list that the sentinel checks and the
statistic families reduce, so a batched reduction still covers every weight at once, and a measured
row is combined per layer as each column's ``shard_ops`` say, the ops that combine an FSDP weight's
shards: ``"sum"``, ``"l2"`` (the root of the sum of the pieces' squares) or ``"max"``. A column without
an op (a custom statistic) keeps the value of the layer's first weight. On a model whose layers have
one weight each (most models) there is nothing to combine and no work per row.
"""

from __future__ import annotations

from typing import Optional

import torch

from xray_tb.health.scope import WeightedLayer
from xray_tb.health.stats.base import IterationStatistic


class LayerPieces:
    """The weights of the weighted layers as one flat list, and the way back to one value per layer."""

    def __init__(self, layers: list[WeightedLayer]):
        #: Every weight of every layer, layer by layer.
        self.weights: list[torch.nn.Parameter] = [param for layer in layers for param in layer.params]
        #: The layer of each weight (a name repeats for a layer with several).
        self.names: list[str] = [layer.name for layer in layers for _ in layer.params]
        self._counts = [len(layer.params) for layer in layers]
        self.single = len(self.weights) == len(layers)

    def combine(self, families: list[IterationStatistic], row: list[Optional[torch.Tensor]]) -> list[Optional[torch.Tensor]]:
        """A measured row of values per weight (family by family, column by column) as values per layer."""
        if self.single:
            return row
        out: list[Optional[torch.Tensor]] = []
        start = 0
        for family in families:
            for column in family.columns:
                op = family.shard_ops.get(column)
                for count in self._counts:
                    values = row[start:start + count]
                    start += count
                    out.append(values[0] if count == 1 or op is None else _reduce(op, values))
        return out


def _reduce(op: str, values: list[Optional[torch.Tensor]]) -> Optional[torch.Tensor]:
    present = [value for value in values if value is not None]
    if not present:
        return None
    stacked = torch.stack([value.to(present[0].dtype) for value in present])
    if op == "sum":
        return stacked.sum()
    if op == "l2":
        return stacked.square().sum().sqrt()
    return stacked.amax()  # "max": NaN propagates
