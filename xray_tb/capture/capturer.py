"""What a recording captures and how: the plan in force and its hooks, the selector, the stored dtype,
the byte budget and the probe. :meth:`Capturer.record` writes one capture through the recording's sink
(the frames themselves are built by :func:`xray_tb.capture.capture.capture`)."""

from __future__ import annotations

import time
import warnings
from typing import Any, Callable, NamedTuple, Optional

from torch import nn

from tb_plugin import metadata
from xray_tb.capture import plan as plans
from xray_tb.capture.capture import MISSING_REASONS, CaptureContext, CaptureReport, capture
from xray_tb.capture.hooks import TapRecorder
from xray_tb.capture.probe import run_probe
from xray_tb.capture.selectors import Selector
from xray_tb import sharding
from xray_tb.capture.sharded import gather_selected
from xray_tb.distributed import Group
from xray_tb.recording import Recording
from xray_tb.trace import graph
from xray_tb.user_frame import user_stacklevel


class PreparedPlan(NamedTuple):
    """A validated plan, its activation sources, an unarmed recorder for it, and the modules by name
    as they were when it was prepared (training health's scope shares them)."""

    plan: dict
    activations: dict
    recorder: TapRecorder
    modules: dict[str, nn.Module]


class Capturer:
    """The plan, its taps and how frames are kept, over one :class:`~xray_tb.recording.Recording`."""

    def __init__(self, recording: Recording, *, selector: Selector, storage_dtype: type, budget_bytes: int,
                 layer_scalars: bool, probe: Optional[tuple[tuple, Any]], loss_fn: Optional[Callable], group: Optional[Group] = None):
        self.recording = recording
        self.group = group  # under torch.distributed: sharded parameters are gathered from every rank
        self.selector = selector
        self.storage_dtype = storage_dtype
        self.budget_bytes = budget_bytes
        self.layer_scalars = layer_scalars
        self.probe = probe
        self.loss_fn = loss_fn
        self.plan: dict[str, dict[str, bool]] = {}
        self.activations: dict[str, graph.ActivationSource] = {}
        self.modules: dict = {}
        self.plan_version = 0
        self.warned: set = set()
        self.sharded = False  # whether the model has sharded (FSDP) parameters: known when a plan is installed

    # The plan -------------------------------------------------------------------------------------

    def prepare(self, plan: plans.PlanLike, modules: Optional[dict[str, nn.Module]] = None, drafted: bool = False) -> PreparedPlan:
        """``plan`` validated and ready to :meth:`install`; ``modules``: ``dict(model.named_modules())``
        when the caller has it; ``drafted``: ``plan`` is :func:`~xray_tb.capture.plan.draft_plan`'s, as it made it."""
        model, traced = self.recording.model, self.recording.graph
        modules = dict(model.named_modules()) if modules is None else modules
        normalized = plans.drafted(plan) if drafted else plans.normalize_plan(plan, traced, model, modules)
        grads_planned = any(kinds["grad"] for kinds in normalized.values())
        if self.probe is not None and grads_planned and self.loss_fn is None:
            raise ValueError("the plan records 'grad' on the probe batch: give loss_fn= (called as loss_fn(output, y))")
        activations = {
            layer: traced.activation_source(layer) for layer, kinds in normalized.items() if kinds["activation"]
        }
        taps = {graph.Tap(layer) for layer, kinds in normalized.items() if kinds["output"] or kinds["grad"]}
        taps |= {source.tap for source in activations.values()}
        grads = {graph.Tap(layer) for layer, kinds in normalized.items() if kinds["grad"]}
        recorder = TapRecorder.for_graph(model, modules, traced, taps, grads)
        return PreparedPlan(normalized, activations, recorder, modules)

    def install(self, normalized: dict, activations: dict, recorder: TapRecorder, modules: dict) -> None:
        """Record by a prepared plan from now on (its hooks unarmed until the caller arms them)."""
        recording = self.recording
        if recording.recorder is not None:
            recorder.owner = recording.recorder.owner  # the same training thread
            recording.recorder.remove()
        recording.recorder, self.plan, self.activations, self.modules = recorder, normalized, activations, modules
        self.sharded = sharding.any_sharded(recording.model.parameters())

    def write_plan(self) -> None:
        """Write the plan in force to the run, as the next plan version."""
        sink = self.recording.sink
        sink.add(metadata.json_summary(metadata.PLAN_TAG, plans.plan_document(self.plan)), step=self.plan_version)
        self.plan_version += 1
        sink.flush()

    # Capturing ------------------------------------------------------------------------------------

    def run_probe(self) -> None:
        inputs, target = self.probe
        want_grads = any(kinds["grad"] for kinds in self.plan.values())
        run_probe(self.recording.model, self.recording.recorder, inputs, target, self.loss_fn, want_grads)

    def gather_shards(self, step: int) -> dict:
        """The selected rows of the plan's sharded parameters (FSDP); every rank calls it at every capture,
        the ranks that write no frames too (see :mod:`xray_tb.capture.sharded`). Without sharded
        parameters, nothing: no scan of the plan at every capture."""
        if not self.sharded:
            return {}
        return gather_selected(self.group, step, self.plan, self.modules, self.selector)

    def record(self, step: int) -> tuple[CaptureReport, dict]:
        """Write one capture as a single event; its report and ``{(layer, kind): (header, values)}``."""
        recorder = self.recording.recorder
        gathered = self.gather_shards(step)
        context = CaptureContext(
            plan=self.plan,
            modules=self.modules,
            kept=recorder.latest,
            kept_errors=recorder.errors,
            activations=self.activations,
            selector=self.selector,
            storage_dtype=self.storage_dtype,
            budget_bytes=self.budget_bytes,
            run_id=self.recording.run_id,
            layer_scalars=self.layer_scalars,
            gathered=gathered,
            reductions=self.recording.reductions,
        )
        result = capture(context, step, time.time())
        if result.event.summary.value:
            self.recording.sink.add_event(result.event)
        for tap in result.report.overwritten:
            recorder.copy_from_now_on(tap)
        self.warn_about(result.report)
        return result.report, result.frames

    def warn_about(self, report: CaptureReport) -> None:
        """One warning per reason for what could not be recorded, each (layer, kind, reason) once."""
        new = [(layer, kind, reason) for layer, kind, reason in report.missing if (layer, kind, reason) not in self.warned]
        self.warned.update(new)
        for reason in dict.fromkeys(reason for _, _, reason in new):
            which = ", ".join(f"{layer!r} {kind}" for layer, kind, why in new if why == reason)
            warnings.warn(f"take_graphs(step={report.step}) did not record {which}: {MISSING_REASONS.get(reason, reason)}", stacklevel=user_stacklevel())
        if report.skipped:
            skipped = ", ".join(f"{name}/{kind}" for name, kind in report.skipped)
            warnings.warn(
                f"capture at step {report.step} reached the budget of {self.budget_bytes} bytes and skipped {skipped}; "
                "raise budget_bytes=, store dtype='float16', or keep fewer filters with the selector",
                stacklevel=user_stacklevel(),
            )

    def warn_once(self, key: object, message: str) -> None:
        if key not in self.warned:
            self.warned.add(key)
            warnings.warn(message, stacklevel=user_stacklevel())
