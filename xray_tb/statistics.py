"""Per-frame statistics written as TensorBoard scalars (see ``tb_plugin.metadata.STATS``)."""

from __future__ import annotations

import torch

from tb_plugin.metadata import STATS


def frame_statistics(tensor: torch.Tensor) -> dict[str, float]:
    """Mean, std, min, max and the count of NaN/Inf values over the whole tensor, with one host sync.

    Non-finite values are not dropped: a NaN anywhere makes mean, std, min and max NaN.
    """
    values = tensor.detach().float().reshape(-1)
    if values.numel() == 0:
        return {name: float("nan") for name in STATS[:-1]} | {"nonfinite": 0.0}
    std = values.std() if values.numel() > 1 else torch.zeros((), device=values.device)
    stacked = torch.stack([values.mean(), std, values.min(), values.max(), (~torch.isfinite(values)).sum().float()])
    return dict(zip(STATS, stacked.tolist()))
