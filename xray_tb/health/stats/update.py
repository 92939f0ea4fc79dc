"""``update_ratio`` = ‖Δw‖ / ‖w‖: the size of one optimizer update relative to the weight.

Measured between consecutive training iterations, on one measured iteration in ``every``: the weights
are copied at iteration i, and iteration i + 1 is then measured too (whatever the pace of the other
statistics), filing ‖w(i+1) − w(i)‖ / ‖w(i)‖ under its step. Other steps have no value. Both norms are
columns (``update_l2``, ``update_base_l2``), divided on the host, so that the norms of a sharded
weight's shards combine before the division.

The copy lives only until the update it measures is made: right after the next ``torch.optim`` step
(a global step post-hook, which returns at once while no copy waits; registered with the statistic and
removed by :meth:`UpdateRatio.remove`, never from inside a step, whose hook table torch is then
iterating), ‖Δw‖ of the weights that optimizer stepped is
taken and their copies are dropped, so the copy is never held through a forward and backward, where it
would add the model's size to the step's peak (500 MB on a GPT-2 small). The values are the same as at
iteration i + 1 unless something writes the weights between the step and that iteration. Weights that
no ``torch.optim`` optimizer steps (a hand-written update, frozen ones, an FSDP rank's shards, whose
optimizer holds the sharded parameters) keep their copies until iteration i + 1, as do all of them when
a step was skipped (a ``GradScaler`` that found an overflow: Δw is then 0). Between two measurements
Xray holds no copy of the weights.
"""

from __future__ import annotations

import operator
import weakref
from typing import Optional, Union

import numpy as np
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from xray_tb.capture.hooks import Hook, call_weakly
from xray_tb.health import reductions
from xray_tb.health.optimizer_params import PerOptimizer, stepped_positions
from xray_tb.health.stats.base import IterationStatistic, IterationView


_SHAPE = operator.attrgetter("shape")


