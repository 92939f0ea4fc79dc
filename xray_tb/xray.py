"""The Xray facade: attach to a model, record what the plan asks at chosen steps, close.

``Xray`` checks its arguments, composes the parts around one :class:`~xray_tb.recording.Recording`
(:class:`~xray_tb.capture.capturer.Capturer`, :class:`~xray_tb.health.training.TrainingHealth`,
:class:`~xray_tb.notebook.readback.ReadBack`) and delegates to them; it keeps only the step logic of
:meth:`Xray.take_graphs`.
Which step a call files and whether it is due: :mod:`xray_tb.capture.call_steps`.
"""

from __future__ import annotations

import copy
import functools
import uuid
import weakref
from typing import Any, Callable, Optional, Sequence, Union

import torch
from torch import nn

from tb_plugin import metadata
from xray_tb import attached, distributed
from xray_tb.bias.recording import attention_iou
from xray_tb.capture import plan as plans
from xray_tb.capture.capture import CaptureReport
from xray_tb.capture.capturer import Capturer, PreparedPlan
from xray_tb.capture.hooks import recompile_with_hooks
from xray_tb.capture.call_steps import DueSteps, filed_step, repeated_step
from xray_tb.capture.schedules import ScheduleLike
from xray_tb.capture.selectors import RandomFilters, Selector
from xray_tb.health import HealthOptions, TrainingHealth
from xray_tb.health.options import as_options
from xray_tb.io import storage
from xray_tb.io.remote_event_file import CLOSE_TIMEOUT
from xray_tb.notebook.readback import ReadBack
from xray_tb.recording import Recording, open_sink, release_on_collection
from xray_tb.trace import arguments
from xray_tb.trace.state import without_cyclic_gc


def _delegate(part: str, method: Callable) -> Callable:
    """``Xray.<name>`` calling ``self.<part>.<name>``, with the part's docstring and signature."""

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        return getattr(getattr(self, part), method.__name__)(*args, **kwargs)

    return call


#: Default cap on the bytes of frame values one capture writes (16 MiB).
DEFAULT_BUDGET_BYTES = 16 * 2**20


