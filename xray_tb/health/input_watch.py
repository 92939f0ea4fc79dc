"""Where the forward is not run again: whether the batch brought a NaN or an infinity, checked at every forward.

A NaN in a batch makes every gradient non-finite, and the gradients alone would name the last layer,
where backward starts. On a CPU the sentinel knows at once and the forward is run again
(:mod:`xray_tb.health.forward_replay`). On an accelerator the sentinel's flags stay on the device until
the next write, when the batch and the weights it met are gone; and a forward that runs collectives
(FSDP's all-gathers, ``SyncBatchNorm``) cannot run again on one rank. So :class:`InputWatch` checks each
training forward's floating inputs as they arrive: one inf-norm per (device, dtype) group and a
comparison (a few launches, whatever the number of layers or inputs, no host sync), OR-ed over the
forwards of the iteration (accumulated micro-batches). The sentinel keeps these flags with its first
find (:mod:`xray_tb.health.device_finds`). When that find, read, holds gradients only and the batch
held a NaN or an infinity, the origin is the first layer, in dataflow order, that the flagged input
reaches in the traced graph (:meth:`InputWatch.origin`), and the ``nonfinite`` finding says to check
the data: the answer a CPU run gives.

Watched: the forwards of the root module on the training thread, with grad enabled (not validation,
not Xray's own forwards), and only the inputs on the weights' device (an input the model moves there
itself is not). An overflow inside the network (finite batch, non-finite activation) is still named
where backward starts on an accelerator. Under DDP and FSDP each rank watches its own batch, and the
ranks' agreement on the first find says whether its batch held the NaN on any rank
(:mod:`~xray_tb.health.find_agreement`): all name where it entered.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Optional

import torch
from torch import nn

from xray_tb.capture.hooks import Hook
from xray_tb.health import reductions
from xray_tb.health.device_finds import InputFlags
from xray_tb.health.training_forwards import TrainingThread
from xray_tb.module_hooks import ModuleHooks
from xray_tb.trace.flatten import tensors_in
from xray_tb.trace.graph import Graph

if TYPE_CHECKING:
    from xray_tb.health.block_writer import BlockWriter
    from xray_tb.health.sentinel import NonFiniteSentinel


class InputWatch:
    """The floating inputs' flags of the training forwards since the last check (see the module's doc)."""

    @classmethod
    def of(cls, model: nn.Module, device: torch.device, order: list[str], sentinel: "NonFiniteSentinel",
           writer: "BlockWriter", replayed: bool) -> Optional["InputWatch"]:
        """One where the forward is not run again at a find (``replayed``: on a CPU, one process or DDP, it
        is), wired to ``sentinel``'s finds: an origin found is filed in ``writer`` as the replay's are."""
        if replayed or not order:
            return None
        watch = cls(model, device, order)

        def file(step: int, found: tuple) -> None:
            layer = watch.origin(*found)
            if layer is not None:
                writer.forward_origins[int(step)] = layer
            writer.nonfinite_inputs.add(int(step))

        sentinel.on_input_find = file
        return watch

    def __init__(self, model: nn.Module, device: torch.device, order: list[str]):
        """``order``: every layer name in dataflow order (the origin is the first the flagged input reaches)."""
        self._device = device
        self._order = order
        self._flags: Optional[InputFlags] = None  # this iteration's: positions and a flag each
        self._fresh = True  # a check ran since: the next forward starts the iteration's flags afresh
        self._checked: Optional[int] = None  # the step of the check that took the flags
        self._thread = TrainingThread()
        #: The traced graph, asked for at a find (the recording rebuilds it on demand); None: the first layer.
        self.graph_of: Optional[Callable[[], Graph]] = None
        self._hooks = ModuleHooks()
        self._hooks.pre((model,), Hook(self._before_forward), with_kwargs=True)

    def _before_forward(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        if not self._thread.claims():
            return
        watched, positions, seen = [], [], set()
        for position, tensor in enumerate(_distinct(tensors_in((args, kwargs)), seen)):
            if tensor.is_floating_point() and tensor.numel() and tensor.device == self._device:
                watched.append(tensor.detach())
                positions.append(position)
        if not watched:
            return
        if torch.is_autocast_enabled(self._device.type):  # a norm autocast would run on a float32 copy of the batch
            with torch.autocast(self._device.type, enabled=False):
                flags = _flags(watched)
        else:
            flags = _flags(watched)
        key = tuple(positions)
        if self._fresh or self._flags is None:
            self._flags, self._fresh, self._checked = (key, flags), False, None
        elif self._flags[0] == key:
            self._flags = (key, self._flags[1] | flags)  # not in place: a check may still hold the earlier flags
        else:  # inputs of another layout within one iteration: one flag for all
            self._flags = ((), (self._flags[1].any() | flags.any()).view(1))

    def flags(self, step: int) -> Optional[InputFlags]:
        """The flags of the forwards since the last check, for the check of ``step`` (None: none watched,
        or no forward since the check of an earlier step). The next forward starts afresh; a second
        check of the same step (another optimizer's) gets them too."""
        self._fresh = True
        if self._flags is None or not self._thread.is_owner() or self._checked not in (None, step):
            return None
        self._checked = step
        return self._flags

    def origin(self, positions: tuple[int, ...], flagged: list[bool]) -> Optional[str]:
        """The first layer, in dataflow order, that a flagged input reaches (``positions``: the inputs'
        positions among the forward's tensors; ``()``: any input)."""
        rank = {name: index for index, name in enumerate(self._order)}
        graph = self.graph_of() if self.graph_of is not None else None
        if graph is None:
            return self._order[0] if self._order else None
        inputs = graph.inputs if not positions else [
            graph.inputs[p] for p, flag in zip(positions, flagged) if flag and p < len(graph.inputs)]
        reached = set().union(*(graph.layers_reached(node) for node in inputs)) if inputs else set()
        return min((name for name in reached if name in rank), key=rank.__getitem__, default=None)

    def remove(self) -> None:
        """Remove the forward hook; idempotent."""
        self._hooks.remove()
        self._flags = None


def _flags(tensors: list[torch.Tensor]) -> torch.Tensor:
    """One flag per tensor, on the first one's device: whether it holds a NaN or an infinity (its
    inf-norm: NaN propagates, nothing overflows; one launch for one tensor)."""
    if len(tensors) == 1:
        return torch.isfinite(torch.linalg.vector_norm(tensors[0], math.inf).view(1)).logical_not_()
    return torch.isfinite(reductions.stacked_norms(tensors, math.inf)).logical_not_()


def _distinct(tensors: list[torch.Tensor], seen: set) -> list[torch.Tensor]:
    """``tensors`` without repeats (the trace numbers each distinct tensor once)."""
    out = []
    for tensor in tensors:
        if id(tensor) not in seen:
            seen.add(id(tensor))
            out.append(tensor)
    return out
