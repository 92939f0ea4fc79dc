"""Leaving a model exactly as it was: what Xray's own forward passes (trace, probe) must undo."""

from __future__ import annotations

import contextlib
import warnings
from typing import Iterator

import torch
from torch import nn


@contextlib.contextmanager
def preserved(model: nn.Module) -> Iterator[None]:
    """Restore, on exit (also after an error): every buffer's value and identity (BatchNorm running
    statistics), every parameter's identity, every module's train/eval flag, and the CPU and CUDA
    random states.

    Parameters are not copied, which would double the model's memory; a forward that writes into a
    parameter in place through a tensor op cannot be undone and is reported with a warning.
    """
    buffers = [
        (module, name, buffer, buffer.detach().clone())
        for module in model.modules()
        for name, buffer in module.named_buffers(recurse=False)
    ]
    parameters = [
        (module, name, param, param._version) for module in model.modules() for name, param in module.named_parameters(recurse=False)
    ]
    training = [(module, module.training) for module in model.modules()]
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        with torch.no_grad():
            for module, name, buffer, copy in buffers:
                if getattr(module, name, None) is not buffer:
                    setattr(module, name, buffer)
                buffer.copy_(copy)  # always: kernels such as batch_norm update buffers without a version bump
        for module, name, param, version in parameters:
            if getattr(module, name, None) is not param:
                setattr(module, name, param)
            if param._version != version:
                warnings.warn(f"the forward pass wrote into parameter {name!r} of {type(module).__name__} in place; Xray cannot undo that", RuntimeWarning, stacklevel=3)
        for module, mode in training:
            module.training = mode
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
