"""Xray on a torch.compile'd model: it looks into the original module, and the compiled forward records."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from xray_tb import Xray, open_run
from xray_tb.trace import arguments


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Drop what torch.compile cached (its fake tensors included) when the test ends."""
    yield
    torch._dynamo.reset()


def test_a_compiled_model_is_recorded_under_its_own_layer_names(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    compiled = torch.compile(model, backend="eager")  # dynamo's own backend: no C++ compiler needed
    assert arguments.model_and_modules(compiled)[0] is model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    expected = {}
    with Xray(compiled, torch.randn(4, 8), logdir=str(tmp_path), every=5, plan={"0": {"output": True}}) as xray:
        assert [node["module"] for node in xray.architecture["nodes"] if node["kind"] == "module"] == ["0", "1", "2"]
        for step in range(11):
            x = torch.randn(4, 8)
            optimizer.zero_grad()
            compiled(x).sum().backward()
            expected[step] = torch.nn.functional.linear(x, model[0].weight, model[0].bias).detach()
            xray.take_graphs(step)
            optimizer.step()
    assert not model[0]._forward_hooks and not model._forward_pre_hooks  # removed at close
    run = open_run(tmp_path)
    assert run.records() == {"0": {"output": [0, 5, 10]}}
    for step in (0, 5, 10):
        values, header = run.load("0", "output", step)
        np.testing.assert_allclose(values.numpy(), expected[step][header.indices].numpy(), rtol=1e-6)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


@pytest.mark.parametrize("ran_before", ["this model", "another instance"])
def test_a_model_compiled_and_run_before_xray_still_records_its_outputs_and_gradients(tmp_path, ran_before):
    """torch.compile does not guard on module hooks: the code compiled before Xray's hooks were there went
    on running without them, and no output or gradient was ever recorded (a warm-up step, or a baseline run
    of the same class in the same process)."""
    torch.manual_seed(0)
    model = Net()
    compiled = torch.compile(model, backend="eager")
    warm = compiled if ran_before == "this model" else torch.compile(Net(), backend="eager")
    warm(torch.randn(3, 4)).pow(2).mean().backward()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with Xray(compiled, torch.randn(2, 4), logdir=str(tmp_path), plan={"fc1": {"output": True, "grad": True}}) as xray:
        for step in range(3):
            x = torch.randn(3, 4)
            optimizer.zero_grad()
            compiled(x).pow(2).mean().backward()
            xray.take_graphs(step)
            expected = torch.nn.functional.linear(x, model.fc1.weight, model.fc1.bias).detach()
            optimizer.step()
            values, header = open_run(tmp_path).load("fc1", "output", step)
            np.testing.assert_allclose(values.numpy(), expected[header.indices].numpy(), rtol=1e-6)
    assert open_run(tmp_path).records() == {"fc1": {"output": [0, 1, 2], "grad": [0, 1, 2]}}
