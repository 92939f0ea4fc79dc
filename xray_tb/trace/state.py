"""Leaving a model exactly as it was: what Xray's own forward passes (trace, probe) must undo."""

from __future__ import annotations

import contextlib
import functools
import gc
import operator
import warnings
from typing import Any, Iterable, Iterator, Optional

import torch
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import is_lazy
from torch.utils.hooks import RemovableHandle

from xray_tb.user_frame import user_stacklevel

#: The registries every ``nn.Module`` keeps in its ``__dict__`` (``_parameters``, ``_buffers``,
#: ``_modules``, ``_non_persistent_buffers_set`` and the hook dicts), read from the installed torch.
_REGISTRIES = tuple(name for name, value in vars(nn.Module()).items() if isinstance(value, (dict, set)))
_HOOK_REGISTRIES = frozenset(name for name in _REGISTRIES if "hook" in name)
_preserving = 0  # how many :func:`preserved` forwards are running (they nest)


def leaving_no_trace() -> bool:
    """Whether a forward of Xray's own that leaves no trace (:func:`preserved`: the trace, a probe, a
    replay) is running: what training health must not take for a training forward."""
    return _preserving > 0


def without_cyclic_gc(build):
    """Run ``build`` with Python's cyclic garbage collector paused (reference counting goes on), and
    restore it as it was. Tracing and hooking a model allocate many small objects that live on, which
    keeps triggering full collections over the whole heap: paused, ``Xray()`` on a 5k-node model is
    about a third faster. The pause is process-wide and lasts the construction only."""

    @functools.wraps(build)
    def call(*args, **kwargs):
        enabled = gc.isenabled()
        gc.disable()
        try:
            return build(*args, **kwargs)
        finally:
            if enabled:
                gc.enable()

    return call


@contextlib.contextmanager
def preserved(model: nn.Module, modules: Optional[Iterable[nn.Module]] = None) -> Iterator[None]:
    """Run a forward of ``model`` that leaves no trace on it: on exit (also after an error), restore

    - every module's attributes, shallowly: each entry of ``vars(module)`` points again to the object
      it pointed to before (a counter, a cache dict replaced, the ``training`` flag, a hook's saved
      output), and an attribute the forward created is deleted, so the model keeps no reference to
      the forward's tensors and their autograd graph;
    - every module's registries in place (the dict and set objects keep their identity): parameters,
      buffers and submodules that the forward registered, replaced or removed are put back as they
      were, and hooks it registered on a module are removed;
    - every buffer's value (BatchNorm running statistics, ``num_batches_tracked``);
    - the CPU and CUDA random states.

    Lazy modules (``nn.LazyLinear``, ...) that the forward materialises keep their materialised
    parameters and new class, as their first real forward would leave them; what the forward did
    after the materialisation (running statistics of a ``LazyBatchNorm``) is undone.

    ``modules`` is ``model.modules()`` when the caller has walked the model already.

    Cannot be restored: state outside the modules (globals, closures, other objects); what the
    forward changed inside an object it did not replace (an item appended to a list attribute, a
    key set in a dict attribute, an attribute set on a parameter or on any other object); and
    parameter values written in place through a tensor op: parameters are not copied, which would
    double the model's memory, so such a write is reported with a ``RuntimeWarning``.
    """
    snapshots = [_ModuleSnapshot(module) for module in (model.modules() if modules is None else modules)]
    lazy_hooks = [snapshot.watch_materialisation() for snapshot in snapshots if snapshot.lazy]
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    global _preserving
    _preserving += 1
    try:
        yield
    finally:
        _preserving -= 1
        for handle in lazy_hooks:
            handle.remove()
        for snapshot in snapshots:
            snapshot.restore()
        with torch.no_grad():
            for snapshot in snapshots:
                snapshot.restore_buffer_values()
        for snapshot in snapshots:
            snapshot.warn_on_parameter_writes()
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)


