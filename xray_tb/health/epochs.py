"""Epoch summaries: each per-iteration statistic's mean over the epoch's iterations and its variance
(n - 1) across them, per layer. Iterations where a statistic was not measured (update ratio between
samples) are left out; non-finite values are kept (the mean is then non-finite); a statistic seen once
has variance 0.

Blocks are folded into running moments (count, mean, sum of squared deviations; Chan et al.'s
pairwise update), so memory stays flat however long an epoch runs.
"""

from __future__ import annotations

import numpy as np


class EpochAccumulator:
    def __init__(self):
        self._moments: dict[str, tuple[list[str], np.ndarray, np.ndarray, np.ndarray]] = {}

    def add(self, stat: str, layers: list[str], values: np.ndarray, absent: np.ndarray) -> None:
        present = ~absent
        count = present.sum(axis=0).astype(np.float64)
        with np.errstate(all="ignore"):
            mean = np.where(count > 0, np.where(present, values, 0.0).sum(axis=0) / np.maximum(count, 1), 0.0)
            squares = np.where(present, (values - mean) ** 2, 0.0).sum(axis=0)
            if stat in self._moments and len(self._moments[stat][0]) == len(layers):
                _, n, m, s = self._moments[stat]
                total = n + count
                delta = mean - m
                merged_mean = np.where(total > 0, m + delta * count / np.maximum(total, 1), 0.0)
                merged_squares = s + squares + np.where(total > 0, delta * delta * n * count / np.maximum(total, 1), 0.0)
                count, mean, squares = total, merged_mean, merged_squares
        self._moments[stat] = (layers, count, mean, squares)

    def close_epoch(self) -> dict[str, dict[str, tuple[float, float]]]:
        """``{layer: {stat: (mean, var)}}`` of the iterations since the last call; starts a new epoch."""
        moments: dict[str, dict[str, tuple[float, float]]] = {}
        for stat, (layers, count, mean, squares) in self._moments.items():
            for column, layer in enumerate(layers):
                n = count[column]
                if n:
                    var = float(squares[column] / (n - 1)) if n > 1 else 0.0
                    moments.setdefault(layer, {})[stat] = (float(mean[column]), var)
        self._moments.clear()
        return moments
