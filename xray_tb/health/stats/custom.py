"""Custom statistics (``xray.add_statistic(name, fn, kinds=...)``): ``fn(tensor) -> float`` on a
layer's weight or weight gradient at every health iteration, or on its activation at health steps.

``fn`` may return a Python number or a 0-d tensor; a tensor stays on its device until the block is
written, so a ``fn`` built from torch ops adds no host sync.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from xray_tb.health.stats.base import ActivationStatistic, ActivationValue, IterationStatistic, IterationView

#: The kinds a custom statistic can run on.
CUSTOM_KINDS = ("weight", "weight_grad", "activation")


def _as_value(result: Any, nan: torch.Tensor, name: str) -> torch.Tensor:
    if isinstance(result, torch.Tensor):
        if result.numel() != 1:
            raise ValueError(f"statistic {name!r} returned a tensor of shape {tuple(result.shape)}; return one number")
        return result.detach().reshape(()).to(device=nan.device, dtype=torch.float32)
    try:
        return torch.tensor(float(result), dtype=torch.float32, device=nan.device)
    except (TypeError, ValueError):
        raise ValueError(f"statistic {name!r} returned {type(result).__name__}; return a float or a 0-d tensor") from None


class CustomParameterStatistic(IterationStatistic):
    """A user's function on each layer's weight (``kind="weight"``) or weight gradient."""

    def __init__(self, layers: list[str], stat: str, fn: Callable, kind: str):
        super().__init__(layers)
        self.columns = (stat,)
        self._fn, self._kind = fn, kind

    def compute(self, view: IterationView) -> dict[str, list[torch.Tensor]]:
        tensors = view.weights if self._kind == "weight" else view.grads
        stat = self.columns[0]
        with torch.no_grad():
            return {stat: [None if t is None else _as_value(self._fn(t.detach()), view.nan, stat) for t in tensors]}


class CustomActivationStatistic(ActivationStatistic):
    """A user's function on each layer's activation at health steps."""

    def __init__(self, layers: list[str], stat: str, fn: Callable):
        super().__init__(layers)
        self.columns = (stat,)
        self._fn = fn

    def compute(self, values: list[ActivationValue], nan: torch.Tensor) -> dict[str, list[torch.Tensor]]:
        stat = self.columns[0]
        out: list[Optional[torch.Tensor]] = []
        with torch.no_grad():
            for value in values:
                out.append(None if value.activation is None else _as_value(self._fn(value.activation), nan, stat))
        return {stat: out}
