"""Training health of sharded parameters (FSDP): every statistic over the whole weight, from its shards.

Each rank reduces its own shards (:func:`xray_tb.sharding.local`: plain tensors, no DTensor op), and a
measured iteration's row is combined across ranks with one ``all_gather`` of Xray's
(:meth:`xray_tb.distributed.Group.gather`, ``"iteration"``, with its timeout), column by column as the
family's ``shard_ops`` say: ``"sum"`` (signed sums, L1 norms), ``"l2"`` (the root of the sum of the
shards' squared norms) or ``"max"``; the mean and variance follow from the combined sums and the
weight's full size. A column without an op (a custom statistic) keeps this rank's value, of its shard.
Each shard counts once in sums and norms: under HSDP (a ``Replicate`` mesh dimension) only the ranks at
coordinate 0 of the replicated dimensions add theirs (:func:`xray_tb.sharding.owners`, found once per
layer), and of a layer whose weight is no DTensor only rank 0's value counts. An empty shard (fewer rows
than ranks) adds 0 (:mod:`xray_tb.health.reductions`).

The same vector carries what keeps the ranks in step:

* the pace: rank 0's ``every`` (``HealthOptions(every="auto")`` adapts it to each rank's timing), which
  every rank adopts, so every rank measures the same iterations;
* the non-finite sentinel's first non-finite iteration on each rank's shards: the earliest over the ranks
  is agreed, with the flags of every rank that saw it at that step, so a NaN in any shard is found
  (and whether a rank's batch held it, checked as it arrives: :mod:`xray_tb.health.input_watch`).

A non-finite value first seen after the last measured iteration is agreed at close
(:meth:`ShardedHealth.settle`, every rank, one gather with the timeout); if that gather fails (a rank
never closes), each rank reports what it saw itself.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from xray_tb import sharding
from xray_tb.distributed import Group
from xray_tb.health import find_agreement
from xray_tb.health.pacing import Pacer
from xray_tb.health.sentinel import NonFiniteSentinel
from xray_tb.health.stats.base import IterationStatistic

OPS = ("sum", "l2", "max")


class ShardedHealth:
    """The local shards of the weights and gradients, and the combination of a measured row."""

    def __init__(self, group: Optional[Group], sentinel: NonFiniteSentinel, weights: list[torch.Tensor]):
        self._group = group
        self._sentinel = sentinel
        # The ranks whose shards count, per layer (its first weight's: fully_shard lays out a module's alike).
        self._owners: dict[str, frozenset[int]] = {}
        for layer, weight in zip(sentinel.layers, weights):
            self._owners.setdefault(layer, sharding.owners(weight) or frozenset({0}))
        self._layout: tuple = ()  # the families' columns that the cached ops and counted ranks are for
        self._ops: list[Optional[str]] = []
        self._counted = torch.zeros(0, dtype=torch.bool)  # ranks × columns: which ranks' values a sum or a norm adds
        sentinel.shared = group is not None  # its findings count once the ranks agreed on them
        sentinel.sharded = True  # its local shards, each read at every check

    @classmethod
    def of(cls, group: Optional[Group], weights: list[torch.Tensor], sentinel: NonFiniteSentinel) -> Optional["ShardedHealth"]:
        """None when no weight is sharded (DDP, one process): nothing to combine."""
        return cls(group, sentinel, weights) if sharding.any_sharded(weights) else None

    @staticmethod
    def local(tensors: list[Optional[torch.Tensor]]) -> list[Optional[torch.Tensor]]:
        return [sharding.local(tensor) for tensor in tensors]

    def combine(self, step: int, families: list[IterationStatistic], row: list[Optional[torch.Tensor]],
                pacer: Pacer) -> list[Optional[torch.Tensor]]:
        """``row`` (one 0-d value or None per family, column and layer) over every rank's shards; the pace
        and the sentinel agree on the way (one collective)."""
        group = self._group
        if group is None or not row:
            return row
        device = next((value.device for value in row if value is not None), group.device)
        ops, counted = self._columns(families, device)
        zero = torch.zeros((), dtype=torch.float64, device=device)
        values = torch.stack([zero if value is None else value.to(device) for value in row]).to(torch.float64)
        present = torch.tensor([value is not None for value in row], dtype=torch.float64, device=device)
        extra = torch.cat([torch.tensor([float(pacer.every)], dtype=torch.float64), find_agreement.local_row(self._sentinel)]).to(device)
        gathered = group.gather(step, torch.cat([values, present, extra]), what="iteration")
        size = len(row)
        combined, seen = _combine(gathered[:, :size], gathered[:, size:2 * size] > 0, ops, counted, group.rank)
        extra = gathered[:, 2 * size:].cpu()
        pacer.every = max(1, int(extra[0, 0]))
        find_agreement.agree(self._sentinel, extra[:, 1:])
        return [value if keep else None for value, keep in zip(combined.float().unbind(), seen.tolist())]

    def _columns(self, families: list[IterationStatistic], device: torch.device) -> tuple[list, torch.Tensor]:
        """Each column's op, and which ranks count in it (``ranks × columns``); made again only when
        the families change."""
        layout = tuple(map(id, families))  # a family's columns and layers are fixed: a new family is a new layout
        if layout != self._layout or self._counted.device != device:
            self._ops = [family.shard_ops.get(column) for family in families for column in family.columns
                         for _ in family.layers]
            owners = [self._owners.get(layer) for family in families for _ in family.columns for layer in family.layers]
            self._counted = torch.tensor([[rank in ranks if ranks is not None else True for ranks in owners]
                                          for rank in range(self._group.size)], dtype=torch.bool, device=device)
            self._layout = layout
        return self._ops, self._counted

    def settle(self, step: int) -> None:
        """At close, on every rank: agree on a first non-finite iteration that no measured iteration
        carried (one gather, none when one was agreed already: the same answer on every rank). Raises
        :class:`~xray_tb.distributed.DistributedMismatch` when the ranks cannot agree (each then reports
        what it saw itself, see :meth:`NonFiniteSentinel.take`)."""
        group = self._group
        if group is None or group.failed or self._sentinel.agreed is not None:
            return
        find_agreement.agree(self._sentinel, group.gather(step, find_agreement.local_row(self._sentinel), what="close").cpu())


def _combine(values: torch.Tensor, present: torch.Tensor, ops: list[Optional[str]], counted: torch.Tensor,
             rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each column's value over the ranks (``ranks × columns``) by its op, this rank's where it has none;
    and whether any rank had a value. Sums and norms add the ``counted`` ranks' values only (a maximum
    takes every rank's: a replica's is the same)."""
    out, seen = values[rank].clone(), present[rank].clone()
    for op in OPS:
        columns = [index for index, column_op in enumerate(ops) if column_op == op]
        if not columns:
            continue
        index = torch.tensor(columns, dtype=torch.long, device=values.device)
        part, here = values[:, index], present[:, index]
        if op == "max":
            reduced = torch.where(here, part, torch.full_like(part, -math.inf)).amax(dim=0)
        else:
            kept = torch.where(here & counted[:, index], part, torch.zeros_like(part))
            reduced = kept.sum(dim=0) if op == "sum" else kept.square().sum(dim=0).sqrt()
        out[index], seen[index] = reduced, here.any(dim=0)
    return out, seen