class Xray:
    """Records weights, outputs, activations and gradients of a model's layers for TensorBoard.

    Args:
        model: the ``nn.Module`` to look into. Xray never changes it. A ``DistributedDataParallel`` is
            looked into through its ``module`` (layer names are the inner model's); a ``fully_shard`` (FSDP)
            model gathers its selected rows (see docs/integrations.md); see ``ranks``.
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
            armed only for due steps (but one pre-hook of training health's on the model, on a CPU:
            see docs/health.md); :meth:`take_graphs` on other steps only counts.
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
        ranks: under an initialised ``torch.distributed`` process group: ``"zero"`` (default) writes
            from rank 0 only (the other ranks open no event file), ``"all"`` writes one run per rank,
            ``<logdir>/rank<k>``. Every rank takes part in training health (see
            :mod:`xray_tb.distributed`), and must call :meth:`take_graphs` as often as the others.
        collective_timeout: seconds an Xray collective waits for the other ranks before raising
            :class:`~xray_tb.distributed.DistributedMismatch` (default 300).
    """

    @without_cyclic_gc
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
        ranks: str = "zero",
        collective_timeout: float = distributed.DEFAULT_TIMEOUT_SECONDS,
    ):
        # with DDP's and torch.compile's, the inner module; its modules, one walk for the trace, the plan and training health
        wrapped, (model, modules) = arguments.wrappers(model), arguments.model_and_modules(model)
        logdir, writer = arguments.destination(logdir, writer)
        arguments.optimizer(optimizer)
        arguments.flag(layer_scalars, "layer_scalars")
        health = as_options(health)  # refused before anything is traced or opened
        selector = arguments.selector(selector)
        group = distributed.Group.current(distributed.timeout_seconds(collective_timeout), distributed.ddp_of(wrapped))  # Join
        self._writes, subfolder = distributed.writing_rank(group, ranks)
        if subfolder is not None:
            if writer is not None:
                raise ValueError("ranks='all' writes one run per rank under logdir=: give logdir=, not writer=")
            logdir = storage.join(logdir, subfolder)
        storage_dtype = arguments.storage_dtype(dtype)
        budget_bytes = arguments.budget_bytes(budget_bytes)
        self._due = DueSteps(every)
        if optimizer is not None and self._due.schedule is None:
            raise ValueError("optimizer= counts steps for a schedule; give every= too")
        arguments.loss_fn(loss_fn)
        probe = arguments.probe_batch(probe, model)
        args, kwargs = arguments.example_inputs(model, example_input, input_size)
        distributed.meet_before_tracing(group, model)
        architecture = arguments.trace_model(model, args, kwargs, modules)
        arguments.probe_runs(model, probe, loss_fn)
        self.run_id = uuid.uuid4().hex
        # Built on a recording with no sink yet, so that a bad plan is refused before anything is opened.
        recording = Recording(model, architecture, None, self.run_id)
        del architecture  # the recording keeps a compact copy: see the `architecture` property
        self._capture = Capturer(recording, selector=selector if selector is not None else RandomFilters(), storage_dtype=storage_dtype,
                                 budget_bytes=budget_bytes, layer_scalars=layer_scalars, probe=probe, loss_fn=loss_fn, group=group)
        first_plan = self._capture.prepare(self.draft_plan() if plan is None else plan, modules, drafted=plan is None)
        open_sink(recording, self._writes, logdir, writer)
        self._recording = recording
        self._finalizer = weakref.finalize(self, release_on_collection, recording)
        try:
            self._build(model, recording, first_plan, optimizer, health, layer_scalars, group)
        except BaseException:
            self._finalizer()  # hooks off the model and the event file closed now, not when a traceback lets go of self
            raise

    def _build(self, model: nn.Module, recording: Recording, first_plan: PreparedPlan,
               optimizer: Optional[torch.optim.Optimizer], health: Optional[HealthOptions], layer_scalars: bool,
               group: Optional[distributed.Group]) -> None:
        """The constructor's second half, once the event file is open: what fails here is released at once."""
        self._readback = ReadBack(recording)
        self.last_report: Optional[CaptureReport] = None
        recording.arm_with(self._arm_for)
        if optimizer is not None:
            recording.count_optimizer_steps(optimizer)
        recording.sink.add(metadata.encoded_json_summary(metadata.ARCHITECTURE_TAG, recording.architecture_json()), step=0)
        ref = weakref.ref(self)  # the monitor must not keep the Xray alive (its finalizer closes it)

        def capture_due(step: int) -> bool:  # with a probe, captures run on the probe batch: no activation statistics by default
            xray = ref()
            return xray is not None and xray._capture.probe is None and xray.is_due(step)

        self._health = TrainingHealth(recording, health, optimizer, capture_due, layer_scalars, group, modules=first_plan.modules)
        self._install(first_plan)
        recompile_with_hooks(model)  # a model compiled and run before it had Xray's hooks
        attached.attach(model, self, attached.run_key(recording.logdir))  # an earlier Xray on the same run is closed
        recording.built()

    @property
    def recording(self) -> Recording:
        """What this Xray's parts share: the model, graph, sink, hooks and step counter."""
        return self._recording

    @property
    def architecture(self) -> dict:
        """The model's traced dataflow graph (schema: :mod:`xray_tb.trace.tracer`); a fresh copy on
        each access, decoded from the compact one kept."""
        return self._recording.architecture

    @property
    def logdir(self) -> str:
        """The run directory Xray writes to."""
        return self._recording.logdir

    # The plan -------------------------------------------------------------------------------------

    def draft_plan(self) -> dict[str, dict[str, bool]]:
        """A plan drafted from the layer types: conv output + activation, linear activation."""
        return plans.draft_plan(self._capture.recording.graph)

    @property
    def plan(self) -> dict[str, dict[str, bool]]:
        """A copy of the plan in force (each layer's entry its own dict)."""
        return {layer: copy.deepcopy(entry) for layer, entry in self._capture.plan.items()}

    def set_plan(self, plan: plans.PlanLike) -> None:
        """Validate ``plan`` and record by it from now on (see :mod:`xray_tb.capture.plan`)."""
        self._recording.sink  # noqa: B018 - raises if closed
        self._install(self._capture.prepare(plan))

    def _install(self, prepared: PreparedPlan) -> None:
        """Record by a prepared plan from now on, and write it to the run."""
        self._capture.install(*prepared)
        self._arm_for(self._recording.next_step)
        self._capture.write_plan()

    # Steps ----------------------------------------------------------------------------------------

    def is_due(self, step: int) -> bool:
        """Whether ``step`` is due for a capture under the schedule (always, without one; asked once per step)."""
        return self._due(step)

    def _arm_for(self, step: int) -> None:
        """Arm the hooks for the training forward of ``step`` when it is due (never in probe mode)."""
        recorder = self._recording.recorder
        due = self._writes and self._capture.probe is None and self._due(step)
        if due != recorder.armed:  # checked first: this runs on every step
            recorder.arm() if due else recorder.disarm()
        self._health.arm_for(step)  # training health's own hooks, for its health steps

    # Recording ------------------------------------------------------------------------------------

    def take_graphs(self, step: Optional[int] = None, *, probe: Optional[bool] = None) -> Optional[int]:
        """Record what the plan asks from the latest training step; call it after ``loss.backward()``.

        Args:
            step: the training step to file the frames under; by default Xray's step count
                (optimizer steps with ``optimizer=``, else earlier calls).
            probe: run the probe batch for outputs, activations and gradients (default: when a
                probe was given).

        Returns:
            The step recorded (on a rank that writes no frames, ``ranks="zero"``: the step of the capture
            it took part in), or None when the schedule says the step is not due.
        """
        recording, capturer = self._recording, self._capture
        sink = recording.sink
        if step is not None:
            step = arguments.step(step)  # refused before anything changes
        if probe and capturer.probe is None:  # so is a probe without a probe batch
            raise ValueError("take_graphs(probe=True) needs a probe batch: Xray(..., probe=(x, y), loss_fn=...)")
        recording.recorder.claim()  # the thread that calls take_graphs() trains
        given = step is not None
        counted_by_optimizer = recording.counts_optimizer_steps
        last_step = self._readback.last_step
        step, checked = filed_step(step, recording.next_step, counted_by_optimizer, self._health.call_step,
                                   self._due.schedule is not None, last_step, capturer.warn_once)
        due = self._due(checked)  # usually asked already, when the hooks were set for this step
        with recording.reductions:  # the frames' statistics reuse what training health reduces of the same tensors
            if not counted_by_optimizer:
                self._health.iteration(step)  # every call is an iteration (with optimizer=, its step pre-hook)
            if not due:
                # The common call, on every training step that is not due: keep it to a count.
                if not counted_by_optimizer:
                    recording.next_step = step + 1
                    self._arm_for(step + 1)
                return None
            try:
                if not self._writes:  # another rank writes the frames; this one gives its rows of sharded parameters
                    capturer.gather_shards(step)
                    return step
                if counted_by_optimizer:  # health's activations of the training forward first: the frames reuse their reductions
                    self._health.activations_before_capture(checked)
                if capturer.probe is not None if probe is None else probe:
                    capturer.run_probe()
                if last_step is not None and step <= last_step:
                    capturer.warn_once("step", repeated_step(step, last_step, given, counted_by_optimizer))
                self.last_report, frames = capturer.record(step)
                self._readback.remember(step, frames)
                self._health.capture(step, list(capturer.plan))
                sink.flush()
                self._readback.last_step = step
            finally:
                if not counted_by_optimizer:
                    recording.next_step = step + 1
                if self._due.schedule is not None:
                    recording.recorder.clear()  # nothing is held between scheduled captures
                self._arm_for(recording.next_step)
        return step

    # Delegated: read-back, training health, Attention-IoU ------------------------------------------

    records = _delegate("_readback", ReadBack.records)
    load = _delegate("_readback", ReadBack.load)
    show_last_graphs = _delegate("_readback", ReadBack.show_last_graphs)
    save_gif = _delegate("_readback", ReadBack.save_gif)
    summary = _delegate("_readback", ReadBack.summary)
    findings = _delegate("_health", TrainingHealth.findings)
    dead_units = _delegate("_health", TrainingHealth.dead_units)
    prune = _delegate("_health", TrainingHealth.prune)
    add_statistic = _delegate("_health", TrainingHealth.add_statistic)
    end_epoch = _delegate("_health", TrainingHealth.end_epoch)
    first_nonfinite = property(lambda self: self._health.first_nonfinite, doc=TrainingHealth.first_nonfinite.__doc__)

    def attention_iou(self, loader, *, target: int, protected: int, masks=None, **options):
        """Attention-IoU of the model over ``loader``, written into the run at the current step and
        returned as a :class:`xray_tb.bias.BiasReport`; see :func:`xray_tb.bias.recording.attention_iou`."""
        return attention_iou(self._recording, loader, target=target, protected=protected, masks=masks, **options)

    # Life cycle -----------------------------------------------------------------------------------

    def flush(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Write what is recorded so far; for a remote logdir (``s3://...``), wait up to ``timeout``
        seconds until every capture is uploaded, also after :meth:`close` (to finish after an outage).

        Raises:
            UploadIncompleteError: captures were still waiting; the message says how many and the
                local folder that keeps them. The uploads go on in the background.
        """
        self._recording.flush(arguments.wait_seconds(timeout))

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Remove every hook and flush and close the event file (a user's writer stays open).

        For a remote logdir, wait up to ``timeout`` seconds for the uploads; if captures are still
        waiting, they are kept in a local folder and :class:`UploadIncompleteError` says how many and
        where. Calling ``close()`` again (or :meth:`flush`) waits for them again; otherwise idempotent.
        An Xray collected without ``close()`` keeps what it could not upload on local disk, and warns.
        Under FSDP every rank calls it: one collective agrees on the first non-finite value (see
        docs/integrations.md); past ``collective_timeout`` it closes all the same, then raises ``DistributedMismatch``.
        """
        self._close(arguments.wait_seconds(timeout), settle=True)

    def _close(self, timeout: float, settle: bool) -> None:
        if self._finalizer.detach() is None:
            self._recording.flush(timeout)
            return
        try:
            if settle:
                self._health.settle()
        finally:
            self._recording.release(timeout)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __enter__(self) -> "Xray":
        return self

    def __exit__(self, exc_type, *exc_info) -> None:
        self._close(CLOSE_TIMEOUT, settle=exc_type is None)  # leaving on an error, the ranks may be out of step: no collective
