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
from xray_tb.io.reader import RecordedRun, read_contents
from xray_tb.io.run_contents import RunContents
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


def read_reports(run: str | os.PathLike | RunContents | RecordedRun) -> dict[str, dict[int, BiasReport]]:
    """``{evaluation: {step: BiasReport}}`` of the results written into a run directory (examples
    included); a later write of a step replaces an earlier one, its examples included."""
    contents = read_contents(run)
    reports: dict[str, dict[int, BiasReport]] = {}
    for (evaluation, step), (origin, blobs) in contents.bias_results.items():
        report = BiasReport.from_json(bias_metadata.decode_result(blobs), step)
        examples = contents.bias_examples.get((evaluation, step))
        if examples is not None and examples[0] >= origin:  # written with this result, or after it
            report.examples = _examples(examples[1])
        reports.setdefault(evaluation, {})[step] = report
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
