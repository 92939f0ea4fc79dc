"""The benches' switched-off windows run nothing of Xray's: its health iteration, which runs from the
optimizer step when ``take_graphs()`` is not called, waits with its global optimizer hooks set aside."""

import sys
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from optimizer_hooks import OwnHooks  # noqa: E402
from xray_tb import Xray  # noqa: E402
from torch.optim import optimizer as torch_optimizer  # noqa: E402


def _train(model, optimizer, steps, xray=None):
    for _ in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(model(torch.randn(8, 4)), torch.randint(0, 3, (8,))).backward()
        if xray is not None:
            xray.take_graphs()
        optimizer.step()


def test_a_switched_off_window_runs_no_health_iteration_and_an_on_window_its_own_hooks_only(tmp_path):
    torch.manual_seed(0)
    tables = (torch_optimizer._global_optimizer_pre_hooks, torch_optimizer._global_optimizer_post_hooks)
    before = [dict(table) for table in tables]
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    own = OwnHooks()
    with own.owning():
        xray = Xray(model, torch.randn(2, 4), logdir=str(tmp_path), every=10)
    assert [dict(table) for table in tables] == before  # set aside outside the loop's windows
    monitor = xray._health.monitor
    with own.owning():
        _train(model, optimizer, 3, xray)
    counted = monitor._iterations
    assert counted == 3
    with own.owning(active=False), xray.recording.paused():
        _train(model, optimizer, 4)  # without the set-aside, the step hooks would count and check these
    assert monitor._iterations == counted
    with own.owning():
        _train(model, optimizer, 2)  # no take_graphs(): health follows the optimizer's steps again
        assert monitor._iterations == counted + 2
        xray.close()
    assert [dict(table) for table in tables] == before
