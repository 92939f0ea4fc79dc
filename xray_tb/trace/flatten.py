"""The tensors a forward's arguments or result hold, in the order the trace numbers them."""

from __future__ import annotations

from typing import Any

import torch


def tensors_in(obj: Any) -> list[torch.Tensor]:
    """Tensors in ``obj``, flattened depth-first through tuples, lists and dict values (a trace's
    ``input:<k>`` is the k-th distinct one among a forward's ``(args, kwargs)``)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for item in obj for t in tensors_in(item)]
    if isinstance(obj, dict):
        return [t for item in obj.values() for t in tensors_in(item)]
    return []
