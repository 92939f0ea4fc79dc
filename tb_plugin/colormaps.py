"""The tab's colour maps in numpy, so that images drawn on the server (``/gif``) match the tab.

A port of ``frontend/colormap.js``, entry for entry: signed data takes a diverging blue-white-red
map (ColorBrewer RdBu reversed) on a range symmetric about zero; other data a sequential viridis
map from min to max. Both are look-up tables of :data:`LUT_SIZE` entries; NaN is magenta and ±Inf
grey, colours neither map holds. Rounding follows JavaScript's ``Math.round`` (halves go up).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

LUT_SIZE = 255  # odd, so that zero of a diverging scale has an entry of its own
_LAST = LUT_SIZE - 1
NAN_COLOR = (255, 0, 255)
INF_COLOR = (128, 128, 128)
#: Codes of :func:`codes` beside the entries 0 .. LUT_SIZE - 1: NaN, then +Inf and -Inf.
NAN_CODE, INF_CODE = LUT_SIZE, LUT_SIZE + 1

_DIVERGING_STOPS = [
    (5, 48, 97), (33, 102, 172), (67, 147, 195), (146, 197, 222), (209, 229, 240),
    (247, 247, 247),
    (253, 219, 199), (244, 165, 130), (214, 96, 77), (178, 24, 43), (103, 0, 31),
]  # fmt: skip
_SEQUENTIAL_STOPS = [
    (68, 1, 84), (71, 44, 122), (59, 81, 139), (44, 113, 142), (33, 144, 141),
    (39, 173, 129), (92, 200, 99), (170, 220, 50), (253, 231, 37),
]  # fmt: skip


def _js_round(x: np.ndarray) -> np.ndarray:
    return np.floor(np.asarray(x, dtype=np.float64) + 0.5)


def _lut(stops: list[tuple[int, int, int]]) -> np.ndarray:
    """``LUT_SIZE x 3`` uint8: the stops interpolated linearly at ``i / (LUT_SIZE - 1)``."""
    colours = np.asarray(stops, dtype=np.float64)
    x = np.arange(LUT_SIZE, dtype=np.float64) / _LAST * (len(stops) - 1)
    i = np.minimum(len(stops) - 2, np.floor(x)).astype(int)
    f = (x - i)[:, None]
    return _js_round(colours[i] + (colours[i + 1] - colours[i]) * f).astype(np.uint8)


DIVERGING_LUT = _lut(_DIVERGING_STOPS)
SEQUENTIAL_LUT = _lut(_SEQUENTIAL_STOPS)


@dataclasses.dataclass(frozen=True)
class Scale:
    """A colour scale: ``lut[0]`` is drawn at ``lo``, ``lut[-1]`` at ``hi``; kind is ``"empty"``
    when no value is finite."""

    kind: str
    lo: float
    hi: float
    lut: np.ndarray

    @property
    def table(self) -> np.ndarray:
        """``(LUT_SIZE + 2) x 3`` uint8: the colour of every code of :func:`codes`."""
        return np.concatenate([self.lut, np.asarray([NAN_COLOR, INF_COLOR], dtype=np.uint8)])


def make_scale(low: Optional[float], high: Optional[float], signed: bool = False) -> Scale:
    """The tab's ``makeScale``: diverging on ``[-m, m]`` (``m`` the larger magnitude) for signed data
    or a range across zero, else sequential from ``low`` to ``high``."""
    if low is None or high is None or not (np.isfinite(low) and np.isfinite(high)):
        return Scale("empty", 0.0, 0.0, SEQUENTIAL_LUT)
    if signed or (low < 0 < high):
        bound = max(abs(low), abs(high))
        return Scale("diverging", -bound, bound, DIVERGING_LUT)
    return Scale("sequential", float(low), float(high), SEQUENTIAL_LUT)


def codes(values: np.ndarray, scale: Scale) -> np.ndarray:
    """int16 codes of ``values`` (any shape): the LUT entry of a finite value (the tab's
    ``fillRgba``: the middle one for a degenerate range), :data:`NAN_CODE` or :data:`INF_CODE`."""
    values = np.asarray(values, dtype=np.float64)
    span = scale.hi - scale.lo
    if span > 0:
        with np.errstate(invalid="ignore", over="ignore"):
            entries = np.clip(_js_round((values - scale.lo) * (_LAST / span)), 0, _LAST)
    else:
        entries = np.full(values.shape, _LAST >> 1, dtype=np.float64)
    found = np.where(np.isfinite(values), entries, INF_CODE)
    return np.where(np.isnan(values), NAN_CODE, found).astype(np.int16)


def rgb(values: np.ndarray, scale: Scale) -> np.ndarray:
    """uint8 ``values.shape + (3,)``: the colour the tab draws each value in."""
    return scale.table[codes(values, scale)]
