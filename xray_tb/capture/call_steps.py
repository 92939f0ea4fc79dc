"""Which step a ``take_graphs()`` call files its capture under, and whether the schedule has it due.

Without ``optimizer=`` a call is an iteration and Xray counts calls (training health counts those
between them); with it, the optimizer's ``step()`` calls are the steps. A step the caller gives files
the capture there. The schedule is asked once per step (:class:`DueSteps`), so arming the hooks for a
step and capturing it agree even for a schedule that is not a pure function of the step.
"""

from __future__ import annotations

from typing import Callable, Optional

from xray_tb.capture.schedules import ScheduleLike, as_schedule


class DueSteps:
    """A capture schedule, asked once per step (always due without one)."""

    def __init__(self, every: ScheduleLike):
        self.schedule = as_schedule(every)
        self._asked: tuple[Optional[int], bool] = (None, False)  # the last step asked, and the answer

    def __call__(self, step: int) -> bool:
        if self.schedule is None:
            return True
        if self._asked[0] != step:
            self._asked = (step, bool(self.schedule(step)))
        return self._asked[1]


def filed_step(step: Optional[int], next_step: int, counted_by_optimizer: bool, counted_call: Callable[[int], int],
               scheduled: bool, last_step: Optional[int], warn_once: Callable[[str, str], None]) -> tuple[int, int]:
    """``(the step a call files under, the step the schedule is asked about)``. ``step``: the caller's,
    or None to count; ``next_step``: Xray's count; ``counted_call(next_step)``: the iteration a call
    without ``optimizer=`` follows (training health counts those between calls)."""
    if step is None:
        step = next_step if counted_by_optimizer else counted_call(next_step)
    elif not counted_by_optimizer and scheduled and step != next_step and last_step is not None:
        warn_once(
            "skipped calls",
            f"take_graphs(step={step}) after step {next_step - 1}: with every= and no optimizer=, Xray "
            "counts take_graphs() calls to know when to arm its hooks; call it every step (it returns None "
            "when the step is not due), or pass optimizer= so Xray counts optimizer steps",
        )
    return step, next_step if counted_by_optimizer else step


def repeated_step(step: int, last_step: int, given: bool, counted_by_optimizer: bool) -> str:
    """The warning for a capture filed at or before the last one (TensorBoard keeps one frame per step)."""
    if given:
        return f"take_graphs(step={step}) after step {last_step}: TensorBoard keeps one frame per step, steps should increase"
    counted = "optimizer steps (optimizer=)" if counted_by_optimizer else "take_graphs() calls"
    return (f"take_graphs() captured step {step} again after step {last_step}: Xray counts {counted}, and none was counted "
            "since the last capture (a skipped optimizer step, or several calls per optimizer step); TensorBoard keeps the "
            "last frame of a step. Pass the step yourself, take_graphs(step), to file captures under your own numbering")
