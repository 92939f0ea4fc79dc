"""The compact binary form of a frame that the Xray tab fetches (route ``/frame_bin``).

Layout, all little-endian::

    b"XRF1" | uint32 N | N bytes of UTF-8 JSON (space-padded so that 8 + N is a multiple of 4) | values

The JSON holds what ``/frame`` answers except the values: run, layer, kind, step, wall_time, meta,
min, max, signed, nonfinite, ``panels`` as ``{"index", "rows", "cols"}``, and ``encoding``: ``"f32"``
or ``"f16"``. The values follow, panel after panel, each ``rows * cols`` numbers row-major, in that
encoding. A frame recorded in float16 travels as float16 (half the bytes); any other frame as
float32. Both are exact: every value the recorder stored arrives unchanged, NaN and ±Inf included,
without base64 (a third larger) or a JSON parse of the numbers.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np

from tb_plugin import layout, metadata

MAGIC = b"XRF1"
_ALIGN = 4


def describe_frame(
    header: metadata.FrameHeader, values: np.ndarray, *, run: str, layer: str, kind: str, step: int, wall_time: float
) -> tuple[dict[str, Any], list[np.ndarray]]:
    """What ``/frame`` and ``/frame_bin`` say about a frame, and its 2-D panels (values not included)."""
    panels = layout.to_panels(values)
    low, high, nonfinite = layout.finite_range(panels)
    single = np.asarray(values).ndim <= 2
    description: dict[str, Any] = {
        "run": run,
        "layer": layer,
        "kind": kind,
        "step": step,
        "wall_time": wall_time,
        "meta": {
            "run_id": header.run_id,
            "original_shape": header.original_shape,
            "dtype": header.dtype,
            "dim": header.dim,
            "indices": header.indices,
            "batch_index": header.batch_index,
            "selector": header.selector,
        },
        "panels": [
            {"index": None if single else _index(header, i), "rows": int(p.shape[0]), "cols": int(p.shape[1])}
            for i, p in enumerate(panels)
        ],
        "min": low,
        "max": high,
        "signed": low is not None and low < 0 < high,
        "nonfinite": nonfinite,
    }
    return description, panels


def frame_body(header: metadata.FrameHeader, values: np.ndarray, *, run: str, layer: str, kind: str, step: int, wall_time: float) -> bytes:
    """The binary body of one frame (see the module docstring)."""
    description, panels = describe_frame(header, values, run=run, layer=layer, kind=kind, step=step, wall_time=wall_time)
    encoding = "f16" if np.asarray(values).dtype == np.float16 else "f32"
    description["encoding"] = encoding
    text = json.dumps(description, allow_nan=False).encode("utf-8")
    text += b" " * (-(len(MAGIC) + 4 + len(text)) % _ALIGN)
    dtype = "<f2" if encoding == "f16" else "<f4"
    data = b"".join(np.ascontiguousarray(p, dtype=dtype).tobytes() for p in panels)
    return b"".join((MAGIC, struct.pack("<I", len(text)), text, data))


def _index(header: metadata.FrameHeader, i: int):
    return header.indices[i] if header.indices is not None and i < len(header.indices) else i


def parse_body(body: bytes) -> tuple[dict[str, Any], list[np.ndarray]]:
    """``(description, panels)`` of a body made by :func:`frame_body` (for tests and scripts)."""
    if body[:4] != MAGIC:
        raise ValueError("not an Xray binary frame (bad magic)")
    (length,) = struct.unpack_from("<I", body, 4)
    description = json.loads(body[8 : 8 + length])
    dtype = "<f2" if description["encoding"] == "f16" else "<f4"
    offset = 8 + length
    panels = []
    for panel in description["panels"]:
        count = panel["rows"] * panel["cols"]
        values = np.frombuffer(body, dtype=dtype, count=count, offset=offset)
        panels.append(values.reshape(panel["rows"], panel["cols"]))
        offset += count * np.dtype(dtype).itemsize
    return description, panels
