"""One GradScaler over two optimizers (a trunk's and a head's): an overflow that reaches the head's gradients
only makes the scaler skip the head's step and step the trunk. That is an overflow, not a non-finite value
of training, whichever loop order and whichever optimizer Xray follows; a NaN of training is still found."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from tests.health.helpers import scaler_steps
from xray_tb import Xray, open_run
from xray_tb.health import HealthOptions, NonFinite

LOOPS = ["take_graphs(step) before the steps", "take_graphs(step) after scaler.update()", "optimizer=trunk", "optimizer=head"]


def _loop(tmp_path, loop: str, steps: int = 30, overflow=(), nan_grad_from=None, nan_weight_at=None,
          head_first: bool = False, device_path: bool = False):
    """Train ``steps`` steps under one GradScaler; the head's last weight gradient overflows (x 1e38) at the
    ``overflow`` steps. Returns Xray's first non-finite value, its nonfinite findings, the steps the scaler
    skipped a step at, and the steps of the grad_l2 series."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
    trunk = torch.optim.SGD(model[0].parameters(), lr=0.05)
    head = torch.optim.SGD([*model[2].parameters(), *model[4].parameters()], lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
    at = {"step": None}
    model[4].weight.register_hook(lambda grad: grad * 1e38 if at["step"] in overflow else grad)
    if nan_grad_from is not None:
        model[2].weight.register_hook(lambda grad: grad * math.nan if at["step"] >= nan_grad_from else grad)
    options = {"optimizer": {"optimizer=trunk": trunk, "optimizer=head": head}[loop]} if loop.startswith("optimizer=") else {}
    skipped = []
    with Xray(model, torch.randn(8, 16), logdir=str(tmp_path), every=10, health=HealthOptions(every=1), **options) as xray:
        if device_path:  # the batched path a GPU takes, on this CPU
            xray._health.monitor._sentinel._on_cpu = False
        for step in range(steps):
            at["step"] = step
            if step == nan_weight_at:
                with torch.no_grad():
                    model[2].weight[1, 1] = math.nan
            trunk.zero_grad()
            head.zero_grad()
            scaler.scale(F.cross_entropy(model(torch.randn(8, 16)), torch.randint(0, 4, (8,)))).backward()
            if loop == "take_graphs(step) before the steps" or (options and step % 10 == 0):
                xray.take_graphs(step)
            if scaler_steps(scaler, *((head, trunk) if head_first else (trunk, head))):
                skipped.append(step)
            if loop == "take_graphs(step) after scaler.update()":
                xray.take_graphs(step)
        found = xray.first_nonfinite
        findings = [finding for finding in xray.findings() if finding.rule == "nonfinite"]
    return found, findings, skipped, open_run(tmp_path).health("grad_l2")[1].tolist()


@pytest.mark.parametrize("head_first", [False, True], ids=["trunk steps first", "head steps first"])
@pytest.mark.parametrize("loop", LOOPS)
def test_an_overflow_in_one_optimizers_gradients_is_no_nonfinite_value(tmp_path, loop, head_first):
    found, findings, skipped, steps = _loop(tmp_path, loop, overflow=(5, 6, 20), head_first=head_first)
    assert skipped == [5, 6, 20] and found is None and findings == []
    if loop == "optimizer=head":  # its skipped steps are no iterations: 27 steps, numbered by its own steps
        assert steps == list(range(27))
    else:  # the trunk stepped: the iteration ran, its row of overflowed gradients is dropped (a gap, as for a skip)
        assert steps == [step for step in range(30) if step not in skipped]


@pytest.mark.parametrize("loop", LOOPS)
def test_a_gradient_that_stays_nan_under_the_scaler_is_still_found(tmp_path, loop):
    """A NaN gradient in the head from step 15 on: the scaler skips the head's step every time, which is no
    overflow after 24 in a row (the scale has shrunk 2**24-fold): the first of them is reported."""
    found, findings, skipped, _ = _loop(tmp_path, loop, steps=45, overflow=(5,), nan_grad_from=15)
    first = 14 if loop == "optimizer=head" else 15  # the head's own steps count its iterations: step 5 was skipped
    assert skipped[:2] == [5, 15] and found == NonFinite(step=first, layer="2", kind="weight_grad")
    assert [finding.step for finding in findings] == [first]


@pytest.mark.parametrize("loop", LOOPS[:2])
def test_a_nan_weight_under_the_scaler_is_found_at_once(tmp_path, loop):
    found, _, _, _ = _loop(tmp_path, loop, overflow=(5,), nan_weight_at=17)
    assert found == NonFinite(step=17, layer="2", kind="weight")


@pytest.mark.parametrize("loop", [LOOPS[0], LOOPS[2]])
def test_the_device_path_waits_for_the_scaler_too(tmp_path, loop):
    found, _, skipped, _ = _loop(tmp_path / "overflow", loop, overflow=(5, 6, 20), device_path=True)
    assert skipped == [5, 6, 20] and found is None
    found, _, _, _ = _loop(tmp_path / "nan", loop, steps=45, overflow=(5,), nan_grad_from=15, device_path=True)
    assert found == NonFinite(step=15, layer="2", kind="weight_grad")


def test_a_nan_gradient_with_a_scaler_that_never_updates_is_found_at_its_step(tmp_path):
    """An enabled GradScaler that this loop does not use (one of another model): its scale never moves, so
    a NaN gradient would wait 64 checks for a verdict; the weights it turned NaN at the next step show it was
    applied, so it is reported at its own step then."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    unused = torch.amp.GradScaler("cpu")
    unused.scale(torch.ones(()))  # initialised, as a scaler in use is
    at = {"step": None}
    model[2].weight.register_hook(lambda grad: grad * math.nan if at["step"] == 7 else grad)
    with Xray(model, torch.randn(4, 8), logdir=str(tmp_path), every=10) as xray:
        for step in range(80):
            at["step"] = step
            optimizer.zero_grad()
            F.cross_entropy(model(torch.randn(4, 8)), torch.randint(0, 4, (4,))).backward()
            xray.take_graphs(step)
            optimizer.step()  # the NaN spreads to the weights: a weight that turns NaN shows the gradient was applied
            if step == 12:  # well within the wait for an update, after the capture at 10 saw NaN outputs
                assert xray.first_nonfinite == NonFinite(step=7, layer="2", kind="weight_grad")
        assert xray.first_nonfinite == NonFinite(step=7, layer="2", kind="weight_grad")
        assert [finding.step for finding in xray.findings() if finding.rule == "nonfinite"] == [7]


@pytest.mark.parametrize("numbering", ["take_graphs(step)", "take_graphs(step * 4 + micro)"])
def test_an_overflow_under_accumulation_with_a_call_per_micro_batch_is_no_nonfinite_value(tmp_path, numbering):
    """Four backwards per scaler step, take_graphs() after each: every micro-batch's row of an overflowed
    window is withdrawn (they accumulated the overflow), and nothing is reported."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
    at = {"step": None}
    model[2].weight.register_hook(lambda grad: grad * 1e38 * 1e38 if at["step"] in (5, 6, 20) else grad)  # inf from micro-batch 0
    skipped, calls = [], []
    with Xray(model, torch.randn(8, 16), logdir=str(tmp_path), every=10, health=HealthOptions(every=1)) as xray:
        for step in range(30):
            at["step"] = step
            optimizer.zero_grad()
            for micro in range(4):
                scaler.scale(F.cross_entropy(model(torch.randn(8, 16)), torch.randint(0, 4, (8,))) / 4).backward()
                calls.append(step if numbering == "take_graphs(step)" else step * 4 + micro)
                xray.take_graphs(calls[-1])
            if scaler_steps(scaler, optimizer):
                skipped.append(step)
        assert skipped == [5, 6, 20] and xray.first_nonfinite is None
    overflowed = {call for index, call in enumerate(calls) if index // 4 in skipped}
    assert open_run(tmp_path).health("grad_l2")[1].tolist() == sorted(set(calls) - overflowed)
