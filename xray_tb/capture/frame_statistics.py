"""Per-frame statistics written as TensorBoard scalars (see ``tb_plugin.metadata.STATS``)."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

from tb_plugin.metadata import STATS
from xray_tb.capture.shared_reductions import SharedReductions
from xray_tb.devices import host_array, on_host


def frame_statistics(tensors: list[torch.Tensor], reductions: Optional[SharedReductions] = None) -> list[dict[str, float]]:
    """Mean, std (n - 1), min, max and the count of NaN/Inf values over each whole tensor.

    CPU tensors are reduced with numpy, without a copy, through ``reductions`` (what training health
    reduced of the same tensor at this step is not computed again); tensors on an accelerator are
    reduced there and brought to the host together, with one sync for all of them. Non-finite values
    are not dropped: a NaN anywhere makes mean, std, min and max NaN.
    """
    reductions = SharedReductions() if reductions is None else reductions
    results: list[dict[str, float]] = [{} for _ in tensors]
    on_device = [(i, t) for i, t in enumerate(tensors) if not on_host(t)]
    for i, tensor in enumerate(tensors):
        if on_host(tensor):
            results[i] = _host_statistics(tensor, reductions)
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
    return host_array(values)


def _host_statistics(tensor: torch.Tensor, reductions: SharedReductions) -> dict[str, float]:
    # Single-threaded passes without a copy, shared with training health (see SharedReductions): this
    # runs once per frame, cold, inside a training loop. float32 sums are pairwise in numpy and einsum's
    # dot product stays within ~1e-7 of a float64 one.
    if not tensor.is_floating_point():
        tensor = tensor.float()
    found = reductions.whole(tensor)
    if found is None:  # empty
        return dict(zip(STATS, [float("nan")] * (len(STATS) - 1) + [0.0]))
    values, total, squares, low, high = found
    size = values.size
    if not math.isfinite(total):  # a non-finite value, or a float32 sum that overflowed
        with np.errstate(all="ignore"):  # +inf and -inf add up to NaN: no warning, the count below says it
            total = float(np.add.reduce(values, dtype=np.float64))
    mean = total / size
    std = 0.0
    if size > 1:
        variance = (squares - mean * total) / (size - 1)  # Python floats: an overflow is an infinity, no warning
        if not (0.0 < variance < math.inf and mean * mean <= 10.0 * variance):  # overflow or cancellation:
            with np.errstate(all="ignore"):  # two passes in float64
                mean = float(np.add.reduce(values, dtype=np.float64)) / size
                deviation = np.subtract(values, mean, dtype=np.float64)
                variance = float(np.add.reduce(np.square(deviation, out=deviation))) / (size - 1)
        std = variance ** 0.5
    # A float64 sum of float32 values cannot overflow, so a finite mean means every value is finite.
    nonfinite = 0 if math.isfinite(mean) else size - int(np.count_nonzero(np.isfinite(values)))
    return dict(zip(STATS, [mean, std, low, high, float(nonfinite)]))


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
