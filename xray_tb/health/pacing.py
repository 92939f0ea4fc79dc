"""How often the per-iteration statistics run: on a fixed share of iterations, or, by default, on as
many as fit a small share of the training step's time.

On most models the per-iteration reductions cost well under a percent of a step. On tiny models with
sub-millisecond steps (a small MLP on a CPU) a handful of reductions over every gradient can cost a
third of the step; there the ``"auto"`` pace measures one iteration in ``every``, choosing ``every``
so that the measured cost stays within ``budget`` of the time between iterations.

Iterations that are not measured cost one comparison: the clock is read at measured ones only, and
the time between iterations is the time between two measured ones over the iterations between them.
"""

from __future__ import annotations

import math
import time
from typing import Optional, Union

#: Measured iterations at every=1 before the automatic pace first adapts (the first ones are cold).
WARMUP = 20
#: The longest gap the automatic pace allows between measured iterations.
MAX_EVERY = 1000
_SMOOTHING = 0.1


class Pacer:
    """Decides which iterations are measured; ``every`` is fixed or adapted (``"auto"``)."""

    def __init__(self, every: Union[int, str], budget: float):
        self.auto = every == "auto"
        self.every = 1 if self.auto else int(every)
        self._budget = budget
        #: The first iteration (counted from 0) still to measure.
        self.next = 0
        self._cost = self._interval = None
        self._last: Optional[tuple[int, float]] = None  # (index, clock) of the last measured iteration
        self._measured = 0

    def due(self, index: int) -> bool:
        """Whether iteration ``index`` (counted from 0) is one to measure."""
        return index >= self.next

    @property
    def interval(self) -> Optional[float]:
        """The typical time between two iterations, in seconds (None before two were measured)."""
        return self._interval

    def measured(self, index: int, seconds: float, now: Optional[float] = None) -> None:
        """Iteration ``index`` was measured, starting at ``now`` (by default ``time.perf_counter()``
        when it is called) and its statistics took ``seconds``."""
        now = time.perf_counter() - seconds if now is None else now
        if self._last is not None and index > self._last[0]:
            gap = (now - self._last[1]) / (index - self._last[0])  # a pause counts as a few steps at most
            self._interval = _smooth(self._interval, gap if self._interval is None else min(gap, 4 * self._interval))
        self._last = (index, now)
        self.next = index + self.every
        if not self.auto:
            return
        self._cost = _smooth(self._cost, seconds)
        self._measured += 1
        if self._measured >= WARMUP and self._interval:
            training = max(self._interval - self._cost / self.every, 1e-9)
            self.every = min(MAX_EVERY, max(1, math.ceil(self._cost / (self._budget * training))))


def _smooth(average, value: float) -> float:
    return value if average is None else average + _SMOOTHING * (value - average)
