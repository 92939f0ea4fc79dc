"""Forward hooks that keep the outputs (and output gradients) of chosen module calls."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from xray_tb.graph import Tap


@dataclasses.dataclass
class TapValue:
    """What the latest grad-enabled forward gave at a tap: the output, and its gradient after backward."""

    output: torch.Tensor
    grad: Optional[torch.Tensor] = None


def first_tensor(value: Any) -> Optional[torch.Tensor]:
    """The first tensor in a module output (a tensor, or tuples, lists and dicts of them)."""
    if isinstance(value, torch.Tensor):
        return value
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (tuple, list)) else ()
    for item in items:
        found = first_tensor(item)
        if found is not None:
            return found
    return None


class TapRecorder:
    """Keeps references to the outputs of ``taps`` from the latest forward run with grad enabled.

    Forwards under ``torch.no_grad()`` (validation) do not replace what was kept. Outputs listed in
    ``copy`` are copied, because a later op overwrites them in place; gradients are caught with a
    tensor hook, which sees the gradient of the output as it was before any in-place op.
    """

    def __init__(self, model: nn.Module, taps: set[Tap], copy: set[Tap], grads: set[Tap]):
        self.latest: dict[Tap, TapValue] = {}
        self._copy, self._grads = copy, grads
        self._calls: dict[str, int] = {}
        self._handles: list[RemovableHandle] = []
        self._tensor_handles: list[RemovableHandle] = []
        modules = dict(model.named_modules())
        self._handles.append(model.register_forward_pre_hook(self._start_forward))
        for name in sorted({tap.module for tap in taps}):
            wanted = {tap.call for tap in taps if tap.module == name}
            self._handles.append(modules[name].register_forward_hook(self._make_hook(name, wanted)))

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
                self._keep(Tap(name, call), first_tensor(output))

        return hook

    def _keep(self, tap: Tap, output: Optional[torch.Tensor]) -> None:
        if output is None:
            return
        value = TapValue(output.detach().clone() if tap in self._copy else output.detach())
        self.latest[tap] = value
        if tap in self._grads and output.requires_grad:
            self._tensor_handles.append(output.register_hook(lambda grad: setattr(value, "grad", grad.detach())))

    def clear(self) -> None:
        """Forget the kept tensors (and their pending gradient hooks)."""
        self._drop_tensor_hooks()
        self.latest.clear()

    def remove(self) -> None:
        """Remove every hook; idempotent."""
        self.clear()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
