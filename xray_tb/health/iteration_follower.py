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

The marker moves when training changes under it: frozen (fine-tuning), to the first weight the followed
optimizer still trains; when the optimizers that step hold no marker (a head-only optimizer, a trunk that
joins later through ``add_param_group``), to the first weight of the one that steps the model's weights
(followed from its second step, or a call that finds backwards uncounted), until one that holds the first
layer steps (a GAN's generator); when the marker is no longer the model's parameter
(``load_state_dict(..., assign=True)``), to the weights found again (``on_replaced``).

Until the marker has seen a backward (FSDP's sharded gradients), every call is an iteration. A loop that
no ``torch.optim`` optimizer steps gets a warning once backwards go uncounted between calls. Both hooks,
which hold the follower weakly, are removed by :meth:`remove` (at ``close()``).
"""

from __future__ import annotations

import warnings
import weakref
from typing import Callable, Optional, Union

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from xray_tb.capture.hooks import Hook, call_weakly
from xray_tb.health.backward_marker import BackwardMarker
from xray_tb.health.closure_steps import after_closure
from xray_tb.health.optimizer_params import PerOptimizer, held_ids, steps_any
from xray_tb.health.skipped_steps import SkippedSteps
from xray_tb.user_frame import user_stacklevel


class IterationFollower:
    """Counts each backward once, from a ``take_graphs()`` call or from the model's optimizer step."""

    def __init__(self, weights: list[torch.nn.Parameter], iteration: Callable[[int], None], first_step: int,
                 modules: Optional[list[torch.nn.Module]] = None, on_replaced: Optional[Callable[[], None]] = None,
                 on_renumber: Optional[Callable[[int], bool]] = None, skipped: Optional[SkippedSteps] = None,
                 check: Optional[Callable[[int, bool], None]] = None):
        """``weights`` in dataflow order, each of the module at the same place in ``modules``;
        ``on_replaced`` is called when the marker is no longer its module's parameter (it should
        :meth:`rebind` the follower to the weights found again); ``on_renumber(delta)`` files the
        iterations counted before the first call ``delta`` steps later (whether it could); ``skipped`` withdraws
        an iteration a call counted whose optimizer step did not run; ``check(step, recheck)`` checks the weights
        and gradients for non-finite values before another optimizer of the model's weights steps first, or
        (``recheck``) before the optimizer step that follows a call that counted the iteration."""
        self._iteration = iteration
        self._check = check
        self._skipped = skipped
        self._followed: Optional[weakref.ref] = None  # the optimizer whose steps count
        # optimizers that step no marker: their parameter count when ignored, and whether they step model weights
        self._ignored: PerOptimizer[bool] = PerOptimizer()
        self._candidate: Optional[weakref.ref] = None
        self._stand_in: Union[bool, int, None] = False  # following a candidate: the count before it, else False
        self._first_step = int(first_step)
        self._last: Optional[int] = None  # the step of the latest iteration
        self._pending: Optional[int] = None  # the step a take_graphs(step) call gave the backward not yet counted
        self._backward_seen = False  # the marker hook has fired: iterations are followed
        self._fresh = False  # a backward ran since the last iteration was counted
        self._uncounted = 0  # backwards since then that no iteration counted
        self._defer = True  # a call leaves the count to the optimizer step that follows it
        # The loop calls take_graphs() after its optimizer steps: a call that finds its backward uncounted
        # then follows a step that did not run (a guard against a NaN loss, a scaler's overflow), and counts it.
        self._after_steps = False
        self._uncounted_calls = 0  # take_graphs() calls that found uncounted backwards, no optimizer followed
        self._call_counted: Optional[int] = None  # the step of the iteration a call counted, until the next backward
        self._steps_model: PerOptimizer[bool] = PerOptimizer()  # whether an optimizer steps some of the model's weights
        self._on_replaced = on_replaced
        self._on_renumber = on_renumber
        self._provisional: Optional[int] = 0  # iterations counted before a call named a step (None: one did)
        this = weakref.ref(self)  # the hooks hold the follower weakly
        self._marker = BackwardMarker(weights, modules, lambda: call_weakly(this, "_backward"))
        self._step_handle = None
        first = self._marker.first_trained()  # the first layer the forward calls
        if first is not None:
            self._marker.put_on(first)
            self._step_handle = register_optimizer_step_pre_hook(  # after a closure's backward, where the step has one
                Hook(lambda optimizer, args, kwargs: after_closure(args, kwargs, lambda: call_weakly(this, "_before_step", optimizer))))

    def counts_call(self, step: int) -> bool:
        """Whether the ``take_graphs(step)`` call is an iteration: not when no backward ran since the last
        one counted, nor when the followed optimizer's next step will count it (filed under ``step``)."""
        if self._provisional is not None:
            self._name_first(step)
        self._note(step)
        if self._replaced():
            return True  # the weights were found again: this call counts
        if not self._backward_seen:
            return True
        if self._marker.frozen():  # frozen since: this backward missed it
            self._fresh = self._remark() or self._fresh
        if not self._fresh:
            self._after_steps = self._backward_seen and self._followed is not None  # the step counted it already
            return False
        if self._uncounted and self._followed is None and self._candidate is not None and self._candidate() is not None:
            self._follow_candidate()  # the optimizers that step hold no marker: follow the one that steps the model
        if self._pending is not None:  # calls come more often than optimizer steps (accumulation): each counts
            self._defer = False
        if self._defer and not self._after_steps and self._followed is not None and self._followed() is not None:
            self._pending = step  # counted at the optimizer step, with the gradients it applies
            return False
        if self._uncounted and self._followed is None:
            self._uncounted_calls += 1
            if self._uncounted_calls == 2:  # not at the first: an accumulating loop's first optimizer step may be next
                self._warn_uncounted()
        self._fresh, self._pending, self._uncounted = False, None, 0
        self._call_counted = step
        if self._skipped is not None and self._known() is not None:
            self._skipped.counted_by_call(step, self._marker.weight)  # stands once the optimizer steps
        return True

    def _known(self) -> Optional[torch.optim.Optimizer]:
        """The optimizer known to step the model: the followed one, else the one that stepped its weights."""
        for ref in (self._followed, self._candidate):
            optimizer = ref() if ref is not None else None
            if optimizer is not None:
                return optimizer
        return None

    def call_step(self, counted: int) -> int:
        """The step a ``take_graphs()`` call without one belongs to: the iteration of the latest backward
        (the next one while it is uncounted, the last counted once the optimizer stepped it), at least
        ``counted``. So sparse calls keep the iterations' numbers, not a count of calls."""
        if self._last is None:
            return counted
        return max(counted, self._last + 1 if self._fresh else self._last)

    def _name_first(self, step: int) -> None:
        """The first call names a step: the iterations counted before it, filed from the first step on,
        were the ones right before it (a resumed run's first steps, 36 to 39 before take_graphs(40)). A call
        made after the optimizer step that counted its backward names that iteration, the latest counted."""
        counted, self._provisional = self._provisional, None
        named = counted if self._fresh or not self._backward_seen else counted - 1  # the iteration the call names
        delta = step - named - self._first_step
        if counted and delta > 0 and self._on_renumber is not None and self._on_renumber(delta):
            self._last = None if self._last is None else self._last + delta

    def remove(self) -> None:
        """Remove both hooks (idempotent)."""
        self._marker.remove()
        if self._step_handle is not None:
            self._step_handle.remove()
            self._step_handle = None

    def rebind(self, weights: list[torch.nn.Parameter], modules: Optional[list[torch.nn.Module]] = None) -> None:
        """The model's weights were found again: the marker moves to the new first trainable one (held by
        the followed optimizer, else the optimizers are looked at again)."""
        marker = self._marker
        marker.bind(weights, modules)
        if marker.weight is None:
            return
        if marker.among_weights():  # the same parameter, maybe under another name (pruned: weight_orig)
            return
        followed = self._followed() if self._followed is not None else None
        if followed is None or not steps_any(held_ids(followed), marker.weights):
            self._followed, self._candidate = None, None
            self._ignored.clear()
        if not self._remark() and self._followed is None and (first := marker.first_trained()) is not None:
            marker.put_on(first)

    def _replaced(self) -> bool:
        """Whether the marker is no longer its module's parameter; if so, asks for the weights again."""
        if not self._marker.stale() or self._on_replaced is None:
            return False
        self._marker.forget_slot()  # asked once per marker
        self._on_replaced()
        return True

    def _remark(self) -> bool:
        """The marker was frozen: move it to the first weight still trained (by the followed optimizer,
        if any). Whether it moved."""
        followed = self._followed() if self._followed is not None else None
        weight = self._marker.first_trained(followed)
        if weight is None or weight is self._marker.weight:
            return False
        self._marker.put_on(weight)
        return True

    def _follow_candidate(self) -> None:
        optimizer = self._candidate()
        weight = self._marker.first_trained(optimizer)
        if weight is not None:
            stand_in = weight is not self._marker.first_trained()  # it holds no first layer (a head, a discriminator)
            self._followed, self._stand_in = weakref.ref(optimizer), self._last if stand_in else False
            self._marker.put_on(weight)

    def _backward(self) -> None:
        if self._skipped is not None and self._skipped.waiting:
            self._skipped.backward(self._marker.weight)
        if self._fresh:
            self._uncounted += 1
        self._backward_seen = self._fresh = True
        self._call_counted = None

    def _before_step(self, optimizer: torch.optim.Optimizer) -> None:
        if self._skipped is not None and self._skipped.waiting and self._known() is optimizer:
            self._skipped.confirm()
        if self._backward_seen and self._marker.missed():
            # The marker missed the backward that this step applies (frozen, or replaced): it moves,
            # and the step shows that a backward ran.
            self._fresh = self._replaced() or self._remark() or self._fresh
        if not self._fresh:
            if self._followed is None and self._candidate is None:
                self._consider(optimizer)  # a call counted the backward: the next call that finds several may follow it
            if self._call_counted is not None and self._check is not None and self._steps_model.get(
                    optimizer, lambda: steps_any(held_ids(optimizer), self._marker.weights)):
                # Its gradients may have changed since the call (clipped, written): the step applies them, so
                # the sentinel looks again at what changed, for the first non-finite value at its iteration.
                self._check(self._call_counted, True)
            return
        if not self._follows(optimizer):
            self._check_before(optimizer)
            return
        step = self._next_step()
        self._after_steps = self._after_steps and self._pending is None
        self._fresh, self._pending, self._uncounted = False, None, 0
        if self._provisional is not None:
            self._provisional += 1
        self._note(step)
        self._iteration(step)

    def _next_step(self) -> int:
        """The step of the backward not counted yet: a call's since, else the one after the latest."""
        return self._pending if self._pending is not None else self._first_step if self._last is None else self._last + 1

    def _note(self, step: int) -> None:
        """``step`` was filed: the next iteration no call names goes after the latest."""
        self._last = step if self._last is None else max(step, self._last)

    def _warn_uncounted(self) -> None:
        warnings.warn(
            f"{self._uncounted + 1} backward passes ran since the last take_graphs() call and no torch.optim optimizer "
            "stepped the model's weights, so training health checked only the last of them: call take_graphs() after "
            "every backward (it returns None when no capture is due) to have every iteration checked",
            stacklevel=user_stacklevel(),
        )

    def _follows(self, optimizer: torch.optim.Optimizer) -> bool:
        if self._followed is not None and self._followed() is optimizer:
            return True
        if self._followed is None and self._candidate is not None and self._candidate() is optimizer:
            # It stepped model weights again and no optimizer stepped the marker meanwhile: it trains the model
            # (a fine-tuning optimizer over the head only, the trunk left out but not frozen). Followed from here.
            self._follow_candidate()
            return self._followed is not None
        if self._stand_in is not False and (first := self._marker.first_trained()) is not None and id(first) in held_ids(optimizer):
            # One that steps the first layer after all (a GAN's generator, once the discriminator's backward
            # through it made the discriminator's optimizer the candidate): followed, counting on from before.
            self._followed, self._last, self._stand_in = weakref.ref(optimizer), self._stand_in, False
            self._marker.put_on(first)
            return True
        if self._ignored.fresh(optimizer):
            return False
        held = held_ids(optimizer)
        if id(self._marker.weight) in held:  # the first to step the marker, or one built anew for it mid-run
            self._followed = weakref.ref(optimizer)
            return True
        stepping = steps_any(held, self._marker.weights)
        self._ignored.put(optimizer, stepping)  # looked at again once add_param_group changed it
        if self._candidate is None and stepping:
            self._candidate = weakref.ref(optimizer)
        return False

    def _check_before(self, optimizer: torch.optim.Optimizer) -> None:
        """An optimizer of other model weights (a head's) steps before the followed one counts the backward:
        the weights and gradients are checked for non-finite values now, as the forward and backward left
        them, before that step spreads a NaN to the layers before (only checked: the followed step counts)."""
        if self._check is not None and self._followed is not None and self._ignored.last(optimizer):
            self._check(self._next_step())

    def _consider(self, optimizer: torch.optim.Optimizer) -> None:
        """An optimizer stepped after a call counted the backward: the one to follow if it steps the model."""
        if steps_any(held_ids(optimizer), self._marker.weights):
            self._candidate = weakref.ref(optimizer)
