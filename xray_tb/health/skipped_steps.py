"""Optimizer steps that do not run: an iteration that a ``take_graphs()`` call counted, whose optimizer step
is then skipped for a non-finite gradient (a ``GradScaler``'s overflow), is no iteration.

A ``GradScaler`` that finds an overflow in the scaled gradients skips ``optimizer.step()``: an overflow is
the scaler's to handle, not a non-finite value of training (overflows are routine: the scale grows until
one happens). Where the followed optimizer counts the iterations, a skipped step counts nothing. Where a
``take_graphs()`` call before each optimizer step counts them (``scaler.unscale_(optimizer)``, then
``take_graphs()``, then ``scaler.step(optimizer)``), the call cannot know yet whether the step will run.
So once an optimizer is known to step the model, such an iteration waits for the next event:

* that optimizer's step confirms it;
* a backward that comes first, onto gradients reset in between (``zero_grad()``, which sets them to None
  by default), while a ``GradScaler`` has just backed off its scale, shows the scaler skipped the step:
  if the sentinel found a non-finite gradient in it (the overflow), the iteration is withdrawn, its row
  of statistics and that find. A step the loop itself skipped (a guard against a NaN loss, or against
  loss spikes) stands, NaN, spike and all;
* a backward onto the same gradient tensors (accumulation, a call per backward) confirms it.

With ``zero_grad(set_to_none=False)`` a skipped step cannot be told from accumulation, and the iteration
stands. A non-finite weight or bias found in a withdrawn iteration stays found (the forward used it). And
after :data:`LIMIT` skipped steps in a row the iterations stand again: a ``GradScaler`` halves its scale at
each skip, so by then the gradients are non-finite in themselves (a loss that stays NaN), not from the
scale, and that is a non-finite value of training: the first of those steps is reported.
"""

from __future__ import annotations

import weakref
from typing import Callable, Optional

import torch

# LIMIT: skipped steps in a row after which the iterations stand (the scale has shrunk 2**24-fold by then).
from xray_tb.health.overflows import LIMIT, Scalers


class SkippedSteps:
    """The iteration a call counted, waiting for its optimizer step; ``hold(step)``, ``release()`` and
    ``withdraw(step)`` tell training health what became of it."""

    def __init__(self, hold: Callable[[int], None], release: Callable[[bool, bool], None], withdraw: Callable[[int], bool]):
        """``release(stepped, reinstate)``: the held iteration stands (``stepped``: an optimizer step ran;
        ``reinstate``: so do the skipped steps before it, in a row too long for a scaler)."""
        self._hold, self._release, self._withdraw = hold, release, withdraw
        self._waiting: Optional[tuple[int, Optional[weakref.ref]]] = None  # (step, the marker's gradient then)
        self._in_a_row = 0  # skipped steps since an optimizer step ran
        self._scalers = Scalers()

    def _scaler_backed_off(self) -> bool:
        """Whether a ``torch.amp.GradScaler`` has just backed off its scale (its growth count is back at 0,
        which after a step that did not run means an overflow it skipped). The scalers are found by a scan of
        the garbage collector's objects, a few times a run at most, at a skipped step only; one sync each."""
        for scaler in self._scalers.enabled():
            tracker = getattr(scaler, "_growth_tracker", None)
            if tracker is not None and int(tracker) == 0:
                return True
        return False

    @property
    def waiting(self) -> bool:
        return self._waiting is not None

    def counted_by_call(self, step: int, marker: Optional[torch.Tensor]) -> None:
        """A call counted iteration ``step`` while an optimizer is known to step the model."""
        self.confirm(stepped=False)
        grad = None if marker is None else marker.grad
        self._waiting = (int(step), None if grad is None else weakref.ref(grad))
        self._hold(int(step))

    def confirm(self, stepped: bool = True) -> None:
        """The optimizer stepped (or the run ends): the waiting iteration stands."""
        if stepped:
            self._in_a_row = 0
        if self._waiting is not None:
            self._waiting = None
            self._release(stepped, False)

    def backward(self, marker: torch.Tensor) -> None:
        """A backward reached the marker before any optimizer step: skipped if its gradient was reset and a
        ``GradScaler`` just backed off (a loop's own guard that skips a step on a NaN loss keeps the NaN)."""
        if self._waiting is None:
            return
        step, then = self._waiting
        if then is None or then() is marker.grad or not self._scaler_backed_off():
            self.confirm(stepped=False)  # accumulation, or a step the loop itself skipped
            return
        self._waiting = None
        if self._in_a_row >= LIMIT:
            self._release(False, True)
            return
        self._in_a_row = self._in_a_row + 1 if self._withdraw(step) else 0  # withdraw(): whether it was an overflow
