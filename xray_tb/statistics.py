"""Per-frame statistics written as TensorBoard scalars (see ``tb_plugin.metadata.STATS``)."""

from __future__ import annotations

import numpy as np
import torch

from tb_plugin.metadata import STATS


def frame_statistics(tensors: list[torch.Tensor]) -> list[dict[str, float]]:
    """Mean, std (n - 1), min, max and the count of NaN/Inf values over each whole tensor.

    CPU tensors are reduced with numpy, without a copy; tensors on an accelerator are reduced there
    and brought to the host together, with one sync for all of them. Non-finite values are not
    dropped: a NaN anywhere makes mean, std, min and max NaN.
    """
    results: list[dict[str, float]] = [{} for _ in tensors]
    on_device = [(i, t) for i, t in enumerate(tensors) if t.device.type != "cpu"]
    for i, tensor in enumerate(tensors):
        if tensor.device.type == "cpu":
            results[i] = _host_statistics(tensor)
    if on_device:
        target = on_device[0][1].device
        rows = torch.stack([_device_statistics(t).to(target) for _, t in on_device]).tolist()
        for (i, _), row in zip(on_device, rows):
            results[i] = dict(zip(STATS, row))
    return results


def as_float_array(tensor: torch.Tensor) -> np.ndarray:
    """A CPU tensor as a float numpy array, sharing memory when it already is float32/float64."""
    values = tensor.detach()
    if values.dtype not in (torch.float32, torch.float64):
        values = values.float()
    return values.numpy()


def _host_statistics(tensor: torch.Tensor) -> dict[str, float]:
    values = as_float_array(tensor).reshape(-1)
    if values.size == 0:
        return dict(zip(STATS, [float("nan")] * (len(STATS) - 1) + [0.0]))
    with np.errstate(all="ignore"):
        std = float(values.std(ddof=1)) if values.size > 1 else 0.0
        row = [float(values.mean(dtype=np.float64)), std, float(values.min()), float(values.max())]
    return dict(zip(STATS, row + [float(values.size - np.count_nonzero(np.isfinite(values)))]))


def _device_statistics(tensor: torch.Tensor) -> torch.Tensor:
    values = tensor.detach().float().reshape(-1)
    if values.numel() == 0:
        return torch.tensor([float("nan")] * (len(STATS) - 1) + [0.0], device=values.device)
    if values.numel() > 1:
        std, mean = torch.std_mean(values)
    else:
        std, mean = torch.zeros((), device=values.device), values[0]
    low, high = torch.aminmax(values)
    nonfinite = values.numel() - torch.isfinite(values).sum()
    return torch.stack([mean, std, low, high, nonfinite.float()])
