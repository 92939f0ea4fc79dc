"""Vanishing gradients in a deep sigmoid MLP; none in healthy ReLU networks (MLP and the digits CNN)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from examples.digits import LeNetDigits, digits_loader
from xray_tb import Xray, open_run
from xray_tb.health import HealthOptions

from tests.health.helpers import batches, scalars

FORBIDDEN_WHEN_HEALTHY = {"vanishing_gradient", "zero_gradient", "exploding_gradient", "saturation", "nonfinite"}


def deep_sigmoid(depth: int = 12) -> nn.Sequential:
    torch.manual_seed(0)
    layers: list = []
    for i in range(depth):
        layers += [nn.Linear(16 if i == 0 else 32, 32), nn.Sigmoid()]
    return nn.Sequential(*layers, nn.Linear(32, 4))


def test_a_deep_sigmoid_mlp_shows_gradients_shrinking_toward_the_input(tmp_path):
    model = deep_sigmoid()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=10, health=HealthOptions(every=1)) as xray:
        for x, y in batches(40):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            last = {name: float(m.weight.grad.norm()) for name, m in model.named_children() if isinstance(m, nn.Linear)}
            xray.take_graphs()
            optimizer.step()
        findings = xray.findings()
    layers, steps, values = open_run(tmp_path).health("grad_l2")
    assert layers == [str(i) for i in range(0, 25, 2)] and len(steps) == 40
    np.testing.assert_allclose(values[:, -1], [last[layer] for layer in layers], rtol=1e-5)
    mean = values.mean(axis=1)
    assert all(a < b for a, b in zip(mean, mean[1:]))  # shrinking toward the input, layer after layer
    vanishing = {f.layer: f for f in findings if f.rule == "vanishing_gradient"}
    assert {"0", "2", "4"} <= set(vanishing)
    rms = values / np.sqrt([[m.weight.numel()] for m in model if isinstance(m, nn.Linear)])
    ratio = rms[0] / rms.max(axis=0)  # the rule's ratio for layer 0, computed here
    assert (ratio < 1e-3).all() and vanishing["0"].step == 19  # held on the 20 iterations 0..19
    assert vanishing["0"].last_step == 39 and vanishing["0"].value == pytest.approx(ratio[39], rel=1e-4)
    assert "ReLU" in vanishing["0"].message


def _digits_training(model, tmp_path, flatten: bool, steps: int, relu_layers: list[str]):
    """Train on the digits with Xray (captures every 10 steps), while the test keeps, at each capture,
    each ReLU layer's largest activation per unit with hooks of its own."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    shape = (64,) if flatten else (1, 8, 8)
    modules = dict(model.named_modules())
    outputs: dict = {}
    hooks = [modules[name].register_forward_hook(lambda m, a, o, name=name: outputs.__setitem__(name, o.detach())) for name in relu_layers]
    maxima: dict = {name: [] for name in relu_layers}
    with Xray(model, input_size=shape, logdir=str(tmp_path), every=10, health=HealthOptions(every=1)) as xray:
        step = 0
        while step < steps:
            for images, labels in digits_loader(32, seed=step):
                optimizer.zero_grad()
                F.cross_entropy(model(images.flatten(1) if flatten else images), labels).backward()
                if step % 10 == 0:
                    for name in relu_layers:
                        activation = F.relu(outputs[name])
                        dim = activation.dim() - 1 if isinstance(modules[name], nn.Linear) else 1
                        maxima[name].append(activation.amax(dim=[d for d in range(activation.dim()) if d != dim]))
                xray.take_graphs()
                optimizer.step()
                step += 1
                if step == steps:
                    break
        findings, dead = xray.findings(), xray.dead_units()
    for hook in hooks:
        hook.remove()
    window = {name: torch.stack(values[-8:]).amax(dim=0) for name, values in maxima.items()}  # the last 8 health steps
    expected = {name: torch.nonzero(largest <= 0).flatten().tolist() for name, largest in window.items()}
    assert dead == {name: units for name, units in expected.items() if units}
    for finding in findings:
        if finding.rule == "dead_units":  # its units never fired over the window ending where it last held
            at = finding.last_step // 10
            largest = torch.stack(maxima[finding.layer][max(at - 7, 0): at + 1]).amax(dim=0)
            assert finding.value == pytest.approx(float((largest <= 0).float().mean())) and finding.value > 0.1
    return findings


def test_a_healthy_relu_mlp_raises_no_gradient_saturation_or_nonfinite_finding(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
    findings = _digits_training(model, tmp_path, flatten=True, steps=120, relu_layers=["0", "2"])
    assert not [f for f in findings if f.rule in FORBIDDEN_WHEN_HEALTHY]
    assert len(scalars(tmp_path)[("0", "grad_l2")]) == 120


@pytest.mark.slow
def test_the_digits_cnn_raises_no_such_finding_and_only_truly_dead_units(tmp_path):
    torch.manual_seed(0)
    model = LeNetDigits()
    findings = _digits_training(model, tmp_path, flatten=False, steps=170, relu_layers=["conv1", "conv2", "fc1", "fc2"])
    assert not [f for f in findings if f.rule in FORBIDDEN_WHEN_HEALTHY], findings
