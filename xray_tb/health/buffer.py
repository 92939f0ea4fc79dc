"""Rows of statistics kept on the device, one per step, brought to the host in blocks (one sync each)."""

from __future__ import annotations

import dataclasses
import time
from typing import Optional

import numpy as np
import torch

from xray_tb.health.stats.base import Statistic


@dataclasses.dataclass
class Block:
    """Rows brought to the host: ``columns[(family index, column)]`` is steps × layers (float64), NaN where
    a value was absent (``absent`` marks those) or not finite."""

    steps: np.ndarray
    walls: np.ndarray
    columns: dict[tuple[int, str], np.ndarray]
    absent: dict[tuple[int, str], np.ndarray]

    def __len__(self) -> int:
        return len(self.steps)


class RowBuffer:
    """Stacks each step's 0-d values (one per column and layer of each family) into one device row."""

    def __init__(self, families: list[Statistic]):
        self._layout = [(index, column, len(family.layers)) for index, family in enumerate(families) for column in family.columns]
        self._width = sum(width for _, _, width in self._layout)
        self._rows: list[torch.Tensor] = []
        self._steps: list[int] = []
        self._walls: list[float] = []
        # (row, positions of absent values): a compact array, since on a model of thousands of layers
        # a row may miss thousands (a Python int each would be about 1 MB per 30,000)
        self._absent: list[tuple[int, np.ndarray]] = []

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, step: int, values: list[Optional[torch.Tensor]], nan: torch.Tensor) -> None:
        """One step's values in layout order: a 0-d tensor per value, None for an absent one, or a 1-D
        tensor for as many values in a row (a family's column, :func:`~xray_tb.health.stats.base.row_of`)."""
        parts: list[torch.Tensor] = []
        scalars: list[torch.Tensor] = []  # 0-d values waiting to be stacked
        missing: list[int] = []
        width = absent = 0  # absent: the run of absent values ending at width (never pending with scalars)

        def close_pending() -> None:
            nonlocal scalars, absent
            if scalars:
                parts.append(torch.stack(scalars).float())  # stack promotes mixed dtypes
                scalars = []
            if absent:  # a column not measured at this step: one view of NaN for the run
                parts.append(nan.expand(absent).float())
                missing.extend(range(width - absent, width))
                absent = 0

        for value in values:
            if value is None:
                if scalars:
                    close_pending()
                absent += 1
                width += 1
            elif value.dim():
                close_pending()
                parts.append(value.float())
                width += value.numel()
            else:
                if absent:
                    close_pending()
                scalars.append(value)
                width += 1
        close_pending()
        if width != self._width:
            raise ValueError(f"a health row holds {width} values where its families' columns and layers make "
                             f"{self._width}: a statistic's compute() must give one value per layer of each column")
        if missing:
            self._absent.append((len(self._rows), np.asarray(missing, dtype=np.int32)))
        self._rows.append(torch.cat(parts) if len(parts) > 1 else parts[0] if parts else nan.new_empty(0))
        self._steps.append(int(step))
        self._walls.append(time.time())

    def shift(self, delta: int) -> None:
        """File every buffered row ``delta`` steps later."""
        self._steps = [step + delta for step in self._steps]

    def _since(self, step: int) -> Optional[int]:
        """Where the rows filed from ``step`` on start: the first of the last run of ``step``'s rows (a call
        per micro-batch files several under one step), with every row after it; None when there is none."""
        start = len(self._steps)
        while start and self._steps[start - 1] != step:
            start -= 1
        if not start:
            return None
        while start and self._steps[start - 1] == step:
            start -= 1
        return start

    def drop(self, step: int) -> None:
        """Forget the rows filed from ``step`` on (its overflowed gradients were accumulated into them)."""
        start = self._since(step)
        if start is not None:
            del self._rows[start:], self._steps[start:], self._walls[start:]
            self._absent = [(row, positions) for row, positions in self._absent if row < start]

    def take(self, keep: Optional[int] = None) -> Optional[Block]:
        """The buffered rows on the host (None when there are none); the buffer is emptied, but for the
        rows filed from step ``keep`` on (an iteration that waits for its optimizer step or a scaler's update)."""
        start = None if keep is None else self._since(keep)
        if start is not None:
            kept = (self._rows[start:], self._steps[start:], self._walls[start:],
                    [(row - start, positions) for row, positions in self._absent if row >= start])
            self._rows, self._steps, self._walls = self._rows[:start], self._steps[:start], self._walls[:start]
            self._absent = [(row, positions) for row, positions in self._absent if row < start]
            block = self.take()
            self._rows, self._steps, self._walls, self._absent = kept
            return block
        if not self._rows:
            return None
        matrix = torch.stack(self._rows).cpu().numpy().astype(np.float64)
        absent = np.zeros(matrix.shape, dtype=bool)
        for row, positions in self._absent:
            absent[row, positions] = True
        block = Block(np.asarray(self._steps, np.int64), np.asarray(self._walls), {}, {})
        offset = 0
        for index, column, width in self._layout:
            block.columns[(index, column)] = matrix[:, offset: offset + width]
            block.absent[(index, column)] = absent[:, offset: offset + width]
            offset += width
        self._rows, self._steps, self._walls, self._absent = [], [], [], []
        return block
