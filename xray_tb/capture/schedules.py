"""Schedules: which steps are due for a capture, as ``step -> bool`` callables with a readable repr."""

from __future__ import annotations

from typing import Callable, Iterable, Optional, Union

from xray_tb.numeric import whole

Schedule = Callable[[int], bool]
ScheduleLike = Union[None, int, Schedule]


class every:  # noqa: N801 - reads as a function: every(100)
    """Due at ``offset``, ``offset + n``, ``offset + 2n``, ..."""

    def __init__(self, n: int, offset: int = 0):
        if whole(n) is None or n < 1:
            raise ValueError(f"every(n) needs a whole number n >= 1, got {n!r}")
        if whole(offset) is None:
            raise ValueError(f"every(n, offset=...) needs a whole number, the first due step; got {offset!r}")
        self.n, self.offset = int(n), int(offset)

    def __call__(self, step: int) -> bool:
        return step >= self.offset and (step - self.offset) % self.n == 0

    def __repr__(self) -> str:
        return f"every({self.n}" + (f", offset={self.offset})" if self.offset else ")")


class at:  # noqa: N801
    """Due at the given steps only."""

    def __init__(self, steps: Union[int, Iterable[int]]):
        if whole(steps) is not None:
            steps = (steps,)  # at(100): the one step
        if isinstance(steps, (str, bytes)) or not isinstance(steps, Iterable):
            raise TypeError(f"at(steps) takes the steps to capture, such as at([0, 50, 1000]); got {steps!r}")
        steps = list(steps)
        wrong = [step for step in steps if whole(step) is None]
        if wrong:
            raise TypeError(f"at(steps) takes whole numbers of steps, such as at([0, 50, 1000]); got {wrong[0]!r} among them")
        self.steps = frozenset(int(s) for s in steps)

    def __call__(self, step: int) -> bool:
        return step in self.steps

    def __repr__(self) -> str:
        return f"at({sorted(self.steps)})"


def as_schedule(schedule: ScheduleLike, argument: str = "every=") -> Optional[Schedule]:
    """None (every call is due), an int n (``every(n)``) or a callable of the step; ``argument`` names
    the parameter in the error a bad one raises."""
    if schedule is None or callable(schedule):
        return schedule
    if whole(schedule) is not None:
        if schedule < 1:
            raise ValueError(f"{argument} takes a whole number of steps >= 1 or a callable step -> bool, got {schedule!r}")
        return every(schedule)
    raise TypeError(f"{argument} takes a whole number of steps or a callable step -> bool, got {schedule!r}")
