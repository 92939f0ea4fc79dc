"""Checkpoints loaded into the model: ``load_state_dict(..., assign=True)`` replaces its parameter objects,
which training health then looks for again (the replaced ones may keep a stale gradient nobody resets)."""

from __future__ import annotations

import weakref

from torch import nn

from xray_tb.capture.hooks import Hook


class LoadWatch:
    """A post-hook on the model's ``load_state_dict`` that notes each load, until :meth:`take` reads it."""

    def __init__(self, model: nn.Module):
        self.loaded = False
        this = weakref.ref(self)  # the hook must not keep training health alive
        self._handle = model.register_load_state_dict_post_hook(Hook(lambda module, keys: _note(this)))

    def take(self) -> bool:
        """Whether the model loaded a state dict since the last call."""
        loaded, self.loaded = self.loaded, False
        return loaded

    def remove(self) -> None:
        self._handle.remove()


def _note(watch: "weakref.ref[LoadWatch]") -> None:
    found = watch()
    if found is not None:
        found.loaded = True
