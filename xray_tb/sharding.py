"""Sharded parameters (``torch.distributed.fsdp.fully_shard``: DTensors) as Xray reads them.

* :func:`is_sharded` and :func:`local` tell a DTensor and give this rank's shard, so that reductions
  run on plain tensors and are combined across ranks by Xray's own collectives
  (:mod:`xray_tb.health.shards`, :mod:`xray_tb.capture.sharded`), never by DTensor's.
* :func:`row_parts` says which rank holds which rows (first axis) of a DTensor laid out as FSDP lays
  it out: ``Shard(0)`` on some mesh dimensions (in mesh order, chunked like ``torch.chunk``) and
  ``Replicate`` on the others (HSDP); a replicated row is taken from the rank at coordinate 0 of those
  dimensions. Other layouts (sharded along another axis, strided, partial) are refused with
  :class:`UnsupportedLayout`, so no rank guesses. :func:`owners` gives the ranks whose shards make up a
  DTensor once each (health adds up their statistics, not the replicas').
* :func:`type_name` is a module's class name as its author wrote it: ``fully_shard`` swaps a module's
  class for a subclass named ``FSDP<Class>``, which would hide a sharded ``Linear`` from everything
  keyed on layer types (the drafted plan, health's scope, selectors).
* :func:`reshard` puts FSDP modules back into their sharded state after Xray's own forward (tracing),
  which leaves the root module's parameters unsharded; it runs inside the tracer's restoring
  context, so that the restored parameters and FSDP's own state agree.
"""

from __future__ import annotations

import functools
import math
import sys
from typing import Iterator, Optional

import torch
from torch import nn


class UnsupportedLayout(ValueError):
    """A DTensor whose rows Xray cannot assign to ranks (only Shard(0) and Replicate placements)."""


def _loaded(module: str, name: str) -> Optional[type]:
    """``module.name`` if the module is imported, else None: a model holds a DTensor or an FSDP module
    only once their modules are imported, and importing them here would cost every user half a second
    (they pull in torch._dynamo and sympy)."""
    return getattr(sys.modules.get(module), name, None)


def _dtensor_type() -> Optional[type]:
    return _loaded("torch.distributed.tensor", "DTensor")


def is_sharded(tensor: Optional[torch.Tensor]) -> bool:
    """Whether ``tensor`` is a DTensor (a parameter or gradient of a ``fully_shard`` model)."""
    dtensor = _dtensor_type()
    return dtensor is not None and isinstance(tensor, dtensor)


