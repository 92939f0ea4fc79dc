"""Per-frame statistics written as TensorBoard scalars (see ``tb_plugin.metadata.STATS``)."""

from __future__ import annotations

import torch

from tb_plugin.metadata import STATS


def statistics_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """Mean, std, min, max and the count of NaN/Inf values over the whole tensor, in :data:`STATS`
    order, as a float32 tensor on the tensor's device (no host sync).

    Non-finite values are not dropped: a NaN anywhere makes mean, std, min and max NaN.
    """
    values = tensor.detach().float().reshape(-1)
    if values.numel() == 0:
        return torch.tensor([float("nan")] * (len(STATS) - 1) + [0.0], device=values.device)
    std = values.std() if values.numel() > 1 else torch.zeros((), device=values.device)
    return torch.stack([values.mean(), std, values.min(), values.max(), (~torch.isfinite(values)).sum().float()])


def gather_statistics(tensors: list[torch.Tensor]) -> list[dict[str, float]]:
    """:func:`statistics_tensor` results brought to the host with one sync for all of them."""
    if not tensors:
        return []
    rows = torch.stack([t.to(tensors[0].device) for t in tensors]).tolist()
    return [dict(zip(STATS, row)) for row in rows]
