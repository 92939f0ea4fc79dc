"""With ``optimizer=``, the other optimizers of the model's weights: one that steps before the given one (a
head's, in a model split over two optimizers) would spread a NaN to the layers before it, so the weights
and gradients are checked for non-finite values before its step, as the forward and backward left them."""

from __future__ import annotations

import weakref
from typing import Callable

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from xray_tb.capture.hooks import Hook, call_weakly
from xray_tb.health.optimizer_params import PerOptimizer, held_ids, steps_any


class OtherOptimizers:
    """Calls ``check()`` before each step of a ``torch.optim`` optimizer, other than ``given``, that steps
    some of the model's weights (``weights()``, looked at once per optimizer and parameter count);
    :meth:`remove` at close."""

    def __init__(self, given: torch.optim.Optimizer, weights: Callable[[], list[torch.Tensor]], check: Callable[[], None]):
        self._given = weakref.ref(given)
        self._weights = weights
        self._check = check
        self._steps_model: PerOptimizer[bool] = PerOptimizer()
        this = weakref.ref(self)  # the global hook must not keep training health alive
        self._handle = register_optimizer_step_pre_hook(Hook(lambda optimizer, args, kwargs: call_weakly(this, "_before", optimizer)))

    def _before(self, optimizer: torch.optim.Optimizer) -> None:
        if optimizer is not self._given() and self._steps_model.get(optimizer, lambda: steps_any(held_ids(optimizer), self._weights())):
            self._check()

    def remove(self) -> None:
        self._handle.remove()