class UpdateRatio(IterationStatistic):
    columns = ("update_l2", "update_base_l2")
    shard_ops = {"update_l2": "l2", "update_base_l2": "l2"}

    def __init__(self, layers: list[str], every: int):
        super().__init__(layers)
        self._every = every
        self._copy: Optional[_Copy] = None  # the weights copied at the last update iteration, until measured
        self._summaries = reductions.Summaries()
        self._stepped: PerOptimizer[list[int]] = PerOptimizer()  # per optimizer: the positions of the weights it steps
        self._weights: Optional[list[torch.Tensor]] = None  # the list of the last copy, which those positions index
        self._generation = 0  # counts the lists of weights, so that what is kept per optimizer is renewed
        this = weakref.ref(self)
        self._hook = register_optimizer_step_post_hook(Hook(lambda optimizer, args, kwargs: call_weakly(this, "_after_step", optimizer)))

    def compute(self, view: IterationView) -> dict[str, Union[list, torch.Tensor]]:
        """Both norms as vectors at the iteration after a copy; lists of None (no value) otherwise."""
        updates: Union[list, torch.Tensor] = [None] * len(view.weights)
        bases: Union[list, torch.Tensor] = list(updates)
        if self._copy is not None:
            copy, self._copy = self._copy, None
            updates, bases = copy.measure(view.weights, self._summaries)
        if view.index % self._every == 0:
            if view.weights is not self._weights:
                self._weights, self._generation = view.weights, self._generation + 1
            with torch.no_grad():  # one multi-tensor op, whatever the number of layers (x * 1.0 is x, bit for bit)
                copies = list(torch._foreach_mul(view.weights, 1.0))
            self._copy = _Copy(copies, self._summaries(copies, ("l2",), view.weights)["l2"], view.weights)
        return {"update_l2": updates, "update_base_l2": bases}

    def finalize(self, columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with np.errstate(all="ignore"):
            return {"update_ratio": columns["update_l2"] / columns["update_base_l2"]}

    @property
    def pending(self) -> bool:
        """Whether a copy waits for the next iteration, which must then be measured."""
        return self._copy is not None

    @property
    def held_copies(self) -> int:
        """How many weights' copies are held now (0 between two measurements and after the step)."""
        return 0 if self._copy is None else self._copy.open

    def forget(self) -> None:
        """Drop the kept copy (the weights were replaced, e.g. by pruning)."""
        self._copy = None
        self._stepped.clear()

    def remove(self) -> None:
        """Drop the copy and remove the step hook (idempotent; at close, not inside an optimizer step)."""
        self.forget()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _after_step(self, optimizer: torch.optim.Optimizer) -> None:
        """An optimizer stepped while a copy waits: measure the weights it steps now, and drop their copies."""
        copy = self._copy
        if copy is None or copy.open == 0:  # most steps: nothing waits
            return
        try:  # inside the user's optimizer.step(): a failure here must not stop training
            positions = self._stepped.get(optimizer, lambda: stepped_positions(optimizer, copy.weights), key=self._generation)
            with torch.no_grad():
                copy.measure_stepped(positions, self._summaries)
        except Exception:  # noqa: BLE001 - this update goes unmeasured (the copies may be half subtracted)
            copy.spoil()  # the next iteration is still measured, as on every rank (FSDP): with no ratio


class _Copy:
    """The weights' copies taken at one iteration, and the update norms already measured from them."""

    def __init__(self, copies: list[torch.Tensor], base_norms: torch.Tensor, weights: list[torch.Tensor]):
        self.copies: list[Optional[torch.Tensor]] = copies  # None once its update was measured
        self.base_norms = base_norms
        self.weights = weights
        self.open = len(copies)  # copies not yet measured
        self.measured: list[tuple[list[int], torch.Tensor]] = []  # (positions, ‖Δw‖ of each), at optimizer steps
        self.spoiled = False

    def spoil(self) -> None:
        """Give up this update (a failure while measuring it): no value, and no copy held."""
        self.copies, self.measured, self.open = [None] * len(self.copies), [], 0
        self.spoiled = True

    def measure_stepped(self, positions: list[int], summaries: reductions.Summaries) -> None:
        """‖Δw‖ of the weights at ``positions`` whose copies wait, now; their copies are dropped."""
        if self.open < len(self.copies):  # another optimizer measured some already
            positions = [i for i in positions if self.copies[i] is not None]
        norms = self._norms(positions, self.weights, summaries) if positions else None
        if norms is not None:  # (a weight whose shape changed keeps its copy: the next iteration gives no value)
            self.measured.append((positions, norms))
            for i in positions:
                self.copies[i] = None
            self.open -= len(positions)

    def measure(self, weights: list[torch.Tensor], summaries: reductions.Summaries) -> tuple:
        """``(updates, bases)`` at the iteration after the copy: what the steps measured, the rest now."""
        count = len(self.copies)
        if self.spoiled:
            return [None] * count, [None] * count
        if self.open:
            rest = list(range(count)) if self.open == count else [i for i in range(count) if self.copies[i] is not None]
            norms = self._norms(rest, weights, summaries) if len(weights) == count else None
            if norms is not None:
                self.measured.append((rest, norms))
        self.copies = []
        if len(self.measured) == 1 and len(self.measured[0][0]) == count:  # the usual case: one vector
            return self.measured[0][1], self.base_norms
        updates: list = [None] * count
        for positions, norms in self.measured:
            for i, norm in zip(positions, norms.unbind()):
                updates[i] = norm
        bases = self.base_norms.unbind()
        return updates, [None if update is None else base for update, base in zip(updates, bases)]

    def _norms(self, positions: list[int], weights: list[torch.Tensor], summaries: reductions.Summaries) -> Optional[torch.Tensor]:
        """‖w − copy‖ for ``positions`` (the copies are subtracted from in place: no new allocation), or
        None when a weight's shape changed since its copy."""
        everything = len(positions) == len(self.copies)
        before = self.copies if everything else [self.copies[i] for i in positions]
        after = weights if everything else [weights[i] for i in positions]
        if list(map(_SHAPE, before)) != list(map(_SHAPE, after)):  # compared in C: no Python per layer
            return None
        torch._foreach_sub_(before, after)
        return summaries(before, ("l2",), after)["l2"]
