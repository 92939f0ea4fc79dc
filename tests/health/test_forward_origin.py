"""A non-finite value that the forward brought (a NaN in the batch, an activation that overflows) is named
where it entered at every pace: between health steps the sentinel sees only gradients, and the iteration's
forward is run again (xray_tb.health.forward_replay) to name the layer, as a health step would. A
gradient that backward alone makes infinite (a finite forward run again) is still named where backward
starts: tests/health/test_sentinel.py."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from xray_tb import HealthOptions, Xray, open_run
from xray_tb.health import NonFinite

from tests.health.helpers import batches


def model_with_dropout_and_batchnorm() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("first", nn.Linear(16, 32))
    model.add_module("norm", nn.BatchNorm1d(32))
    model.add_module("act1", nn.ReLU())
    model.add_module("drop", nn.Dropout(0.3))
    model.add_module("second", nn.Linear(32, 32))
    model.add_module("act2", nn.ReLU())
    model.add_module("third", nn.Linear(32, 4))
    return model


def train(model, xray, steps: int, optimizer=None, *, corrupt=None, micro_batches: int = 1):
    """SGD on the helpers' batches; ``corrupt(step, micro, x)`` returns the batch the forward gets."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05) if optimizer is None else optimizer
    data = batches(steps * micro_batches)
    for step in range(steps):
        optimizer.zero_grad()
        for micro in range(micro_batches):
            x, y = data[step * micro_batches + micro]
            x = corrupt(step, micro, x) if corrupt is not None else x
            F.cross_entropy(model(x), y).backward()
        if xray is not None:
            xray.take_graphs()
        optimizer.step()
    return optimizer


def nan_in_the_batch_at(at: int, micro_at: int = 0):
    def corrupt(step, micro, x):
        if step == at and micro == micro_at:
            x = x.clone()
            x[2, 5] = math.nan
        return x

    return corrupt


def origin(tmp_path, name: str, health=True, **train_options) -> NonFinite:
    model = model_with_dropout_and_batchnorm()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    extra = {"optimizer": optimizer} if train_options.pop("optimizer", False) else {}
    with Xray(model, input_size=(16,), logdir=str(tmp_path / name), every=10, health=health, **extra) as xray:
        train(model, xray, 45, optimizer, **train_options)
        found = xray.first_nonfinite
        assert [(f.layer, f.step) for f in xray.findings() if f.rule == "nonfinite"] == [(found.layer, found.step)]
    return found


@pytest.mark.parametrize("with_optimizer", [False, True])
def test_a_nan_in_the_batch_between_health_steps_is_named_where_it_entered_as_at_every_pace(tmp_path, with_optimizer):
    corrupt = nan_in_the_batch_at(37)
    at_the_defaults = origin(tmp_path, "defaults", corrupt=corrupt, optimizer=with_optimizer)
    every_iteration = origin(tmp_path, "every", health=HealthOptions(every=1, activations=1), corrupt=corrupt,
                             optimizer=with_optimizer)
    assert at_the_defaults == every_iteration == NonFinite(step=37, layer="first", kind="output")
    run = open_run(tmp_path / "defaults")
    finding, = [f for f in run.findings() if f.rule == "nonfinite"]
    assert (finding.layer, finding.step) == ("first", 37)
    assert "the batch of that step held NaN or Inf values, which entered there: check the data" in finding.message
    assert 37 in run.health("dead_fraction")[1].tolist()  # the replayed iteration's activations are measured


@pytest.mark.parametrize("with_optimizer", [False, True])
def test_where_the_forward_cannot_run_again_a_nan_in_the_batch_is_named_where_it_entered(tmp_path, with_optimizer):
    # A SyncBatchNorm's forward runs collectives under a process group, so it is never run again: the
    # batch is watched as it arrives instead, as on an accelerator (before: the last layer's weight_grad).
    model = model_with_dropout_and_batchnorm()
    model.norm = nn.SyncBatchNorm(32)  # one process, no group: it normalises as BatchNorm1d does
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    extra = {"optimizer": optimizer} if with_optimizer else {}
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=10, **extra) as xray:
        train(model, xray, 45, optimizer, corrupt=nan_in_the_batch_at(37))
        assert xray.first_nonfinite == NonFinite(step=37, layer="first", kind="output")
        finding, = [f for f in xray.findings() if f.rule == "nonfinite"]
        assert (finding.layer, finding.step) == ("first", 37)
        assert "the batch of that step held NaN or Inf values, which entered there: check the data" in finding.message


def test_a_nan_in_the_first_of_two_accumulated_micro_batches_is_named_where_it_entered(tmp_path):
    found = origin(tmp_path, "accumulated", corrupt=nan_in_the_batch_at(37, micro_at=0), micro_batches=2)
    assert found == NonFinite(step=37, layer="first", kind="output")


class Square(nn.Module):
    def forward(self, x):
        return x * x


def squaring_model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential()
    for name, module in (("first", nn.Linear(16, 32)), ("square", Square()), ("second", nn.Linear(32, 32)),
                         ("act", nn.Tanh()), ("third", nn.Linear(32, 4))):
        model.add_module(name, module)
    return model


