"""Each bench loop's own global optimizer hooks, and nobody else's, while that loop trains.

Training health registers global optimizer step hooks (``torch.optim.optimizer.register_optimizer_step_pre_hook``):
they run at every ``optimizer.step()`` in the process, whichever loop it belongs to, and when a loop
trains without calling ``take_graphs()`` they run its health iteration from the step. Benches that keep
several variants in one process would otherwise time every loop with every variant's hooks, and a
variant "switched off" with its health still running from its step. :class:`OwnHooks` keeps what a loop
registered aside and puts it back only for that loop's instrumented windows. It reads torch's two
global tables (private names of torch 2.x), so it is bench code only.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from torch.optim import optimizer as _optimizer

_TABLES = (_optimizer._global_optimizer_pre_hooks, _optimizer._global_optimizer_post_hooks)


class OwnHooks:
    """The global optimizer hooks one loop registered (collected from :meth:`owning` blocks)."""

    def __init__(self):
        self._kept: tuple[dict, ...] = tuple({} for _ in _TABLES)

    @contextlib.contextmanager
    def owning(self, active: bool = True) -> Iterator[None]:
        """Run the block with only this loop's hooks installed (none when not ``active``); whatever the
        block adds or removes is this loop's from then on. Every other hook is set aside meanwhile."""
        others = tuple(dict(table) for table in _TABLES)
        for table, kept in zip(_TABLES, self._kept):
            table.clear()
            if active:
                table.update(kept)
        try:
            yield
        finally:
            for table, kept, other in zip(_TABLES, self._kept, others):
                if active:  # the table held the loop's hooks: it is what the loop has now
                    kept.clear()
                kept.update(table)  # switched off: what the window added is the loop's too
                table.clear()
                table.update({key: hook for key, hook in other.items() if key not in kept})
