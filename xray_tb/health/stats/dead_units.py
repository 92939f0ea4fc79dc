"""Dead units: a unit (a conv channel, a linear feature) is dead when its activation stays at or below
a threshold for every sample and position seen over a window of recent health steps (until the window
fills, over the health steps seen so far). ``dead_fraction`` is the share of a layer's units that are dead.

Each health step keeps, on the device, the largest activation of every unit (a row of a ring of
``window`` rows, written in place); a unit is dead at a threshold when the largest of those over the
window is at or below it, so :meth:`DeadUnits.dead` answers for any threshold without recomputing
anything. The dead mask of each health step is also kept for the ``dead`` per-unit vector
(:meth:`DeadUnits.vectors`, 1.0 for a dead unit), brought to the host with the other vectors at flush.

The rows are bfloat16, rounded up (half the memory of float32: the rings were most of what Xray holds
between captures on a ResNet-50). A rounded-up maximum is at or below a threshold exactly when the
true one is, for every threshold that bfloat16 represents (0, the default, and 0.5, 1, -20, any power
of two...). For another threshold, a unit whose largest activation lies within 0.4% below it counts as
alive: never the reverse, so pruning never removes a unit that fired above the threshold.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

from xray_tb.numeric import is_number
from xray_tb.health.stats.base import ActivationStatistic, ActivationValue
from xray_tb.devices import host_array, on_host


class DeadUnits(ActivationStatistic):
    columns = ("dead_fraction",)

    def __init__(self, layers: list[str], window: int, threshold: float):
        super().__init__(layers)
        self.threshold = threshold
        self._window = window
        self._rings: list[Optional[_Ring]] = [None] * len(layers)
        self._last: list[Optional[torch.Tensor]] = [None] * len(layers)
        self._added: list[torch.Tensor] = []  # the ring rows of the latest health step

    def compute(self, values: list[ActivationValue], nan: torch.Tensor) -> dict[str, list[torch.Tensor]]:
        self._add_rows(values)
        return self._fractions()

    def share(self, values: list[ActivationValue]) -> Optional[torch.Tensor]:
        """The unit maxima of this rank's batch, the rows just added (a unit is dead only if dead on every rank)."""
        added = self._add_rows(values)
        return torch.cat([row.double() for row in added]) if added else torch.zeros(0, dtype=torch.float64)

    def compute_shared(self, gathered: torch.Tensor, nan: torch.Tensor) -> dict[str, list[torch.Tensor]]:
        maxima, start = gathered.amax(dim=0), 0
        for row in self._added:  # each rank's row becomes the maximum over the ranks
            _write_rounded_up(row, maxima[start:start + row.numel()].float())
            start += row.numel()
        return self._fractions()

    def _add_rows(self, values: list[ActivationValue]) -> list[torch.Tensor]:
        """Add each seen activation's unit maxima to its ring; the rows written, in layer order. On a CPU
        the rows are rounded to bfloat16 together (a few numpy calls for every layer at once)."""
        added, host_rows, host_maxima = [], [], []
        for i, value in enumerate(values):
            ring = self._rings[i]
            tensor = value.activation
            if tensor is not None and tensor.dim() and tensor.numel() and tensor.is_floating_point():
                dim = value.layer.unit_dim(tensor)
                units = tensor.shape[dim]
                if ring is None or ring.units != units or ring.rows.device != tensor.device:
                    ring = self._rings[i] = _Ring(self._window, units, tensor.device)
                maxima = value.reductions.unit_maxima(tensor, dim) if value.reductions is not None else None
                if maxima is None:
                    others = [d for d in range(tensor.dim()) if d != dim]
                    maxima = tensor.amax(dim=others) if others else tensor
                slot = ring.next_slot()
                if ring.bits is not None:
                    host_rows.append(ring.bits[slot])
                    host_maxima.append(maxima.float())
                else:
                    _write_rounded_up(ring.rows[slot], maxima.float())
                added.append(ring.rows[slot])
        if host_rows:
            _write_rows_rounded_up(host_rows, host_maxima)
        self._added = added
        return added

    def _fractions(self) -> dict[str, list[torch.Tensor]]:
        """Each layer's dead share, and its dead mask kept for :meth:`vectors`; on a CPU for every layer at
        once (one pass over the rings' rows, whose unwritten rows hold -inf)."""
        fractions: list = [None] * len(self._rings)
        host = [i for i, ring in enumerate(self._rings) if ring is not None and ring.bits is not None]
        if host:
            bits = np.concatenate([self._rings[i].bits for i in host], axis=1) if len(host) > 1 else self._rings[host[0]].bits
            with np.errstate(invalid="ignore"):  # a NaN maximum: alive, as torch compares
                dead = (bits.view(np.uint16).astype(np.uint32) << 16).view(np.float32).max(axis=0) <= np.float32(self.threshold)
            units = np.asarray([self._rings[i].units for i in host])
            starts = np.concatenate(([0], np.cumsum(units)[:-1]))
            shares = torch.from_numpy(np.add.reduceat(dead, starts).astype(np.float32) / units.astype(np.float32))
            for i, start, count, share in zip(host, starts.tolist(), units.tolist(), shares.unbind()):
                self._last[i] = torch.from_numpy(dead[start:start + count])
                fractions[i] = share
        for i, ring in enumerate(self._rings):
            if ring is None:
                self._last[i] = None
            elif ring.bits is None:
                mask = self._last[i] = ring.maxima().float() <= self.threshold
                fractions[i] = torch.mean(mask, dtype=torch.float32)
        return {"dead_fraction": fractions}

    def vectors(self) -> dict[str, list[Optional[torch.Tensor]]]:
        last, self._last = self._last, [None] * len(self.layers)  # handed over: nothing held between health steps
        return {"dead": last}

    def dead(self, threshold: Optional[float] = None) -> dict[str, list[int]]:
        """``{layer: sorted dead unit indices}`` for layers with at least one dead unit (one host sync)."""
        threshold = self.threshold if threshold is None else finite_threshold(threshold)
        found = {}
        for layer, ring in zip(self.layers, self._rings):
            if ring is not None:
                units = np.flatnonzero(ring.maxima().float().cpu().numpy() <= np.float32(threshold))
                if units.size:
                    found[layer] = [int(u) for u in units]
        return found

    def reset(self, layer: str) -> None:
        """Forget what was seen of ``layer`` (its units changed, e.g. by pruning)."""
        index = self.layers.index(layer)
        self._rings[index] = self._last[index] = None


