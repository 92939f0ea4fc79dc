"""The ``health=`` option of :class:`~xray_tb.Xray`: switch training health off, or thin it."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional, Union

from xray_tb.capture.schedules import ScheduleLike, as_schedule
from xray_tb.health.rules import make_rules
from xray_tb.numeric import is_number, plain_number, whole


@dataclasses.dataclass(frozen=True)
class HealthOptions:
    """How much training health to compute (``Xray(..., health=HealthOptions(...))``).

    Args:
        every: per-iteration statistics (gradients, weight norms) on every n-th iteration (1: all), or
            ``"auto"`` (default): on every iteration while they cost at most ``budget`` of the training
            step's time, else on one iteration in n, n chosen to stay within it (see
            :mod:`xray_tb.health.pacing`).
        budget: with ``every="auto"``, the share of the step time the per-iteration reductions may take.
            None (default): 0.003 for a model on the CPU (counting the colder caches of the step after
            it, a measured iteration costs about twice its reductions' time), 0.05 for a model on an
            accelerator, where the time measured is the time to launch a fixed number of batched
            reductions, which mostly overlaps the device's own work. 5% is the cost accepted for
            ``every=1`` on a network with short GPU steps (the 16-block conv network of
            ``bench/bench_gpu_health.py``): wherever ``every=1`` stays within it, so does the
            automatic pace, and it measures every iteration.
        activations: when activation statistics (dead units, saturation, channel variance, output
            checks) run: None (default) at Xray's captures (never in probe mode, whose captures run
            on the probe batch), an int n, or a callable ``step -> bool``.
        update_every: the update ratio is measured on one iteration in this many (a copy of the
            weights is kept for one iteration); 1 measures it on every iteration.
        dead_window: dead units are judged over this many recent health steps.
        dead_threshold: a unit is dead when its activation stays at or below this value.
        saturation_margin: sigmoid and tanh values within this margin of their bounds, and softmax
            rows whose largest value is within it of 1, count as saturated.
        channel_dim: the dimension of the activation whose per-index variance is ``channel_var``
            (None: the unit dimension, channels of a conv and features of a linear layer).
        flush_every: write the buffered statistics at least every this many measured iterations (at the
            automatic pace, one iteration in ``every`` is measured).
        flush_seconds: at a capture, write the buffered statistics when they were last written at least
            this many seconds of training ago (iterations times their typical interval: pauses do not count) (they are also written every ``flush_every`` iterations, when a
            result is asked for, and at ``close()``).
        histograms: write a TensorBoard histogram of each planned layer's weight at captures.
        histograms_every: at captures at least this many steps apart (100; 1: at every capture), so
            frequent captures (every 10 steps) do not pay for a histogram each: TensorBoard keeps
            500 per tag anyway.
        rules: per-rule settings, ``{"vanishing_gradient": {"ratio": 1e-4}, "saturation": False}``;
            ``False`` switches a rule off. See :mod:`xray_tb.health.rules` for each rule's settings.
    """

    every: Union[int, str] = "auto"
    budget: Optional[float] = None
    activations: ScheduleLike = None
    update_every: int = 10
    dead_window: int = 8
    dead_threshold: float = 0.0
    saturation_margin: float = 0.01
    channel_dim: Optional[int] = None
    flush_every: int = 500
    flush_seconds: float = 10.0
    histograms: bool = True
    histograms_every: int = 100
    rules: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        for field in dataclasses.fields(self):  # numpy numbers (np.int64(4)) become ints and floats
            object.__setattr__(self, field.name, plain_number(getattr(self, field.name)))
        if self.every != "auto" and (whole(self.every) is None or self.every < 1):
            raise ValueError(f"HealthOptions(every=...) takes 'auto' or a whole number >= 1, got {self.every!r}")
        if self.budget is not None and (not is_number(self.budget) or not 0 < self.budget <= 1):
            raise ValueError(f"HealthOptions(budget=...) takes a share of the step time in (0, 1], got {self.budget!r}")
        for name in ("update_every", "dead_window", "flush_every", "histograms_every"):
            value = getattr(self, name)
            if whole(value) is None or value < 1:
                raise ValueError(f"HealthOptions({name}=...) takes a whole number >= 1, got {value!r}")
        if not is_number(self.flush_seconds) or not self.flush_seconds >= 0:  # NaN too
            raise ValueError(f"HealthOptions(flush_seconds=...) takes a number of seconds >= 0, got {self.flush_seconds!r}")
        if not is_number(self.saturation_margin) or not 0 <= self.saturation_margin < 0.5:
            raise ValueError(f"HealthOptions(saturation_margin=...) takes a number in [0, 0.5), got {self.saturation_margin!r}")
        if not is_number(self.dead_threshold) or not math.isfinite(self.dead_threshold):
            raise ValueError(f"HealthOptions(dead_threshold=...) takes a finite number (0: a unit that never fires above 0 "
                             f"is dead), got {self.dead_threshold!r}")
        if not isinstance(self.histograms, bool):
            raise ValueError(f"HealthOptions(histograms=...) takes True or False, got {self.histograms!r}")
        if not isinstance(self.rules, Mapping):
            raise ValueError(f"HealthOptions(rules=...) takes a dict {{rule: {{setting: value}} or False}}, got {self.rules!r}; "
                             f"e.g. rules={{'saturation': False}}")
        make_rules(self.rules, self.dead_window)  # raises on an unknown rule or setting, or a bad value
        if self.channel_dim is not None and whole(self.channel_dim) is None:
            raise ValueError(f"HealthOptions(channel_dim=...) takes a dimension index or None, got {self.channel_dim!r}")
        as_schedule(self.activations, "HealthOptions(activations=...)")  # raises on a bad schedule


#: The default ``budget`` for a model on the CPU and on an accelerator.
CPU_BUDGET, DEVICE_BUDGET = 0.003, 0.05


def budget_for(options: HealthOptions, device_type: str) -> float:
    """The pace's budget: the one given, else the default for the weights' device."""
    if options.budget is not None:
        return float(options.budget)
    return CPU_BUDGET if device_type == "cpu" else DEVICE_BUDGET


def as_options(health: Union[bool, HealthOptions, None]) -> Optional[HealthOptions]:
    """The options for ``Xray(health=...)``: None when health is switched off."""
    if health is True:
        return HealthOptions()
    if health is False or health is None:
        return None
    if isinstance(health, HealthOptions):
        return health
    raise TypeError(f"health= takes True, False or a HealthOptions(...), got {health!r}")
