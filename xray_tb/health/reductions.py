"""Batched reductions over many tensors, a fixed number of kernel launches whatever their number.

Tensors are grouped per (device, dtype); each group is reduced with PyTorch's multi-tensor
``_foreach_norm`` (ord 1, 2 and inf, the way ``clip_grad_norm_`` computes per-tensor norms). Signed
sums have no multi-tensor op: on a GPU each group is copied (in float32) into a scratch buffer of at
most :data:`CHUNK` values, chunk by chunk, and summed per tensor with one ``segment_reduce`` per
chunk. The scratch and its views into it are made once per layout; its memory is taken from torch's
caching allocator for the call only (its storage resized, as FSDP frees and refills its flat
parameters), so between iterations Xray holds none of it and the training step's own allocations
reuse it; the Python work per call does not grow with the number of tensors. On a CPU, where
a kernel launch is a function call and ``sum`` runs at memory speed, each tensor is summed directly,
and :class:`Summaries` reduces small tensors of one shape together (:mod:`xray_tb.health.cpu_batches`).

Every function returns one 0-d tensor per input tensor, on the tensors' device, in input order
(:class:`Summaries`: one vector per statistic, a value per tensor). An empty tensor (an FSDP rank's shard of a layer with fewer rows than ranks) gives 0: the identity of a
sum and of a norm, and of an absolute maximum combined with others by ``max``.
"""

from __future__ import annotations

import math
import operator
from typing import Optional

import torch

from xray_tb.health import cpu_batches
from xray_tb.devices import on_host

_DTYPE, _DEVICE, _SHAPE = operator.attrgetter("dtype"), operator.attrgetter("device"), operator.attrgetter("shape")

#: The largest scratch buffer (values) used for signed sums on a GPU: 64 MiB of float32.
CHUNK = 1 << 24


def groups(tensors: list[torch.Tensor]) -> list[tuple[list[int], list[torch.Tensor]]]:
    """``(positions, tensors)`` per (device, dtype), in order of first appearance."""
    if tensors and len(set(map(_DTYPE, tensors))) == 1 and len(set(map(_DEVICE, tensors))) == 1:
        return [(list(range(len(tensors))), list(tensors))]  # the common case, checked without Python per tensor
    by_key: dict = {}
    for index, tensor in enumerate(tensors):
        entry = by_key.setdefault((tensor.device, tensor.dtype), ([], []))
        entry[0].append(index)
        entry[1].append(tensor)
    return list(by_key.values())


def _per_group(tensors: list[torch.Tensor], reduce) -> list[torch.Tensor]:
    out: list = [None] * len(tensors)
    for positions, members in groups(tensors):
        for position, value in zip(positions, reduce(members)):
            out[position] = value
    return out


def _norms(members: list[torch.Tensor], ord: float) -> list[torch.Tensor]:
    """One multi-tensor norm of one group, accumulated and returned in float32 for half types (a
    float16 L1 norm overflows at 65,504)."""
    dtype = torch.float32 if members[0].dtype in (torch.float16, torch.bfloat16) else None
    return _empty_as_zero(members, lambda full: list(torch._foreach_norm(full, ord, dtype=dtype)), dtype or members[0].dtype)


def _empty_as_zero(members: list[torch.Tensor], reduce, dtype: torch.dtype) -> list[torch.Tensor]:
    """``reduce(members)``, with 0 (of ``dtype``) for the empty members when ``reduce`` refuses them (a
    maximum has no identity). Only a refusal costs a look at each member's size."""
    try:
        return reduce(members)
    except RuntimeError:
        if all(t.numel() for t in members):
            raise
    full = [t for t in members if t.numel()]
    values = iter(reduce(full) if full else ())
    zero = torch.zeros((), dtype=dtype, device=members[0].device)
    return [next(values) if t.numel() else zero for t in members]


