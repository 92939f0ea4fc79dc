"""The operations one measured training-health iteration dispatches on its device path, counted on the
``meta`` device (shapes only, no data, no accelerator needed): what a GPU would be asked to launch, and
how many values its kernels write into new tensors. Shared by ``tests/health/test_fixed_dispatch.py``
and ``bench/bench_health_layers.py``."""

from __future__ import annotations

import collections
import contextlib
import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from xray_tb.health.buffer import RowBuffer
from xray_tb.health.sentinel import NonFiniteSentinel
from xray_tb.health.stats import GradientStatistics, IterationView, UpdateRatio, WeightNorm
from xray_tb.health.stats.base import row_of


#: Ops that make a view (metadata only, no kernel, nothing allocated).
VIEWS = frozenset({"view", "unbind", "slice", "select", "as_strided", "alias", "unsqueeze"})


class _Counted(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: collections.Counter = collections.Counter()
        self.allocated = 0  # values of the new tensors that the ops (not views, not in place) returned

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.ops[name] += 1
        out = func(*args, **(kwargs or {}))
        if name not in VIEWS and not name.endswith("_"):
            self.allocated += sum(t.numel() for t in tree_leaves(out) if isinstance(t, torch.Tensor))
        return out


def dispatched_ops(layers: int, shape: tuple[int, ...] = (32, 32), device: str = "meta",
                   dtypes: tuple[torch.dtype, ...] = (torch.float32,)) -> collections.Counter:
    """The ops of two measured iterations over ``layers`` weights of ``shape`` (the update ratio copies the
    weights at the first and takes the ratio at the second): see :func:`measured_iterations`."""
    first, second = measured_iterations(layers, shape, device, dtypes, counted=2)
    return first.ops + second.ops


def allocated_values(layers: int, shape: tuple[int, ...] = (32, 32)) -> list[int]:
    """The values each of four measured iterations allocates (the update ratio copies the weights at the
    first and third, and takes the ratio at the second and fourth)."""
    return [each.allocated for each in measured_iterations(layers, shape, counted=4)]


def measured_iterations(layers: int, shape: tuple[int, ...] = (32, 32), device: str = "meta",
                        dtypes: tuple[torch.dtype, ...] = (torch.float32,), counted: int = 2) -> list[_Counted]:
    """What each of ``counted`` measured iterations dispatches, as the monitor runs them: the built-in
    iteration statistics (the update ratio every second iteration), the row of the step, and the
    non-finite sentinel's check. Counted after two iterations that set up what is made once per list of
    shapes (the scratch of the signed sums). Layer ``i`` has dtype ``dtypes[i % len(dtypes)]``."""
    names = [f"layer{i}" for i in range(layers)]
    weights = [torch.empty(shape, device=device, dtype=dtypes[i % len(dtypes)]) for i in range(layers)]
    grads = [torch.empty_like(weight) for weight in weights]
    families = [GradientStatistics(names, [math.prod(shape)] * layers), WeightNorm(names), UpdateRatio(names, 2)]
    rows, sentinel = RowBuffer(families), NonFiniteSentinel(names)
    nan = torch.full((), math.nan, device=device)
    found = []
    for index in range(2 + counted):
        each = _Counted()
        with each if index >= 2 else contextlib.nullcontext():
            view = IterationView(weights, grads, nan, index)
            rows.add(index, row_of(families, [family.compute(view) for family in families]), nan)
            sentinel.check(index, weights, grads)
        if index >= 2:
            found.append(each)
    return found
