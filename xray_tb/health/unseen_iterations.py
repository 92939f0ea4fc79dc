"""Iterations training health cannot see: under FSDP without ``optimizer=``, only ``take_graphs()`` calls.

The :class:`~xray_tb.health.iteration_follower.IterationFollower` counts the backwards between calls
through a hook on the first layer's gradient, which FSDP's sharded gradients do not fire. So under FSDP,
without ``optimizer=``, an iteration is a ``take_graphs()`` call, and a loop that calls it at captures
only (``if step % 100 == 0``) would have training health, and the first non-finite value, checked at
those steps only. :class:`UnseenIterations` says so once: when an optimizer that steps the model's
weights steps twice with no call between, it warns and removes its hook.
"""

from __future__ import annotations

import warnings
import weakref

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from xray_tb.capture.hooks import Hook
from xray_tb.user_frame import user_stacklevel


class UnseenIterations:
    """Warns once when the model's optimizer steps twice between two ``take_graphs()`` calls."""

    def __init__(self, weights: list[torch.nn.Parameter]):
        self._ids = {id(weight) for weight in weights}
        self._steps = 0  # optimizer steps of the model since the last call
        this = weakref.ref(self)
        self._handle = register_optimizer_step_pre_hook(Hook(lambda optimizer, args, kwargs: _stepped(this, optimizer)))

    def called(self) -> None:
        """A ``take_graphs()`` call: an iteration health sees."""
        self._steps = 0

    def stepped(self, optimizer: torch.optim.Optimizer) -> None:
        if not any(id(p) in self._ids for group in optimizer.param_groups for p in group["params"]):
            return  # another model's optimizer
        self._steps += 1
        if self._steps == 2:
            self.remove()
            warnings.warn(
                "the optimizer stepped the model twice since the last take_graphs() call, and under FSDP Xray cannot "
                "see the backward passes between calls (its sharded gradients), so training health and the first "
                "non-finite value are checked only at the iterations that call take_graphs(): call it after every "
                "backward (it returns None when no capture is due), or pass optimizer= with every=",
                stacklevel=user_stacklevel(),
            )

    def remove(self) -> None:
        """Remove the hook (idempotent)."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


def _stepped(this: weakref.ref, optimizer: torch.optim.Optimizer) -> None:
    unseen = this()
    if unseen is not None:
        unseen.stepped(optimizer)
