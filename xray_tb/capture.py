"""Turning a tensor into a stored frame: pick one sample, select filters, keep the header."""

from __future__ import annotations

import numpy as np
import torch

from tb_plugin.metadata import BATCH_KINDS, FrameHeader
from xray_tb.selectors import SelectionInfo, Selector, check_selection
from xray_tb.statistics import as_float_array


def make_frame(
    tensor: torch.Tensor,
    *,
    info: SelectionInfo,
    selector: Selector,
    step: int,
    run_id: str,
    wall_time: float,
    path: str = "",
) -> tuple[FrameHeader, np.ndarray]:
    """The header and float32 values of one frame.

    Batch kinds (output, activation, grad) of rank 3 and more keep sample 0 of the batch; the
    selector then chooses entries along the first remaining axis. Non-finite values are kept.
    """
    full = tensor.detach()
    batch_index = 0 if info.kind in BATCH_KINDS and full.dim() >= 3 else None
    view = full[0] if batch_index is not None else full
    indices = list(check_selection(selector.select(view, info), selector, view.shape[0] if view.dim() else 0))
    header = FrameHeader(
        run_id=run_id,
        layer=info.layer,
        kind=info.kind,
        step=int(step),
        wall_time=wall_time,
        original_shape=list(full.shape),
        dtype=str(full.dtype).replace("torch.", ""),
        dim=0 if batch_index is None else 1,
        indices=indices,
        batch_index=batch_index,
        selector=repr(selector),
        path=path,
    )
    return header, _kept_values(view, indices)


def _kept_values(view: torch.Tensor, indices: list[int]) -> np.ndarray:
    """float32 values of ``view`` at ``indices`` along its first axis, on the host."""
    if view.device.type == "cpu":
        values = as_float_array(view)
        return np.asarray(values[indices] if view.dim() else values, dtype=np.float32)
    chosen = view.index_select(0, torch.tensor(indices, dtype=torch.long, device=view.device)) if view.dim() else view
    return chosen.to(device="cpu", dtype=torch.float32).numpy()


_FUNCTIONAL_ACTIVATIONS = {
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
}


def recompute_activation(op: str, kwargs: dict, tensor: torch.Tensor) -> torch.Tensor:
    """``op(tensor, **kwargs)`` for a functional activation recorded by the tracer (``"relu"``, ``"gelu"``, ...)."""
    function = _FUNCTIONAL_ACTIVATIONS.get(op) or getattr(torch.nn.functional, op)
    with torch.no_grad():
        return function(tensor, **kwargs)
