"""Reading training health back from a run's event files, without the model."""

from __future__ import annotations

from typing import Optional

import numpy as np
from tensorboard.util import tensor_util

from tb_plugin import health_metadata, metadata
from xray_tb.health.findings import Finding
from xray_tb.io.records import run_events


def _values(logdir: str):
    for event in run_events(logdir, warn=False):  # open_run warns about damage; read on quietly here
        for value in event.summary.value:
            yield event, value


def _blobs(value) -> Optional[list[bytes]]:
    plugin = value.metadata.plugin_data
    if plugin.plugin_name not in ("", metadata.PLUGIN_NAME) or value.tensor.dtype != 7:  # DT_STRING
        return None
    return list(tensor_util.make_ndarray(value.tensor))


def findings(logdir: str) -> list[Finding]:
    """The findings last written to the run (an empty list when there are none)."""
    latest: Optional[tuple[int, bytes]] = None
    for event, value in _values(logdir):
        if value.tag == health_metadata.FINDINGS_TAG and (blobs := _blobs(value)):
            if latest is None or event.step >= latest[0]:
                latest = (event.step, blobs[0])
    return [] if latest is None else [Finding.from_dict(item) for item in health_metadata.decode_findings(latest[1])]


def series(logdir: str, stat: str) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """``(layers, steps, values, present)`` of a statistic's full series: values is layers × steps,
    NaN where a layer has no value at a step (``present`` False there)."""
    tag = health_metadata.series_tag(stat)
    blocks = [health_metadata.decode_series(blobs) for _, value in _values(logdir) if value.tag == tag and (blobs := _blobs(value))]
    return health_metadata.merge_blocks(blocks)