def local(tensor: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """This rank's shard of a DTensor (a plain tensor, no copy); any other value as it is."""
    if is_sharded(tensor):
        with torch.no_grad():
            return tensor.to_local()
    return tensor


def local_all(tensors: list) -> list:
    """:func:`local` of each entry, looking for the DTensor type once: a plain copy of the list when
    no DTensor can exist (no Python call per tensor on the common path)."""
    if _dtensor_type() is None:
        return list(tensors)
    return [local(tensor) for tensor in tensors]


def any_sharded(tensors) -> bool:
    dtensor = _dtensor_type()
    return dtensor is not None and any(isinstance(tensor, dtensor) for tensor in tensors)


def row_parts(tensor: torch.Tensor) -> dict[int, tuple[int, int]]:
    """``{global rank: (start, stop)}``: the rows of the first axis each rank contributes, every row
    exactly once (ranks holding a replica of rows another rank contributes are left out).

    Raises :class:`UnsupportedLayout` for placements other than ``Shard(0)`` and ``Replicate``, or
    when this rank's shard does not have the rows the layout gives it."""
    from torch.distributed.tensor import Replicate, Shard

    mesh, placements = tensor.device_mesh, tensor.placements
    for placement in placements:
        if not (type(placement) is Replicate or (type(placement) is Shard and placement.dim == 0)):
            raise UnsupportedLayout(f"Xray gathers the rows of DTensors sharded along their first axis only, not {placements}")
    rows = tensor.shape[0] if tensor.dim() else 1
    parts = {rank: _range_at(coordinate, placements, mesh, rows) for rank, coordinate in _owners(mesh, placements)}
    mine = mesh.get_coordinate()
    if mine is not None and tensor.dim():
        held = tensor.to_local().shape[0]
        start, stop = _range_at(mine, placements, mesh, rows)
        if stop - start != held:
            raise UnsupportedLayout(f"this rank holds {held} rows of a {tuple(tensor.shape)} DTensor, not the {stop - start} "
                                    f"that chunking gives it ({placements})")
    return parts


def owners(tensor: Optional[torch.Tensor]) -> Optional[frozenset[int]]:
    """The global ranks whose shards of ``tensor`` make it up once each, replicas left out (HSDP: the
    ranks at coordinate 0 of the ``Replicate`` mesh dimensions); None for a tensor that is no DTensor."""
    if not is_sharded(tensor):
        return None
    return frozenset(rank for rank, _ in _owners(tensor.device_mesh, tensor.placements))


def _owners(mesh, placements) -> Iterator[tuple[int, list[int]]]:
    """``(global rank, mesh coordinate)`` of each rank not holding a replica of another's shard."""
    from torch.distributed.tensor import Replicate

    layout = mesh.mesh.tolist()
    replicated = [dim for dim, placement in enumerate(placements) if type(placement) is Replicate]
    for coordinate in _coordinates(mesh.mesh.shape):
        if any(coordinate[dim] for dim in replicated):
            continue  # a replica: its rows are contributed by coordinate 0 of the replicated dimensions
        rank = layout
        for index in coordinate:
            rank = rank[index]
        yield int(rank), coordinate


def _range_at(coordinate: list[int], placements, mesh, rows: int) -> tuple[int, int]:
    """The rows of the shard at ``coordinate``, replicas included."""
    from torch.distributed.tensor import Shard

    start, stop = 0, rows
    for dim, placement in enumerate(placements):
        if type(placement) is Shard:
            chunk = math.ceil((stop - start) / mesh.size(dim)) if stop > start else 0
            start, stop = min(start + coordinate[dim] * chunk, stop), min(start + (coordinate[dim] + 1) * chunk, stop)
    return start, stop


def _coordinates(shape) -> Iterator[list[int]]:
    if not len(shape):
        yield []
        return
    for first in range(shape[0]):
        for rest in _coordinates(shape[1:]):
            yield [first, *rest]


def type_name(module: nn.Module) -> str:
    """``type(module).__name__``, seen through the subclasses that FSDP (``FSDP<Class>``) and
    ``torch.nn.utils.parametrize`` (``Parametrized<Class>``) make: ``"Linear"`` for both."""
    return _class_name(type(module))


@functools.lru_cache(maxsize=None)  # asked twice per module call while tracing
def _class_name(cls: type) -> str:
    fsdp = _fsdp_module_type()
    if fsdp is not None and issubclass(cls, fsdp):
        cls = next((base for base in cls.__mro__ if not issubclass(base, fsdp)), cls)
    while cls.__module__ == "torch.nn.utils.parametrize" and cls.__name__.startswith("Parametrized") and cls.__bases__:
        cls = cls.__bases__[0]
    return cls.__name__


def _fsdp_module_type() -> Optional[type]:
    return _loaded("torch.distributed.fsdp", "FSDPModule")


def sharded_fsdp_modules(model: nn.Module) -> list[nn.Module]:
    """The ``fully_shard`` modules of ``model`` with sharded parameters now (theirs or their children's)."""
    fsdp = _fsdp_module_type()
    if fsdp is None:  # FSDP not imported (or torch built without distributed): no FSDP module
        return []
    return [module for module in model.modules() if isinstance(module, fsdp) and any_sharded(module.parameters())]


def reshard(modules: list[nn.Module]) -> None:
    """Put FSDP modules back into their sharded state (FSDP keeps the root unsharded after a forward)."""
    for module in modules:
        module.reshard()
