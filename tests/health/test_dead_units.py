"""Planted dead units are reported exactly, named in a finding, and pruned without changing outputs."""

from __future__ import annotations

import random

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from xray_tb import Xray, open_run
from xray_tb.health import HealthOptions

from tests.health.helpers import batches, scalars

DEAD = sorted(random.Random(3).sample(range(64), 16))


def planted_model() -> nn.Sequential:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    with torch.no_grad():
        model[0].weight[DEAD] = 0.0
        model[0].bias[DEAD] = -10.0
    return model


def train(model, xray, optimizer, data):
    for x, y in data:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        xray.take_graphs()
        optimizer.step()


def test_planted_dead_units_are_found_named_and_pruned_without_changing_outputs(tmp_path):
    model = planted_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = batches(48)
    xray = Xray(model, input_size=(16,), logdir=str(tmp_path), every=4, health=HealthOptions(every=1))
    train(model, xray, optimizer, data)
    # Independently: over every batch trained on, exactly the planted units never fire.
    with torch.no_grad():
        inputs = torch.cat([x for x, _ in data])
        fired = (F.relu(model[0](inputs)) > 0).any(dim=0)
    assert sorted(torch.nonzero(~fired).flatten().tolist()) == DEAD
    assert xray.dead_units() == {"0": DEAD}
    assert xray.dead_units(threshold=-20.0) == {}
    findings = [f for f in xray.findings() if f.rule == "dead_units"]
    assert [(f.layer, f.value) for f in findings] == [("0", 0.25)]
    assert findings[0].step == 28  # health steps 0, 4, ..., 28: the window of 8 is full there
    dead_fraction = scalars(tmp_path)[("0", "dead_fraction")]
    assert sorted(dead_fraction) == list(range(0, 48, 4)) and set(dead_fraction.values()) == {0.25}

    for flags in ({"dry_run": "no"}, {"remove": 1}):  # prune(dry_run="no") would have been a dry run
        with pytest.raises(TypeError, match=rf"prune\({next(iter(flags))}=...\) takes True or False, got"):
            xray.prune(**flags)
    report = xray.prune()  # a dry run changes nothing
    assert [(e.layer, e.units, e.parameters, e.applied) for e in report] == [("0", DEAD, 16 * (16 + 1), False)]
    assert isinstance(model[0]._parameters["weight"], nn.Parameter) and not hasattr(model[0], "weight_mask")

    probe = torch.randn(256, 16, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        before = model(probe)
    report = xray.prune(dry_run=False)
    assert [(e.layer, e.units, e.parameters, e.applied) for e in report] == [("0", DEAD, 16 * 17, True)]
    with torch.no_grad():
        after = model(probe)
    assert torch.equal(before, after)
    assert torch.equal(model[0].weight_mask[DEAD], torch.zeros(16, 16)) and model[0].weight_mask.sum() == 48 * 16
    assert torch.equal(model[0].bias_mask[DEAD], torch.zeros(16)) and model[0].bias_mask.sum() == 48

    train(model, xray, optimizer, batches(8, seed=1))  # training goes on, statistics too
    assert torch.isfinite(model[0].weight).all() and torch.equal(model[0].weight[DEAD], torch.zeros(16, 16))
    xray.close()
    grad_l2 = scalars(tmp_path)[("0", "grad_l2")]
    assert sorted(grad_l2) == list(range(56))
    assert open_run(tmp_path).findings() == xray.findings()  # written into the run
    assert ("dead_units", "0", 28) in [(f.rule, f.layer, f.step) for f in open_run(tmp_path).findings()]


def test_remove_makes_pruning_permanent(tmp_path):
    model = planted_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=4, health=HealthOptions(every=1, dead_window=2)) as xray:
        train(model, xray, optimizer, batches(8))
        report = xray.prune(dry_run=False, remove=True)
        assert report[0].units == DEAD and report[0].applied
        assert isinstance(model[0]._parameters["weight"], nn.Parameter) and not hasattr(model[0], "weight_orig")
        assert torch.equal(model[0].weight.detach()[DEAD], torch.zeros(16, 16)) and torch.equal(model[0].bias.detach()[DEAD], torch.zeros(16))
        train(model, xray, optimizer, batches(4, seed=2))


