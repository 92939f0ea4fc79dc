"""Which weights still hold what the sentinel last found finite, or what an optimizer step made of it
from the gradients it checked: those need not be read again at the next check.

A weight changes between two iterations in two ways: an optimizer step, which from finite weights and
finite gradients gives finite weights (unless the update itself overflows), and a write of the user's
(``weight[5, 3] = nan`` under ``no_grad``, ``load_state_dict``, ``copy_``), which bumps the weight's
version counter. So after a finite check, each weight's version and its gradient (a weak reference and
the gradient's own version) are noted. Around every ``torch.optim`` step (the global step pre- and
post-hooks) a weight keeps its clean mark when nothing wrote it since the check and the gradient the step
may have applied is the one checked, unchanged (not scaled or clipped in place since); its new version
is noted. Any other change leaves the weight dirty, and the next check reads it.

What this cannot see, and the docs say so: a weight written in place without a version bump (through
``weight.data``: ``weight.data = ...`` moves its data, which is seen), or a step's own overflow, whose non-finite value no gradient shows (a unit a ReLU, sigmoid or tanh clamps
away). A non-finite weight that the forward uses shows in that iteration's gradients, and the check that
then reads everything names it.
"""

from __future__ import annotations

import weakref
from typing import Optional

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from xray_tb.capture.hooks import Hook


class WeightVersions:
    """Clean marks of a list of weights, kept across optimizer steps (global hooks, removed by :meth:`remove`)."""

    def __init__(self):
        self._weights: Optional[list[torch.Tensor]] = None  # the list the marks belong to
        self._seen: list[Optional[tuple[int, int]]] = []  # each weight's version while clean; None: dirty
        self._grads: list[Optional[tuple[weakref.ref, tuple[int, int]]]] = []  # each checked gradient, None where it had none
        self._before: Optional[list] = None  # the versions when the step began
        this = weakref.ref(self)
        self._handles = (
            register_optimizer_step_pre_hook(Hook(lambda optimizer, args, kwargs: _call(this, "_before_step"))),
            register_optimizer_step_post_hook(Hook(lambda optimizer, args, kwargs: _call(this, "_after_step"))),
        )

    def clean(self, weights: list[torch.Tensor]) -> Optional[list[bool]]:
        """Whether each of ``weights`` is unchanged since it was found finite (or only stepped from it);
        None when nothing is known of this list."""
        if weights is not self._weights:
            return None
        return [seen is not None and _version(weight) == seen for weight, seen in zip(weights, self._seen)]

    def checked(self, weights: list[torch.Tensor], grads: list[Optional[torch.Tensor]]) -> None:
        """``weights`` and their dense ``grads`` were found finite: mark them clean."""
        self._weights = weights
        self._seen = [_version(weight) for weight in weights]
        self._grads = [None if grad is None else _reference(grad) for grad in grads]
        self._before = None

    def forget(self) -> None:
        """Nothing is known any more: the next check reads every weight."""
        self._weights, self._seen, self._grads, self._before = None, [], [], None

    def remove(self) -> None:
        """Remove both hooks (idempotent)."""
        for handle in self._handles:
            handle.remove()
        self.forget()

    def _before_step(self) -> None:
        if self._weights is not None:
            self._before = [_version(weight) for weight in self._weights]

    def _after_step(self) -> None:
        before, self._before = self._before, None
        if self._weights is None or before is None:
            return
        for i, weight in enumerate(self._weights):
            seen = self._seen[i]
            if seen is None:
                continue
            grad, checked = weight.grad, self._grads[i]
            applied_checked = grad is None or (checked is not None and checked[0]() is grad and _version(grad) == checked[1])
            self._seen[i] = _version(weight) if before[i] == seen and applied_checked else None


def _version(tensor: torch.Tensor) -> Optional[tuple[int, int]]:
    """The tensor's version counter and where its data lies (``weight.data = ...`` bumps no version)."""
    try:
        return tensor._version, tensor.data_ptr()
    except RuntimeError:  # an inference tensor has no version: never taken for clean
        return None


def _reference(grad: torch.Tensor) -> Optional[tuple[weakref.ref, tuple[int, int]]]:
    version = _version(grad)
    if version is None or grad.layout != torch.strided:
        return None  # a sparse gradient is read at every check
    return weakref.ref(grad), version


def _call(versions_ref: weakref.ref, method: str) -> None:
    versions = versions_ref()
    if versions is not None:
        getattr(versions, method)()
