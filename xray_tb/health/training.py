"""Training health over a :class:`~xray_tb.recording.Recording`: what ``Xray`` delegates to.

``Xray`` calls three methods as it trains: :meth:`TrainingHealth.iteration` on every ``take_graphs()``
call when steps are counted by those calls (with ``optimizer=``, the optimizer's step pre-hook calls
it), :meth:`~TrainingHealth.arm_for` wherever Xray arms its own hooks for a step, and
:meth:`~TrainingHealth.capture` at each capture. The monitor is closed when the recording is released.
With health switched off, the same object answers every question with the error that says so.
"""

from __future__ import annotations

import re
import warnings
from typing import Callable, Optional, Sequence, Union

import torch

from tb_plugin import health_metadata
from xray_tb.capture.hooks import Hook
from xray_tb.distributed import DistributedMismatch, Group
from xray_tb.health import pruning
from xray_tb.health.closure_steps import after_closure
from xray_tb.health.findings import Finding, NonFinite
from xray_tb.health.iteration_follower import IterationFollower
from xray_tb.health.other_optimizers import OtherOptimizers
from xray_tb.health.unseen_iterations import UnseenIterations
from xray_tb.health.skipped_steps import SkippedSteps
from xray_tb.health.monitor import HealthMonitor
from xray_tb.health.options import HealthOptions, as_options
from xray_tb.health.stats import CUSTOM_KINDS, CustomActivationStatistic, CustomParameterStatistic
from xray_tb.recording import Recording
from xray_tb.sharding import is_sharded
from xray_tb.user_frame import user_stacklevel