def norms(tensors: list[torch.Tensor], ord: float) -> list[torch.Tensor]:
    """Each tensor's vector norm of order ``ord`` (1, 2 or inf; NaN propagates), in float32 at least."""
    return _per_group(tensors, lambda members: _norms(members, ord))


def stacked_norms(tensors: list[torch.Tensor], ord: float) -> torch.Tensor:
    """:func:`norms` as one float32 vector on the first tensor's device: one stack per group."""
    parts = groups(tensors)
    device = tensors[0].device
    if len(parts) == 1:
        return torch.stack(_norms(parts[0][1], ord)).float()
    values = torch.cat([torch.stack(_norms(members, ord)).float().to(device) for _, members in parts])
    return values[_order(device, tuple(i for positions, _ in parts for i in positions))]


_ORDERS: dict = {}


def _order(device: torch.device, positions: tuple[int, ...]) -> torch.Tensor:
    """The index that puts values grouped as ``positions`` back in input order, kept on ``device``
    (made once per layout: no host-to-device copy per call)."""
    key = (device, positions)
    order = _ORDERS.get(key)
    if order is None:
        if len(_ORDERS) > 64:
            _ORDERS.clear()
        order = _ORDERS[key] = torch.tensor(positions, device=device).argsort()
    return order


def abs_maxima(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor's largest absolute value (NaN when it holds a NaN)."""

    def reduce(members: list[torch.Tensor]) -> list[torch.Tensor]:
        if not on_host(members[0]):
            return _norms(members, math.inf)
        return _empty_as_zero(members, _cpu_abs_maxima, members[0].dtype)

    return _per_group(tensors, reduce)


def _cpu_abs_maxima(members: list[torch.Tensor]) -> list[torch.Tensor]:
    """On a CPU the inf-norm kernel is ten times slower than aminmax: take |min| and |max|."""
    extremes = torch.stack([value for t in members for value in torch.aminmax(t)]).view(-1, 2)
    return list(torch.maximum(extremes[:, 1], extremes[:, 0].neg()).unbind())


class SignedSums:
    """Each tensor's sum in float32 (see the module docstring); keeps its scratch's layout between calls."""

    def __init__(self):
        self._plans: dict = {}

    def __call__(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        return _per_group(tensors, self._group)

    def _group(self, members: list[torch.Tensor]) -> list[torch.Tensor]:
        if on_host(members[0]):
            return [t.sum(dtype=torch.float32) for t in members]
        key = (members[0].device, tuple(map(_SHAPE, members)))
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= 4:  # each plan keeps its views and lengths: only the recent layouts
                self._plans.clear()
            plan = self._plans[key] = _ChunkPlan(members)
        return plan.sums(members)


class _ChunkPlan:
    """How one list of shapes is packed into chunks of the scratch buffer (whose memory is there only
    while :meth:`sums` runs)."""

    def __init__(self, members: list[torch.Tensor]):
        device = members[0].device
        self.chunks: list[tuple[list[int], list[torch.Tensor], torch.Tensor, int]] = []  # (positions, views, lengths, values)
        self.large: list[int] = []  # tensors larger than a chunk: summed on their own
        sizes = [t.numel() for t in members]
        filled = sum(n for n in sizes if n <= CHUNK)
        self.scratch = torch.empty(max(1, min(CHUNK, filled)), dtype=torch.float32, device=device)
        positions: list[int] = []
        used = 0
        for index, size in enumerate(sizes):
            if size > CHUNK:
                self.large.append(index)
                continue
            if used + size > self.scratch.numel():
                self._close(positions, members)
                positions, used = [], 0
            positions.append(index)
            used += size
        self._close(positions, members)
        # The views stay; the memory behind them is there during sums() only (module docstring).
        self._storage = self.scratch.untyped_storage()
        self._bytes = self._storage.nbytes()
        self._storage.resize_(0)

    def _close(self, positions: list[int], members: list[torch.Tensor]) -> None:
        if not positions:
            return
        views, offset = [], 0
        for index in positions:
            shape, size = members[index].shape, members[index].numel()
            views.append(self.scratch[offset: offset + size].view(shape))
            offset += size
        lengths = torch.tensor([members[i].numel() for i in positions], dtype=torch.int64, device=self.scratch.device)
        self.chunks.append((positions, views, lengths, offset))

    def sums(self, members: list[torch.Tensor]) -> list[torch.Tensor]:
        out: list[Optional[torch.Tensor]] = [None] * len(members)
        self._storage.resize_(self._bytes)  # on a GPU, a block from the caching allocator (no device sync)
        try:
            for positions, views, lengths, used in self.chunks:
                torch._foreach_copy_(views, [members[i] for i in positions])
                for index, value in zip(positions, torch.segment_reduce(self.scratch[:used], "sum", lengths=lengths).unbind()):
                    out[index] = value
        finally:
            self._storage.resize_(0)  # back to the allocator, ordered on the stream after the reductions
        for index in self.large:
            out[index] = members[index].sum(dtype=torch.float32)
        return out


class Summaries:
    """Per-tensor statistics of a list of tensors, as one float32 vector per statistic (a value per tensor,
    in input order, on the tensors' device): ``"sum"`` (signed), ``"l1"``, ``"l2"`` and ``"absmax"``. On
    a GPU, the batched reductions above; on a CPU, small tensors of one shape as the rows of one matrix
    (:mod:`xray_tb.health.cpu_batches`), the others one by one. Keeps the signed sums' scratch layouts."""

    def __init__(self):
        self._sums = SignedSums()
        self._memo = cpu_batches.PlanMemo()

    def __call__(self, tensors: list[torch.Tensor], wanted: tuple[str, ...],
                 owners: Optional[list[torch.Tensor]] = None) -> dict[str, torch.Tensor]:
        """``owners``: the parameters the tensors are the gradients, copies or values of, one each (the
        CPU batches' plan is kept while they are the same: :class:`~xray_tb.health.cpu_batches.PlanMemo`)."""
        if not tensors:
            return {name: torch.zeros(0) for name in wanted}
        if not on_host(tensors[0]):
            return self._vectors(tensors, wanted)
        return cpu_batches.with_plan(lambda tensors, batches, singles: self._on_cpu(tensors, wanted, batches, singles),
                                     tensors, owners, self._memo)

    def _on_cpu(self, tensors: list[torch.Tensor], wanted: tuple[str, ...], batches: list, singles) -> dict[str, torch.Tensor]:
        if not batches:
            return self._vectors(tensors, wanted)
        out = {name: torch.empty(len(tensors), dtype=torch.float32) for name in wanted}
        for positions in batches:
            where = _positions(positions)
            for name, values in cpu_batches.row_reductions(cpu_batches.matrix(tensors, positions), wanted).items():
                out[name][where] = values
        if singles:
            where, members = _positions(singles), [tensors[i] for i in singles]
            for name, values in self._vectors(members, wanted).items():
                out[name][where] = values
        return out

    def _vectors(self, tensors: list[torch.Tensor], wanted: tuple[str, ...]) -> dict[str, torch.Tensor]:
        """The reductions above, every statistic's values stacked at once (one launch), as rows of one matrix."""
        values: list[torch.Tensor] = []
        for name in wanted:
            if name == "sum":
                values.extend(self._sums(tensors))
            elif name == "absmax":
                values.extend(abs_maxima(tensors))
            else:
                values.extend(norms(tensors, {"l1": 1, "l2": 2}[name]))
        stacked = torch.stack(values).float()  # stack promotes mixed dtypes
        if len(wanted) == 1:
            return {wanted[0]: stacked}
        return dict(zip(wanted, stacked.view(len(wanted), len(tensors)).unbind()))


def _positions(positions):
    """An index for ``positions`` (a ``range`` or an array of them, :func:`cpu_batches.plan`)."""
    if isinstance(positions, range):
        return slice(positions.start, positions.stop)
    return torch.tensor(positions, dtype=torch.int64)
