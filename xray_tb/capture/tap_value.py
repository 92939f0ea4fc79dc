"""What a tap keeps from one forward: its output tensors by path, and their gradients."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import torch


@dataclasses.dataclass
class TapValue:
    """What the latest grad-enabled forward gave at a tap: its output tensors by path (``""`` for a
    plain tensor, ``"[0]"``, ``"[1][0]"``, ``"['logits']"`` inside tuples and dicts), and their
    gradients after backward. ``versions`` holds the version counter of each output that was kept
    without a copy, as the layer returned it: a later in-place write (also through a view) changes
    it, and the output no longer holds what the layer returned."""

    outputs: dict[str, torch.Tensor]
    grads: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    versions: dict[str, int] = dataclasses.field(default_factory=dict)
    #: Outputs whose gradient was asked for; a path missing from ``grads`` after backward never got one.
    expected_grads: tuple[str, ...] = ()

    def overwritten(self, path: str) -> bool:
        """Whether the output at ``path`` was written in place after the layer returned it."""
        version = self.versions.get(path)
        return version is not None and version_of(self.outputs[path]) != version


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


def version_of(tensor: torch.Tensor) -> Optional[int]:
    """The tensor's version counter (shared with its views), None where it has none (inference tensors)."""
    try:
        return tensor._version
    except RuntimeError:
        return None
