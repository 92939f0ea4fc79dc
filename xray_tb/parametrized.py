"""A layer's ``weight`` or ``bias`` as its forward uses it, read without side effects.

A parameter that ``torch.nn.utils.parametrize`` computes (``parametrizations.spectral_norm``,
``orthogonal``, ``weight_norm``) is computed again on each read, and spectral norm's read runs a power
iteration that updates its buffers in training mode. :func:`parameter` computes it with the
parametrizations in eval mode, so that reading it changes nothing: the value is the one the last
forward used. Being computed, it has no gradient of its own.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn


def has_parameter(module: nn.Module, name: str) -> bool:
    """Whether ``module`` has a tensor ``name``, found without computing a parametrized one."""
    parametrizations = module._modules.get("parametrizations")
    if parametrizations is not None and name in parametrizations:
        return True
    return isinstance(getattr(module, name, None), torch.Tensor)


def is_computed(module: nn.Module, name: str) -> bool:
    """Whether ``module``'s ``name`` is computed from other parameters (parametrized, or pruned)."""
    parametrizations = module._modules.get("parametrizations")
    if parametrizations is not None and name in parametrizations:
        return True
    tensor = module.__dict__.get(name)  # torch.nn.utils.prune sets the masked weight as a plain attribute
    return isinstance(tensor, torch.Tensor) and not tensor.is_leaf


def parameter(module: nn.Module, name: str, grad: bool = False) -> Optional[torch.Tensor]:
    """``module``'s ``name`` (its ``.grad`` with ``grad``), None where it has none (a computed one)."""
    parametrizations = module._modules.get("parametrizations")
    if parametrizations is None or name not in parametrizations:
        tensor = getattr(module, name, None)
        if not isinstance(tensor, torch.Tensor):
            return None
        if grad:
            return tensor.grad if tensor.is_leaf else None  # a pruned weight is computed: no .grad of its own
        return tensor
    if grad:
        return None
    modes = [(each, each.training) for each in parametrizations[name].modules()]
    try:
        for each, _ in modes:
            each.training = False
        with torch.no_grad():
            return getattr(module, name)
    finally:
        for each, training in modes:
            each.training = training
