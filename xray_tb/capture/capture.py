"""One capture: gather the planned tensors, select, and build the frames and statistics to write.

Nothing here writes or keeps state: :func:`capture` returns a :class:`Capture` that the caller
writes first and only then commits, so a failure part-way leaves no half-recorded step behind.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Union

import numpy as np
import torch
from tensorboard.compat.proto import event_pb2
from torch import nn

from xray_tb import sharding
from xray_tb.parametrized import is_computed, parameter
from tb_plugin import frame_stats, metadata
from tb_plugin.metadata import BATCH_KINDS, FrameHeader
from xray_tb.trace.activations import recompute
from xray_tb.trace.graph import ActivationSource, Tap
from xray_tb.capture.tap_value import TapValue
from xray_tb.capture.sharded import Gathered
from xray_tb.capture.selectors import SelectionInfo, Selector, check_selection
from xray_tb.capture.frame_statistics import as_float_array, frame_statistics
from xray_tb.capture.shared_reductions import SharedReductions
from xray_tb.devices import host_array, on_host

#: Why a planned kind could not be recorded, by reason key.
MISSING_REASONS = {
    "parameter_grad": ("no .grad on the parameter (call take_graphs() after loss.backward(); under FSDP before any other "
                       "forward, which leaves the parameters unsharded and their gradients on the sharded ones)"),
    "computed": (
        "the parameter is computed from others (torch.nn.utils.prune or parametrize) and has no .grad of its own; "
        "training health's gradient statistics cover the parameters that train"
    ),
    "forward": "no forward pass ran with grad enabled while Xray's hooks were armed",
    "recomputed": (
        "the layer ran more than once without grad in the forward, inside reentrant activation checkpointing "
        "(torch.utils.checkpoint with use_reentrant=True), and its recomputations in backward cannot be matched to "
        "its calls; checkpoint with use_reentrant=False to record it"
    ),
    "grad": "no gradient reached the output (call take_graphs() after loss.backward())",
    "overwritten": (
        "the output was written in place after the layer returned it (through a view, say), so it no longer holds "
        "what the layer returned; Xray copies it from the next capture on"
    ),
}


@dataclasses.dataclass
class CaptureReport:
    """What one capture wrote: frames, bytes of values, frames skipped for the byte budget, and
    planned kinds that could not be recorded, as ``(layer, kind, reason)``: a key of
    :data:`MISSING_REASONS`, or ``"failed: <error>"`` when recording that kind raised (every other
    frame of the capture is still written)."""

    step: int
    frames: int = 0
    bytes: int = 0
    skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    missing: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)
    #: Taps whose kept output was written in place after the layer returned it.
    overwritten: set[Tap] = dataclasses.field(default_factory=set)


@dataclasses.dataclass
class Capture:
    """One capture as a single event to write (empty summary: nothing to write), and the frames it
    holds, keyed by (layer name, kind)."""

    report: CaptureReport
    event: event_pb2.Event
    frames: dict[tuple[str, str], tuple[FrameHeader, np.ndarray]]


@dataclasses.dataclass(frozen=True)
class CaptureContext:
    """Everything a capture reads: the plan, the modules, what the hooks kept, and how to store it."""

    plan: dict[str, dict]
    modules: dict[str, nn.Module]
    kept: dict[Tap, TapValue]
    kept_errors: dict[Tap, str]
    activations: dict[str, ActivationSource]
    selector: Selector
    storage_dtype: type
    budget_bytes: int
    run_id: str
    layer_scalars: bool = False  # also write the statistics as xray_stats/<layer>/<kind>/<stat> scalars
    #: The selected rows of sharded parameters (FSDP), gathered from every rank, or why they are missing.
    gathered: dict = dataclasses.field(default_factory=dict)
    #: Reductions of this step's tensors that training health took already (see SharedReductions).
    reductions: Optional[SharedReductions] = None


def capture(context: CaptureContext, step: int, wall_time: float) -> Capture:
    """Frames and statistics of every planned kind that can be recorded now.

    The summary is built in place in the event (each frame's values are copied into it once): this
    runs inside the training loop.
    """
    result = Capture(CaptureReport(step), event_pb2.Event(step=int(step), wall_time=wall_time), {})
    summary = result.event.summary
    measured: list[tuple[FrameHeader, torch.Tensor]] = []
    names: dict[int, str] = {}  # repr of each selector, once per capture
    for layer, entry in context.plan.items():
        module = context.modules[layer]
        selector = entry.get("selector") or context.selector
        selector_name = names.get(id(selector)) or names.setdefault(id(selector), repr(selector))
        for kind in metadata.KINDS:
            if not entry[kind]:
                continue
            try:
                frames = _kind_frames(context, result.report, layer, kind, module, selector, selector_name, step, wall_time)
            except Exception as error:  # noqa: BLE001 - one layer's failure must not cost the capture or the training
                result.report.missing.append((layer, kind, f"failed: {type(error).__name__}: {error}"))
                continue
            for header, values, tensor in frames:
                if result.report.bytes + values.nbytes > context.budget_bytes:
                    result.report.skipped.append((header.name, kind))
                    continue
                metadata.add_frame(summary, header, values)
                result.frames[(header.name, kind)] = (header, values)
                measured.append((header, tensor))
                result.report.frames += 1
                result.report.bytes += values.nbytes
    try:
        statistics = frame_statistics([tensor for _, tensor in measured], context.reductions)
    except Exception as error:  # noqa: BLE001 - the frames are worth writing without their statistics
        statistics = []
        result.report.missing.extend((h.name, h.kind, f"failed: statistics: {type(error).__name__}: {error}") for h, _ in measured)
    if context.layer_scalars:
        for (header, _), stats in zip(measured, statistics):
            metadata.add_stats(summary, header.name, header.kind, stats)
    if statistics:
        frame_stats.add_frame_stats(summary, [(header.name, header.kind, stats) for (header, _), stats in zip(measured, statistics)])
    return result


def _kind_frames(
    context: CaptureContext,
    report: CaptureReport,
    layer: str,
    kind: str,
    module: nn.Module,
    selector: Selector,
    selector_name: str,
    step: int,
    wall_time: float,
) -> list[tuple[FrameHeader, np.ndarray, torch.Tensor]]:
    """Every frame of one layer's kind, all or none (a failure part-way adds nothing); what could not
    be recorded goes to ``report``."""
    tensors, reason = _planned_tensors(context, report, layer, kind, module)
    if reason:
        report.missing.append((layer, kind, reason))
    info = SelectionInfo(layer=layer, kind=kind, layer_type=sharding.type_name(module))
    frames = []
    for path, tensor in tensors:
        header, values = make_frame(
            tensor, info=info, selector=selector, step=step, run_id=context.run_id, wall_time=wall_time, path=path, selector_name=selector_name
        )
        frames.append((header, _stored(values, context.storage_dtype), tensor.rows if isinstance(tensor, Gathered) else tensor))
    return frames


#: float16's largest finite value and its smallest normal one.
_HALF_MAX, _HALF_TINY = float(np.finfo(np.float16).max), float(np.finfo(np.float16).tiny)


def _stored(values: np.ndarray, dtype: type) -> np.ndarray:
    """``values`` (float32) as the run stores them: in ``dtype``, but a frame float16 cannot hold (a finite
    value beyond ±65504, which would read as infinite, or every value below its normal range, which would
    read as 0 or lose its digits) stays float32. The stored ``.npy`` says which, so readers need no flag."""
    if dtype is not np.float16 or not values.size:
        return values.astype(dtype, copy=False)
    with np.errstate(invalid="ignore"):
        magnitudes = np.abs(values[np.isfinite(values)])
    if magnitudes.size and (magnitudes.max() > _HALF_MAX or 0 < magnitudes.max() < _HALF_TINY):
        return values
    return values.astype(np.float16)


def _planned_tensors(
    context: CaptureContext, report: CaptureReport, layer: str, kind: str, module: nn.Module
) -> tuple[list[tuple[str, torch.Tensor]], Optional[str]]:
    """The tensors to record for a layer's kind with their paths in the output, or why there are none
    (or why some are missing: a gradient that never reached one output of several)."""
    if kind in metadata.PARAMETER_KINDS:
        name, is_grad = metadata.PARAMETER_KINDS[kind]
        tensor = parameter(module, name, grad=is_grad)
        if tensor is None:
            return [], "computed" if is_grad and is_computed(module, name) else "parameter_grad"
        if (layer, kind) in context.gathered:  # sharded: only the selected rows, gathered from every rank
            gathered = context.gathered[(layer, kind)]
            return ([], gathered) if isinstance(gathered, str) else ([("", gathered)], None)
        return [("", tensor.to_dense() if tensor.is_sparse else tensor)], None
    source = context.activations[layer] if kind == "activation" else None
    tap = source.tap if source else Tap(layer)
    kept = context.kept.get(tap)
    if kept is None:
        return [], context.kept_errors.get(tap, "forward")
    if kind == "grad":
        arrived = [(path, kept.grads[path]) for path in kept.expected_grads if path in kept.grads]
        if not arrived:
            return [], "grad"
        report.missing.extend((layer + path, kind, "grad") for path in kept.expected_grads if path not in kept.grads)
        return arrived, None
    if any(kept.overwritten(path) for path in kept.outputs):
        report.overwritten.add(tap)
        return [], "overwritten"
    if source is not None and source.op is not None:
        path, tensor = next(iter(kept.outputs.items()))
        return [(path, recompute(source.op, dict(source.kwargs), tensor))], None
    return list(kept.outputs.items()), None


def make_frame(
    tensor: Union[torch.Tensor, Gathered],
    *,
    info: SelectionInfo,
    selector: Selector,
    step: int,
    run_id: str,
    wall_time: float,
    path: str = "",
    selector_name: Optional[str] = None,
) -> tuple[FrameHeader, np.ndarray]:
    """The header and float32 values of one frame.

    Batch kinds (output, activation, grad) of rank 3 and more keep sample 0 of the batch (dim 0);
    the selector then chooses entries along the first remaining axis. Non-finite values are kept.
    A :class:`Gathered` sharded tensor holds its selected rows already.
    """
    if isinstance(tensor, Gathered):
        shape, dtype, batch_index, indices = tensor.shape, tensor.rows.dtype, None, list(tensor.indices)
        view, kept = tensor.rows, list(range(len(indices)))
    else:
        full = tensor.detach()
        shape, dtype = full.shape, full.dtype
        batch_index = 0 if info.kind in BATCH_KINDS and full.dim() >= 3 and full.shape[0] > 0 else None
        view = full[0] if batch_index is not None else full
        indices = kept = list(check_selection(selector.select(view, info), selector, view.shape[0] if view.dim() else 0))
    header = FrameHeader(
        run_id=run_id,
        layer=info.layer,
        kind=info.kind,
        step=int(step),
        wall_time=wall_time,
        original_shape=list(shape),
        dtype=str(dtype).replace("torch.", ""),
        dim=0 if batch_index is None else 1,
        indices=indices,
        batch_index=batch_index,
        selector=repr(selector) if selector_name is None else selector_name,
        path=path,
    )
    return header, _kept_values(view, kept)


def _kept_values(view: torch.Tensor, indices: list[int]) -> np.ndarray:
    """A float32 copy of ``view`` at ``indices`` along its first axis, on the host."""
    if on_host(view):
        values = as_float_array(view)
        return (values[indices] if view.dim() else values.copy()).astype(np.float32, copy=False)
    chosen = view.index_select(0, torch.tensor(indices, dtype=torch.long, device=view.device)) if view.dim() else view
    return host_array(chosen.to(device="cpu", dtype=torch.float32))
