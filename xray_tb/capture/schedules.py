"""Schedules: which steps are due for a capture, as ``step -> bool`` callables with a readable repr."""

from __future__ import annotations

from typing import Callable, Iterable, Optional, Union

Schedule = Callable[[int], bool]
ScheduleLike = Union[None, int, Schedule]


class every:  # noqa: N801 - reads as a function: every(100)
    """Due at ``offset``, ``offset + n``, ``offset + 2n``, ..."""

    def __init__(self, n: int, offset: int = 0):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"every(n) needs a whole number n >= 1, got {n!r}")
        self.n, self.offset = n, offset

    def __call__(self, step: int) -> bool:
        return step >= self.offset and (step - self.offset) % self.n == 0

    def __repr__(self) -> str:
        return f"every({self.n}" + (f", offset={self.offset})" if self.offset else ")")


class at:  # noqa: N801
    """Due at the given steps only."""

    def __init__(self, steps: Iterable[int]):
        self.steps = frozenset(int(s) for s in steps)

    def __call__(self, step: int) -> bool:
        return step in self.steps

    def __repr__(self) -> str:
        return f"at({sorted(self.steps)})"


def as_schedule(schedule: ScheduleLike) -> Optional[Schedule]:
    """None (every call is due), an int n (``every(n)``) or a callable of the step."""
    if schedule is None or callable(schedule):
        return schedule
    if isinstance(schedule, int) and not isinstance(schedule, bool):
        return every(schedule)
    raise TypeError(f"every= takes a whole number of steps or a callable step -> bool, got {schedule!r}")
