"""Each capture's frame statistics as plugin data (numpy and protos only).

Tag :data:`FRAME_STATS_TAG` at the capture's step, two blobs: a JSON header ``{"frames": [[layer, kind],
...], "stats": [...]}`` (the :data:`tb_plugin.metadata.STATS` names) and an ``.npy`` float64 matrix
frames × stats. The plugin's ``/ranges`` and :func:`xray_tb.open_run`'s ``to_pandas`` read it; the
same statistics are written as ``xray_stats/...`` scalars only with ``Xray(..., layer_scalars=True)``.

:func:`frame_extremes` reads only each frame's minimum and maximum, for ``/ranges``, whose first
request reads every capture: the headers (the same bytes at most captures) are parsed once, the
``.npy`` header too, and no dict is built per frame.
"""

from __future__ import annotations

import json
import math

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


#: Parsed JSON headers and ``.npy`` headers by their bytes (a run's captures mostly share both).
_HEADERS: dict[bytes, tuple[list, int, int]] = {}
_NPY: dict[bytes, tuple[np.dtype, tuple, int]] = {}
_KEPT = 256


def frame_extremes(blobs: list[bytes]) -> dict[tuple[str, str], tuple[float, float]]:
    """``{(layer, kind): (min, max)}`` of the frames of one capture whose minimum and maximum are both
    finite, from the blobs :func:`add_frame_stats` wrote (what :func:`decode_frame_stats` gives, faster)."""
    frames, low_column, high_column = _header(blobs[0])
    matrix = _matrix(blobs[1])
    if matrix.shape[0] != len(frames):
        raise ValueError(f"frame statistics of {len(frames)} frames hold {matrix.shape[0]} rows")
    extremes = {}
    for (layer, kind), low, high in zip(frames, matrix[:, low_column].tolist(), matrix[:, high_column].tolist()):
        if math.isfinite(low) and math.isfinite(high):
            extremes[(layer, kind)] = (low, high)
    return extremes


def _header(data: bytes) -> tuple[list, int, int]:
    found = _HEADERS.get(data)
    if found is None:
        header = json.loads(data)
        stats = header["stats"]
        found = ([tuple(frame) for frame in header["frames"]], stats.index("min"), stats.index("max"))
        if len(_HEADERS) >= _KEPT:
            _HEADERS.clear()
        _HEADERS[bytes(data)] = found
    return found


def _matrix(data: bytes) -> np.ndarray:
    """The 2-D float matrix of ``.npy`` bytes, read-only (its header parsed once per distinct header)."""
    size = 10 + int.from_bytes(data[8:10], "little") if data[6:7] == b"\x01" else None
    found = _NPY.get(data[:size]) if size is not None else None
    if found is None:
        array = metadata.decode_array(data)
        if array.ndim != 2 or array.dtype.kind != "f":
            raise ValueError(f"frame statistics are a 2-D float matrix, got {array.dtype} of shape {array.shape}")
        if size is not None and not np.isfortran(array):
            if len(_NPY) >= _KEPT:
                _NPY.clear()
            _NPY[bytes(data[:size])] = (array.dtype, array.shape, size)
        return array
    dtype, shape, offset = found
    return np.frombuffer(data, dtype=dtype, count=shape[0] * shape[1], offset=offset).reshape(shape)
