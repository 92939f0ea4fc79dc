"""Which path a tensor takes through Xray's reductions: the host's or an accelerator's.

A CPU tensor takes the host path: numpy without a copy, values read at once, small tensors batched as
rows (reading a value costs no sync there). A tensor on an accelerator takes the device path: batched
reductions left on the device and read in one sync. Every such choice asks :func:`on_host`, so one
switch, :func:`device_path_on_cpu`, sends CPU tensors down the device path: the tests run the code an
accelerator runs, value for value, on a machine without one.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Union

import numpy as np
import torch

_forced = False


def on_host(where: Union[torch.Tensor, torch.device]) -> bool:
    """Whether a tensor (or a tensor on ``where``'s device) takes the host path: a CPU one, unless
    :func:`device_path_on_cpu` is in force."""
    device = where.device if isinstance(where, torch.Tensor) else where
    return device.type == "cpu" and not _forced


@contextlib.contextmanager
def device_path_on_cpu() -> Iterator[None]:
    """Within this block, CPU tensors take the device path (for tests; process-wide, not thread-safe)."""
    global _forced
    before, _forced = _forced, True
    try:
        yield
    finally:
        _forced = before


def host_array(tensor: torch.Tensor) -> np.ndarray:
    """A CPU tensor's values as a numpy array sharing its memory, the tensor left exactly as it was.

    torch's ``Tensor.numpy()`` marks the tensor's storage as never to be resized again, for good. FSDP
    frees an unsharded parameter by resizing its storage to nothing and fails on a storage so marked
    ("Trying to resize storage that is not resizable"). So tensors that may be the user's (parameters,
    gradients, activations) are read through DLPack, which marks nothing; a tensor DLPack cannot
    carry (a negated view) is copied first."""
    tensor = tensor.detach()
    try:
        return np.from_dlpack(tensor)
    except (BufferError, RuntimeError, TypeError):
        return tensor.resolve_neg().resolve_conj().clone().numpy()
