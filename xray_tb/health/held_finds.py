"""What the non-finite sentinel found at an iteration whose optimizer step is still to come.

A ``take_graphs()`` call's iteration may still see its optimizer step skipped (a ``GradScaler``'s
overflow, a guard against loss spikes: :mod:`xray_tb.health.skipped_steps`). What its check found is
held until the step ran (:meth:`HeldFinds.release`) or was skipped (:meth:`HeldFinds.withdraw`): a
non-finite gradient whose step was skipped is forgotten, a non-finite weight or bias stands, since the
forward used it. The base of :class:`~xray_tb.health.sentinel.NonFiniteSentinel`, whose state it reads.
"""

from __future__ import annotations

from typing import Optional

import torch


class HeldFinds:
    """The sentinel's holding of a find for its optimizer step (module doc); expects the sentinel's state:
    ``_pending``, ``_held``, ``_skipped_first``, ``_found``, ``done``, ``found_at``, ``layout``,
    ``_waits`` and ``_merge``."""

    @property
    def held_find(self) -> Optional[int]:
        """The step of a find that waits for its iteration's optimizer step (:meth:`release`, :meth:`withdraw`), or None."""
        return None if self._pending is None else int(self._pending[0])

    def held_forward_find(self) -> Optional[tuple[int, list[bool]]]:
        """A CPU find that waits for its optimizer step, with its weights' and biases' flags alone (those stand,
        whatever the step does: the forward used them), or None: what the ranks may agree on before the step."""
        pending = self._pending
        if pending is None or len(pending) != 2 or self.done:
            return None
        kept = self.layout.forward_only(pending[1])
        return (pending[0], kept) if any(kept) else None

    def hold(self, step: int) -> None:
        """What iteration ``step`` finds waits for :meth:`release` or :meth:`withdraw` (its optimizer step)."""
        self._held = int(step)

    def release(self, stepped: bool = True, reinstate: bool = False) -> None:
        """The held iteration stands: what it found counts. ``stepped``: an optimizer step ran (a row of
        skipped steps ended); ``reinstate``: the first of the skipped steps before it counts too."""
        pending, self._pending, self._held = self._pending, None, None
        first, self._skipped_first = self._skipped_first, None if stepped or reinstate else self._skipped_first
        for found in (first if reinstate else None, pending):
            if found is None or self.done:
                continue
            if found is pending and len(found) == 2 and self._waits(found):
                continue  # stepped or accumulated on: a scaler may still skip an optimizer's step at its update
            if len(found) == 2:
                self._found, self.done = found, True
            else:
                self._merge(*found)

    def withdraw(self) -> bool:
        """The held iteration's optimizer step was skipped: if it found a non-finite gradient (an overflow a
        scaler skipped), forget that and say so (True); a non-finite weight or bias stays found, the forward
        used it. An iteration without one stands (False): skipping a finite step is the loop's own choice
        (a guard against loss spikes), and the spike is worth seeing. One sync on a device."""
        pending, self._pending, self._held = self._pending, None, None
        if pending is None or self.done:
            return False
        if len(pending) == 2:
            step, flags = pending
            if not self.layout.has_gradient(flags):
                self._found, self.done = pending, True  # a weight or bias only: it stands as it is
                return False
            kept = self.layout.forward_only(flags)
            if any(kept):
                self._found, self.done = (step, kept), True
            self.found_at = self.found_at if any(kept) else None
        else:
            step, flags, positions, count, inputs = pending
            forward = self.layout.forward
            mask = torch.tensor([forward[i] for i in positions], device=flags.device)
            if not bool((flags & ~mask).any()):  # no non-finite gradient: the iteration stands
                self._merge(*pending)
                return False
            self._merge(step, flags & mask, positions, count, inputs)
        if self._skipped_first is None:
            self._skipped_first = pending  # reinstated if the skipped steps go on too long for a scaler
        return True
