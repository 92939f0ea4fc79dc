"""Custom statistics (``xray.add_statistic(name, fn, kinds=...)``): ``fn(tensor) -> float`` on a
layer's weight or weight gradient at every health iteration, or on its activation at health steps.

``fn`` may return a Python number or a 0-d tensor; a tensor stays on its device until the block is
written, so a ``fn`` built from torch ops adds no host sync.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Optional

import torch

from xray_tb.health.stats.base import ActivationStatistic, ActivationValue, IterationStatistic, IterationView
from xray_tb.user_frame import user_stacklevel

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


class _Guarded:
    """A user's ``fn`` applied to one layer's tensor: a failure (an exception, or a value that is no number)
    costs that value only (written as missing), never the built-in statistics of the step, and is
    warned once per statistic."""

    def __init__(self, fn: Callable, stat: str):
        self.fn, self.stat, self.warned = fn, stat, False

    def __call__(self, tensor: torch.Tensor, nan: torch.Tensor, where: str) -> Optional[torch.Tensor]:
        try:
            return _as_value(self.fn(tensor), nan, self.stat)
        except Exception as error:  # noqa: BLE001 - a user's statistic must not stop training health
            if not self.warned:
                self.warned = True
                warnings.warn(f"statistic {self.stat!r} failed on {where} ({type(error).__name__}: {error}); its value is "
                              "written as missing wherever it fails, and the other statistics go on. Fix the function given "
                              "to xray.add_statistic()", stacklevel=user_stacklevel())
            return None


class CustomParameterStatistic(IterationStatistic):
    """A user's function on each layer's weight (``kind="weight"``) or weight gradient."""

    def __init__(self, layers: list[str], stat: str, fn: Callable, kind: str):
        super().__init__(layers)
        self.columns = (stat,)
        self._fn, self._kind = _Guarded(fn, stat), kind

    def compute(self, view: IterationView) -> dict[str, list[torch.Tensor]]:
        tensors = view.weights if self._kind == "weight" else view.grads
        with torch.no_grad():
            where = "a weight" if self._kind == "weight" else "a weight's gradient"
            return {self.columns[0]: [None if t is None else self._fn(t.detach(), view.nan, where) for t in tensors]}


class CustomActivationStatistic(ActivationStatistic):
    """A user's function on each layer's activation at health steps."""

    def __init__(self, layers: list[str], stat: str, fn: Callable):
        super().__init__(layers)
        self.columns = (stat,)
        self._fn = _Guarded(fn, stat)

    def compute(self, values: list[ActivationValue], nan: torch.Tensor) -> dict[str, list[torch.Tensor]]:
        with torch.no_grad():
            return {self.columns[0]: [None if value.activation is None
                                      else self._fn(value.activation, nan, f"the activation of layer {value.layer.name!r}")
                                      for value in values]}
