"""Binning a layers × steps health matrix into at most ``columns`` columns, each showing its bin's worst value.

Steps are split into ``columns`` contiguous bins of near-equal size. A cell is present when any step of
its bin is; its value is NaN when any present value of the bin is NaN, else the value of largest
magnitude (sign kept) for a signed statistic (:data:`tb_plugin.health_metadata.SIGNED_STATS`), else
the largest value (+Inf wins). Vectorised with ``ufunc.reduceat``.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from tb_plugin import health_metadata

COLUMNS = range(1, 20001)  # what the ``columns`` parameter may ask for


@dataclasses.dataclass
class Binned:
    """``steps``/``last_steps``: each column's first and last step; ``values`` layers × columns
    float32 (NaN where not present); ``present`` bool of the same shape."""

    steps: np.ndarray
    last_steps: np.ndarray
    values: np.ndarray
    present: np.ndarray
    binned: bool


def bin_starts(total: int, columns: int) -> np.ndarray:
    """The first index of each of ``columns`` near-equal contiguous bins over ``total`` steps."""
    return (np.arange(columns, dtype=np.int64) * total) // columns


def bin_matrix(steps: np.ndarray, values: np.ndarray, present: np.ndarray, columns: int, signed: bool = False) -> Binned:
    """``values``/``present`` (layers × steps) in at most ``columns`` columns; unchanged when they fit."""
    steps = np.asarray(steps, np.int64)
    values = np.asarray(values, np.float32)
    present = np.asarray(present, bool)
    total = len(steps)
    if total <= columns:
        return Binned(steps, steps, np.where(present, values, np.float32(np.nan)), present, False)
    starts = bin_starts(total, columns)
    ends = np.append(starts[1:], total) - 1
    if not values.shape[0]:
        empty = np.zeros((0, columns))
        return Binned(steps[starts], steps[ends], empty.astype(np.float32), empty.astype(bool), True)
    nan = np.isnan(values)
    valid = present & ~nan
    any_present = np.logical_or.reduceat(present, starts, axis=1)
    any_nan = np.logical_or.reduceat(present & nan, starts, axis=1)
    high = np.maximum.reduceat(np.where(valid, values, -np.inf), starts, axis=1)
    if signed:
        low = np.minimum.reduceat(np.where(valid, values, np.inf), starts, axis=1)
        high = np.where(np.abs(low) > np.abs(high), low, high)
    out = np.where(any_nan | ~any_present, np.nan, high).astype(np.float32)
    return Binned(steps[starts], steps[ends], out, any_present, True)


def binned(matrix, stat: str, columns: Optional[int]) -> Binned:
    """``matrix`` (a :class:`tb_plugin.health_data` matrix: ``steps``, ``values``, ``present``) binned to
    ``columns`` (unchanged when None or when it fits)."""
    signed = stat in health_metadata.SIGNED_STATS
    return bin_matrix(matrix.steps, matrix.values, matrix.present, columns or max(len(matrix.steps), 1), signed)
