"""Where a NaN that the forward brought entered: what the monitor does with :class:`ForwardReplay` at a find.

At every check the monitor calls :meth:`ForwardOrigin.after_check` (the kept forwards are dropped, and a
batch that held the NaN is noted for the ``nonfinite`` finding's message); when the sentinel's find holds
gradients only, :meth:`ForwardOrigin.at_find` runs the iteration's forward again with every called
layer's output tapped, files the first that is not finite as the origin, and measures that iteration's
activations from it when they were not taken (see :mod:`xray_tb.health.forward_replay`).
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import nn

from xray_tb.capture.hooks import TapRecorder
from xray_tb.distributed import Group
from xray_tb.health.block_writer import BlockWriter
from xray_tb.health.forward_replay import (ForwardReplay, every_output, first_nonfinite_output, nonfinite_layers, runs_collectives,
                                           values_nonfinite)
from xray_tb.health.scope import Scope
from xray_tb.health.sentinel import NonFiniteSentinel
from xray_tb.trace.graph import Graph


class ForwardOrigin:
    """The forward replay of one monitor, and what its finds are filed as."""

    def __init__(self, model: nn.Module, scope: Scope, sentinel: NonFiniteSentinel, writer: BlockWriter,
                 recorder: TapRecorder, measure: Callable[[int, TapRecorder], None], group: Optional[Group]):
        """``recorder``: the monitor's own activation hooks; ``measure(step, recorder)`` measures the
        activations of ``step`` from what ``recorder`` kept."""
        self._model, self._scope, self._sentinel, self._writer = model, scope, sentinel, writer
        self._recorder, self._measure, self._group = recorder, measure, group
        self._replay: Optional[ForwardReplay] = ForwardReplay(model)
        #: The hook sets to pause while a forward runs again (Xray's capture hooks), set by TrainingHealth.
        self.capture_hooks: Callable[[], tuple] = tuple
        #: The traced graph, asked for at a find (the recording rebuilds it on demand); None: health's own taps only.
        self.graph_of: Optional[Callable[[], Graph]] = None

    @classmethod
    def of(cls, model: nn.Module, scope: Scope, sentinel: NonFiniteSentinel, writer: BlockWriter, recorder: TapRecorder,
           measure: Callable[[int, TapRecorder], None], group: Optional[Group], on_cpu: bool, sharded: bool) -> Optional["ForwardOrigin"]:
        """One where a forward can run again: weights on a CPU, none sharded, no SyncBatchNorm (whose forward runs collectives)."""
        if not on_cpu or sharded or not scope.weighted or runs_collectives(scope.modules.values()):
            return None
        return cls(model, scope, sentinel, writer, recorder, measure, group)

    def at_find(self, step: int, taken: bool) -> bool:
        """The sentinel found gradients only at ``step`` (``taken``: its activations were measured already):
        run its forward again and file where the NaN entered. Whether it measured the activations.

        Under DDP the ranks' batches differ: every rank takes part, since gradients are reduced together
        and so every rank's find flags them, even where one rank's weights alone hold the NaN. Where the
        activations were not measured yet, they are measured from the forwards run again, and their checks
        combined in that measurement's collective; where they were (a capture before the iteration), the
        ranks combine where each saw the first non-finite output and whether its batch held it, in one
        gather of their own."""
        if self._replay is None:
            return False
        if self._group is None and not self._sentinel.gradients_only(step):
            return False  # (under DDP the monitor decided, alike on every rank: see find_agreement.replays)
        recorder = self._recorder if self.graph_of is None else every_output(self._model, self._scope, self.graph_of())
        own = recorder is not self._recorder
        latest = recorder.latest

        def kept_nonfinite() -> bool:
            return values_nonfinite(t for value in latest.values() for t in value.outputs.values())

        try:
            paused = (*self.capture_hooks(), self._recorder) if own else self.capture_hooks()
            ran = self._replay.run(recorder, kept_nonfinite, paused)
            if taken and self._group is not None:
                self._agree_on_origin(step, nonfinite_layers(latest) if ran else set())
                return False
            origin = first_nonfinite_output(latest, self._scope.order) if ran and self._group is None else None
            if origin is not None:
                self._writer.forward_origins[int(step)] = origin
            if taken or (not ran and self._group is None):
                return False
            self._measure(step, recorder)  # under DDP every rank measures (the same find): one collective
            return True
        finally:
            if own:
                recorder.remove()

    def _agree_on_origin(self, step: int, layers: set[str]) -> None:
        """Under DDP, after a capture took the activations: the first layer in dataflow order whose output
        any rank's forward run again held non-finite, and whether any rank's batch held the NaN."""
        order = self._scope.order
        flags = [name in layers for name in order] + [bool(self._replay.inputs_nonfinite())]
        rows = self._group.gather(step, torch.tensor(flags, dtype=torch.float64), what="origin")
        *seen, batch = (rows > 0).any(dim=0).tolist()
        origin = next((name for name, flagged in zip(order, seen) if flagged), None)
        if origin is not None:
            self._writer.forward_origins[int(step)] = origin
        if batch:
            self._batch_held(step)

    def note_batch(self, step: int) -> None:
        """The check of ``step`` found a non-finite value (on a CPU): note whether the batch held it, for the
        finding's advice, and in this rank's find, which the ranks' agreement carries (under DDP another
        rank's batch may have held it): before any activation statistics of ``step`` are gathered."""
        if self._replay is not None and self._replay.inputs_nonfinite():
            self._batch_held(step)

    def _batch_held(self, step: int) -> None:
        """File that a batch of ``step`` held the NaN: in the sentinel's finds, which the ranks' agreement
        carries and the ``nonfinite`` finding's advice reads (:class:`~xray_tb.health.block_writer.BlockWriter`)."""
        self._sentinel.input_finds.setdefault(int(step), ((), [True]))

    def after_check(self, step: int, found: bool) -> None:
        """A check of ``step`` ran (``found``: a non-finite value at it, on a CPU): drop the kept forwards;
        after the sentinel's first find, drop the replay too."""
        if self._replay is None:
            return
        self._replay.forget()
        # Only the first non-finite value is reported: no forward to keep from now on; under DDP, once the
        # ranks agreed on it (until then a rank whose own search ended still joins the others' replays).
        if self._sentinel.done and (self._group is None or self._sentinel.agreed is not None):
            self.remove()

    def remove(self) -> None:
        """Remove the replay's hooks; idempotent."""
        if self._replay is not None:
            self._replay.remove()
            self._replay = None