def test_layers_whose_outputs_pruning_would_change_are_reported_not_masked(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 8), nn.Sigmoid(), nn.Linear(8, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=1, health=HealthOptions(every=1, dead_window=2)) as xray:
        train(model, xray, optimizer, batches(3))
        report = xray.prune(threshold=1.0, dry_run=False)  # every sigmoid value is <= 1
        assert [(e.layer, e.units, e.applied) for e in report] == [("0", list(range(8)), False)]
        assert "Sigmoid" in report[0].reason and not hasattr(model[0], "weight_mask")


class CalledTwice(nn.Module):
    """One Linear + ReLU called on x and on -x: unit 1 never fires in the first call, always in the second."""

    def __init__(self):
        super().__init__()
        self.shared, self.act, self.out = nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1)
        with torch.no_grad():
            self.shared.weight.copy_(torch.eye(2))
            self.shared.bias.zero_()

    def forward(self, x):
        return self.out(self.act(self.shared(x)) + self.act(self.shared(-x)))


def test_a_layer_called_twice_a_forward_is_not_pruned_since_its_units_are_judged_on_its_first_call(tmp_path):
    model = CalledTwice()
    x = torch.tensor([[1.0, -1.0], [2.0, -0.5]])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with Xray(model, x, logdir=str(tmp_path), health=HealthOptions(every=1, activations=1)) as xray:
        for step in range(3):
            optimizer.zero_grad()
            model(x).sum().backward()
            xray.take_graphs(step)
            optimizer.step()
        assert xray.dead_units() == {"shared": [1]}  # in its first call: documented
        with torch.no_grad():
            before = model(x)
        report = xray.prune(dry_run=False)
        assert [(e.layer, e.units, e.applied) for e in report] == [("shared", [1], False)]
        assert "runs 2 times in each forward" in report[0].reason
        with torch.no_grad():
            assert torch.equal(model(x), before)  # before, unit 1 was masked and the outputs changed


def test_a_layer_whose_every_unit_died_is_not_pruned_and_zero_gradients_are_a_finding(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 4))
    with torch.no_grad():
        model[2].bias.fill_(-100.0)  # every unit of layer 2 dead: nothing reaches layers 0 and 2 backward
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=1, health=HealthOptions(every=1, dead_window=2)) as xray:
        train(model, xray, optimizer, batches(8))
        findings = {(f.rule, f.layer): f for f in xray.findings()}
        report = xray.prune(dry_run=False)
    dead = findings[("dead_units", "2")]
    assert dead.value == 1.0 and "Do not prune it" in dead.message and "prune(dry_run=False)" not in dead.message
    assert [(e.layer, e.units, e.parameters, e.applied) for e in report] == [("2", list(range(16)), 0, False)]
    assert report[0].reason.startswith("every unit is dead") and not hasattr(model[2], "weight_mask")
    zero = sorted(layer for rule, layer in findings if rule == "zero_gradient")
    assert zero == ["0", "2", "4"]  # 4 too: its input is all zeros, so its weight gets no gradient (its bias does)
    assert findings[("zero_gradient", "0")].step == 4 and findings[("zero_gradient", "0")].value == 0.0


def test_tanh_units_that_stay_below_zero_are_listed_but_not_a_finding(tmp_path):
    """Dead is a ReLU notion: a Tanh unit below 0 still passes a gradient, so no dead_units finding."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 4))
    with torch.no_grad():
        model[0].weight[:4] = 0.0
        model[0].bias[:4] = -5.0  # tanh(-5) < 0 on every sample
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=1, health=HealthOptions(every=1, dead_window=2)) as xray:
        train(model, xray, optimizer, batches(6))
        assert xray.dead_units() == {"0": [0, 1, 2, 3]}  # as documented: at or below the threshold
        assert not [f for f in xray.findings() if f.rule == "dead_units"]
