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
        self._add(modules, hook, _PRE_TABLES, "register_forward_pre_hook", self._pre, with_kwargs, prepend)

    def post(self, modules: Iterable[nn.Module], hook: Callable, *, with_kwargs: bool = False) -> None:
        """``module.register_forward_hook(hook, with_kwargs=...)`` on each of ``modules``."""
        self._add(modules, hook, _POST_TABLES, "register_forward_hook", self._post, with_kwargs, False)

    def _add(self, modules: Iterable[nn.Module], hook: Callable, tables: tuple[str, ...], method: str,
             hooked: list[nn.Module], with_kwargs: bool, prepend: bool) -> None:
        """Write ``hook`` into each module's registry ``tables[0]`` (flagged in ``tables[1]`` when it takes
        keyword arguments), as torch's ``method`` does; torch's own call for a module that registers its way."""
        key, torchs = self._key, getattr(nn.Module, method)
        registry_name, kwargs_name = tables[0], tables[1]
        for module in modules:
            own = vars(module)
            registry = own.get(registry_name)
            if getattr(type(module), method) is not torchs or type(registry) is not OrderedDict:
                extra = {"prepend": True} if prepend else {}
                self._handles.append(getattr(module, method)(hook, with_kwargs=with_kwargs, **extra))
                continue
            registry[key] = hook
            if with_kwargs:
                own[kwargs_name][key] = True
            if prepend:
                registry.move_to_end(key, last=False)
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

