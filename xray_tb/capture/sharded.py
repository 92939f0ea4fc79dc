"""Frames of sharded parameters (FSDP's DTensor weights, biases and their gradients).

At a due capture every rank calls :func:`gather_selected` (the ranks that write no frames too): each
planned sharded tensor's selection is made on every rank, each rank packs its own rows of the selection
(:func:`xray_tb.sharding.row_parts`) into one vector, and one ``all_gather`` of Xray's
(:meth:`xray_tb.distributed.Group.gather`, with its timeout) brings every rank's rows. No rank
gathers a whole weight, and no DTensor op runs (its collectives would not have Xray's timeout).

Selectors see a sharded tensor as a stand-in on the ``meta`` device: its global shape, no values. The
built-in selectors that choose from the shape and the layer name make the same choice on every rank;
a :class:`~xray_tb.capture.selectors.ScoredRows` (``TopVariance``) asks for its rows' scores, which
each rank computes on the rows it holds and one more gather of Xray's brings together (at the first
capture of a layer: the choice is then kept), so that every rank chooses as on the whole tensor; a
selector that reads the stand-in's values fails, and that frame is reported missing on every rank.
Each tensor's entry starts with a checksum of its selection: ranks that chose different rows raise
:class:`~xray_tb.distributed.DistributedMismatch` on every rank.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Optional, Union

import torch
from torch import nn

from tb_plugin import metadata
from xray_tb import sharding
from xray_tb.parametrized import parameter
from xray_tb.capture.selectors import ScoresNeeded, SelectionInfo, Selector, check_selection
from xray_tb.distributed import DistributedMismatch, Group


@dataclasses.dataclass
class Gathered:
    """The selected rows of a sharded tensor, in selection order, and where they sit in it."""

    rows: torch.Tensor
    indices: tuple[int, ...]
    shape: torch.Size


@dataclasses.dataclass
class _Part:
    key: tuple[str, str]
    tensor: torch.Tensor
    indices: tuple[int, ...] = ()
    parts: dict[int, tuple[int, int]] = dataclasses.field(default_factory=dict)
    error: Optional[str] = None
    needs: Optional[ScoresNeeded] = None  # a ScoredRows selector waits for every rank's scores

    @property
    def stand_in(self) -> torch.Tensor:
        """What selectors see: the global shape and dtype, no values (reading them fails)."""
        return torch.empty(self.tensor.shape, dtype=self.tensor.dtype, device="meta")

    @property
    def row_size(self) -> int:
        return int(torch.Size(self.tensor.shape[1:]).numel())

    def positions(self, rank: int) -> list[int]:
        """Where the rows ``rank`` contributes sit in the selection."""
        start, stop = self.parts.get(rank, (0, 0))
        return [p for p, index in enumerate(self.indices) if start <= index < stop]

    def checksum(self) -> float:
        return -1.0 if self.error else float(zlib.crc32(repr((self.key, self.indices, tuple(self.tensor.shape))).encode()))


def sharded_tensors(plan: dict, modules: dict[str, nn.Module]) -> list[tuple[tuple[str, str], torch.Tensor]]:
    """The planned parameter kinds held as DTensors, ``((layer, kind), tensor)``."""
    found = []
    for layer, entry in plan.items():
        for kind, (name, is_grad) in metadata.PARAMETER_KINDS.items():
            tensor = parameter(modules[layer], name, grad=is_grad) if entry[kind] else None
            if sharding.is_sharded(tensor):
                found.append(((layer, kind), tensor))
    return found


def gather_selected(group: Optional[Group], step: int, plan: dict, modules: dict[str, nn.Module],
                    selector: Selector) -> dict[tuple[str, str], Union[Gathered, str]]:
    """Every planned sharded tensor's selected rows (or why they could not be gathered), by (layer, kind).
    Every rank must call it at the same captures; one collective when the plan holds sharded tensors, and
    one more before it when a ScoredRows selector has not chosen yet (see :func:`agree_on_scores`)."""
    found = [(key, tensor, plan[key[0]].get("selector") or selector, modules[key[0]]) for key, tensor in sharded_tensors(plan, modules)]
    if not found:
        return {}
    parts = [_select(*item) for item in found]
    if any(part.needs is not None for part in parts):  # the same parts on every rank: ScoredRows keep what they agreed
        agree_on_scores(group, step, [part for part in parts if part.needs is not None])
        parts = [_select(*item, again=True) if part.needs is not None and not part.error else part for item, part in zip(found, parts)]
    rank = group.rank if group is not None else 0
    size = group.size if group is not None else 1
    mine = [_local_rows(part, rank) for part in parts]
    longest = max(sum(len(part.positions(r)) * part.row_size for part in parts) for r in range(size))
    device = mine[0].device if mine else parts[0].tensor.device
    checksums = torch.tensor([part.checksum() for part in parts], dtype=torch.float64, device=device)
    packed = torch.cat([checksums, *mine])
    packed = torch.cat([packed, packed.new_zeros(len(parts) + longest - packed.numel())])
    rows = packed[None] if group is None else group.gather(step, packed, what="capture")
    if not bool((rows[:, :len(parts)] == rows[0, :len(parts)]).all()):
        raise DistributedMismatch(f"rank {rank}: the ranks selected different rows of the sharded tensors at capture step "
                                  f"{step}; a selector of sharded tensors must choose the same rows on every rank")
    offsets = [len(parts)] * size
    results: dict[tuple[str, str], Union[Gathered, str]] = {}
    for part in parts:
        if part.error:
            results[part.key] = part.error
            continue
        out = rows.new_empty((len(part.indices), part.row_size))
        for r in range(size):
            positions = part.positions(r)
            count = len(positions) * part.row_size
            if positions:
                out[positions] = rows[r, offsets[r]: offsets[r] + count].view(len(positions), part.row_size)
            offsets[r] += count
        shape = part.tensor.shape
        results[part.key] = Gathered(out.view(len(part.indices), *shape[1:]).to(part.tensor.dtype), part.indices, shape)
    return results


def _select(key: tuple[str, str], tensor: torch.Tensor, selector: Selector, module: nn.Module, again: bool = False) -> _Part:
    """The selection of one sharded tensor, made from its stand-in; ``again``: after the scores were agreed."""
    part = _Part(key, tensor)
    try:
        info = SelectionInfo(layer=key[0], kind=key[1], layer_type=sharding.type_name(module))
        size = tensor.shape[0] if tensor.dim() else 0
        part.indices = tuple(check_selection(selector.select(part.stand_in, info), selector, size))
        part.parts = sharding.row_parts(tensor)
    except ScoresNeeded as needs:
        if again:  # the scores were agreed for another key than the one asked now
            part.error = f"failed: {needs}"
        else:
            part.needs = needs
    except Exception as error:  # noqa: BLE001 - the frame is reported missing, the same way on every rank
        # Whatever the selector tripped on, say what it was given: reading values is the likely cause.
        part.error = (f"failed: {type(selector).__name__}.select raised {type(error).__name__}: {error}. Selectors see a sharded "
                      "(FSDP) tensor as its global shape only (a 'meta' tensor, no values): choose from the shape, or subclass "
                      "ScoredRows to choose by a per-row score")
    return part


def agree_on_scores(group: Optional[Group], step: int, parts: list[_Part]) -> None:
    """Every rank's row scores for the ScoredRows selectors of ``parts`` in one gather, and their choice,
    made alike on every rank; a part whose rows could not be scored gets its error."""
    rank = group.rank if group is not None else 0
    needs: dict[tuple[int, tuple[str, int]], list[_Part]] = {}
    for part in parts:  # one layer's kinds of one size share a choice: the first planned (the weight) is scored
        needs.setdefault((id(part.needs.selector), part.needs.key), []).append(part)
    vectors, layouts, errors = [], [], []
    for first, *_ in needs.values():
        vector, layout, error = torch.zeros(1 + first.tensor.shape[0], dtype=torch.float64), {}, None
        try:
            layout = sharding.row_parts(first.tensor)
            start, stop = layout.get(rank, (0, 0))
            if stop > start:
                vector[1 + start:1 + stop] = first.needs.selector.row_scores(sharding.local(first.tensor)).cpu()
            vector[0] = 1.0
        except Exception as failure:  # noqa: BLE001 - the frame is reported missing, on every rank
            vector.zero_()
            error = f"failed: scoring the rows: {type(failure).__name__}: {failure}"
        vectors.append(vector)
        layouts.append(layout)
        errors.append(error)
    flat = torch.cat(vectors)
    rows = flat[None] if group is None else group.gather(step, flat, what="scores").cpu()
    offset = 0
    for (first, *others), vector, layout, error in zip(needs.values(), vectors, layouts, errors):
        block, offset = rows[:, offset:offset + vector.numel()], offset + vector.numel()
        if error is None and not bool((block[:, 0] == 1).all()):
            error = "failed: scoring the rows failed on another rank"
        if error is None:
            scores = block.new_zeros(block.shape[1] - 1)
            for owner, (start, stop) in layout.items():
                scores[start:stop] = block[owner, 1 + start:1 + stop]
            first.needs.selector.agree(first.needs.key, scores, first.stand_in)
        for part in (first, *others):
            part.error = error


def _local_rows(part: _Part, rank: int) -> torch.Tensor:
    """This rank's rows of the selection, flat, in float64 (exact for every float dtype)."""
    local = sharding.local(part.tensor)
    positions = part.positions(rank) if not part.error else []
    if not positions:
        return local.new_zeros(0, dtype=torch.float64)
    start = part.parts[rank][0]
    index = torch.tensor([part.indices[p] - start for p in positions], dtype=torch.long, device=local.device)
    return local.detach().reshape(local.shape[0], -1).index_select(0, index).reshape(-1).to(torch.float64)
