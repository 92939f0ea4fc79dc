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


def pool_panel(panel: np.ndarray, ky: int, kx: int) -> np.ndarray:
    """The panel pooled by blocks of ``ky`` rows × ``kx`` columns, each block shown as its value of
    largest magnitude with its sign (outliers stay visible; an infinity wins), NaN where the block holds
    a NaN: as the tab pools a panel larger than the page (``frontend/heatmap_layout.js``)."""
    if ky <= 1 and kx <= 1:
        return panel
    rows, cols = panel.shape
    out_rows, out_cols = -(-rows // ky), -(-cols // kx)
    padded = np.zeros((out_rows * ky, out_cols * kx), dtype=np.float32)  # 0: never the largest magnitude
    padded[:rows, :cols] = panel
    blocks = padded.reshape(out_rows, ky, out_cols, kx).transpose(0, 2, 1, 3).reshape(out_rows, out_cols, ky * kx)
    nan = np.isnan(blocks)
    magnitude = np.where(nan, -1.0, np.abs(blocks))
    pooled = np.take_along_axis(blocks, magnitude.argmax(axis=2)[..., None], axis=2)[..., 0]
    pooled[nan.any(axis=2)] = np.nan
    return pooled
