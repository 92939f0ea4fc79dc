"""Reductions of the tensors seen at one step, computed once and shared by the frame statistics and
training health.

At a capture several readers go over the same activations: training health's non-finite checks (a
tensor's minimum and maximum), its dead units (each unit's maximum), its channel variance (each
channel's sums of values and of squares) and the frames' statistics (the whole tensor's sum, sum of
squares, minimum and maximum). On a CPU each pass over a tensor costs about the same whatever it
computes, so :class:`SharedReductions` computes each reduction once per tensor and step, and derives
the whole-tensor ones from the per-unit ones computed before them: a tensor's maximum is the largest of
its unit maxima, its sums are the sums of its channel sums (added in float64).

Only CPU tensors are handled (numpy reads them without a copy); for a tensor on an accelerator every
method returns None and the reader uses its own batched device reductions. Two views of the same memory
(the readers keep their own detached views of a layer's output) are one entry: entries are matched by
address, shape, strides and dtype, and by the version counter, so a tensor written in place since is
reduced again. An entry holds its tensor, so its memory cannot pass to another tensor while the entry
lives; the entries are dropped when the outermost scope (``with reductions:``) ends: at the end of
``take_graphs()``, or of a health step run from an optimizer hook. Outside a scope nothing is kept.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

from xray_tb.devices import host_array, on_host

#: dtypes whose channel sums are taken without a copy (others are read as float32 copies).
_SHARED_DTYPES = (torch.float32, torch.float64)
#: Rows added in float32 before their sums are added in float64 (a linear layer's channel sums).
ROW_BLOCK = 8
#: From this many values, a whole tensor's sums, minimum and maximum, and a conv's squares, are torch's
#: (vectorised, on its intra-op threads: a half to a third of numpy's time); below it numpy's, whose
#: call costs a few microseconds less.
TORCH_FROM = 1 << 16


class _Entry:
    __slots__ = ("tensor", "values", "maxima", "channels", "low", "high", "total", "squares")

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor
        values = tensor if tensor.dtype in _SHARED_DTYPES else tensor.float()
        self.values = host_array(values).reshape(-1)  # a copy only for other dtypes or a tensor not laid out contiguously
        self.maxima: dict[int, torch.Tensor] = {}  # unit dim: float32 unit maxima
        self.channels: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # channel dim: float64 sums and sums of squares
        self.low = self.high = self.total = self.squares = None


class SharedReductions:
    """Reductions of CPU tensors, each computed once per tensor within a scope (``with reductions:``)."""

    def __init__(self):
        self._entries: dict[tuple, tuple[int, _Entry]] = {}  # memory key: (version, entry)
        self._depth = 0

    def __enter__(self) -> "SharedReductions":
        """A scope: what is computed is kept until the outermost scope ends (scopes nest)."""
        self._depth += 1
        return self

    def __exit__(self, *exc_info) -> None:
        self._depth -= 1
        if not self._depth and self._entries:
            self._entries.clear()

    def unit_maxima(self, tensor: torch.Tensor, dim: int) -> Optional[torch.Tensor]:
        """Each unit's largest value along ``dim`` over every other dimension, float32 (NaN where the
        unit holds a NaN); None for a tensor on an accelerator."""
        entry = self._entry(tensor)
        if entry is None:
            return None
        dim %= tensor.dim()
        maxima = entry.maxima.get(dim)
        if maxima is None:
            others = [d for d in range(tensor.dim()) if d != dim]
            maxima = entry.maxima[dim] = (entry.tensor.amax(dim=others) if others else entry.tensor).float()
        return maxima

    def channel_sums(self, tensor: torch.Tensor, dim: int) -> Optional[tuple[np.ndarray, np.ndarray, int]]:
        """For each index along ``dim``: the float64 sums of the values and of their squares over every
        other dimension, and how many values each sums. Taken along the contiguous positions after
        ``dim`` first (a conv's: torch's vectorised sum, about half the time of numpy's pairwise one
        on a 28x28 map; the squares numpy's ``einsum`` below :data:`TORCH_FROM` values, else the
        square of torch's L2 norm of each map, half the time, as close to float64), or, with none
        after it (a linear layer's features), over blocks of
        :data:`ROW_BLOCK` rows in float32, then added in float64: one pass each. None for a float
        tensor not laid out contiguously in float32 or float64, with fewer than two values a channel,
        and on an accelerator."""
        entry = self._entry(tensor)
        if entry is None or not entry.values.size or tensor.dtype not in _SHARED_DTYPES or not tensor.is_contiguous():
            return None
        dim %= tensor.dim()
        channels = tensor.shape[dim]
        count = tensor.numel() // channels
        if count < 2:
            return None
        found = entry.channels.get(dim)
        if found is None:
            positions = math.prod(tensor.shape[dim + 1:])
            with np.errstate(all="ignore"):
                if positions > 1:
                    maps = entry.tensor.view(-1, channels, positions)
                    sums = np.add.reduce(maps.sum(2).numpy(), axis=0, dtype=np.float64)
                    if entry.values.size >= TORCH_FROM:
                        map_squares = torch.linalg.vector_norm(maps, dim=2).double().square_().numpy()
                    else:
                        view = entry.values.reshape(-1, channels, positions)
                        map_squares = np.einsum("lcp,lcp->lc", view, view)
                    squares = np.add.reduce(map_squares, axis=0, dtype=np.float64)
                else:
                    sums, squares = _row_sums(entry.values.reshape(-1, channels))
            found = entry.channels[dim] = (sums, squares)
        return found[0], found[1], count

    def extremes(self, tensor: torch.Tensor) -> Optional[tuple[float, float]]:
        """The tensor's minimum and maximum (NaN when it holds a NaN), its maximum taken from unit maxima
        computed before; None on an accelerator or for an empty tensor."""
        entry = self._entry(tensor)
        if entry is None or not entry.values.size:
            return None
        if entry.low is None:
            with np.errstate(all="ignore"):
                _extremes(entry)
        return entry.low, entry.high

    def count_outside(self, tensor: torch.Tensor, low: Optional[float], high: float) -> Optional[int]:
        """How many values are at or below ``low`` (None: no lower bound) or at or above ``high`` (NaN is
        neither), the bounds rounded to the dtype the values are read in (float64 for a float64 tensor,
        else float32), as torch compares a tensor with a number; nothing is counted when the extremes
        lie inside the bounds. None on an accelerator, or when ``low`` is not below ``high``."""
        entry = self._entry(tensor)
        if entry is None or (low is not None and not low < high):
            return None
        dtype = entry.values.dtype.type
        high = dtype(high)
        low = None if low is None else dtype(low)
        extremes = self.extremes(tensor)
        if extremes is None:  # empty
            return 0
        if extremes[1] < high and (low is None or extremes[0] > low):
            return 0
        with np.errstate(all="ignore"):
            above = int(np.count_nonzero(entry.values >= high))
            return above if low is None else above + int(np.count_nonzero(entry.values <= low))

    def whole(self, tensor: torch.Tensor) -> Optional[tuple[np.ndarray, float, float, float, float]]:
        """The tensor's flat values (float32 or float64, no copy where its dtype and layout allow), sum,
        sum of squares, minimum and maximum. The sums come from channel sums computed before (added in
        float64), else from one float32 pass each (numpy's pairwise sum and ``einsum`` dot product,
        or from :data:`TORCH_FROM` values torch's sum and ``dot``, a third of the time); either may
        overflow to infinity or be NaN: the reader checks. None on an accelerator or for an empty
        tensor."""
        entry = self._entry(tensor)
        if entry is None or not entry.values.size:
            return None
        if entry.total is None or entry.low is None:
            with np.errstate(all="ignore"):
                if entry.total is None:
                    channels = next(iter(entry.channels.values()), None)
                    if channels is not None:
                        entry.total, entry.squares = float(np.add.reduce(channels[0])), float(np.add.reduce(channels[1]))
                    else:
                        entry.total, entry.squares = _flat_sums(entry.values)
                if entry.low is None:
                    _extremes(entry)
        return entry.values, entry.total, entry.squares, entry.low, entry.high

    def _entry(self, tensor: torch.Tensor) -> Optional[_Entry]:
        if not on_host(tensor) or not tensor.is_floating_point() or tensor.layout != torch.strided:
            return None
        tensor = tensor.detach()
        if not self._depth:
            return _Entry(tensor)
        try:
            version = tensor._version
        except RuntimeError:  # an inference tensor has no version counter: not kept
            return _Entry(tensor)
        key = (tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype)
        found = self._entries.get(key)
        if found is None or found[0] != version:
            found = self._entries[key] = (version, _Entry(tensor))
        return found[1]


def _row_sums(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each column's float64 sum of values and of squares: :data:`ROW_BLOCK` rows at a time in float32
    (numpy adds rows one after another, so a block's error stays that of a few additions), the blocks'
    sums and the rows left over in float64."""
    blocks = len(rows) // ROW_BLOCK
    head, tail = rows[:blocks * ROW_BLOCK].reshape(blocks, ROW_BLOCK, rows.shape[1]), rows[blocks * ROW_BLOCK:]
    sums = np.add.reduce(np.add.reduce(head, axis=1), axis=0, dtype=np.float64)
    squares = np.add.reduce(np.einsum("brc,brc->bc", head, head), axis=0, dtype=np.float64)
    if len(tail):
        wide = tail.astype(np.float64)
        sums += np.add.reduce(wide, axis=0)
        squares += np.einsum("rc,rc->c", wide, wide)
    return sums, squares


def _flat_sums(values: np.ndarray) -> tuple[float, float]:
    """The float32 sum of ``values`` and of their squares: torch's ``sum`` and ``dot`` from
    :data:`TORCH_FROM` values, else numpy's pairwise sum and ``einsum``."""
    if values.size >= TORCH_FROM:
        flat = torch.from_numpy(values)
        return float(flat.sum()), float(torch.dot(flat, flat))
    return float(np.add.reduce(values)), float(np.einsum("i,i->", values, values))


def _extremes(entry: _Entry) -> None:
    """Set the entry's minimum and maximum (from its unit maxima when there are some), NaN when it holds
    a NaN: one pass (torch's ``aminmax`` or ``min`` from :data:`TORCH_FROM` values, else numpy's)."""
    values = entry.values
    maxima = next(iter(entry.maxima.values()), None)
    if values.size >= TORCH_FROM:
        flat = torch.from_numpy(values)
        if maxima is None:
            low, high = torch.aminmax(flat)
            entry.low, entry.high = float(low), float(high)
            return
        entry.low = float(flat.min())
    else:
        entry.low = float(np.minimum.reduce(values))
    entry.high = float(np.maximum.reduce(values if maxima is None else host_array(maxima).reshape(-1)))
