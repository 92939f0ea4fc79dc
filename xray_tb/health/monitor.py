"""The health monitor: drives the statistic families and buffers their rows.

Every iteration (:meth:`HealthMonitor.iteration`) the non-finite sentinel checks the weights and
gradients (:mod:`xray_tb.health.sentinel`); on measured iterations the per-iteration families reduce the weights and
gradients on their device into one row; at health steps the activation families read the activations
that the monitor's own forward hooks kept (armed for health steps only). Rows reach the host in blocks
(at captures, every ``flush_every`` iterations, when a result is asked for, and at close), where a
:class:`~xray_tb.health.block_writer.BlockWriter` locates the first non-finite value, runs the rules and
writes everything: the full series and vectors as plugin data, a few model-level scalars and the prune
plan (:mod:`xray_tb.health.model_scalars`), and the per-layer scalars only with ``layer_scalars``.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Optional

import torch
from torch import nn

from xray_tb.trace.graph import Graph
from xray_tb.health import activation_step, find_agreement
from xray_tb.health.block_writer import BlockWriter
from xray_tb.health.families import Families
from xray_tb.health.buffer import RowBuffer
from xray_tb.health.findings import Finding, NonFinite
from xray_tb.health.flag_layout import FlagLayout
from xray_tb.health.forward_origin import ForwardOrigin
from xray_tb.health.health_steps import HealthSteps
from xray_tb.health.held_iterations import HeldIterations
from xray_tb.health.input_watch import InputWatch
from xray_tb.health.options import HealthOptions, budget_for
from xray_tb.health.pacing import Pacer
from xray_tb.health.pieces import LayerPieces
from xray_tb.health.reloads import LoadWatch
from xray_tb.health.rules import make_rules
from xray_tb.health.scope import Scope
from xray_tb.health.sentinel import NonFiniteSentinel
from xray_tb.health.shards import ShardedHealth
from xray_tb.health.stats import IterationView, Statistic
from xray_tb.health.stats.base import entries, row_of
from xray_tb.health.stats.histograms import WeightHistograms
from xray_tb.capture.hooks import TapRecorder
from xray_tb.capture.shared_reductions import SharedReductions
from xray_tb.io.sink import EventSink
from xray_tb.devices import on_host
from xray_tb.distributed import Group


class HealthMonitor(HeldIterations):
    """One model's training health: its sentinel, statistic families, buffered rows and writer (module doc)."""

    def __init__(self, model: nn.Module, graph: Graph, options: HealthOptions, sink: EventSink,
                 capture_due: Callable[[int], bool], first_step: int = 0, layer_scalars: bool = False, group: Optional[Group] = None,
                 modules: Optional[dict[str, nn.Module]] = None, reductions: Optional[SharedReductions] = None,
                 earlier_findings: Optional[list[dict]] = None):
        self.options = options
        self._reductions = SharedReductions() if reductions is None else reductions  # shared with the frames' statistics
        self._group = group  # under torch.distributed: activation statistics combine every rank's batch
        self._last_step = int(first_step)  # the step of the latest iteration
        self.scope = scope = Scope(model, graph, modules)
        self._health_steps = HealthSteps(options.activations, capture_due)
        self._taken: Optional[int] = None  # the step whose activations were taken before its capture
        self._unchecked: Optional[int] = None  # that step, until its iteration's check (at its optimizer step)
        device = next((layer.param.device for layer in scope.weighted), torch.device("cpu"))
        self._nan = torch.full((), math.nan, device=device)
        self._pacer = Pacer(options.every, budget_for(options, device.type))
        self._flushed_at: Optional[int] = None  # the iteration count at the last write
        self._histograms = WeightHistograms(options.histograms_every)
        self.families = families = Families(scope, options, self._reductions)
        self._pieces = LayerPieces(scope.weighted)  # layers with several weights (LSTM): one piece each
        self._sentinel = NonFiniteSentinel(self._pieces.names, [name for name, _ in scope.biases])
        self._sentinel.on_overflow = self._drop_row  # a GradScaler's overflow: no row, a gap in the series
        self._shards = ShardedHealth.of(group, self._pieces.weights, self._sentinel)  # FSDP
        self._writer = BlockWriter(sink, scope, make_rules(options.rules, options.dead_window), layer_scalars,
                                   families.iteration, families.activation, families.checks, self._sentinel,
                                   earlier_findings)
        self._iterations = self._measured = 0
        self._measured_at: Optional[int] = None  # the step of the last measured iteration
        self._held: Optional[int] = None  # an iteration waiting for its optimizer step
        self._grads_seen = False  # the last iteration had a gradient
        self._loads = LoadWatch(model)  # parameters a checkpoint replaced are found at the next iteration
        self.on_weights_changed: Optional[Callable[[], None]] = None  # called once the weights were found again
        self._vectors: list[tuple[int, float, dict[str, tuple[list[str], list[Optional[torch.Tensor]]]]]] = []
        self._rebuild_buffers()
        taps = set(scope.output_taps.values()) | {layer.source.tap for layer in scope.activations}
        self._recorder = TapRecorder.for_graph(model, scope.modules, graph, taps)
        # A find of gradients only runs that iteration's forward again, to name where a NaN the batch brought entered.
        self.origin = ForwardOrigin.of(model, scope, self._sentinel, self._writer, self._recorder, self._measure_activations,
                                       group, on_host(device), self._shards is not None)
        # Elsewhere (an accelerator, FSDP, SyncBatchNorm), each forward's floating inputs are checked instead.
        self.inputs = InputWatch.of(model, device, scope.order, self._sentinel, self._writer,
                                    self.origin is not None) if scope.weighted else None
        self.arm_for(first_step)

    # Driving ------------------------------------------------------------------------------------

    def iteration(self, step: int, activations: bool = True) -> None:
        """One training iteration, filed under ``step``, after backward, before the optimizer step;
        ``activations=False``: not a health step (an iteration between ``take_graphs()`` calls). Runs on
        every training step: an iteration not measured costs the sentinel and a few comparisons."""
        index = self._iterations
        self._iterations = index + 1
        self._last_step = step
        self._recorder.claim()  # the thread that trains is the one whose forwards are kept
        weights = self._weights
        grads = [weight.grad for weight in weights]
        if self._loads.loaded or all(grad is None for grad in grads):  # stops at the first gradient: one test per iteration
            if (self._loads.take() or self._grads_seen) and self.refresh_weights():
                weights = self._weights
                grads = [weight.grad for weight in weights]
            self._grads_seen = any(grad is not None for grad in grads)
        else:
            self._grads_seen = True
        if weights and self._shards is not None:  # each rank reduces its own shards; a measured row is combined
            weights, grads = self._shards.local(weights), self._shards.local(grads)
        searched = not self._sentinel.done
        if weights and searched:  # none: no layer holds a parameter, nothing per iteration
            self._sentinel.check(step, weights, grads, self._biases, None if self.inputs is None else self.inputs.flags(step))
        elif self.inputs is not None and self._sentinel.done:  # only the first non-finite value is reported
            self.inputs.remove()
        if self._unchecked is not None and step >= self._unchecked:
            self._unchecked = None  # its weights and gradients are checked: a first non-finite value there can be located
        # On a CPU a find is known at once: that iteration's statistics show the NaN too. Not with sharded
        # weights (FSDP), where a measured row is combined over the ranks, which must all measure it.
        found = self._sentinel.found_at == step and self._shards is None
        if found and self.origin is not None:
            self.origin.note_batch(step)
        measure = weights and (found or index >= self._pacer.next or self.families.update_ratio.pending)
        if measure:
            start = time.perf_counter()
            self._measure_parameters(step, weights, grads)
            self._pacer.measured(index, time.perf_counter() - start, start)
        # A find of gradients only runs the iteration's forwards again first, also at a health step: its
        # activations are then measured from the forward that held the NaN (under DDP with gradient
        # accumulation, an earlier micro-batch's than the last one the hooks kept).
        if self.origin is not None and find_agreement.replays(self._group, self._sentinel, step, grads, found, searched) and self.origin.at_find(step, self._taken == step):
            self._taken, measure = step, True
            self._recorder.clear()
        taken = activations and self._taken != step and self._health_steps.due(step)
        if taken:
            self._measure_activations(step)
            measure = True
        if self.origin is not None:
            self.origin.after_check(step, found)
        if measure and max(len(self._iteration_rows), len(self._activation_rows)) >= self.options.flush_every:
            self.flush()

    def check(self, step: int, recheck: bool = False) -> None:
        """The non-finite sentinel alone, on the weights and gradients as they are now (iteration ``step``,
        before an optimizer other than the one that counts the iterations applies its gradients; ``recheck``:
        before the optimizer step that follows the ``take_graphs()`` call that measured it)."""
        if self._weights and not self._sentinel.done and self._shards is None:
            self._sentinel.check(step, self._weights, [weight.grad for weight in self._weights], self._biases,
                                 None if self.inputs is None else self.inputs.flags(step), recheck)
            if self._sentinel.found_at == step and self._group is None:
                if self._measured_at != step:  # the iteration it flags shows the NaN, whatever the pace
                    self._measure_parameters(step, self._weights, [weight.grad for weight in self._weights])
                if self.origin is not None:
                    self.origin.note_batch(step)
                    if self.origin.at_find(step, self._taken == step):  # before that optimizer moves the weights
                        self._taken = step

    def activations_before_capture(self, step: int, collective: bool = False) -> None:
        """A capture before its iteration (``optimizer=``): a health step's activation statistics first, for
        the frames to reuse, not again at the iteration. Under torch.distributed they stay at the iteration
        (every rank's collectives in one order), unless ``collective``: every rank takes them here."""
        if (self._group is None or collective) and self._taken != step and self._health_steps.due(step):
            if self._loads.take():  # a checkpoint's parameters are found before this step's rows start
                self.refresh_weights()
            self._measure_activations(step)
            self._taken = self._unchecked = step

    def capture(self, step: int, planned: list[str]) -> None:
        """At a capture: a histogram of each planned layer's weight (at captures ``histograms_every``
        steps apart), then write what is buffered (unless it was written less than ``flush_seconds``
        ago: frequent captures write in fewer, larger blocks)."""
        if self.options.histograms and self._histograms.due(step):
            self._histograms.write(self._writer.sink, self.scope.weighted, planned, step)
        if self._training_seconds_since_flush() >= self.options.flush_seconds:
            self.flush()

    @property
    def activation_hooks(self) -> TapRecorder:
        """The hooks that keep activations at health steps (paused with Xray's own)."""
        return self._recorder

    def arm_for(self, step: int) -> None:
        """Arm the activation hooks for the forward of ``step`` when it is a health step (called when
        Xray arms its own, after it asked its schedule about ``step``)."""
        due = self._health_steps.due(step)
        if due != self._recorder.armed:
            self._recorder.arm() if due else self._recorder.disarm()

    # Measuring ----------------------------------------------------------------------------------

    def _measure_parameters(self, step: int, weights: list[torch.Tensor], grads: list[Optional[torch.Tensor]]) -> None:
        with torch.no_grad():
            view = IterationView(weights, grads, self._nan, self._measured)
            families = self.families.iteration
            row = row_of(families, [family.compute(view) for family in families])
            if not self._pieces.single or self._shards is not None:  # per weight, combined per layer and over ranks
                row = self._pieces.combine(families, entries(row))
                if self._shards is not None:
                    row = self._shards.combine(step, families, row, self._pacer)
            self._iteration_rows.add(step, row, self._nan)
        self._measured += 1
        self._measured_at = step

    def _measure_activations(self, step: int, recorder: Optional[TapRecorder] = None) -> None:
        """The activation statistics of ``step`` from what ``recorder`` kept (the monitor's own by default)."""
        recorder = self._recorder if recorder is None else recorder
        with torch.no_grad(), self._reductions:  # inside take_graphs(), the frames reuse what is reduced here
            # under torch.distributed, the ranks agree on the first non-finite iteration (the same on every rank)
            rows = {"find": find_agreement.local_row(self._sentinel)} if self._group is not None and self._sentinel.agreed is None else None
            families = self.families
            row, vectors = activation_step.measure(self.scope, recorder.latest, self._reductions, families.activation,
                                                   families.checks, self._group, step, self._nan, rows)
            if rows:
                find_agreement.agree(self._sentinel, rows["find"])
            self._activation_rows.add(step, row, self._nan)
        if vectors:
            self._vectors.append((int(step), time.time(), vectors))
        recorder.clear()

    # Writing ------------------------------------------------------------------------------------

    def flush(self) -> None:
        """Bring the buffered rows to the host (one sync), judge them and write them (no-op once closed)."""
        if self._writer.sink is None:
            return
        self._sentinel.settle()
        keep = self._held if self._held is not None else self._sentinel.overflows.waiting_step
        iterations, activations = self._iteration_rows.take(keep=keep), self._activation_rows.take()
        vectors, self._vectors = self._vectors, []
        self._flushed_at = self._iterations
        # a step whose weights and gradients are checked (or whose find counts) at its optimizer step: located after it
        unchecked = [step for step in (self._unchecked, self._sentinel.held_find) if step is not None]
        self._writer.write(iterations, activations, vectors, self._last_step, min(unchecked, default=None))

    def _training_seconds_since_flush(self) -> float:
        """Training time since the last write: iterations times their typical interval, so pauses
        between iterations (validation, checkpoints) do not make frequent captures write more often."""
        if self._flushed_at is None:
            return math.inf
        return (self._iterations - self._flushed_at) * (self._pacer.interval or 0.0)

    # Results ------------------------------------------------------------------------------------

    @property
    def first_nonfinite(self) -> Optional[NonFinite]:
        """Where the first non-finite value appeared, among the blocks written so far."""
        return self._writer.first_nonfinite

    def findings(self) -> list[Finding]:
        self.flush()
        return self._writer.findings()

    def end_epoch(self) -> dict[str, dict[str, tuple[float, float]]]:
        self.flush()
        return self._writer.end_epoch()

    def add_family(self, family: Statistic) -> None:
        """Measure one more statistic family from now on (what is buffered is written first)."""
        self.flush()
        self.families.add(family)
        self._rebuild_buffers()

    def refresh_weights(self) -> bool:
        """Find the weights again if parameter objects were replaced (``load_state_dict(..., assign=True)``);
        whether they were."""
        if not self.scope.replaced():
            return False
        self.weights_changed()
        return True

    def weights_changed(self) -> None:
        """The weight parameters were replaced (pruning): find them again."""
        self.flush()
        self.scope.refresh_weights()
        self._pieces = LayerPieces(self.scope.weighted)
        self._sentinel.layout = FlagLayout(self._pieces.names, [name for name, _ in self.scope.biases])
        self.families.update_ratio.forget()
        self._rebuild_buffers()
        if self.on_weights_changed is not None:
            self.on_weights_changed()

    def _rebuild_buffers(self) -> None:
        self._weights = self._pieces.weights
        self._biases = [bias for _, bias in self.scope.biases]
        self._iteration_rows = RowBuffer(list(self.families.iteration))
        self._activation_rows = RowBuffer([*self.families.activation, self.families.checks])

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran (nothing is written any more)."""
        return self._writer.sink is None

    def settle(self) -> None:
        """Before :meth:`close`, on every rank (FSDP): agree on what only some ranks may have seen."""
        if self._shards is not None and self._writer.sink is not None:
            self._shards.settle(self._last_step)

    def close(self) -> None:
        """Write what is buffered and remove every hook; idempotent. A first non-finite value the ranks
        did not agree on (no :meth:`settle`, or it failed) is written as this rank saw it."""
        self._sentinel.shared = False
        self._unchecked = None  # an iteration whose optimizer step never came: located with what was seen
        self.release()  # an iteration still waiting for its optimizer step stands
        self._sentinel.settle(final=True)  # and so does a find still waiting for a GradScaler's update
        try:
            self.flush()
        finally:
            self._recorder.remove()
            if self.origin is not None:
                self.origin.remove()
            if self.inputs is not None:
                self.inputs.remove()
            self._sentinel.remove()
            self.families.update_ratio.remove()  # its copy and its step hook
            self._loads.remove()
            self._writer.sink = None

