"""A capture never crashes training and never records a wrong frame (issue 8, items 1 and 2)."""

from __future__ import annotations

import math
import sys
import threading
import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from xray_tb import Xray

INF = math.inf


class FunctionalActivation(nn.Module):
    """A linear layer followed by a functional activation with the given arguments."""

    def __init__(self, activation):
        super().__init__()
        self.fc = nn.Linear(4, 6)
        self.activation = activation

    def forward(self, x):
        return self.activation(self.fc(x))


@pytest.mark.parametrize(
    "activation",
    [
        lambda y: F.hardtanh(y, -INF, 1.0),
        lambda y: F.softplus(y, threshold=INF),
        lambda y: F.elu(y, alpha=INF),
        lambda y: F.leaky_relu(y, math.nan),
    ],
    ids=["hardtanh(-inf, 1)", "softplus(threshold=inf)", "elu(alpha=inf)", "leaky_relu(nan)"],
)
def test_non_finite_activation_arguments_are_recomputed_as_they_were(tmp_path, activation):
    torch.manual_seed(0)
    model, x = FunctionalActivation(activation), torch.randn(5, 4) * 3
    with Xray(model, x, logdir=str(tmp_path), plan={"fc": {"activation": True}}) as xray:
        model(x).nan_to_num().sum().backward()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert xray.take_graphs(0) == 0
        values, _ = xray.load("fc", "activation", 0)
    torch.testing.assert_close(values, activation(model.fc(x)).detach(), equal_nan=True)


class Halves(nn.Module):
    """A layer with two outputs from one autograd node (``chunk``); the loss uses only the first."""

    def forward(self, x):
        return x.chunk(2, dim=1)


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 8)
        self.halves = Halves()
        self.lstm = nn.LSTM(4, 3, batch_first=True)

    def forward(self, x):
        first, _unused = self.halves(self.fc(x))
        out, (h, c) = self.lstm(first.unsqueeze(1))  # only h feeds the loss: out gets no gradient
        return h[-1]


def test_a_gradient_that_never_arrives_is_reported_not_raised(tmp_path):
    torch.manual_seed(0)
    model, x = TwoHeads(), torch.randn(5, 4)
    with Xray(model, x, logdir=str(tmp_path), plan={"halves": {"grad": True}, "lstm": {"grad": True}}) as xray:
        output = model(x)
        output.sum().backward()  # Xray's gradient hooks see None for the unused half: no AttributeError
        with pytest.warns(UserWarning, match="no gradient reached the output"):
            xray.take_graphs(0)
        missing = {(layer, kind) for layer, kind, _ in xray.last_report.missing}
        assert ("halves[1]", "grad") in missing and ("lstm[0]", "grad") in missing
        # What did arrive is recorded, and is autograd's gradient: d(sum h)/d(first half) through the LSTM.
        values, header = xray.load("halves[0]", "grad", 0)
    first = model.fc(x).chunk(2, dim=1)[0].detach().requires_grad_()
    (expected,) = torch.autograd.grad(model.lstm(first.unsqueeze(1))[1][0][-1].sum(), first)
    torch.testing.assert_close(values, expected)


class Reused(nn.Module):
    """``fc`` is called twice per forward: the call count must follow the training thread only."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.out = nn.Linear(6, 2)

    def forward(self, x):
        return self.out(torch.relu(self.fc(torch.relu(self.fc(x)))))


def test_forwards_on_another_thread_never_replace_the_training_forward(tmp_path):
    torch.manual_seed(0)
    model = Reused()
    plan = {"fc": {"output": True}, "out": {"output": True}}
    stop = threading.Event()

    def serve():  # an eval thread: no_grad forwards on the same model, with other inputs
        probe = torch.full((3, 6), 100.0)
        while not stop.is_set():
            with torch.no_grad():
                model(probe)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # interleave the two threads as often as the interpreter can
    server = threading.Thread(target=serve)
    wrong = []
    try:
        with Xray(model, input_size=(6,), logdir=str(tmp_path), plan=plan) as xray:
            server.start()
            for step in range(150):
                x = torch.randn(4, 6, generator=torch.Generator().manual_seed(step))
                model(x).sum().backward()
                xray.take_graphs(step)
                recorded_fc, _ = xray.load("fc", "output", step)
                recorded_out, _ = xray.load("out", "output", step)
                with torch.no_grad():
                    fc0 = model.fc(x)
                    expected_out = model(x)
                if not (torch.equal(recorded_fc, fc0) and torch.equal(recorded_out, expected_out)):
                    wrong.append(step)
    finally:
        stop.set()
        sys.setswitchinterval(switch)
        server.join()
    assert wrong == []


class WritesThroughAView(nn.Module):
    """After ``poison`` is set, the forward writes into the linear layer's output through a view."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)
        self.poison = False

    def forward(self, x):
        y = self.linear(x)
        if self.poison:
            y.t().mul_(0).add_(42)
        return y * 2


