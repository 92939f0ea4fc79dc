"""The Xray facade: attach to a model, record what the plan asks at chosen steps, close."""

from __future__ import annotations

import copy
import operator
import time
import uuid
import warnings
import weakref
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
import torch
from torch import nn

from tb_plugin import metadata
from xray_tb.trace import arguments
from xray_tb.trace import graph
from xray_tb.capture import plan as plans
from xray_tb.attach import Resources, step_counter, trace_model, warn_about_earlier_captures
from xray_tb.capture.capture import MISSING_REASONS, CaptureContext, CaptureReport, capture
from xray_tb.health import HealthMixin, HealthOptions
from xray_tb.capture.hooks import TapRecorder
from xray_tb.capture.probe import run_probe
from xray_tb.io.reader import RecordedRun
from xray_tb.notebook.readback import ReadBackMixin
from xray_tb.capture.schedules import ScheduleLike, as_schedule
from xray_tb.capture.selectors import RandomFilters, Selector
from xray_tb.io.sink import EventSink

#: Default cap on the bytes of frame values one capture writes (16 MiB).
DEFAULT_BUDGET_BYTES = 16 * 2**20


class Xray(HealthMixin, ReadBackMixin):
    """Records weights, outputs, activations and gradients of a model's layers for TensorBoard.

    Args:
        model: the ``nn.Module`` to look into. Xray never changes it.
        example_input: a tensor, a tuple of positional inputs, or a dict of keyword inputs, used
            once to trace the architecture.
        input_size: instead of ``example_input``, the shape of one sample without the batch
            dimension; a random batch of 2 is made.
        plan: what to record, ``{layer: {kind: bool}}`` or a list of layer names; defaults to
            :meth:`draft_plan`.
        logdir: the run directory to write to (Xray opens its own event file there).
        writer: instead of ``logdir``, a ``torch.utils.tensorboard.SummaryWriter`` whose run
            receives Xray's data, next to the user's scalars.
        selector: how filters or rows are chosen from big tensors (default :class:`RandomFilters`).
        every: a schedule: an int n (every n-th step) or a callable ``step -> bool``. Hooks are
            armed only for due steps; :meth:`take_graphs` on other steps only counts.
        optimizer: with ``every``, count this optimizer's ``step()`` calls as the steps; without
            it, steps are :meth:`take_graphs` calls.
        probe: a fixed batch ``x`` or ``(x, y)``; outputs, activations and gradients are then taken
            by running it (in eval mode, leaving no trace on the model) at each capture.
        loss_fn: ``loss_fn(output, y)`` (or ``loss_fn(output)``) for the probe's gradients.
        dtype: ``"float32"`` (default) or ``"float16"`` for the stored values.
        budget_bytes: cap on the bytes of values one capture writes; frames beyond it are skipped
            and reported in :attr:`last_report`.
        health: training health (gradient statistics every iteration, dead units, findings, ...):
            True (default), False to switch it off, or ``HealthOptions(...)`` to thin it.
        layer_scalars: also write every per-layer statistic as a TensorBoard scalar (``xray_stats/...``
            per frame, ``xray_health/...`` and ``xray_health_epoch/...``), as Xray did before; by default
            only a few model-level scalars (``xray/grad_norm``, ...) reach the Scalars tab, and the
            per-layer statistics are plugin data, drawn by the Xray tab.
    """

    def __init__(
        self,
        model: nn.Module,
        example_input: Any = None,
        *,
        input_size: Optional[Sequence[int]] = None,
        plan: Optional[plans.PlanLike] = None,
        logdir: Optional[str] = None,
        writer=None,
        selector: Optional[Selector] = None,
        every: ScheduleLike = None,
        optimizer: Optional[torch.optim.Optimizer] = None,
        probe: Any = None,
        loss_fn: Optional[Callable] = None,
        dtype: Union[str, torch.dtype] = "float32",
        budget_bytes: int = DEFAULT_BUDGET_BYTES,
        health: Union[bool, HealthOptions] = True,
        layer_scalars: bool = False,
    ):
        arguments.model(model)
        logdir, writer = arguments.logdir(logdir), arguments.writer(writer)
        arguments.optimizer(optimizer)
        if not isinstance(layer_scalars, bool):
            raise TypeError(f"layer_scalars= must be True or False, got {type(layer_scalars).__name__} {layer_scalars!r}")
        self._layer_scalars = layer_scalars
        selector = arguments.selector(selector)
        if logdir is not None and writer is not None:
            raise ValueError("give either logdir= or writer=, not both")
        if logdir is None and writer is None:
            raise ValueError("give logdir='runs/<name>' or writer=SummaryWriter(...) so Xray knows where to write")
        self._storage_dtype = arguments.storage_dtype(dtype)
        if isinstance(budget_bytes, bool) or not hasattr(budget_bytes, "__index__") or operator.index(budget_bytes) <= 0:
            raise ValueError(f"budget_bytes must be a positive number of bytes (a whole number), got {budget_bytes!r}")
        self._schedule = as_schedule(every)
        self._due: tuple[Optional[int], bool] = (None, False)  # the schedule's last answer, by step
        if optimizer is not None and self._schedule is None:
            raise ValueError("optimizer= counts steps for a schedule; give every= too")
        if loss_fn is not None and not callable(loss_fn):
            raise TypeError(f"loss_fn= is called as loss_fn(output, y) on the probe batch; got {type(loss_fn).__name__} {loss_fn!r}")
        self._probe = arguments.probe_batch(probe)
        self._loss_fn = loss_fn
        args, kwargs = arguments.example_inputs(model, example_input, input_size)
        self._model = model
        self.architecture: dict = trace_model(model, args, kwargs)
        self._graph = graph.Graph(self.architecture)
        self.run_id = uuid.uuid4().hex
        self._selector = selector if selector is not None else RandomFilters()
        self._budget = operator.index(budget_bytes)
        first_plan = self._prepare(self.draft_plan() if plan is None else plan)  # before anything is opened
        warn_about_earlier_captures(logdir if writer is None else writer.log_dir)
        self._resources = Resources(EventSink(logdir=logdir, writer=writer))
        self._logdir = self._resources.sink.logdir
        self._finalizer = weakref.finalize(self, self._resources.release)
        self._plan: dict[str, dict[str, bool]] = {}
        self._activations: dict[str, graph.ActivationSource] = {}
        self._plan_version = 0
        self._next_step = 0
        self._last_step: Optional[int] = None
        self._records: dict[str, dict[str, list[int]]] = {}
        self._last_frames: dict[tuple[str, str], tuple[metadata.FrameHeader, np.ndarray]] = {}
        self.last_report: Optional[CaptureReport] = None
        self._run: Optional[RecordedRun] = None
        self._warned: set = set()
        if optimizer is not None:
            self._resources.step_hook = optimizer.register_step_post_hook(step_counter(weakref.ref(self)))
        self._sink.add(metadata.json_summary(metadata.ARCHITECTURE_TAG, self.architecture), step=0)
        self._install(*first_plan)
        self._start_health(health, optimizer, layer_scalars)

    @property
    def _sink(self) -> EventSink:
        if self._resources.sink is None:
            raise RuntimeError("this Xray is closed; create a new one to record again")
        return self._resources.sink

    @property
    def logdir(self) -> str:
        """The run directory Xray writes to."""
        return self._logdir

    # The plan -------------------------------------------------------------------------------------

    def draft_plan(self) -> dict[str, dict[str, bool]]:
        """A plan drafted from the layer types: conv output + activation, linear activation."""
        return plans.draft_plan(self._graph)

    @property
    def plan(self) -> dict[str, dict[str, bool]]:
        """A copy of the plan in force."""
        return copy.deepcopy(self._plan)

    def set_plan(self, plan: plans.PlanLike) -> None:
        """Validate ``plan`` and record by it from now on (see :mod:`xray_tb.capture.plan`)."""
        self._sink  # noqa: B018 - raises if closed
        self._install(*self._prepare(plan))

    def _prepare(self, plan: plans.PlanLike) -> tuple[dict, dict, TapRecorder, dict]:
        """The validated plan, its activation sources, an unarmed recorder for it, and the modules
        by name as they are now."""
        normalized = plans.normalize_plan(plan, self._graph, self._model)
        grads_planned = any(kinds["grad"] for kinds in normalized.values())
        if self._probe is not None and grads_planned and self._loss_fn is None:
            raise ValueError("the plan records 'grad' on the probe batch: give loss_fn= (called as loss_fn(output, y))")
        activations = {
            layer: self._graph.activation_source(layer) for layer, kinds in normalized.items() if kinds["activation"]
        }
        taps = {graph.Tap(layer) for layer, kinds in normalized.items() if kinds["output"] or kinds["grad"]}
        taps |= {source.tap for source in activations.values()}
        modules = dict(self._model.named_modules())
        recorder = TapRecorder(
            self._model,
            modules,
            taps,
            copy={tap for tap in taps if self._graph.overwritten_in_place(tap)},
            grads={graph.Tap(layer) for layer, kinds in normalized.items() if kinds["grad"]},
        )
        return normalized, activations, recorder, modules

    def _install(self, normalized: dict, activations: dict, recorder: TapRecorder, modules: dict) -> None:
        """Record by a prepared plan from now on, and write it to the run."""
        if self._resources.recorder is not None:
            recorder.owner = self._resources.recorder.owner  # the same training thread
            self._resources.recorder.remove()
        self._resources.recorder, self._plan, self._activations, self._modules = recorder, normalized, activations, modules
        self._arm_for(self._next_step)
        self._sink.add(metadata.json_summary(metadata.PLAN_TAG, plans.plan_document(self._plan)), step=self._plan_version)
        self._plan_version += 1
        self._sink.flush()

    # Steps ----------------------------------------------------------------------------------------

    def is_due(self, step: int) -> bool:
        """Whether ``step`` is due for a capture under the schedule (always, without one).

        The schedule is asked once per step: arming the hooks for a step and capturing it agree
        even for a schedule that is not a pure function of the step.
        """
        if self._schedule is None:
            return True
        if self._due[0] != step:
            self._due = (step, bool(self._schedule(step)))
        return self._due[1]

    def _arm_for(self, step: int) -> None:
        """Arm the hooks for the training forward of ``step`` when it is due (never in probe mode)."""
        recorder = self._resources.recorder
        due = self._probe is None and self.is_due(step)
        if due != recorder.armed:  # checked first: this runs on every step
            recorder.arm() if due else recorder.disarm()
        self._health_arm(step)  # training health's own hooks, for its health steps

    def _optimizer_stepped(self) -> None:
        self._next_step += 1
        self._arm_for(self._next_step)

    # Recording ------------------------------------------------------------------------------------

    def take_graphs(self, step: Optional[int] = None, *, probe: Optional[bool] = None) -> Optional[int]:
        """Record what the plan asks from the latest training step; call it after ``loss.backward()``.

        Args:
            step: the training step to file the frames under; by default Xray's step count
                (optimizer steps with ``optimizer=``, else earlier calls).
            probe: run the probe batch for outputs, activations and gradients (default: when a
                probe was given).

        Returns:
            The step recorded, or None when the schedule says the step is not due.
        """
        sink = self._sink
        if step is not None:
            step = arguments.step(step)  # refused before anything changes
        self._resources.recorder.claim()  # the thread that calls take_graphs() trains
        counted_by_optimizer = self._resources.step_hook is not None
        if step is None:
            step = self._next_step
        elif not counted_by_optimizer:
            if self._schedule is not None and step != self._next_step and self._last_step is not None:
                self._warn_once(
                    "skipped calls",
                    f"take_graphs(step={step}) after step {self._next_step - 1}: with every= and no optimizer=, Xray "
                    "counts take_graphs() calls to know when to arm its hooks; call it every step (it returns None "
                    "when the step is not due), or pass optimizer= so Xray counts optimizer steps",
                )
        checked = self._next_step if counted_by_optimizer else step
        if not counted_by_optimizer:
            self._health_iteration(step)  # every call is an iteration (with optimizer=, its step pre-hook)
        cached_step, due = self._due  # usually asked already, when the hooks were set for this step
        if not (due if cached_step == checked else self.is_due(checked)):
            # The common call, on every training step that is not due: keep it to a count.
            if not counted_by_optimizer:
                self._next_step = step + 1
                self._arm_for(step + 1)
            return None
        try:
            if self._probe is not None if probe is None else probe:
                if self._probe is None:
                    raise ValueError("take_graphs(probe=True) needs a probe batch: Xray(..., probe=(x, y), loss_fn=...)")
                self._run_probe()
            if self._last_step is not None and step <= self._last_step:
                self._warn_once("step", f"take_graphs(step={step}) after step {self._last_step}: TensorBoard keeps one frame per step, steps should increase")
            self.last_report = self._record(sink, step)
            self._health_capture(step)
            sink.flush()
            self._last_step = step
        finally:
            if not counted_by_optimizer:
                self._next_step = step + 1
            if self._schedule is not None:
                self._resources.recorder.clear()  # nothing is held between scheduled captures
            self._arm_for(self._next_step)
        return step

    def _run_probe(self) -> None:
        inputs, target = self._probe
        want_grads = any(kinds["grad"] for kinds in self._plan.values())
        run_probe(self._model, self._resources.recorder, inputs, target, self._loss_fn, want_grads)

    def _record(self, sink: EventSink, step: int) -> CaptureReport:
        """Write one capture as a single event, then remember what it holds."""
        context = CaptureContext(
            plan=self._plan,
            modules=self._modules,
            kept=self._resources.recorder.latest,
            kept_errors=self._resources.recorder.errors,
            activations=self._activations,
            selector=self._selector,
            storage_dtype=self._storage_dtype,
            budget_bytes=self._budget,
            run_id=self.run_id,
            layer_scalars=self._layer_scalars,
        )
        wall_time = time.time()
        result = capture(context, step, wall_time)
        if result.event.summary.value:
            sink.add_event(result.event)
        self._last_frames = result.frames
        for tap in result.report.overwritten:
            self._resources.recorder.copy_from_now_on(tap)
        for name, kind in result.frames:
            self._records.setdefault(name, {}).setdefault(kind, []).append(step)
        self._warn_about(result.report)
        return result.report

    def _warn_about(self, report: CaptureReport) -> None:
        """One warning per reason for what could not be recorded, each (layer, kind, reason) once."""
        new = [(layer, kind, reason) for layer, kind, reason in report.missing if (layer, kind, reason) not in self._warned]
        self._warned.update(new)
        for reason in dict.fromkeys(reason for _, _, reason in new):
            which = ", ".join(f"{layer!r} {kind}" for layer, kind, why in new if why == reason)
            warnings.warn(f"take_graphs(step={report.step}) did not record {which}: {MISSING_REASONS.get(reason, reason)}", stacklevel=4)
        if report.skipped:
            skipped = ", ".join(f"{name}/{kind}" for name, kind in report.skipped)
            warnings.warn(
                f"capture at step {report.step} reached the budget of {self._budget} bytes and skipped {skipped}; "
                "raise budget_bytes=, store dtype='float16', or keep fewer filters with the selector",
                stacklevel=4,
            )

    def _warn_once(self, key: object, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, stacklevel=4)

    # Life cycle -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Remove every hook and flush and close the event file (a user's writer stays open). Idempotent."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __enter__(self) -> "Xray":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
