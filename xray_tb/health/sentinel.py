"""The non-finite sentinel: every training iteration, whatever the pace of the statistics, checks each
weight (as the forward used it) and each gradient for NaN and infinity, so the first non-finite value
is named at the iteration where it appeared and in the layer where it started (docs/health.md).

Cheap, and without a host sync per iteration on a GPU: there one inf-norm per (device, dtype) group
gives a flag per tensor, and the first flagged iteration stays on the device until the statistics are
next written (:mod:`~xray_tb.health.device_finds`, with its batch's input flags:
:mod:`~xray_tb.health.input_watch`); on a CPU the sums of the gradients and of the weights that may
have changed are read (:mod:`~xray_tb.health.cpu_sums`), and only a non-finite total is checked value
by value. Weights are checked too, since a clamped unit (ReLU, sigmoid, tanh) or an embedding row never
looked up hides an infinite weight from every gradient. Biases are checked where a find was made (on a
GPU every iteration), so a NaN bias is named in its own layer. With a ``GradScaler`` a non-finite
gradient waits for the scaler's update (:mod:`~xray_tb.health.overflows`). The sentinel stops at the
first find; under FSDP only what the ranks agreed on is reported (:mod:`~xray_tb.health.shards`).
"""

from __future__ import annotations

import math
import operator
from typing import Callable, Optional

import torch

from xray_tb import sharding
from xray_tb.health import reductions
from xray_tb.health.check_stamp import CheckStamp
from xray_tb.health.cpu_sums import CpuSums
from xray_tb.health.device_finds import DeviceFinds, InputFlags
from xray_tb.health.flag_layout import FlagLayout
from xray_tb.health.held_finds import HeldFinds
from xray_tb.health.nonfinite import FlagRows
from xray_tb.health.overflows import OverflowWatch
from xray_tb.health.stats.base import stored_all
from xray_tb.devices import on_host

_GRAD = operator.attrgetter("grad")