class _ModuleSnapshot:
    """One module's attributes, registries, buffer values and parameter versions, taken shallowly."""

    __slots__ = ("module", "lazy", "attributes", "registries", "buffers", "versions")

    def __init__(self, module: nn.Module):
        self.module = module
        self.lazy = isinstance(module, LazyModuleMixin) and _uninitialized(module)
        self._take()

    def _take(self, hooks: Optional[dict[str, Any]] = None) -> None:
        """Record the module's state now; ``hooks`` replaces the recorded hook registries."""
        module = self.module
        attributes = self.attributes = vars(module).copy()
        # Only the non-empty ones (most are empty): an absent entry means empty. A ScriptModule's
        # registries are wrappers of its C++ state, not dicts: left alone.
        self.registries = {name: _save(r) for name in _REGISTRIES if (r := attributes.get(name)) and isinstance(r, (dict, set))}
        if hooks is not None:
            self.registries.update(hooks)
        # Buffer values: always copied back, kernels such as batch_norm update them without a version bump.
        buffers, parameters = module._buffers, module._parameters
        self.buffers = [(b, b.detach().clone()) for b in buffers.values() if b is not None and not is_lazy(b)] if buffers else []
        self.versions = [(n, p, p._version) for n, p in parameters.items() if p is not None and not is_lazy(p)] if parameters else []

    def watch_materialisation(self) -> RemovableHandle:
        """A forward pre-hook, run after the lazy module's own, that retakes the snapshot once the
        module is materialised, so the materialisation stays and only later changes are undone."""

        def retake(module: nn.Module, args: tuple) -> None:
            if self.lazy and not _uninitialized(module):  # its class may be nn.Linear by now
                self.lazy = False
                # The hooks it had, less those the materialisation removed (neither ours nor the tracer's).
                hooks = {}
                for name in _HOOK_REGISTRIES:
                    keys, values = self.registries.get(name, _EMPTY)
                    kept = [(key, value) for key, value in zip(keys, values) if key in vars(module)[name]]
                    hooks[name] = (tuple(key for key, _ in kept), tuple(value for _, value in kept))
                self._take(hooks)

        return self.module.register_forward_pre_hook(retake)

    def restore(self) -> None:
        """Put the registries' contents and the attributes' references back."""
        attributes = self.attributes
        saved = self.registries
        for name in _REGISTRIES:  # (the tables Xray's hooks grew are shrunk by their remover: module_hooks)
            registry = attributes.get(name)
            if (registry or name in saved) and isinstance(registry, (dict, set)):
                _put_back(registry, saved.get(name, _EMPTY))
        current = vars(self.module)
        if current.keys() == attributes.keys() and all(map(operator.is_, current.values(), attributes.values())):
            return  # the common case: nothing set, same order
        for name in [name for name in current if name not in attributes]:
            del current[name]
        for name, value in attributes.items():
            if current.get(name, _MISSING) is not value:
                current[name] = value

    def restore_buffer_values(self) -> None:
        for buffer, copy in self.buffers:
            buffer.copy_(copy)

    def warn_on_parameter_writes(self) -> None:
        for name, param, version in self.versions:
            if param._version != version:
                owner = type(self.module).__name__
                warnings.warn(
                    f"the forward pass wrote into parameter {name!r} of {owner} in place; Xray cannot undo that",
                    RuntimeWarning,
                    stacklevel=user_stacklevel(),
                )


_MISSING = object()
_EMPTY = ((), ())


def _uninitialized(module: nn.Module) -> bool:
    """Whether ``module`` still has a lazy (uninitialized) parameter or buffer of its own."""
    return any(is_lazy(t) for t in (*module._parameters.values(), *module._buffers.values()) if t is not None)


def _save(registry: Any) -> Any:
    """A registry's contents: a frozenset for a set, (keys, values) tuples for a dict."""
    return frozenset(registry) if isinstance(registry, set) else (tuple(registry), tuple(registry.values()))


def _put_back(registry: Any, saved: Any) -> None:
    """Give ``registry`` (the same object) its saved contents again, if they changed."""
    if isinstance(registry, set):
        saved = frozenset() if saved is _EMPTY else saved
        if registry != saved:
            registry.clear()
            registry.update(saved)
        return
    keys, values = saved
    if tuple(registry) == keys and all(map(operator.is_, registry.values(), values)):
        return
    registry.clear()
    registry.update(zip(keys, values))
