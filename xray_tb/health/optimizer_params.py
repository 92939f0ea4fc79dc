"""Which parameters a ``torch.optim`` optimizer steps, and what training health works out once per optimizer
from them (again when ``add_param_group`` changes them)."""

from __future__ import annotations

import weakref
from typing import Callable, Generic, Optional, TypeVar

import torch

T = TypeVar("T")


def held_ids(optimizer: torch.optim.Optimizer) -> set[int]:
    """The ids of the parameters ``optimizer`` steps."""
    return {id(p) for group in optimizer.param_groups for p in group["params"]}


def stepped_positions(optimizer: torch.optim.Optimizer, tensors: list[torch.Tensor]) -> list[int]:
    """The positions in ``tensors`` of the parameters ``optimizer`` steps, in order."""
    held = held_ids(optimizer)
    return [i for i, tensor in enumerate(tensors) if id(tensor) in held]


def steps_any(held: set[int], weights: list[torch.Tensor]) -> bool:
    """Whether any of ``weights`` is among ``held`` (:func:`held_ids`); asked when an optimizer is first seen,
    so the weights' ids are not kept (a set of them was 50 KB on 1,000 layers, held for the run)."""
    return any(id(weight) in held for weight in weights)


class PerOptimizer(Generic[T]):
    """A value per optimizer (held weakly), stamped with its parameter count and a ``key``: it is worked
    out again once ``add_param_group`` changed the parameters, or the key changed."""

    def __init__(self):
        self._known: "weakref.WeakKeyDictionary[torch.optim.Optimizer, tuple[tuple, T]]" = weakref.WeakKeyDictionary()

    def get(self, optimizer: torch.optim.Optimizer, work: Callable[[], T], key: object = None) -> T:
        """The value for ``optimizer``: ``work()`` unless it is known for its parameters as they are now."""
        stamp = _stamp(optimizer, key)
        known = self._known.get(optimizer)
        if known is None or known[0] != stamp:
            known = self._known[optimizer] = (stamp, work())
        return known[1]

    def fresh(self, optimizer: torch.optim.Optimizer) -> bool:
        """Whether a value is known for ``optimizer``'s parameters as they are now."""
        known = self._known.get(optimizer)
        return known is not None and known[0] == _stamp(optimizer, None)

    def put(self, optimizer: torch.optim.Optimizer, value: T) -> None:
        self._known[optimizer] = (_stamp(optimizer, None), value)

    def last(self, optimizer: torch.optim.Optimizer) -> Optional[T]:
        """The value worked out last for ``optimizer`` (its parameters may have changed since), or None."""
        known = self._known.get(optimizer)
        return None if known is None else known[1]

    def clear(self) -> None:
        self._known.clear()


def _stamp(optimizer: torch.optim.Optimizer, key: object) -> tuple:
    return sum(len(group["params"]) for group in optimizer.param_groups), key
