"""One forward hook on many modules, added and removed in bulk.

torch's ``register_forward_hook`` and ``register_forward_pre_hook`` make a ``RemovableHandle`` per call,
with a weak reference to each hook registry it touches: on a model of thousands of modules the trace
registered about 11,000 hooks and spent about 30 ms (rg5k) making and removing them, and arming the
captures' hooks paid a share of that again at every capture. :class:`ModuleHooks` writes the hook
into each module's registries as torch's call does (the same registries, flags and order), under one
key for all of them: an id taken from torch's own handle counter, so it is unique in every registry
as torch's ids are, and removes every entry with it. A module whose class registers hooks its own way
(it overrides the registration method, or keeps its registries in something other than an
``OrderedDict``) gets torch's call and handle instead.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Iterable

from torch import nn
from torch.utils.hooks import RemovableHandle

#: The registries a forward pre-hook (then a forward hook) adds entries to.
_PRE_TABLES = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs")
_POST_TABLES = ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called")


class ModuleHooks:
    """Forward hooks and pre-hooks of one owner on many modules, removed together by :meth:`remove`."""

    def __init__(self):
        self._key = RemovableHandle.next_id  # reserved as torch's own handles reserve theirs
        RemovableHandle.next_id += 1
        self._pre: list[nn.Module] = []  # modules whose registries hold a pre-hook written here
        self._post: list[nn.Module] = []  # ... a forward hook
        self._handles: list[RemovableHandle] = []  # from torch's own call

    def __bool__(self) -> bool:
        """Whether any hook is in place."""
        return bool(self._pre or self._post or self._handles)

    def pre(self, modules: Iterable[nn.Module], hook: Callable, *, with_kwargs: bool = False, prepend: bool = False) -> None:
        """``module.register_forward_pre_hook(hook, with_kwargs=..., prepend=...)`` on each of ``modules``."""
        key, hooked = self._key, self._pre
        for module in modules:
            tables = vars(module)
            registry = tables.get("_forward_pre_hooks")
            if type(module).register_forward_pre_hook is not _PRE or type(registry) is not OrderedDict:
                self._handles.append(module.register_forward_pre_hook(hook, with_kwargs=with_kwargs, prepend=prepend))
                continue
            registry[key] = hook
            if with_kwargs:
                tables["_forward_pre_hooks_with_kwargs"][key] = True
            if prepend:
                registry.move_to_end(key, last=False)
            hooked.append(module)

    def post(self, modules: Iterable[nn.Module], hook: Callable, *, with_kwargs: bool = False) -> None:
        """``module.register_forward_hook(hook, with_kwargs=...)`` on each of ``modules``."""
        key, hooked = self._key, self._post
        for module in modules:
            tables = vars(module)
            registry = tables.get("_forward_hooks")
            if type(module).register_forward_hook is not _POST or type(registry) is not OrderedDict:
                self._handles.append(module.register_forward_hook(hook, with_kwargs=with_kwargs))
                continue
            registry[key] = hook
            if with_kwargs:
                tables["_forward_hooks_with_kwargs"][key] = True
            hooked.append(module)

    def remove(self) -> None:
        """Remove every hook added (idempotent)."""
        key = self._key
        for modules, names in ((self._pre, _PRE_TABLES), (self._post, _POST_TABLES)):
            for module in modules:
                tables = vars(module)
                for name in names:
                    registry = tables.get(name)
                    if registry is not None:
                        registry.pop(key, None)
                        if not registry:
                            registry.clear()  # gives back the table the entry grew (about 220 bytes a module)
            modules.clear()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


_PRE, _POST = nn.Module.register_forward_pre_hook, nn.Module.register_forward_hook
