"""Turning a stored frame into the 2-D panels the frontend draws (numpy only)."""

from __future__ import annotations

from typing import Optional

import numpy as np


def to_panels(frame: np.ndarray) -> list[np.ndarray]:
    """2-D float32 panels of a frame.

    Rank 0-2 frames are one panel (a vector is one row). A frame of rank 3 or more has one panel per
    entry of its first axis; each entry of rank 3 or more (a conv filter ``[C_in, kh, kw]``) is tiled
    side by side into ``kh x (C_in * kw)``, leading axes beyond that being flattened into ``C_in``.
    """
    values = np.asarray(frame, dtype=np.float32)
    if values.ndim <= 2:
        return [np.atleast_2d(values)]
    return [_tile(entry) for entry in values]


def _tile(entry: np.ndarray) -> np.ndarray:
    if entry.ndim == 2:
        return entry
    stacked = entry.reshape(-1, *entry.shape[-2:])  # [C, h, w]
    return np.concatenate(list(stacked), axis=1)


def finite_range(panels: list[np.ndarray]) -> tuple[Optional[float], Optional[float], int]:
    """``(min, max, nonfinite_count)`` over all panels; min and max are None when nothing is finite."""
    flat = np.concatenate([p.ravel() for p in panels]) if panels else np.zeros(0, np.float32)
    finite = flat[np.isfinite(flat)]
    nonfinite = int(flat.size - finite.size)
    if finite.size == 0:
        return None, None, nonfinite
    return float(finite.min()), float(finite.max()), nonfinite
