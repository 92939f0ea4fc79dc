"""On a CPU, small tensors of one shape reduced together, as the rows of one matrix.

A reduction call on a CPU costs a few microseconds of dispatch, more than summing a few thousand values:
on a model of a thousand small layers, one call per tensor and statistic cost tens of milliseconds per
measured iteration. Here the tensors of at most :data:`SMALL` values that share a shape and a dtype are
copied, up to :data:`BATCH` values at a time, into one ``k × n`` matrix (one ``cat``) and reduced along
its rows: a fixed number of calls per batch, whatever ``k``. Larger tensors are reduced one by one, as
their cost is their bytes. A batch's copy is made per call and freed after it (at most :data:`BATCH`
values): nothing is held between iterations.
"""

from __future__ import annotations

import array
import operator
from typing import Callable, Optional, Sequence

import torch

#: Tensors of at most this many values are batched with others of their shape.
SMALL = 1 << 14
#: The fewest tensors a batch holds: a pair costs more batched (a copy, then the reductions) than one by one.
MIN_BATCH = 4
#: The most values one batch copies (256 KiB of float32: it stays in the cache while its rows are reduced).
BATCH = 1 << 16


_PLANS: dict = {}
_shape, _dtype, _device = operator.attrgetter("shape"), operator.attrgetter("dtype"), operator.attrgetter("device")


def plan(tensors: list[torch.Tensor]) -> tuple[list[Sequence[int]], Sequence[int]]:
    """The batches (positions of small tensors of one shape, dtype and device, :data:`MIN_BATCH` or more
    each) and the positions reduced one by one (large or empty tensors, and shapes seen less often), in
    input order. Made
    once per list of shapes, dtypes and devices (a training loop's are the same each iteration), and
    kept compact: a ``range`` or an array of 4-byte positions, under the hash of that list (the list
    itself would hold an object per tensor)."""
    key = hash((tuple(map(_shape, tensors)), tuple(map(_dtype, tensors)), tuple(map(_device, tensors))))
    found = _PLANS.get(key)
    if found is None:
        if len(_PLANS) >= 16:  # a handful of lists per model (gradients, weights, a shard's)
            _PLANS.clear()
        batches, singles = _plan(tensors)
        found = _PLANS[key] = ([_compact(positions) for positions in batches], _compact(singles))
    return found


def _compact(positions: list[int]) -> Sequence[int]:
    if positions and positions[-1] - positions[0] + 1 == len(positions):
        return range(positions[0], positions[-1] + 1)
    return array.array("i", positions)