def finite_threshold(threshold) -> float:
    """``threshold`` (of ``xray.dead_units()`` and ``xray.prune()``) as a float; raises unless a finite number."""
    taken = ("takes a finite number: a unit is dead when its activation stays at or below it "
             f"(None: HealthOptions.dead_threshold, 0 by default); got {threshold!r}")
    if not is_number(threshold):
        raise TypeError(f"threshold= {taken}")
    if not math.isfinite(threshold):
        raise ValueError(f"threshold= {taken}")
    return float(threshold)


class _Ring:
    """The largest activation of each unit at each of the last ``window`` health steps (bfloat16 rounded
    up, on the activation's device): one row written in place per health step. Rows not written yet
    hold -inf, which no maximum over the window takes."""

    def __init__(self, window: int, units: int, device: torch.device):
        self.units = units
        self.rows = torch.full((window, units), -math.inf, dtype=torch.bfloat16, device=device)
        #: On a CPU, the rows' bits as numpy int16 (the same memory), for the batched writes and reads.
        self.bits: Optional[np.ndarray] = self.rows.view(torch.int16).numpy() if on_host(self.rows) else None
        self._written = 0

    def next_slot(self) -> int:
        """The index of the row the next health step writes (the oldest once the window is full)."""
        slot = self._written % len(self.rows)
        self._written += 1
        return slot

    def maxima(self) -> torch.Tensor:
        """Each unit's largest activation over the window (the health steps seen so far until it fills)."""
        filled = min(self._written, len(self.rows))
        return self.rows[0] if filled == 1 else self.rows[:filled].amax(dim=0)


def _write_rounded_up(row: torch.Tensor, values: torch.Tensor) -> None:
    """Write float32 ``values`` into the bfloat16 ``row``, each rounded up to the nearest bfloat16 at
    or above it (NaN stays NaN). On a CPU through numpy on the bits (:func:`_bits_rounded_up`); else
    with torch ops."""
    values = values.to(row.device)  # the maxima gathered over ranks may sit elsewhere
    if on_host(row):
        row.view(torch.int16).numpy()[:] = _bits_rounded_up(host_array(values.contiguous()))
        return
    row.copy_(rounded_up(values))


def _write_rows_rounded_up(rows: list[np.ndarray], values: list[torch.Tensor]) -> None:
    """:func:`_write_rounded_up` into CPU rows (their int16 bits, :attr:`_Ring.bits`), the values of every
    row rounded in one pass."""
    upper = _bits_rounded_up(np.concatenate([host_array(v) for v in values]) if len(values) > 1 else host_array(values[0].contiguous()))
    start = 0
    for row in rows:
        row[:] = upper[start:start + len(row)]
        start += len(row)


def _bits_rounded_up(floats: np.ndarray) -> np.ndarray:
    """The int16 bits of float32 ``floats`` each rounded up to bfloat16 (a bfloat16 is the upper half of
    a float32: positive values with lower bits set go one up, the others are cut; NaN stays NaN)."""
    bits = floats.view(np.uint32)
    upper = (bits >> 16).astype(np.uint16)
    upper += ((bits & 0xFFFF) != 0) & (bits < 0x7F800000)  # positive, finite and not exact in bfloat16
    upper[np.isnan(floats)] = 0x7FC0  # a NaN whose payload sat in the lower half would be cut to an infinity
    return upper.view(np.int16)


def rounded_up(values: torch.Tensor) -> torch.Tensor:
    """float32 ``values`` as bfloat16, each rounded up to the nearest bfloat16 at or above it, with
    torch ops (on any device)."""
    nearest = values.to(torch.bfloat16)
    above = torch.nextafter(nearest, torch.full((), math.inf, dtype=torch.bfloat16, device=values.device))
    return torch.where(nearest.float() < values, above, nearest)
