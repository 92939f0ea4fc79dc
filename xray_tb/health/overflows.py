"""Non-finite gradients that a ``GradScaler`` may be about to call an overflow: they wait for its next update.

A ``GradScaler`` skips the step of each optimizer whose scaled gradients overflowed, then its ``update()``
backs off the scale. Overflows are routine (the scale grows until one happens) and are the scaler's to
handle, not a non-finite value of training. One scaler over two optimizers (a trunk's and a head's, with
their own learning rates) may skip only one of them: the other steps, so the step that counts the iteration
runs, and the non-finite gradient cannot be told from a NaN of training by that step alone.

So while an enabled ``GradScaler`` is in use, a check that finds a non-finite gradient does not report it at
once. The find waits, with each scaler's scale and growth count noted, until a later check (or a write of
the statistics) sees that an update ran:

* the scale went down: the scaler backed off, the gradient was an overflow. The find is withdrawn (a
  non-finite weight or bias it also found stays found: the forward used it), and so is its iteration's row
  of statistics, which leaves a gap in the series, as a skipped step does;
* the scale or the growth count moved otherwise: an update without a back-off, and the find stands;
* neither, by the end of the run or :data:`PATIENCE` checks later (a scaler that scales another model's
  loss, or none at all): it stands, filed at its own step.

After :data:`LIMIT` overflows in a row with no clean iteration between them, the first of them stands: the
scale has shrunk 2**24-fold by then, so the gradients are non-finite in themselves (a loss that stays NaN).

The scalers are found by a scan of Python's objects, a few times a run at most. Reading a scale is a host
sync on a GPU; the scaler's own ``step()`` syncs every iteration already (it reads whether it found an
overflow), so under a scaler the sentinel's flags are read at each check too.
"""

from __future__ import annotations

import gc
import weakref
from typing import Optional

from torch.amp import GradScaler

#: Overflows (or skipped steps, :mod:`~xray_tb.health.skipped_steps`) in a row after which the first of them
#: stands (the scale has shrunk 2**24-fold by then).
LIMIT = 24
#: Checks a find waits for a scaler's update at most (accumulation runs several backwards per update).
PATIENCE = 64


class Scalers:
    """The enabled GradScalers (``torch.amp.GradScaler`` and subclasses: FSDP's), found by a scan of the garbage
    collector's objects while none is known, ``scans`` times at most; held weakly."""

    def __init__(self, scans: int = 3):
        self._found: "weakref.WeakSet[GradScaler]" = weakref.WeakSet()
        self._scans = scans

    def enabled(self) -> list[GradScaler]:
        if not any(True for _ in self._found) and self._scans:
            self._scans -= 1
            self._found.update(o for o in gc.get_objects() if issubclass(type(o), GradScaler) and o.is_enabled())
        return [scaler for scaler in self._found if scaler.is_enabled()]


class OverflowWatch:
    """The find waiting for a ``GradScaler``'s verdict, and the row of overflows it is part of."""

    def __init__(self):
        self._scalers = Scalers()
        self._waiting: Optional[tuple[tuple, list]] = None  # (the find, each scaler's (ref, scale, growth count))
        self._patience = 0  # checks the waiting find may still wait
        self._in_a_row = 0  # overflows since the last clean iteration
        self._first: Optional[tuple] = None  # the first find withdrawn in this row

    def scaler_in_use(self) -> bool:
        """Whether an enabled ``torch.amp.GradScaler`` (or a subclass: FSDP's) exists."""
        return bool(self._scalers.enabled())

    @property
    def waiting_step(self) -> Optional[int]:
        """The step of the find that waits, or None."""
        return None if self._waiting is None else self._waiting[0][0]

    def wait(self, find: tuple) -> None:
        """``find`` (``(step, flags)``) waits for the scalers' next update."""
        self._waiting = (find, [(weakref.ref(scaler), *_state(scaler)) for scaler in self._scalers.enabled()])
        self._patience = PATIENCE

    def stands(self) -> Optional[tuple]:
        """The waiting find, decided as no overflow (a non-finite weight came after it: an optimizer applied the
        gradient, which a scaler that skips the step would not have done); None when none waits."""
        find, self._waiting = (None if self._waiting is None else self._waiting[0]), None
        if find is not None:
            self.clean()
        return find

    def clean(self) -> None:
        """An iteration found nothing: a row of overflows is over."""
        self._in_a_row, self._first = 0, None

    def shift(self, delta: int) -> None:
        """File the waiting find ``delta`` steps later."""
        if self._waiting is not None:
            (step, flags), marks = self._waiting
            self._waiting = ((step + delta, flags), marks)

    def settle(self, final: bool = False, at_check: bool = False) -> Optional[tuple[tuple, bool]]:
        """``(find, overflowed)`` once the verdict on the waiting find is known, else None; ``final``: the run
        ends, a find still waiting stands; ``at_check``: a check is about to run (one of :data:`PATIENCE`).
        After :data:`LIMIT` overflows in a row, the first of them is returned as not overflowed (it stands)."""
        if self._waiting is None:
            return None
        find, marks = self._waiting
        verdict: Optional[bool] = None
        for ref, scale, growth in marks:
            scaler = ref()
            if scaler is None:
                continue
            now_scale, now_growth = _state(scaler)
            if now_scale < scale:
                verdict = True
                break
            if now_scale != scale or now_growth != growth:
                verdict = False
        if verdict is None and not final:
            self._patience -= at_check
            if self._patience > 0:
                return None
        self._waiting = None
        if not verdict:
            self.clean()
            return find, False
        self._in_a_row += 1
        if self._first is None:
            self._first = find
        if self._in_a_row >= LIMIT:
            first = self._first
            self.clean()
            return first, False
        return find, True


def _state(scaler: GradScaler) -> tuple[float, Optional[int]]:
    """A scaler's scale and growth count (one sync each on a GPU)."""
    growth = getattr(scaler, "_growth_tracker", None)
    return scaler.get_scale(), None if growth is None else int(growth)
