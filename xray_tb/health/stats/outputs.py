"""Non-finite checks of every layer's output and activation at health steps (for ``first_nonfinite``).

The columns are internal (1.0 where a non-finite value was seen, else 0.0): they are not written.
"""

from __future__ import annotations

from typing import Optional

import torch

from xray_tb.health.stats.base import Statistic


def nonfinite_flag(tensor: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    if tensor is None or not tensor.is_floating_point():
        return None
    return (~torch.isfinite(tensor).all()).float()


class ForwardChecks(Statistic):
    """One flag per called layer for its output and one for its activation (absent: not seen)."""

    columns = ("output_nonfinite", "activation_nonfinite")
    internal = True

    def compute(self, outputs: list[Optional[torch.Tensor]], activations: list[Optional[torch.Tensor]]) -> dict[str, list]:
        return {
            "output_nonfinite": [nonfinite_flag(t) for t in outputs],
            "activation_nonfinite": [nonfinite_flag(t) for t in activations],
        }
