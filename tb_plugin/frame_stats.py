"""Each capture's frame statistics as plugin data (numpy and protos only).

Tag :data:`FRAME_STATS_TAG` at the capture's step: a JSON header ``{"frames": [[layer, kind], ...],
"stats": [...]}`` (the :data:`tb_plugin.metadata.STATS` names) and an ``.npy`` float64 matrix frames ×
stats, in one blob: :data:`ONE_BLOB`, the header's length (4 bytes, little-endian), the header, the
``.npy`` bytes. One blob, because on the fast loader each blob is a ``ReadBlob`` call of its own, and
the first ``/ranges`` reads every capture's (runs written before 2026-12-03 hold the header and the
matrix as two blobs, read alike). The plugin's ``/ranges`` and :func:`xray_tb.open_run`'s
``to_pandas`` read it; the same statistics are written as ``xray_stats/...`` scalars only with
``Xray(..., layer_scalars=True)``.

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
#: The first bytes of the one blob a capture's frame statistics are written as.
ONE_BLOB = b"xray-frame-stats/1\n"


def add_frame_stats(summary: summary_pb2.Summary, frames: list[tuple[str, str, dict[str, float]]]) -> None:
    """Append ``(layer, kind, {stat: value})`` of every frame of a capture as one value (one blob)."""
    matrix = np.array([[stats.get(name, np.nan) for name in metadata.STATS] for _, _, stats in frames], dtype=np.float64)
    header = json.dumps({"frames": [[layer, kind] for layer, kind, _ in frames], "stats": list(metadata.STATS)}).encode("utf-8")
    values = metadata.encode_array(matrix.reshape(len(frames), len(metadata.STATS)))
    metadata.add_blobs(summary, FRAME_STATS_TAG, metadata.create_summary_metadata({"type": "frame_stats"}), [one_blob(header, values)])


def one_blob(header: bytes, values: bytes) -> bytes:
    """The blob of a capture's frame statistics: :data:`ONE_BLOB`, the JSON header's length, the header,
    the ``.npy`` bytes (what :func:`parts` splits again)."""
    return b"".join((ONE_BLOB, len(header).to_bytes(4, "little"), header, values))


def parts(blobs: list[bytes]) -> tuple[bytes, bytes]:
    """The JSON header and the ``.npy`` bytes of a capture's frame statistics, from one blob or from
    the two of older runs; raises ``ValueError`` for anything else."""
    if len(blobs) == 2:
        return blobs[0], blobs[1]
    if len(blobs) == 1 and blobs[0][:len(ONE_BLOB)] == ONE_BLOB:
        data, start = blobs[0], len(ONE_BLOB) + 4
        end = start + int.from_bytes(data[len(ONE_BLOB):start], "little")
        if len(data) >= end:
            return data[start:end], data[end:]
    raise ValueError(f"not frame statistics: {len(blobs)} blob(s)")


def decode_frame_stats(blobs: list[bytes]) -> list[tuple[str, str, dict[str, float]]]:
    """The ``(layer, kind, {stat: value})`` written by :func:`add_frame_stats`."""
    header_bytes, values = parts(blobs)
    header = json.loads(header_bytes)
    matrix = metadata.decode_array(values)
    return [(layer, kind, {name: float(v) for name, v in zip(header["stats"], row)}) for (layer, kind), row in zip(header["frames"], matrix)]


#: Parsed JSON headers and ``.npy`` headers by their bytes (a run's captures mostly share both).
_HEADERS: dict[bytes, tuple[list, int, int]] = {}
_NPY: dict[bytes, tuple[np.dtype, tuple, int]] = {}
_KEPT = 256


def frame_extremes(blobs: list[bytes]) -> dict[tuple[str, str], tuple[float, float]]:
    """``{(layer, kind): (min, max)}`` of the frames of one capture whose minimum and maximum are both
    finite, from the blobs :func:`add_frame_stats` wrote (what :func:`decode_frame_stats` gives, faster)."""
    header, values = parts(blobs)
    frames, low_column, high_column = _header(header)
    matrix = _matrix(values)
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
