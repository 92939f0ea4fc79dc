"""Writing Attention-IoU results into an Xray run, and reading them back.

The layout is :mod:`tb_plugin.bias_metadata`'s. :func:`attention_iou` is what ``Xray.attention_iou``
runs: the evaluation pass on the Xray's model, written at the current step.
"""

from __future__ import annotations

import os
import time
from typing import Iterable, Optional

from tensorboard.compat.proto import event_pb2

from tb_plugin import bias_metadata
from xray_tb.bias.evaluation import MasksLike, evaluate
from xray_tb.bias.report import BiasReport, Examples
from xray_tb.io.records import run_events
from xray_tb.recording import Recording


def attention_iou(
    xray,
    loader: Iterable,
    *,
    target: int,
    protected: int,
    masks: MasksLike = None,
    step: Optional[int] = None,
    **options,
) -> BiasReport:
    """Run :func:`xray_tb.bias.evaluate` on ``xray``'s model and write the result into its run.

    Args:
        xray: an open :class:`xray_tb.Xray`, or its :class:`~xray_tb.recording.Recording`.
        loader, target, protected, masks, options: as for :func:`xray_tb.bias.evaluate`.
        step: the step to file the result under; by default the last step Xray counted (the step of
            the latest ``take_graphs()`` call, or 0 before any).

    Returns:
        The :class:`BiasReport`, its ``step`` set.
    """
    recording = xray if isinstance(xray, Recording) else xray.recording
    sink = recording.sink  # raises if the Xray is closed
    if step is None:
        step = recording.current_step
    elif isinstance(step, bool) or not hasattr(step, "__index__") or int(step) < 0:
        raise ValueError(f"step must be a whole number from 0, got {step!r}")
    # Xray's own hooks sit out the evaluation's forward passes, so that the next take_graphs() still
    # records the training forward.
    with recording.paused():
        report = evaluate(recording.model, loader, target=target, protected=protected, masks=masks, **options)
    report.step = int(step)
    write_report(sink, report, report.step, run_id=recording.run_id)
    return report


def write_report(sink, report: BiasReport, step: int, *, run_id: str = "", wall_time: Optional[float] = None) -> None:
    """Write ``report`` (and its examples) at ``step`` as one event through ``sink`` (an
    :class:`xray_tb.io.sink.EventSink`), and flush it."""
    document = dict(report.to_json(), run_id=run_id)
    summary = bias_metadata.result_summary(document)
    if report.examples is not None:
        examples = report.examples
        header = {
            "map_names": examples.map_names,
            "labels": examples.labels,
            "subgroups": examples.subgroups,
            "indices": examples.indices,
            "attributes": [report.target.name, report.protected.name],
            "run_id": run_id,
        }
        summary.value.extend(
            bias_metadata.examples_summary(report.evaluation, header, examples.images, examples.maps).value
        )
    sink.add_event(
        event_pb2.Event(step=int(step), wall_time=time.time() if wall_time is None else wall_time, summary=summary)
    )
    sink.flush()


def read_reports(logdir: str | os.PathLike) -> dict[str, dict[int, BiasReport]]:
    """``{evaluation: {step: BiasReport}}`` of the results written into a run directory (examples
    included); a later write of a step replaces an earlier one."""
    reports: dict[str, dict[int, BiasReport]] = {}
    pending_examples: dict[tuple[str, int], list[bytes]] = {}
    for event in run_events(logdir, warn=False):  # open_run warns about damage; read on quietly here
        for value in event.summary.value:
            parsed = bias_metadata.parse_tag(value.tag)
            if parsed is None or not value.tensor.string_val:
                continue
            evaluation, part = parsed
            blobs = list(value.tensor.string_val)
            if part == "result":
                document = bias_metadata.decode_result(blobs)
                reports.setdefault(evaluation, {})[event.step] = BiasReport.from_json(document, event.step)
                pending_examples.pop((evaluation, event.step), None)  # an earlier write's examples
            else:
                pending_examples[(evaluation, event.step)] = blobs
    for (evaluation, step), blobs in pending_examples.items():
        report = reports.get(evaluation, {}).get(step)
        if report is not None:
            report.examples = _examples(blobs)
    return {evaluation: dict(sorted(by_step.items())) for evaluation, by_step in sorted(reports.items())}


def _examples(blobs: list[bytes]) -> Examples:
    header, images, maps = bias_metadata.decode_examples(blobs)
    return Examples(
        images=images,
        maps=maps.astype("float32"),
        map_names=list(header.get("map_names", [])),
        labels=header.get("labels", []),
        subgroups=header.get("subgroups", []),
        indices=header.get("indices", []),
    )
