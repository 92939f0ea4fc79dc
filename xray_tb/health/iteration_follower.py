"""Training iterations that ``take_graphs()`` does not see, counted from the optimizer that steps the model.

Without ``optimizer=``, an iteration of training health is a ``take_graphs()`` call. A loop that calls it
only at captures (``if step % 100 == 0: xray.take_graphs(step)``, as in the README) would then be
watched at those steps only, and the first non-finite value named late, in whichever layer it had
spread to by then. :class:`IterationFollower` closes that gap:

* a global optimizer step pre-hook (``torch.optim.optimizer.register_optimizer_step_pre_hook``) follows
  the first optimizer whose ``step()`` updates one of the model's weights, and ignores every other;
* a post-accumulate-grad hook on one weight (the last trainable one) marks that a backward has run;
* each backward is one iteration, counted once, by whichever comes first after it: a ``take_graphs(step)``
  call (filed under ``step``) or that optimizer's ``step()`` (filed under the step after the last one,
  so a loop numbered 0, 1, 2, ... is filed under its own steps whatever the order of the two calls).

Until that hook has seen a backward (FSDP hands sharded gradients over without accumulating them, say),
nothing is followed and every call is an iteration, as before. Both hooks are removed by :meth:`remove`
(at ``close()``); they hold the follower weakly, so a forgotten ``Xray`` can still be collected.
"""

from __future__ import annotations

import weakref
from typing import Callable, Optional

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from xray_tb.capture.hooks import Hook


class IterationFollower:
    """Counts each backward once, from a ``take_graphs()`` call or from the model's optimizer step."""

    def __init__(self, weights: list[torch.nn.Parameter], iteration: Callable[[int], None], first_step: int):
        self._iteration = iteration
        self._weights = {id(weight) for weight in weights}
        self._followed: Optional[weakref.ref] = None  # the optimizer whose steps count
        self._ignored: "weakref.WeakSet[torch.optim.Optimizer]" = weakref.WeakSet()
        self._first_step = int(first_step)
        self._last: Optional[int] = None  # the step of the latest iteration
        self._backward_seen = False  # the marker hook has fired: iterations are followed
        self._fresh = False  # a backward ran since the last iteration was counted
        this = weakref.ref(self)
        trainable = [weight for weight in weights if weight.requires_grad]
        self._handles = []
        if trainable:
            self._handles.append(trainable[-1].register_post_accumulate_grad_hook(Hook(lambda _: _call(this, "_backward"))))
            self._handles.append(register_optimizer_step_pre_hook(
                Hook(lambda optimizer, args, kwargs: _call(this, "_before_step", optimizer))))

    def counts_call(self, step: int) -> bool:
        """Whether the ``take_graphs(step)`` call is an iteration (no optimizer step counted its backward)."""
        counted = self._fresh or not self._backward_seen
        self._fresh = False
        self._last = step if self._last is None else max(step, self._last)
        return counted

    def remove(self) -> None:
        """Remove both hooks (idempotent)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _backward(self) -> None:
        self._backward_seen = self._fresh = True

    def _before_step(self, optimizer: torch.optim.Optimizer) -> None:
        if not self._fresh or not self._follows(optimizer):
            return
        self._fresh = False
        step = self._first_step if self._last is None else self._last + 1
        self._last = step
        self._iteration(step)

    def _follows(self, optimizer: torch.optim.Optimizer) -> bool:
        if self._followed is not None:
            return self._followed() is optimizer
        if optimizer in self._ignored:
            return False
        if any(id(p) in self._weights for group in optimizer.param_groups for p in group["params"]):
            self._followed = weakref.ref(optimizer)
            return True
        self._ignored.add(optimizer)
        return False


def _call(follower_ref: weakref.ref, method: str, *args) -> None:
    follower = follower_ref()
    if follower is not None:
        getattr(follower, method)(*args)
