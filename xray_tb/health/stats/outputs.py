"""Non-finite checks of every layer's output and activation at health steps (for ``first_nonfinite``).

The columns are internal (1.0 where a non-finite value was seen, else 0.0): they are not written.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from xray_tb.capture.shared_reductions import SharedReductions
from xray_tb.health.stats.base import Statistic
from xray_tb.devices import on_host


def nonfinite_flags(tensors: list[Optional[torch.Tensor]], reductions: Optional[SharedReductions] = None) -> list[Optional[torch.Tensor]]:
    """1.0 for each tensor holding a NaN or an infinity, else 0.0 (None for None or non-float ones).

    A NaN or an infinity shows in a tensor's minimum or maximum, and neither can overflow. On a CPU,
    the minimum and maximum through ``reductions`` (no copy; numpy's on small tensors, torch's on large
    ones; the maximum taken from unit maxima computed before; a shared 0-d flag per answer); on an
    accelerator, one ``aminmax`` per tensor, then one batched check of all of them.
    """
    indices = [i for i, t in enumerate(tensors) if t is not None and t.is_floating_point() and t.numel()]
    present = [tensors[i] for i in indices]
    out: list[Optional[torch.Tensor]] = [None] * len(tensors)
    if not present:
        return out
    reductions = SharedReductions() if reductions is None else reductions
    flags = [_FLAGS[_host_nonfinite(t, reductions)] for t in present] if all(map(on_host, present)) else device_flags(present)
    for i, flag in zip(indices, flags):
        out[i] = flag
    return out


def device_flags(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The flags of float tensors with torch ops and no host sync: one batched check per device."""
    if len({t.device for t in tensors}) == 1:
        extremes = torch.stack([value for t in tensors for value in torch.aminmax(t)]).float()
        return list((~torch.isfinite(extremes.view(-1, 2)).all(dim=1)).float().unbind())
    return [(~torch.isfinite(torch.stack(torch.aminmax(t)).float()).all()).float() for t in tensors]  # a model spread over devices


#: The two answers on a CPU, shared (read only: stacked into rows, never written).
_FLAGS = (torch.tensor(0.0), torch.tensor(1.0))


def _host_nonfinite(tensor: torch.Tensor, reductions: SharedReductions) -> bool:
    if tensor.dtype not in (torch.float32, torch.float64):  # numpy has no bfloat16: no float32 copy
        return not bool(torch.isfinite(torch.stack(torch.aminmax(tensor)).float()).all())
    low, high = reductions.extremes(tensor)
    return not (math.isfinite(low) and math.isfinite(high))


class ForwardChecks(Statistic):
    """One flag per called layer for its output and one for its activation (absent: not seen)."""

    columns = ("output_nonfinite", "activation_nonfinite")
    internal = True

    def __init__(self, layers: list[str], reductions: Optional[SharedReductions] = None):
        super().__init__(layers)
        self.reductions = reductions

    def compute(self, outputs: list[Optional[torch.Tensor]], activations: list[Optional[torch.Tensor]]) -> dict[str, list]:
        flags = nonfinite_flags([*outputs, *activations], self.reductions)  # one batch for both
        return {"output_nonfinite": flags[: len(outputs)], "activation_nonfinite": flags[len(outputs):]}
