"""Training iterations that ``take_graphs()`` does not see, counted from the optimizer that steps the model.

Without ``optimizer=``, an iteration of training health is a ``take_graphs()`` call. A loop that calls it
only at captures (``if step % 100 == 0: xray.take_graphs(step)``, as in the README) would then be
watched at those steps only, and the first non-finite value named late, in whichever layer it had
spread to by then. :class:`IterationFollower` closes that gap:

* a post-accumulate-grad hook on one weight, the marker, marks that a backward has run: the trainable
  weight of the first layer the forward calls (the trunk's, which every backward reaches; a head used on
  some steps only, or a layer never called, would miss backwards);
* a global optimizer step pre-hook (``torch.optim.optimizer.register_optimizer_step_pre_hook``) follows
  the first optimizer whose ``step()`` updates the marker, and ignores every other (in a GAN, the
  optimizer of the network the forward runs first);
* each backward is one iteration, counted once, at that optimizer's ``step()``, where the gradients
  are those the step applies (after any clipping): filed under the step of a ``take_graphs(step)``
  call made since the backward, else under the step after the last one, so a loop numbered
  0, 1, 2, ... is filed under its own steps whatever the order of the two calls. A ``take_graphs()``
  call counts the iteration itself only where no followed optimizer will: before the first
  optimizer step, in a loop without one, and in a loop that calls it more often than the optimizer
  steps (gradient accumulation with a call per backward).

Until the marker has seen a backward (FSDP hands sharded gradients over without accumulating them, say),
nothing is followed and every call is an iteration, as before. A loop whose weights no ``torch.optim``
optimizer steps (a hand-written update) gets a warning once backwards go uncounted between
``take_graphs()`` calls. Both hooks are removed by :meth:`remove` (at ``close()``); they hold the
follower weakly, so a forgotten ``Xray`` can still be collected.
"""

from __future__ import annotations

import warnings
import weakref
from typing import Callable, Optional

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from xray_tb.capture.hooks import Hook


class IterationFollower:
    """Counts each backward once, from a ``take_graphs()`` call or from the model's optimizer step."""

    def __init__(self, weights: list[torch.nn.Parameter], iteration: Callable[[int], None], first_step: int):
        self._iteration = iteration
        self._followed: Optional[weakref.ref] = None  # the optimizer whose steps count
        self._ignored: "weakref.WeakSet[torch.optim.Optimizer]" = weakref.WeakSet()
        self._first_step = int(first_step)
        self._last: Optional[int] = None  # the step of the latest iteration
        self._pending: Optional[int] = None  # the step a take_graphs(step) call gave the backward not yet counted
        self._backward_seen = False  # the marker hook has fired: iterations are followed
        self._fresh = False  # a backward ran since the last iteration was counted
        self._uncounted = 0  # backwards since then that no iteration counted
        self._defer = True  # a call leaves the count to the optimizer step that follows it
        self._uncounted_calls = 0  # take_graphs() calls that found uncounted backwards, no optimizer followed
        this = weakref.ref(self)
        trainable = [weight for weight in weights if weight.requires_grad]  # the layers the forward calls first
        self._marker = id(trainable[0]) if trainable else None
        self._handles = []
        if trainable:
            self._handles.append(trainable[0].register_post_accumulate_grad_hook(Hook(lambda _: _call(this, "_backward"))))
            self._handles.append(register_optimizer_step_pre_hook(
                Hook(lambda optimizer, args, kwargs: _call(this, "_before_step", optimizer))))

    def counts_call(self, step: int) -> bool:
        """Whether the ``take_graphs(step)`` call is an iteration: not when no backward ran since the last
        one counted, nor when the followed optimizer's next step will count it (filed under ``step``)."""
        self._note(step)
        if not self._backward_seen:
            return True
        if not self._fresh:
            return False
        if self._pending is not None:  # calls come more often than optimizer steps (accumulation): each counts
            self._defer = False
        if self._defer and self._followed is not None and self._followed() is not None:
            self._pending = step  # counted at the optimizer step, with the gradients it applies
            return False
        if self._uncounted and self._followed is None:
            self._uncounted_calls += 1
            if self._uncounted_calls == 2:  # not at the first: an accumulating loop's first optimizer step may be next
                self._warn_uncounted()
        self._fresh, self._pending, self._uncounted = False, None, 0
        return True

    def remove(self) -> None:
        """Remove both hooks (idempotent)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _backward(self) -> None:
        if self._fresh:
            self._uncounted += 1
        self._backward_seen = self._fresh = True

    def _before_step(self, optimizer: torch.optim.Optimizer) -> None:
        if not self._fresh or not self._follows(optimizer):
            return
        step = self._pending if self._pending is not None else self._first_step if self._last is None else self._last + 1
        self._fresh, self._pending, self._uncounted = False, None, 0
        self._note(step)
        self._iteration(step)

    def _note(self, step: int) -> None:
        """``step`` was filed: the next iteration no call names goes after the latest."""
        self._last = step if self._last is None else max(step, self._last)

    def _warn_uncounted(self) -> None:
        warnings.warn(
            f"{self._uncounted + 1} backward passes ran since the last take_graphs() call and no torch.optim optimizer "
            "stepped the model's weights, so training health checked only the last of them: call take_graphs() after "
            "every backward (it returns None when no capture is due) to have every iteration checked",
            stacklevel=5,
        )

    def _follows(self, optimizer: torch.optim.Optimizer) -> bool:
        if self._followed is not None:
            return self._followed() is optimizer
        if optimizer in self._ignored:
            return False
        if any(id(p) == self._marker for group in optimizer.param_groups for p in group["params"]):
            self._followed = weakref.ref(optimizer)
            return True
        self._ignored.add(optimizer)
        return False


def _call(follower_ref: weakref.ref, method: str, *args) -> None:
    follower = follower_ref()
    if follower is not None:
        getattr(follower, method)(*args)