def test_an_activation_that_overflows_from_finite_weights_is_named_where_it_overflowed_as_at_every_pace(tmp_path):
    data = batches(40)
    huge = data[37][0] * 1e20  # finite; its square is not
    with torch.no_grad():  # the test's own reference: the first module whose output is not finite on that batch
        value, expected = huge, None
        for name, module in squaring_model().named_children():
            value = module(value)
            expected = expected or (name if not torch.isfinite(value).all() else None)
    assert expected == "square"

    def overflow_origin(name: str, health) -> NonFinite:
        model = squaring_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # the weights stay as they were
        with Xray(model, input_size=(16,), logdir=str(tmp_path / name), every=10, health=health) as xray:
            for step, (x, y) in enumerate(data):
                optimizer.zero_grad()
                F.cross_entropy(model(huge if step == 37 else x), y).backward()
                xray.take_graphs()
                optimizer.step()
            return xray.first_nonfinite

    every_iteration = overflow_origin("every", HealthOptions(every=1, activations=1))
    assert overflow_origin("defaults", True) == every_iteration == NonFinite(step=37, layer=expected, kind="output")
    message, = [f.message for f in open_run(tmp_path / "defaults").findings() if f.rule == "nonfinite"]
    assert "lower the learning rate" in message and "batch" not in message  # a finite batch: the generic advice


class Recurrent(nn.Module):
    """No activation layer: health's own output checks see nothing, the forward run again sees every layer."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(16, 24, batch_first=True)
        self.head = nn.Linear(24, 4)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


@pytest.mark.parametrize("health", [True, HealthOptions(every=1, activations=1)], ids=["defaults", "every iteration"])
def test_a_nan_in_the_batch_of_a_model_without_activation_layers_is_named_in_the_layer_it_entered(tmp_path, health):
    torch.manual_seed(0)
    model = Recurrent()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(0)
    with Xray(model, input_size=(5, 16), logdir=str(tmp_path), every=10, health=health) as xray:
        for step in range(40):
            x, y = torch.randn(8, 5, 16, generator=generator), torch.randint(0, 4, (8,), generator=generator)
            if step == 37:
                x[1, 2, 3] = math.nan
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            xray.take_graphs()
            optimizer.step()
        assert xray.first_nonfinite == NonFinite(step=37, layer="lstm", kind="output")  # was the head's weight_grad


def test_running_the_forward_again_leaves_the_model_and_the_random_state_as_without_xray(tmp_path):
    corrupt = nan_in_the_batch_at(37)
    plain = model_with_dropout_and_batchnorm()
    torch.manual_seed(1)
    train(plain, None, 40, corrupt=corrupt)
    plain_rng = torch.get_rng_state()

    watched = model_with_dropout_and_batchnorm()
    with Xray(watched, input_size=(16,), logdir=str(tmp_path), every=10) as xray:
        torch.manual_seed(1)
        train(watched, xray, 40, corrupt=corrupt)
        assert xray.first_nonfinite == NonFinite(step=37, layer="first", kind="output")
        assert torch.equal(torch.get_rng_state(), plain_rng)  # the dropout masks after the replay are the plain run's
        assert watched.training and all(module.training for module in watched.modules())
    for (name, mine), (_, theirs) in zip(watched.state_dict().items(), plain.state_dict().items()):
        assert torch.equal(mine, theirs) or torch.allclose(mine, theirs, equal_nan=True), name  # buffers counted once
    for mine, theirs in zip(watched.parameters(), plain.parameters()):
        assert torch.allclose(mine.grad, theirs.grad, equal_nan=True)
    assert not watched._forward_pre_hooks and not watched._forward_hooks  # removed at close


@pytest.mark.parametrize("with_optimizer", [False, True])
def test_a_nan_in_the_batch_of_a_model_split_over_two_optimizers_is_named_where_it_entered(tmp_path, with_optimizer):
    """The head's optimizer steps first: the forward runs again at the check before it, with the weights the
    forward used (an optimizer's step drops the forwards kept, which ran with the weights it moved)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
    trunk = torch.optim.SGD(model[0].parameters(), lr=0.05)
    head = torch.optim.SGD([*model[2].parameters(), *model[4].parameters()], lr=0.05)
    options = {"every": 10, "optimizer": trunk} if with_optimizer else {"every": 10}
    with Xray(model, input_size=(16,), logdir=str(tmp_path), **options) as xray:
        for step, (x, y) in enumerate(batches(30)):
            if step == 23:
                x = x.clone()
                x[0, 0] = math.nan
            trunk.zero_grad()
            head.zero_grad()
            F.cross_entropy(model(x), y).backward()
            xray.take_graphs()
            head.step()
            trunk.step()
        assert xray.first_nonfinite == NonFinite(step=23, layer="0", kind="output")


def test_a_nan_batch_before_the_first_call_names_its_step_once_the_call_numbers_the_steps(tmp_path):
    """The README loop numbered from 100, take_graphs(step) at 105, 115, ...: the iterations before the first
    call are filed under their steps once it names one, and so is where the NaN of step 102's batch entered."""
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with Xray(model, input_size=(16,), logdir=str(tmp_path)) as xray:
        for step, (x, y) in zip(range(100, 130), batches(30)):
            if step == 102:
                x = x.clone()
                x[0, 0] = math.nan
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            if step % 10 == 5:
                xray.take_graphs(step)
            optimizer.step()
        assert xray.first_nonfinite == NonFinite(step=102, layer="0", kind="output")
        message, = [f.message for f in xray.findings() if f.rule == "nonfinite"]
    assert "the batch of that step held NaN or Inf values" in message
