"""Forward hooks that keep the outputs (and output gradients) of chosen module calls."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from xray_tb.graph import Tap


@dataclasses.dataclass
class TapValue:
    """What the latest grad-enabled forward gave at a tap: its output tensors by path (``""`` for a
    plain tensor, ``"[0]"``, ``"[1][0]"``, ``"['logits']"`` inside tuples and dicts), and their
    gradients after backward."""

    outputs: dict[str, torch.Tensor]
    grads: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)


def tensors_with_paths(value: Any, path: str = "") -> list[tuple[str, torch.Tensor]]:
    """Every tensor in a module output (a tensor, or tuples, lists and dicts of them) with its path."""
    if isinstance(value, torch.Tensor):
        return [(path, value)]
    if isinstance(value, dict):
        items = ((f"[{key!r}]", item) for key, item in value.items())
    elif isinstance(value, (tuple, list)):
        items = ((f"[{index}]", item) for index, item in enumerate(value))
    else:
        return []
    return [found for suffix, item in items for found in tensors_with_paths(item, path + suffix)]


class _InertHook:
    """What an Xray hook becomes when the model is pickled, deep-copied or ``torch.save``d: nothing."""

    def __call__(self, *args) -> None:
        return None


class _Hook:
    """A hook function that pickles and copies as :class:`_InertHook`, so the model stays saveable."""

    def __init__(self, function: Callable):
        self._function = function

    def __call__(self, *args):
        return self._function(*args)

    def __reduce__(self):
        return (_InertHook, ())


def _grad_keeper(grads: dict[str, torch.Tensor], path: str) -> Callable:
    def keep(grad: torch.Tensor) -> None:
        grads[path] = grad.detach()

    return keep


class TapRecorder:
    """Keeps references to the outputs of ``taps`` from the latest forward run with grad enabled.

    Hooks exist only while armed (:meth:`arm`, :meth:`disarm`). Forwards under ``torch.no_grad()``
    (validation) do not replace what was kept. Outputs in ``copy`` are copied, because a later op
    overwrites them in place; gradients of outputs in ``grads`` are caught with a tensor hook, which
    sees the gradient of the output as it was before any in-place op.
    """

    def __init__(self, model: nn.Module, modules: dict[str, nn.Module], taps: set[Tap], copy: set[Tap], grads: set[Tap]):
        self.latest: dict[Tap, TapValue] = {}
        self._model = model
        targets = {name: (modules[name], {tap.call for tap in taps if tap.module == name}) for name in sorted({t.module for t in taps})}
        # Built once: arming for a due step only registers them.
        self._hooks = [(module, _Hook(self._make_hook(name, wanted))) for name, (module, wanted) in targets.items()]
        self._start_hook = _Hook(self._start_forward)
        self._copy, self._grads = copy, grads
        self._calls: dict[str, int] = {}
        self._handles: list[RemovableHandle] = []
        self._tensor_handles: list[RemovableHandle] = []

    @property
    def armed(self) -> bool:
        return bool(self._handles)

    def arm(self) -> None:
        """Register the hooks (no-op when armed or when there is nothing to tap)."""
        if self.armed or not self._hooks:
            return
        self._handles.append(self._model.register_forward_pre_hook(self._start_hook))
        for module, hook in self._hooks:
            self._handles.append(module.register_forward_hook(hook))

    def disarm(self) -> None:
        """Remove the module hooks; what was kept stays until :meth:`clear`."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _start_forward(self, module, args) -> None:
        self._calls.clear()
        if torch.is_grad_enabled():
            self._drop_tensor_hooks()

    def _drop_tensor_hooks(self) -> None:
        for handle in self._tensor_handles:
            handle.remove()
        self._tensor_handles.clear()

    def _make_hook(self, name: str, wanted: set[int]):
        def hook(module, args, output):
            call = self._calls.get(name, 0)
            self._calls[name] = call + 1
            if call in wanted and torch.is_grad_enabled():
                self._keep(taps[call], tensors_with_paths(output))

        taps = {call: Tap(name, call) for call in wanted}
        return hook

    def _keep(self, tap: Tap, outputs: list[tuple[str, torch.Tensor]]) -> None:
        if not outputs:
            return
        copy = tap in self._copy
        value = TapValue({path: tensor.detach().clone() if copy else tensor.detach() for path, tensor in outputs})
        self.latest[tap] = value
        if tap in self._grads:
            for path, tensor in outputs:
                if tensor.requires_grad:
                    self._tensor_handles.append(tensor.register_hook(_grad_keeper(value.grads, path)))

    def clear(self) -> None:
        """Forget the kept tensors (and their pending gradient hooks)."""
        self._drop_tensor_hooks()
        self.latest.clear()

    def remove(self) -> None:
        """Remove every hook and forget everything; idempotent."""
        self.disarm()
        self.clear()
