"""The operations one measured training-health iteration dispatches on its device path, counted on the
``meta`` device (shapes only, no data, no accelerator needed): what a GPU would be asked to launch.
Shared by ``tests/health/test_fixed_dispatch.py`` and ``bench/bench_health_layers.py``."""

from __future__ import annotations

import collections
import contextlib
import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from xray_tb.health.buffer import RowBuffer
from xray_tb.health.sentinel import NonFiniteSentinel
from xray_tb.health.stats import GradientStatistics, IterationView, UpdateRatio, WeightNorm
from xray_tb.health.stats.base import row_of


class _Counted(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def dispatched_ops(layers: int, shape: tuple[int, ...] = (32, 32), device: str = "meta",
                   dtypes: tuple[torch.dtype, ...] = (torch.float32,)) -> collections.Counter:
    """The ops of two measured iterations over ``layers`` weights of ``shape`` (the update ratio copies the
    weights at the first and takes the ratio at the second), as the monitor runs them: the built-in
    iteration statistics, the row of the step, and the non-finite sentinel's check. Counted after two
    iterations that set up what is made once per list of shapes (the scratch of the signed sums).
    Layer ``i`` has dtype ``dtypes[i % len(dtypes)]``."""
    names = [f"layer{i}" for i in range(layers)]
    weights = [torch.empty(shape, device=device, dtype=dtypes[i % len(dtypes)]) for i in range(layers)]
    grads = [torch.empty_like(weight) for weight in weights]
    families = [GradientStatistics(names, [math.prod(shape)] * layers), WeightNorm(names), UpdateRatio(names, 2)]
    rows, sentinel = RowBuffer(families), NonFiniteSentinel(names)
    nan = torch.full((), math.nan, device=device)
    counted = _Counted()
    for index in range(4):
        with counted if index >= 2 else contextlib.nullcontext():
            view = IterationView(weights, grads, nan, index)
            rows.add(index, row_of(families, [family.compute(view) for family in families]), nan)
            sentinel.check(index, weights, grads)
    return counted.ops
