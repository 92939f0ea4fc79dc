"""Memory stays flat over a long training with periodic captures."""

from __future__ import annotations

import gc
import tracemalloc

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from xray_tb import Xray


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["every", "manual"])
def test_memory_is_flat_over_5000_steps(tmp_path, schedule):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    xray = Xray(model, input_size=(32,), logdir=str(tmp_path), every=100 if schedule == "every" else None)
    xray.set_plan({name: {"weight": True, "weight_grad": True, "output": True, "grad": True} for name in ("0", "2", "4")})
    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
    tracemalloc.start()
    samples = {}
    for step in range(5000):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        if schedule == "every":
            xray.take_graphs()
        elif step % 100 == 0:
            xray.take_graphs(step)
        optimizer.step()
        if step in (999, 4999):
            gc.collect()
            samples[step] = (tracemalloc.get_traced_memory()[0], rss_bytes())
    tracemalloc.stop()
    xray.close()
    assert sum(len(steps) for kinds in xray.records().values() for steps in kinds.values()) == 50 * 12
    python_growth = samples[4999][0] - samples[999][0]
    rss_growth = samples[4999][1] - samples[999][1]
    # Only the step lists of records() grow: 40 captures x 12 frames of small ints.
    assert python_growth < 256 * 1024, python_growth
    assert rss_growth < 16 * 2**20, rss_growth