class NonFiniteSentinel(HeldFinds):
    """Flags for the first iteration with a non-finite weight, bias or gradient, by layer and kind."""

    def __init__(self, layers: list[str], bias_layers: Optional[list[str]] = None):
        #: The layer of each weight and of each bias, and so of each flag of a find.
        self.layout = FlagLayout(layers, bias_layers or ())
        self.done = False  # a first non-finite iteration was found (or its search is over)
        self._found: Optional[tuple[int, list[bool]]] = None  # (step, flags), weights then grads
        #: On an accelerator: the first find, kept on the device until it is read.
        self.device_finds = DeviceFinds()
        #: ``{step: (positions, flags)}``: the floating inputs of a step with a find whose batch was watched, where
        #: one held a NaN or an infinity (:mod:`xray_tb.health.input_watch`).
        self.input_finds: dict[int, tuple] = {}
        #: Called with ``(step, input_finds[step])`` when the first find, read, holds gradients only and the
        #: step's batch held the NaN or Inf (the monitor files where it entered).
        self.on_input_find: Optional[Callable[[int, tuple], None]] = None
        self._on_cpu: Optional[bool] = None  # decided at the first check (the weights' device)
        self.shared = False  # sharded weights: report what the ranks agreed on, not this rank's own find
        self._agreed: Optional[tuple[int, list[bool]]] = None
        self._held: Optional[int] = None  # the iteration whose find waits for its optimizer step
        self._pending: Optional[tuple] = None  # what it found: (step, flags) on a CPU, (step, flags, positions, count) on a device
        self.found_at: Optional[int] = None  # the step of the last find on a CPU (waiting or not)
        self._skipped_first: Optional[tuple] = None  # the first find withdrawn in the current row of skipped steps
        self._sums: Optional[CpuSums] = None  # on a CPU: the every-iteration check (set at the first check)
        self._stamp = CheckStamp()  # what the last check read: a recheck of it untouched since reads nothing
        #: The weights are DTensors (set by ShardedHealth): each is checked as this rank's shard, and every
        #: weight is read at every check (no version tracking of local shards).
        self.sharded = False
        #: A non-finite gradient found while a GradScaler is in use waits for its next update (:mod:`~xray_tb.health.overflows`).
        self.overflows = OverflowWatch()
        #: Called with the step of a find the scaler's update showed to be an overflow (its row is dropped).
        self.on_overflow: Optional[Callable[[int], None]] = None
        self._scaled: Optional[bool] = None  # on a device: whether a GradScaler is in use (looked for at the first check)

    @property
    def layers(self) -> list[str]:
        """The layer of each weight."""
        return self.layout.layers

    @property
    def flag_count(self) -> int:
        """How many flags a find holds: weights, their gradients, biases, their gradients."""
        return self.layout.count

    def check(self, step: int, weights: list[torch.Tensor], grads: list[Optional[torch.Tensor]],
              biases: Optional[list[torch.Tensor]] = None, inputs: Optional[InputFlags] = None, recheck: bool = False) -> None:
        """Check one iteration's weights and gradients (None for a missing gradient), and ``biases``;
        ``inputs``: where the forward is not run again, the flags of the iteration's floating inputs (kept with a find);
        ``recheck``: the iteration was checked already (what is unchanged since is not read again)."""
        biases = biases or []
        if recheck or self._stamp.armed:  # a loop without rechecks builds nothing for them
            stamped = grads if self._on_cpu else [*grads, *biases, *map(_GRAD, biases)]  # a CPU sums no bias
            if not recheck:
                self._stamp.note(weights, stamped)
            elif self._stamp.unchanged(weights, stamped):
                return  # the common case: nothing written between the take_graphs() call and the optimizer step
        with torch.no_grad():
            if self.overflows.waiting_step is not None:
                self.settle(at_check=True)
            if self._on_cpu is None:
                self._on_cpu = all(map(on_host, weights))
                if self._on_cpu:
                    self._sums = CpuSums(follow_versions=not self.sharded)
            if self._on_cpu and self._sums.finite(weights, grads, recheck):  # the common CPU case first
                self.overflows.clean()
                return
            bias_grads = [b.grad for b in biases]
            if self.sharded:  # this rank's shards
                biases, bias_grads = sharding.local_all(biases), sharding.local_all(bias_grads)
            tensors = [*weights, *stored_all(grads), *biases, *stored_all(bias_grads)]  # a sparse gradient: what it stores
            positions = [i for i, t in enumerate(tensors) if t is not None]  # an empty one's norm is 0: finite
            checked = [tensors[i] for i in positions]
            if not checked:
                return
            if self._on_cpu:
                self._locate_now(step, tensors, positions, checked, inputs)
            else:
                self._check_on_device(step, tensors, positions, checked, inputs)

    def _locate_now(self, step: int, tensors: list, positions: list[int], checked: list[torch.Tensor],
                    inputs: Optional[InputFlags]) -> None:
        """A gradient sum was not finite: check every weight and gradient element by element."""
        flags = [False] * len(tensors)
        for position, tensor in zip(positions, checked):
            flags[position] = not bool(torch.isfinite(tensor).all())
        self._note_inputs(step, flags, inputs)
        self._flagged(step, flags)

    def _note_inputs(self, step: int, flags: list[bool], inputs: Optional[InputFlags]) -> None:
        """Keep the input flags of a find on the host whose batch held a NaN or an Inf."""
        if inputs is not None and any(flags) and bool(inputs[1].any()):
            self.input_finds[int(step)] = (inputs[0], inputs[1].tolist())

    def _flagged(self, step: int, flags: list[bool]) -> None:
        """What one check found, on the host: held for its optimizer step, waiting for a GradScaler's update
        (a non-finite gradient), or the first non-finite iteration."""
        if not any(flags):  # a finite tensor's sum overflowed: nothing to report
            self.overflows.clean()
            return
        if self.overflows.waiting_step is not None:
            if any(self.layout.forward_only(flags)):  # the waiting gradient was applied: no overflow
                self._found, self.done = self.overflows.stands(), True
                return
        self.found_at = int(step)
        if step == self._held:
            self._pending = (int(step), flags)
        elif not self._waits((int(step), flags)):
            self._found = (int(step), flags)
            self.done = True

    def _waits(self, find: tuple) -> bool:
        """Let ``find`` wait for a GradScaler's next update if it holds a non-finite gradient and a scaler is in use.
        While an earlier find waits (several checks per update: accumulation), a later one is let go: it shares
        the earlier one's verdict, and a non-finite weight stays to be found again."""
        if self.overflows.waiting_step is not None:
            return True
        if not self.layout.has_gradient(find[1]) or not self.overflows.scaler_in_use():
            return False
        self.overflows.wait(find)
        return True

    def settle(self, final: bool = False, at_check: bool = False) -> None:
        """Decide on a find that waits for a GradScaler's update, if the update ran (or ``final``: the run ends;
        ``at_check``: a check is about to run, one more the find waited)."""
        settled = self.overflows.settle(final, at_check)
        if settled is None or self.done:
            return
        find, overflowed = settled
        if not overflowed:
            self._found, self.done = find, True
            return
        step, flags = find
        kept = self.layout.forward_only(flags)
        if any(kept):  # a non-finite weight or bias stays found: the forward used it
            self._found, self.done = (step, kept), True
        elif self.on_overflow is not None:
            self.on_overflow(step)

    def gradients_only(self, step: int) -> bool:
        """Whether the find of iteration ``step`` on a CPU (kept, or held for its optimizer step) flags
        gradients and no weight or bias: the forward that made them may hold where it started."""
        flags = self._cpu_find(step)
        return flags is not None and self._gradients_only(flags)

    def flags_gradients(self, step: int) -> bool:
        """Whether the find of iteration ``step`` on a CPU flags a gradient, whatever else it flags: under
        DDP the same on every rank (their gradients are reduced together), where their weights may differ."""
        flags = self._cpu_find(step)
        return flags is not None and self.layout.has_gradient(flags)

    def _cpu_find(self, step: int) -> Optional[list[bool]]:
        for find in (self._found, self._pending):
            if find is not None and len(find) == 2 and find[0] == step:
                return find[1]
        return None

    def _gradients_only(self, flags: list[bool]) -> bool:
        return self.layout.has_gradient(flags) and not any(self.layout.forward_only(flags))

    def _check_on_device(self, step: int, tensors: list, positions: list[int], checked: list[torch.Tensor],
                         inputs: Optional[InputFlags] = None) -> None:
        flags = ~torch.isfinite(reductions.stacked_norms(checked, math.inf))
        if self._scaled is None:
            self._scaled = self.overflows.scaler_in_use()
        if self._scaled:  # the scaler's step syncs every iteration: its flags are read on the host, to wait on its update
            host = [False] * len(tensors)
            for position, flag in zip(positions, flags.tolist()):
                host[position] = flag
            self._note_inputs(step, host, inputs)
            self._flagged(step, host)
            return
        if step == self._held:
            self._pending = (int(step), flags, positions, len(tensors), inputs)
        else:
            self._merge(int(step), flags, positions, len(tensors), inputs)

    def _merge(self, step: int, flags: torch.Tensor, positions: list[int], count: int, inputs: Optional[InputFlags] = None) -> None:
        """Keep ``flags`` (on the device) if they are the first with a flag."""
        if not self.done and (earlier := self.device_finds.merge(step, flags, positions, count, inputs)) is not None:
            self._take_device_find(earlier)

    def _read_device(self) -> None:
        if not self.done and (found := self.device_finds.read()) is not None:
            self._take_device_find(found)

    def _take_device_find(self, found: tuple) -> None:
        step, flags, inputs = found
        self._found, self.done = (step, flags), True
        if inputs is not None:
            self.input_finds[step] = inputs

    def remove(self) -> None:
        """Remove the optimizer hooks that keep the weights' clean marks (idempotent)."""
        if self._sums is not None:
            self._sums.remove()

    def shift(self, delta: int) -> None:
        """File a first non-finite iteration found so far (and not agreed on yet) ``delta`` steps later."""
        if self._found is not None and self._agreed is None:
            self._found = (self._found[0] + delta, self._found[1])
        self.overflows.shift(delta)
        self.device_finds.shift(delta)
        self.input_finds = {step + delta: found for step, found in self.input_finds.items()}

    def local_find(self) -> Optional[tuple[int, list[bool]]]:
        """This rank's first non-finite iteration, ``(step, flags)`` (weights then gradients), or None."""
        self.settle()
        self._read_device()
        return self._found

    @property
    def agreed(self) -> Optional[tuple[int, list[bool]]]:
        """The first non-finite iteration the ranks agreed on, or None."""
        return self._agreed

    def agree(self, step: int, flags: list[bool]) -> None:
        """The first non-finite iteration over every rank's shards; the first agreement stands."""
        if self._agreed is None:
            self._agreed = (int(step), list(flags))

    def take(self, rows: FlagRows) -> None:
        """Add the first non-finite iteration found so far (if any) to ``rows`` (one sync on a GPU)."""
        found = self._agreed if self._agreed is not None or self.shared else self.local_find()
        if found is None:
            return
        step, flags = found
        if self.on_input_find is not None and step in self.input_finds and self._gradients_only(flags):
            self.on_input_find(step, self.input_finds[step])
        self.layout.add_to(rows, step, flags)