def test_a_write_through_a_view_after_the_trace_is_caught_and_then_copied(tmp_path):
    torch.manual_seed(0)
    model, x = WritesThroughAView(), torch.randn(5, 4)
    with Xray(model, x, logdir=str(tmp_path), plan={"linear": {"output": True}}) as xray:
        model.poison = True  # the trace saw no such write: the first capture must notice it
        model(x).sum().backward()
        with pytest.warns(UserWarning, match="written in place after the layer returned it"):
            xray.take_graphs(0)
        assert xray.last_report.missing == [("linear", "output", "overwritten")]
        assert "linear" not in xray.records()  # no frame of 42.0 was written
        model(x).sum().backward()
        xray.take_graphs(1)
        values, _ = xray.load("linear", "output", 1)
    torch.testing.assert_close(values, model.linear(x).detach())  # what the layer returned, not 42.0


class Unkeepable(torch.Tensor):
    """A tensor subclass whose ``detach`` raises: Xray cannot keep it, the user's forward must not notice."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.detach:
            raise RuntimeError("this tensor cannot be detached")
        return super().__torch_function__(func, types, args, kwargs or {})


class ReturnsUnkeepable(nn.Module):
    def forward(self, x):
        return x.as_subclass(Unkeepable) * 1


def test_an_output_xray_cannot_keep_never_breaks_the_forward(tmp_path):
    model = nn.Sequential(nn.Linear(3, 4), ReturnsUnkeepable(), nn.Linear(4, 2))
    x = torch.randn(2, 3)
    with Xray(model, x, logdir=str(tmp_path), plan={"0": {"output": True}, "1": {"output": True}}) as xray:
        output = model(x)  # Xray's hook on "1" fails inside; the forward goes on
        output.sum().backward()
        with pytest.warns(UserWarning, match="keeping the output raised RuntimeError: this tensor cannot be detached"):
            xray.take_graphs(0)
        assert [(layer, kind) for layer, kind, _ in xray.last_report.missing] == [("1", "output")]
        values, _ = xray.load("0", "output", 0)
    torch.testing.assert_close(values, model[0](x).detach())


def test_a_second_xray_in_a_folder_with_captures_warns_and_its_writes_win(tmp_path):
    from xray_tb import open_run

    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(3, 4), nn.ReLU()), torch.randn(2, 3)
    with Xray(model, x, logdir=str(tmp_path), plan={"0": {"weight": True}}) as first:
        for step in (0, 10, 20):
            first.take_graphs(step)
    with torch.no_grad():
        model[0].weight.add_(1.0)  # the resumed run's weights differ
    with pytest.warns(UserWarning, match=r"already holds Xray captures up to step 20: steps after it continue that run, and a step at or before it is recorded again"):
        second = Xray(model, x, logdir=str(tmp_path), plan={"0": {"weight": True}})
    with second:
        second.take_graphs(10)
    run = open_run(tmp_path)
    assert run.records() == {"0": {"weight": [0, 10, 20]}}
    torch.testing.assert_close(run.load("0", "weight", 10)[0], model[0].weight.detach())  # the last write
    assert not torch.equal(run.load("0", "weight", 0)[0], model[0].weight.detach())
