"""Which weights still hold what the sentinel last found finite, or what an optimizer step made of it
from the gradients it checked: those need not be read again at the next check.

A weight changes between two iterations in two ways: an optimizer step, which from finite weights and
finite gradients gives finite weights (unless the update itself overflows), and a write of the user's
(``weight[5, 3] = nan`` under ``no_grad``, ``load_state_dict``, ``copy_``), which bumps the weight's
version counter. So after a finite check, each weight's version (and where its data lies) and its
gradient (a weak reference and the gradient's own version) are noted. Around every ``torch.optim`` step
(the global step pre- and post-hooks), each weight that optimizer steps keeps its clean mark when nothing
wrote it since the check and the gradient the step may have applied is the one checked, unchanged (not
scaled or clipped in place since); its new version is noted. Any other change leaves the weight dirty,
and the next check reads it.

Only weights of at least :data:`MIN_SIZE` values are followed: a smaller one is read at every check,
which costs less than following it (and keeps what is held per layer nil on models of thousands of small
layers).

What this cannot see, and the docs say so: a weight written in place without a version bump (through
``weight.data``: ``weight.data = ...`` moves its data, which is seen), or a step's own overflow, whose
non-finite value no gradient shows (a unit a ReLU, sigmoid or tanh clamps away). A non-finite weight
that the forward uses shows in that iteration's gradients, and the check that then reads everything
names it.
"""

from __future__ import annotations

import weakref
from typing import Optional

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from xray_tb.capture.hooks import Hook, call_weakly
from xray_tb.health.optimizer_params import PerOptimizer, stepped_positions

#: The fewest values a weight must hold to be followed rather than read at every check.
MIN_SIZE = 1 << 14


class WeightVersions:
    """Clean marks of the large weights of a list, kept across optimizer steps (global hooks, removed by
    :meth:`remove`)."""

    def __init__(self):
        self._weights: Optional[list[torch.Tensor]] = None  # the list the marks belong to
        self._followed: list[int] = []  # the positions of its weights of MIN_SIZE values or more
        self._seen: list = []  # each followed weight's version while clean; None: dirty
        self._grads: list = []  # each followed weight's checked gradient: (weak reference, version), or None
        self._before: Optional[tuple[int, list[int], list]] = None  # generation, the slots the step may change, their versions
        self._generation = 0  # counts the lists of weights followed, so that what is cached per optimizer is renewed
        # per optimizer and generation: the slots of the followed weights it steps
        self._stepped: PerOptimizer[list[int]] = PerOptimizer()
        this = weakref.ref(self)
        self._handles = (
            register_optimizer_step_pre_hook(Hook(lambda optimizer, args, kwargs: call_weakly(this, "_before_step", optimizer))),
            register_optimizer_step_post_hook(Hook(lambda optimizer, args, kwargs: call_weakly(this, "_after_step"))),
        )

    def clean(self, weights: list[torch.Tensor]) -> frozenset:
        """The positions in ``weights`` of those unchanged since they were found finite (or only stepped
        from there); empty when nothing is known of this list."""
        if weights is not self._weights:
            return frozenset()
        return frozenset(i for i, seen in zip(self._followed, self._seen) if seen is not None and _version(weights[i]) == seen)

    def checked(self, weights: list[torch.Tensor], grads: list[Optional[torch.Tensor]]) -> None:
        """``weights`` and their ``grads`` were found finite: mark them clean."""
        if weights is not self._weights:
            self._weights = weights
            self._followed = [i for i, weight in enumerate(weights) if weight.numel() >= MIN_SIZE]
            self._generation += 1
        self._seen = [_version(weights[i]) for i in self._followed]
        self._grads = [None if (grad := grads[i]) is None else _reference(grad) for i in self._followed]
        # a step under way keeps what its pre-hook noted: with optimizer=, the check runs in that step's own
        # pre-hook, after the global one

    def same_grads(self, weights: list[torch.Tensor], grads: list[Optional[torch.Tensor]]) -> frozenset:
        """The positions in ``weights`` whose gradient in ``grads`` is the one found finite at the last check,
        unchanged since (not written, clipped or replaced): those need no reading at a check again."""
        if weights is not self._weights:
            return frozenset()
        return frozenset(i for i, checked in zip(self._followed, self._grads) if (grad := grads[i]) is not None and _is_checked(grad, checked))

    def remove(self) -> None:
        """Remove both hooks (idempotent) and forget everything."""
        for handle in self._handles:
            handle.remove()
        self._weights, self._followed, self._seen, self._grads, self._before = None, [], [], [], None
        self._stepped.clear()

    def _before_step(self, optimizer: torch.optim.Optimizer) -> None:
        if self._weights is not None and self._followed:
            slots = self._slots(optimizer)
            self._before = (self._generation, slots, [_version(self._weights[self._followed[slot]]) for slot in slots])

    def _slots(self, optimizer: torch.optim.Optimizer) -> list[int]:
        """The slots of the followed weights ``optimizer`` steps (looked at again when its parameters or
        the followed weights change). A weight it steps that is missed here keeps its old mark, which its
        new version no longer matches: it is read at the next check."""
        return self._stepped.get(optimizer, lambda: stepped_positions(optimizer, [self._weights[i] for i in self._followed]),
                                 key=self._generation)

    def _after_step(self) -> None:
        before, self._before = self._before, None
        if self._weights is None or before is None or before[0] != self._generation:
            return  # nothing noted, or the weights were found again meanwhile: the next check reads them
        for slot, version in zip(before[1], before[2]):
            seen = self._seen[slot]
            if seen is None:
                continue
            weight, checked = self._weights[self._followed[slot]], self._grads[slot]
            grad = weight.grad
            applied_checked = grad is None or _is_checked(grad, checked)
            self._seen[slot] = _version(weight) if version == seen and applied_checked else None


def _version(tensor: torch.Tensor) -> Optional[tuple[int, int]]:
    """The tensor's version counter and where its data lies (``weight.data = ...`` bumps no version)."""
    try:
        return tensor._version, tensor.data_ptr()
    except RuntimeError:  # an inference tensor has no version: never taken for clean
        return None


def _is_checked(grad: torch.Tensor, checked: Optional[tuple[weakref.ref, tuple[int, int]]]) -> bool:
    """Whether ``grad`` is the gradient ``checked`` refers to (:func:`_reference`), unwritten since."""
    return checked is not None and checked[0]() is grad and _version(grad) == checked[1]


def _reference(grad: torch.Tensor) -> Optional[tuple[weakref.ref, tuple[int, int]]]:
    version = _version(grad)
    if version is None or grad.layout != torch.strided:
        return None  # a sparse gradient: its weight is read at every check
    return weakref.ref(grad), version
