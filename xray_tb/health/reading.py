"""Reading training health back from a run's event files, without the model (through
:func:`xray_tb.io.reader.read_contents`: one pass, kept while the files are unchanged)."""

from __future__ import annotations

import os
from typing import Union

import numpy as np

from tb_plugin import health_metadata
from xray_tb.health.findings import Finding
from xray_tb.io.reader import RecordedRun, read_contents
from xray_tb.io.run_contents import RunContents

RunLike = Union[str, os.PathLike, RunContents, RecordedRun]


def findings(run: RunLike) -> list[Finding]:
    """The findings last written to the run (an empty list when there are none)."""
    latest = read_contents(run).findings
    return [] if latest is None else [Finding.from_dict(item) for item in health_metadata.decode_findings(latest[1])]


def series(run: RunLike, stat: str) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """``(layers, steps, values, present)`` of a statistic's full series: values is layers × steps,
    NaN where a layer has no value at a step (``present`` False there); a later write of a step wins."""
    written = sorted(read_contents(run).health_series.get(stat, []), key=lambda item: item[0])
    return health_metadata.merge_blocks([health_metadata.decode_series(blobs) for _, blobs in written])
