"""A measured iteration on an accelerator dispatches a fixed number of operations whatever the number of
layers (issue 16, bar 3): batched reductions per (device, dtype), nothing per layer, and allocates nothing
the size of the gradients. Counted on the meta device."""

from __future__ import annotations

import pytest
import torch

from tests.health.dispatched_ops import VIEWS, allocated_values, dispatched_ops


def test_a_measured_iteration_dispatches_as_many_ops_for_200_layers_as_for_3():
    few, many = dispatched_ops(3), dispatched_ops(200)
    assert many == few
    launches = {op: count for op, count in many.items() if op not in VIEWS}
    assert sum(launches.values()) < 60
    assert "empty_like" not in many and "detach" not in many  # the update ratio's copy is one multi-tensor op


def test_weights_of_two_dtypes_are_two_groups_whatever_the_number_of_layers():
    two = (torch.float32, torch.float64)
    assert dispatched_ops(60, shape=(4, 8), dtypes=two) == dispatched_ops(6, shape=(4, 8), dtypes=two)
    assert sum(dispatched_ops(6, dtypes=two).values()) > sum(dispatched_ops(6).values())  # a group's ops again


def test_a_measured_iteration_allocates_a_few_values_per_layer_not_the_size_of_the_gradients():
    """Bar 3: "allocate nothing the size of the gradients per iteration" (an ``_foreach_abs`` copied them
    all). What is left is a few scalars per tensor, and the update ratio's copy of the weights at the
    iterations before it takes the ratio (it lives for one iteration)."""
    layers, shape = 200, (32, 32)
    values = layers * 32 * 32  # of the gradients, and of the weights
    copying, plain, copying_again, plain_again = allocated_values(layers, shape)
    assert plain == plain_again and copying == copying_again
    assert plain < 64 * layers < values / 10
    assert values <= copying - plain < values + 4 * layers  # the update ratio's one copy of the weights (and its scalars)
    few = allocated_values(3, shape)[1]
    assert plain / layers == pytest.approx(few / 3, rel=0.1)  # per layer alike: no grad-sized scratch



def _python_calls(layers: int, xray_on: bool = True) -> list[int]:
    """The Python calls (``sys.setprofile``: functions, generators resumed, builtins) of each iteration's
    ``take_graphs()`` and optimizer step, on the device path forced on the CPU (the Python an
    accelerator's host runs); ``xray_on=False``: the same loop's step without Xray (torch's own Python)."""
    import contextlib
    import sys
    import tempfile

    from torch import nn
    from torch.nn import functional as F

    from xray_tb import Xray
    from xray_tb.devices import device_path_on_cpu
    from xray_tb.health import HealthOptions

    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Linear(8, 8) for _ in range(layers)))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    counts, counted = [], [0]

    def count(frame, event, arg) -> None:
        if event in ("call", "c_call"):
            counted[0] += 1

    with tempfile.TemporaryDirectory() as logdir, device_path_on_cpu():
        recording = Xray(model, x, logdir=logdir, every=1000, health=HealthOptions(every=1)) if xray_on else None
        with recording or contextlib.nullcontext():
            for _ in range(14):
                optimizer.zero_grad()
                F.mse_loss(model(x), y).backward()
                counted[0] = 0
                sys.setprofile(count)  # the call counts the iteration, the step checks it again
                if recording is not None:
                    recording.take_graphs()
                optimizer.step()
                sys.setprofile(None)
                counts.append(counted[0])
    return counts[8:]


def test_a_measured_iteration_runs_as_much_host_python_for_60_layers_as_for_6():
    """Bar 3: "keep the Python work per iteration independent of the number of layers" (a generator over
    the layers, resumed once per tensor, breaks it). torch's own step, per parameter, is taken out."""
    def xrays(layers: int) -> list[int]:
        return [on - off for on, off in zip(_python_calls(layers), _python_calls(layers, xray_on=False))]

    assert xrays(60) == xrays(6)
