"""Reading a recorded run back from its event files, without the model::

    run = open_run("runs/exp1")
    run.records()                           # {layer: {kind: [steps]}}
    values, header = run.load("conv1", "weight", 20)
    stats = run.to_pandas()                 # one row per (step, layer, kind)

Reading is tolerant: a damaged record or an unreadable value is skipped with a
:class:`~xray_tb.io.records.DamagedEventFileWarning` naming the file and the byte offset, and every
other frame is read. A step written twice (a crashed run resumed into the same folder) reads as its
last write (see :mod:`xray_tb.io.run_contents`).

This module opens a run (a :class:`~xray_tb.io.recorded_run.RecordedRun`), keeps the recently read
ones for :func:`read_contents`, and tells what an earlier process left in a folder (:func:`earlier_run`).
"""

from __future__ import annotations

import os
from typing import Optional

from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2

from tb_plugin import health_metadata, metadata
from xray_tb.io import storage
from xray_tb.io.records import RecordReader
from xray_tb.io.recorded_run import RecordedRun
from xray_tb.io.run_contents import RunContents, holds_xray_blobs, xray_blobs


def open_run(logdir: str | os.PathLike) -> RecordedRun:
    """Open a finished run for reading.

    Args:
        logdir: one run directory, the one holding the ``events.out.tfevents.*`` files.

    Returns:
        The run, its event files read once (damaged records and unreadable values skipped, with a
        :class:`~xray_tb.io.records.DamagedEventFileWarning` each).

    Raises:
        FileNotFoundError: ``logdir`` is not a directory.
        ValueError: ``logdir`` holds no event file (the message lists the run directories below it).
    """
    if not isinstance(logdir, (str, os.PathLike)):
        raise TypeError(f"open_run() takes a run directory, a str or path such as 'runs/exp1'; got {type(logdir).__name__} {logdir!r}")
    return RecordedRun(logdir)


def last_recorded_step(logdir: str | os.PathLike) -> Optional[int]:
    """The highest step at which the event files directly in ``logdir`` hold an Xray frame; None when
    ``logdir`` does not exist or holds no Xray frame (see :func:`earlier_run`)."""
    return earlier_run(logdir)[0]


def earlier_run(logdir: str | os.PathLike) -> tuple[Optional[int], Optional[list[dict]]]:
    """What an earlier process left in ``logdir``: the highest step with an Xray frame, and the
    findings it wrote last (as dicts), each None when there are none.

    Cheap: it parses each event but decodes no frame, and skips damaged records without a warning.
    It asks which steps exist, not what a step holds, so it keeps nothing but the findings:
    :class:`RunContents` would hold every frame's bytes (a long run's hundreds of megabytes) for a
    new Xray that needs a number and a short list.
    """
    logdir = os.fspath(logdir)
    if not storage.isdir(logdir):
        return None, None
    last, findings = None, None
    for path in storage.event_files(logdir):
        for record in RecordReader(path, warn=False).read():
            try:
                event = event_pb2.Event.FromString(record.data)
            except DecodeError:
                continue
            for value in event.summary.value:
                if value.tag == health_metadata.FINDINGS_TAG:
                    blobs = xray_blobs(value)
                    if blobs:
                        findings = blobs[0]  # the last written is current
                elif (last is None or event.step > last) and metadata.parse_frame_tag(value.tag) and holds_xray_blobs(value):
                    last = event.step
    try:
        return last, None if findings is None else health_metadata.decode_findings(findings)
    except (ValueError, TypeError, AttributeError):  # damaged: nothing to carry over
        return last, None


_KEPT_RUNS = 8  # runs kept by read_contents()
_kept: dict[str, RecordedRun] = {}


def read_contents(run: str | os.PathLike | RunContents | RecordedRun) -> RunContents:
    """The contents of a run directory, read quietly in one pass and kept while its files are
    unchanged (records appended since are read on); a :class:`RunContents` or a :class:`RecordedRun`
    gives its own."""
    if isinstance(run, RunContents):
        return run
    if isinstance(run, RecordedRun):
        return run.contents
    logdir = os.fspath(run)
    kept = _kept.pop(logdir, None)
    if kept is not None and kept.unchanged_but_appended():
        kept.reload()
    else:
        kept = RecordedRun(logdir, warn=False)
    _kept[logdir] = kept  # the most recently used last
    while len(_kept) > _KEPT_RUNS:
        del _kept[next(iter(_kept))]
    return kept.contents
