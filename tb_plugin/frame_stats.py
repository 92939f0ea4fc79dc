"""Each capture's frame statistics as plugin data (numpy and protos only).

Tag :data:`FRAME_STATS_TAG` at the capture's step, two blobs: a JSON header ``{"frames": [[layer, kind],
...], "stats": [...]}`` (the :data:`tb_plugin.metadata.STATS` names) and an ``.npy`` float64 matrix
frames × stats. The plugin's ``/ranges`` and :func:`xray_tb.open_run`'s ``to_pandas`` read it; the
same statistics are written as ``xray_stats/...`` scalars only with ``Xray(..., layer_scalars=True)``.
"""

from __future__ import annotations

import json

import numpy as np
from tensorboard.compat.proto import summary_pb2

from tb_plugin import metadata

FRAME_STATS_TAG = "xray/frame_stats"


def add_frame_stats(summary: summary_pb2.Summary, frames: list[tuple[str, str, dict[str, float]]]) -> None:
    """Append ``(layer, kind, {stat: value})`` of every frame of a capture as one value."""
    matrix = np.array([[stats.get(name, np.nan) for name in metadata.STATS] for _, _, stats in frames], dtype=np.float64)
    header = json.dumps({"frames": [[layer, kind] for layer, kind, _ in frames], "stats": list(metadata.STATS)}).encode("utf-8")
    metadata.add_blobs(summary, FRAME_STATS_TAG, metadata.create_summary_metadata({"type": "frame_stats"}),
                        [header, metadata.encode_array(matrix.reshape(len(frames), len(metadata.STATS)))])


def decode_frame_stats(blobs: list[bytes]) -> list[tuple[str, str, dict[str, float]]]:
    """The ``(layer, kind, {stat: value})`` written by :func:`add_frame_stats`."""
    header = json.loads(blobs[0])
    matrix = metadata.decode_array(blobs[1])
    return [(layer, kind, {name: float(v) for name, v in zip(header["stats"], row)}) for (layer, kind), row in zip(header["frames"], matrix)]