class TrainingHealth:
    """Training health: per-iteration gradient and weight statistics, dead units, saturation, channel
    variance, the first non-finite value and findings (see docs/health.md)."""

    def __init__(self, recording: Recording, health: Union[bool, HealthOptions, None], optimizer: Optional[torch.optim.Optimizer],
                 capture_due: Callable[[int], bool], layer_scalars: bool = False, group: Optional[Group] = None,
                 modules: Optional[dict] = None):
        self._warned: set = set()
        self._group = group
        self.monitor: Optional[HealthMonitor] = None
        self._follower: Optional[IterationFollower] = None
        self._unseen: Optional[UnseenIterations] = None  # FSDP without optimizer=: warns of sparse calls
        options = as_options(health)
        if options is None:
            return
        monitor = HealthMonitor(recording.model, recording.graph, options, recording.sink, capture_due,
                                recording.next_step, layer_scalars=layer_scalars, group=group, modules=modules,
                                reductions=recording.reductions, earlier_findings=recording.earlier_findings)
        if optimizer is not None:
            # Iterations are the optimizer's steps: a step pre-hook measures before the weights move.
            def before_step(optimizer, args, kwargs):
                if not recording.closed:  # after a closure's backward, where the step has one
                    return after_closure(args, kwargs, lambda: self.iteration(recording.next_step))
                return None

            recording.on_release(optimizer.register_step_pre_hook(Hook(before_step)).remove)
            others = OtherOptimizers(optimizer, lambda: [param for layer in monitor.scope.weighted for param in layer.params],
                                     lambda: self._check_nonfinite(recording.next_step))
            recording.on_release(others.remove)
        elif any(is_sharded(param) for layer in monitor.scope.weighted for param in layer.params):
            self._unseen = UnseenIterations([param for layer in monitor.scope.weighted for param in layer.params])
            recording.on_release(self._unseen.remove)
        else:
            # Iterations between take_graphs() calls, from the optimizer that steps the model.
            self._follower = IterationFollower([layer.param for layer in monitor.scope.weighted],
                                               lambda step: self.iteration(step, activations=False), recording.next_step,
                                               [layer.module for layer in monitor.scope.weighted],
                                               lambda: self._contained("finding replaced weights at", recording.next_step,
                                                                       HealthMonitor.refresh_weights),
                                               monitor.renumber,
                                               SkippedSteps(monitor.hold, monitor.release, monitor.withdraw),
                                               self._check_nonfinite)
            recording.on_release(self._follower.remove)
            monitor.on_weights_changed = self._rebind_follower
        if monitor.origin is not None:  # a forward run again taps every layer's output, Xray's capture hooks paused
            monitor.origin.graph_of, monitor.origin.capture_hooks = (lambda: recording.graph), (lambda: (recording.recorder,))
        if monitor.inputs is not None:  # a flagged input names the first layer it reaches in the traced graph
            monitor.inputs.graph_of = lambda: recording.graph
        recording.on_release(monitor.close)
        recording.pause_with_recorder(monitor.activation_hooks)
        self.monitor = monitor

    # The first two run on every training step: the failure handling is inlined to keep them cheap.

    def iteration(self, step: int, activations: bool = True) -> None:
        """One training iteration: from a ``take_graphs()`` call, from the ``optimizer=`` hook, or (with
        ``activations=False``: not a health step) from the follower. A call whose backward the model's
        optimizer step counts (before the call, or at the step that follows it) takes only that step's
        activation statistics, if it is a health step."""
        if self._unseen is not None and activations:
            self._unseen.called()
        if self.monitor is not None:
            counted_by_step = activations and self._follower is not None and not self._follower.counts_call(step)
            try:
                if counted_by_step:
                    self.monitor.activations_before_capture(step, collective=True)
                else:
                    self.monitor.iteration(step, activations)
            except DistributedMismatch:
                raise  # the ranks disagree: going on would hang or mix their statistics
            except Exception as error:  # noqa: BLE001 - training health must never crash training
                if self._group is not None:  # ... unless this rank would then skip a collective the others wait in
                    raise _out_of_step(self._group, step, error) from error
                _failed(self._warned, "measuring", step, error)

    def call_step(self, counted: int) -> int:
        """The step of a ``take_graphs()`` call given none: ``counted`` (the calls' count), or, where the
        followed optimizer counted iterations between calls, the iteration of the latest backward."""
        return counted if self._follower is None else self._follower.call_step(counted)

    def _rebind_follower(self) -> None:
        """The monitor found the weights again (pruning, replaced parameters): so does the follower."""
        if self.monitor is not None and self._follower is not None:
            weighted = self.monitor.scope.weighted
            self._follower.rebind([layer.param for layer in weighted], [layer.module for layer in weighted])

    def arm_for(self, step: int) -> None:
        if self.monitor is not None:
            try:
                self.monitor.arm_for(step)
            except Exception as error:  # noqa: BLE001
                _failed(self._warned, "arming its hooks for", step, error)

    def settle(self) -> None:
        """Before the recording is released by ``close()``: under FSDP, the ranks agree on the first
        non-finite value (one collective, with the timeout); :class:`DistributedMismatch` is raised."""
        if self.monitor is not None:
            try:
                self.monitor.settle()
            except DistributedMismatch:
                raise
            except Exception as error:  # noqa: BLE001 - closing goes on; this rank reports what it saw itself
                warnings.warn(f"training health failed to agree with the other ranks at close ({type(error).__name__}: {error})",
                              stacklevel=user_stacklevel())

    def _check_nonfinite(self, step: int, recheck: bool = False) -> None:
        """The sentinel alone, before an optimizer of other model weights steps first (a head's), or
        (``recheck``) before the optimizer step that follows a call that measured the iteration."""
        self._contained("checking for non-finite values at", step, lambda monitor: monitor.check(step, recheck))

    def activations_before_capture(self, step: int) -> None:
        self._contained("measuring", step, lambda monitor: monitor.activations_before_capture(step))

    def capture(self, step: int, layers: list[str]) -> None:
        self._contained("writing", step, lambda monitor: monitor.capture(step, layers))

    def _contained(self, doing: str, step: int, call: Callable[[HealthMonitor], None]) -> None:
        """``call(monitor)`` at a capture, a failure warned once per kind of work, never raised."""
        if self.monitor is not None:
            try:
                call(self.monitor)
            except Exception as error:  # noqa: BLE001 - training health must never crash training
                _failed(self._warned, doing, step, error)

    def _monitor(self) -> HealthMonitor:
        if self.monitor is None:
            raise RuntimeError("training health is switched off for this Xray: create it with health=True (the default)")
        return self.monitor

    @property
    def first_nonfinite(self) -> Optional[NonFinite]:
        """None, or where the first NaN/Inf appeared: ``step``, ``layer`` and ``kind`` (weight, weight_grad,
        bias, bias_grad, output or activation). Weights and gradients are checked on every training
        iteration, biases where a non-finite value was found, outputs and activations at health steps.
        Under DDP, once a health step agreed on it, the same on every rank (before, this rank's own find);
        under FSDP, before ``close()``: what the ranks agreed at the last measured iteration or health
        step (``close()`` agrees on the rest)."""
        monitor = self._monitor()
        monitor.flush()
        return monitor.first_nonfinite

    def findings(self) -> list[Finding]:
        """What the rules found wrong so far, in the order first seen (see :mod:`xray_tb.health.rules`)."""
        return self._monitor().findings()

    def dead_units(self, threshold: Optional[float] = None) -> dict[str, list[int]]:
        """``{layer: sorted unit indices}`` of layers with units whose activation stayed at or below
        ``threshold`` (default: ``HealthOptions.dead_threshold``, 0) over the recent health steps."""
        return self._monitor().families.dead.dead(threshold)

    def prune(self, threshold: Optional[float] = None, dry_run: bool = True, remove: bool = False) -> list[pruning.PruneEntry]:
        """Mask the dead units' weight rows or filters and biases with ``torch.nn.utils.prune``.

        With ``dry_run=True`` (the default) nothing changes: the report says what would be masked.
        ``remove=True`` makes the pruning permanent. This is the one Xray call that changes the model.
        Layers that cannot be pruned without changing outputs are reported with a ``reason``.
        """
        for name, value in (("dry_run", dry_run), ("remove", remove)):
            if not isinstance(value, bool):  # prune(dry_run="no") would be a dry run: refused
                raise TypeError(f"prune({name}=...) takes True or False, got {value!r}")
        if remove and dry_run:  # a dry run changes nothing, so there would be nothing to make permanent
            raise ValueError("prune(remove=True) makes the masks permanent, which needs them applied: "
                             "call prune(dry_run=False, remove=True)")
        monitor = self._monitor()
        layers = {layer.name: layer for layer in monitor.scope.activations}
        report = pruning.plan(layers, self.dead_units(threshold))
        if dry_run:
            return report
        monitor.flush()
        report = pruning.apply(layers, report, remove)
        if any(entry.applied for entry in report):
            monitor.weights_changed()
        return report

    def add_statistic(self, name: str, fn: Callable[[torch.Tensor], float], kinds: Sequence[str] = ("weight_grad",)) -> None:
        """Compute ``fn(tensor) -> float`` (or a 0-d tensor) per layer: on each layer's ``weight`` or
        ``weight_grad`` at every health iteration, on its ``activation`` at health steps. It is written
        like the built-ins, as ``name`` (``name[kind]`` when several kinds are given)."""
        monitor = self._monitor()
        if monitor.closed:
            raise RuntimeError("this Xray is closed; create a new one to record again")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]{1,48}", name):
            raise ValueError(f"add_statistic name must be letters, digits, '_', '.' or '-' (1-48 of them), got {name!r}")
        if not callable(fn):
            raise TypeError(f"add_statistic fn must be callable as fn(tensor) -> float, got {type(fn).__name__}")
        kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
        unknown = [kind for kind in kinds if kind not in CUSTOM_KINDS]
        if not kinds or unknown:
            raise ValueError(f"add_statistic kinds must be some of {', '.join(CUSTOM_KINDS)}; got {kinds!r}")
        families = []
        for kind in dict.fromkeys(kinds):
            stat = name if len(kinds) == 1 else f"{name}[{kind}]"
            if not health_metadata.STAT_NAME.fullmatch(stat):
                raise ValueError(f"statistic name {stat!r} is too long")
            if kind == "activation":
                families.append(CustomActivationStatistic([layer.name for layer in monitor.scope.activations], stat, fn))
            else:
                families.append(CustomParameterStatistic([layer.name for layer in monitor.scope.weighted], stat, fn, kind))
        monitor.families.check_names(families)  # all or none: a refused name adds none of the kinds
        for family in families:
            monitor.add_family(family)

    def end_epoch(self) -> dict[str, dict[str, tuple[float, float]]]:
        """Close an epoch: each per-iteration statistic's mean over the epoch's iterations and its
        variance across them, ``{layer: {stat: (mean, var)}}``, also written to the run."""
        return self._monitor().end_epoch()


def _failed(warned: set, what: str, step: int, error: Exception) -> None:
    """A health call failed: that costs the step's health statistics, never the training. Each kind of
    failure is warned once."""
    key = ("health", what, type(error).__name__)
    if key not in warned:
        warned.add(key)
        warnings.warn(
            f"training health failed {what} step {step} ({type(error).__name__}: {error}); that step's health "
            "statistics are skipped and training goes on. Switch health off with Xray(..., health=False)",
            stacklevel=user_stacklevel(),
        )


def _out_of_step(group: Group, step: int, error: Exception) -> DistributedMismatch:
    """Training health failed on this rank under torch.distributed: going on without it would leave the other
    ranks waiting in a collective this rank skips, so it stops here, and they fail at their next one."""
    group.failed = True
    return DistributedMismatch(
        f"rank {group.rank}: training health failed at step {step} ({type(error).__name__}: {error}); under "
        "torch.distributed every rank must take part in its collectives, so this rank cannot go on without it. "
        "Pass health=False to Xray() on every rank to train without training health (and please report the error)")
