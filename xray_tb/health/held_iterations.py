"""The monitor's iterations that wait for their optimizer step, and its rows filed later.

A ``take_graphs()`` call's iteration is held until its optimizer step ran or was skipped
(:mod:`xray_tb.health.skipped_steps`, :mod:`xray_tb.health.held_finds`): a skipped step with a
non-finite gradient drops its row, as does a ``GradScaler``'s overflow. Iterations counted before the
first ``take_graphs(step)`` named a step are filed again under it (:meth:`HeldIterations.renumber`).
The base of :class:`~xray_tb.health.monitor.HealthMonitor`, whose buffers and sentinel it reads.
"""

from __future__ import annotations


class HeldIterations:
    """The monitor's holding of iterations for their optimizer step (module doc); expects the monitor's
    ``_held``, ``_sentinel``, ``_iteration_rows``, ``_activation_rows``, ``_writer``, ``_flushed_at``,
    ``_shards``, ``_vectors``, ``_measured_at`` and ``_last_step``."""

    def hold(self, step: int) -> None:
        """Iteration ``step``'s row and find wait for its optimizer step."""
        self._held = step
        self._sentinel.hold(step)

    def release(self, stepped: bool = True, reinstate: bool = False) -> None:
        """The held iteration's optimizer step ran (see :meth:`~xray_tb.health.held_finds.HeldFinds.release`): it stands."""
        self._held = None
        self._sentinel.release(stepped, reinstate)

    def withdraw(self, step: int) -> bool:
        """Its optimizer step was skipped: a row whose find was a non-finite gradient is dropped; whether it was."""
        self._held = None
        if withdrawn := self._sentinel.withdraw():  # only an iteration with a non-finite gradient
            self._iteration_rows.drop(step)
        return withdrawn

    def _drop_row(self, step: int) -> None:
        """A GradScaler's overflow at ``step``: no row, a gap in the series."""
        self._iteration_rows.drop(step)

    def renumber(self, delta: int) -> bool:
        """File every iteration measured so far ``delta`` steps later, if none was written yet (the
        steps of iterations counted before the first ``take_graphs(step)`` named one); whether it did."""
        if self._flushed_at is not None or self._shards is not None:
            return False
        self._iteration_rows.shift(delta)
        self._activation_rows.shift(delta)
        self._sentinel.shift(delta)
        self._writer.shift_forward_finds(delta)
        self._held = None if self._held is None else self._held + delta
        self._measured_at = None if self._measured_at is None else self._measured_at + delta
        self._vectors = [(step + delta, wall, vectors) for step, wall, vectors in self._vectors]
        self._last_step += delta
        return True
