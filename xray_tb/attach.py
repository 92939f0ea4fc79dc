"""The pieces Xray attaches to a model and releases on close: its resources, the optimizer step
counter, the trace, and the warning about a run directory that holds captures already."""

from __future__ import annotations

import warnings
import weakref
from typing import TYPE_CHECKING, Optional

from torch import nn

from xray_tb.trace import arguments
from xray_tb.capture.hooks import TapRecorder, _Hook
from xray_tb.io.reader import last_recorded_step
from xray_tb.trace.tracer import trace
from xray_tb.io.sink import EventSink

if TYPE_CHECKING:
    from xray_tb.xray import Xray


class Resources:
    """Hooks and the event file, released by close() or when the Xray object is garbage-collected."""

    def __init__(self, sink: EventSink):
        self.sink: Optional[EventSink] = sink
        self.recorder: Optional[TapRecorder] = None
        self.step_hook = None
        self.health = None  # the training-health monitor (xray_tb.health), closed before the sink

    def release(self) -> None:
        if self.health is not None:
            self.health, health = None, self.health
            health.close()
        for removable in (self.recorder, self.step_hook):
            if removable is not None:
                removable.remove()
        self.recorder = self.step_hook = None
        if self.sink is not None:
            self.sink.close()
            self.sink = None



def step_counter(xray_ref: "weakref.ref[Xray]") -> _Hook:
    """An optimizer step hook holding Xray weakly (a forgotten Xray can still be garbage-collected),
    and, like every Xray hook, pickling as a no-op."""

    def count(optimizer, args, kwargs) -> None:
        xray = xray_ref()
        if xray is not None:
            xray._optimizer_stepped()

    return _Hook(count)


def warn_about_earlier_captures(logdir: str) -> None:
    """Warn once when the run directory already holds Xray captures (a resumed or repeated run)."""
    previous = last_recorded_step(logdir)
    if previous is not None:
        warnings.warn(
            f"{logdir!r} already holds Xray captures up to step {previous}; a step recorded again replaces the earlier "
            "one (the last write wins). Give each run its own logdir to keep both",
            stacklevel=3,
        )


def trace_model(model: nn.Module, args: tuple, kwargs: dict) -> dict:
    """The traced architecture; a forward that fails says so, with the shapes it was given."""
    try:
        return trace(model, args, kwargs)
    except Exception as error:
        raise ValueError(
            f"tracing the model failed with the example input of shape {arguments.describe_inputs(args, kwargs)}: "
            f"{type(error).__name__}: {error}. Give example_input= a batch the model accepts (model(example_input) must "
            "run), or input_size= one sample's shape"
        ) from error