def _plan(tensors: list[torch.Tensor]) -> tuple[list[list[int]], list[int]]:
    by_kind: dict = {}
    singles: list[int] = []
    for index, tensor in enumerate(tensors):
        size = tensor.numel()
        if size == 0 or size > SMALL:
            singles.append(index)
        else:
            by_kind.setdefault((tensor.shape, tensor.dtype, tensor.device), (size, []))[1].append(index)
    batches: list[list[int]] = []
    for size, positions in by_kind.values():
        per = max(MIN_BATCH, BATCH // size)
        for start in range(0, len(positions), per):
            chunk = positions[start:start + per]
            if len(chunk) >= MIN_BATCH:
                batches.append(chunk)
            else:
                singles.extend(chunk)
    return batches, sorted(singles)


def matrix(tensors: list[torch.Tensor], positions: Sequence[int]) -> torch.Tensor:
    """The tensors at ``positions`` (one shape) as the rows of one ``k × n`` matrix (a copy). Raises
    :class:`StalePlan` when they are not of one shape (a plan kept by :class:`PlanMemo` for tensors
    whose shape changed since)."""
    members = [tensors[i] for i in positions]
    try:
        if members[0].dim() == 0:
            return torch.stack(members).view(len(members), 1)
        rows = torch.cat(members)
    except RuntimeError as error:  # shapes (or devices) that differ
        raise StalePlan(str(error)) from error
    if rows.numel() != len(members) * members[0].numel():
        raise StalePlan("the tensors of a batch differ in size")
    return rows.reshape(len(members), -1)


class StalePlan(RuntimeError):
    """A batch of a kept plan whose tensors no longer share one shape."""


class PlanMemo:
    """The plan of the latest call, kept while the tensors' ``owners`` are the same objects in the same
    order: the parameters, stable across iterations, whose gradients (or copies, or selves) the tensors
    are, so of the same shapes, dtypes and devices. Checking them costs a pointer comparison each,
    where :func:`plan`'s key reads every tensor's shape, dtype and device (about 1 µs a tensor: 2 ms an
    iteration on 1,000 layers, more than the reductions). The owners are referenced, not copied: the
    caller holds them anyway. A parameter whose shape changed in place since (``weight.data = ...``
    of another shape) shows as a :class:`StalePlan` from :func:`matrix`; :func:`with_plan` then plans
    the call afresh."""

    __slots__ = ("_owners", "_found")

    def __init__(self):
        self._owners: tuple = ()
        self._found: Optional[tuple[list[Sequence[int]], Sequence[int]]] = None

    def plan(self, tensors: list[torch.Tensor], owners: Sequence[torch.Tensor]) -> tuple[list[Sequence[int]], Sequence[int]]:
        """:func:`plan` of ``tensors``, made again only when ``owners`` changed."""
        found = self._found
        if found is None or len(owners) != len(self._owners) or not all(map(operator.is_, owners, self._owners)):
            found = self._found = plan(tensors)
            self._owners = tuple(owners)
        return found

    def forget(self) -> None:
        self._owners, self._found = (), None


def with_plan(reduce: Callable, tensors: list[torch.Tensor], owners: Optional[Sequence[torch.Tensor]] = None,
              memo: Optional[PlanMemo] = None):
    """``reduce(tensors, batches, singles)`` with ``memo``'s plan for ``owners`` when both are given (see
    :class:`PlanMemo`), again with a fresh plan if that one is stale; else with :func:`plan`'s."""
    if memo is not None and owners is not None:
        try:
            return reduce(tensors, *memo.plan(tensors, owners))
        except StalePlan:
            memo.forget()
    return reduce(tensors, *plan(tensors))


def row_reductions(x: torch.Tensor, wanted: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """Of each row of ``x``, in float32: ``"sum"``, ``"l1"``, ``"l2"`` and ``"absmax"`` (NaN propagates)."""
    out: dict[str, torch.Tensor] = {}
    if "sum" in wanted:
        out["sum"] = x.sum(1, dtype=torch.float32)
    if "l1" in wanted or "absmax" in wanted:
        magnitudes = x.abs()
        if "l1" in wanted:
            out["l1"] = magnitudes.sum(1, dtype=torch.float32)
        if "absmax" in wanted:
            out["absmax"] = magnitudes.amax(1).float()
    if "l2" in wanted:
        half = x.dtype in (torch.float16, torch.bfloat16)  # accumulated in float32; a wider dtype as it is
        out["l2"] = torch.linalg.vector_norm(x, 2, dim=1, dtype=torch.float32 if half else None).float()
    return out


def total(tensors: list[torch.Tensor], owners: Optional[Sequence[torch.Tensor]] = None, memo: Optional[PlanMemo] = None) -> float:
    """The sum of every value of ``tensors`` on the host (float32 per tensor or batch, added in float64):
    finite exactly when every value is, unless a sum overflows. ``owners`` and ``memo``: see :func:`with_plan`."""
    return with_plan(_total, tensors, owners, memo)


def _total(tensors: list[torch.Tensor], batches: list[Sequence[int]], singles: Sequence[int]) -> float:
    total = 0.0  # read per sum: on a CPU a float() costs less than stacking the sums first
    for positions in batches:
        total += float(matrix(tensors, positions).sum(dtype=torch.float32))
    for index in singles:
        total += float(tensors[index].sum(dtype=torch.float32))
    return total
