"""Stable alias of :mod:`xray_tb.capture.schedules` (``from xray_tb.schedules import every, at``)."""

from xray_tb.capture.schedules import Schedule, ScheduleLike, as_schedule, at, every

__all__ = ["every", "at", "as_schedule", "Schedule", "ScheduleLike"]
