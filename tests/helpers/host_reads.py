"""What a block of code reads back to the host: the calls that make a GPU wait for its queue.

:func:`host_reads` lists each one made inside the block: an aten op that returns a value to Python
(``item()``, ``bool()``, ``float()``: ``_local_scalar_dense``; ``nonzero``, ``masked_select``, ``equal``,
``is_nonzero``), a copy from an accelerator to the CPU, and the ``Tensor`` methods that hand the host a
tensor's values with no aten op on a CPU (``tolist``, ``numpy``, ``cpu``). It sees them on a CPU too,
so a test on the device path forced on the CPU (:func:`xray_tb.devices.device_path_on_cpu`) finds the
reads that would sync a GPU. On a CUDA GPU, ``torch.cuda.set_sync_debug_mode("warn")`` is on as well, and each of its
warnings is listed too: a sync that the list above does not know of, such as a copy from pageable host
memory to the GPU.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

#: aten ops whose result Python reads on the host (a GPU waits for its queue).
READING_OPS = frozenset({"_local_scalar_dense", "nonzero", "masked_select", "equal", "is_nonzero"})
#: Tensor methods that hand the host a tensor's values (``item`` is ``_local_scalar_dense``, above).
READING_METHODS = ("tolist", "numpy", "cpu")


class _Reads(TorchDispatchMode):
    def __init__(self, found: list[str]):
        super().__init__()
        self.found = found

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in READING_OPS:
            self.found.append(f"aten.{name}")
        out = func(*args, **kwargs)
        if name in ("_to_copy", "copy_") and _to_host(name, args, out):
            self.found.append(f"aten.{name} to the CPU")
        return out


def _to_host(name: str, args: tuple, out) -> bool:
    """Whether a copy went from an accelerator to the CPU."""
    source, target = (args[0], out) if name == "_to_copy" else (args[1], args[0])
    return isinstance(source, torch.Tensor) and source.device.type != "cpu" and target.device.type == "cpu"


@contextlib.contextmanager
def host_reads(device: torch.device) -> Iterator[list[str]]:
    """A list that fills with the host reads made inside the block (see the module doc)."""
    found: list[str] = []
    originals = {name: getattr(torch.Tensor, name) for name in READING_METHODS}
    own = {name: vars(torch.Tensor)[name] for name in READING_METHODS if name in vars(torch.Tensor)}  # else inherited

    def counting(name: str):
        method = originals[name]

        def call(self, *args, **kwargs):
            found.append(f"Tensor.{name}")
            return method(self, *args, **kwargs)

        return call

    for name in READING_METHODS:
        setattr(torch.Tensor, name, counting(name))
    cuda = device.type == "cuda"
    try:
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            if cuda:
                torch.cuda.set_sync_debug_mode("warn")
            try:
                with _Reads(found):
                    yield found
            finally:
                found.extend(f"CUDA sync: {w.message}" for w in warned if "synchroniz" in str(w.message))
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode("default")
        for name in READING_METHODS:  # as they were: torch.Tensor's own, or none (inherited again)
            if name in own:
                setattr(torch.Tensor, name, own[name])
            else:
                delattr(torch.Tensor, name)
