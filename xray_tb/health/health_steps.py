"""Which training steps are health steps, the steps whose activation statistics run:
``HealthOptions(activations=...)``'s schedule, else Xray's captures."""

from __future__ import annotations

from typing import Callable, Optional

from xray_tb.capture.schedules import ScheduleLike, as_schedule


class HealthSteps:
    """``due(step)``: whether ``step`` is a health step. The schedule is asked once per step, so arming the
    activation hooks for a step and measuring it agree even for a schedule that is not a pure function."""

    def __init__(self, activations: ScheduleLike, capture_due: Callable[[int], bool]):
        self._schedule = as_schedule(activations)
        self._capture_due = capture_due
        self._asked: tuple[Optional[int], bool] = (None, False)  # the last step asked and its answer

    def due(self, step: int) -> bool:
        asked = self._asked
        if asked[0] != step:
            asked = self._asked = (step, bool(self._schedule(step) if self._schedule is not None else self._capture_due(step)))
        return asked[1]
