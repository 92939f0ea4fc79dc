"""The first non-finite value: a planted NaN weight is named at its step and layer; a model driven to
blow up is flagged no later than the first non-finite value the test sees."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from xray_tb import Xray, open_run
from xray_tb.health import HealthOptions
from xray_tb.health import NonFinite

from tests.health.helpers import batches, relu_mlp, scalars


def test_a_weight_set_to_nan_is_named_with_its_step_and_layer(tmp_path):
    model = relu_mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=5, health=HealthOptions(every=1)) as xray:
        for step, (x, y) in enumerate(batches(12)):
            if step == 7:
                with torch.no_grad():
                    model[2].weight[3, 1] = float("nan")
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            xray.take_graphs()
            optimizer.step()
            if step == 6:
                assert xray.first_nonfinite is None
        assert xray.first_nonfinite == NonFinite(step=7, layer="2", kind="weight")
        findings = [f for f in xray.findings() if f.rule == "nonfinite"]
    assert [(f.layer, f.step) for f in findings] == [("2", 7)] and math.isnan(findings[0].value)
    assert [(f.rule, f.layer, f.step) for f in open_run(tmp_path).findings() if f.rule == "nonfinite"] == [("nonfinite", "2", 7)]
    written = scalars(tmp_path)
    assert math.isnan(written[("2", "weight_l2")][7]) and math.isfinite(written[("2", "weight_l2")][6])  # written as they are


def test_only_gradients_non_finite_names_the_latest_layer_where_backward_starts(tmp_path):
    model = relu_mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=100, health=HealthOptions(every=1)) as xray:
        for step, (x, y) in enumerate(batches(4)):
            optimizer.zero_grad()
            out = model(x)
            loss = F.cross_entropy(out, y) + (0.0 * out).sum() * (float("inf") if step == 2 else 1.0)  # an Inf gradient into the last layer
            loss.backward()
            xray.take_graphs()
            optimizer.step()
        assert xray.first_nonfinite == NonFinite(step=2, layer="4", kind="weight_grad")


def test_a_model_driven_to_blow_up_is_flagged_no_later_than_its_first_non_finite_value(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=5.0)  # far too high
    seen_nonfinite = None
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=10, health=HealthOptions(every=1)) as xray:
        for step, (x, _) in enumerate(batches(60)):
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), x.sum(dim=1, keepdim=True))
            loss.backward()
            finite = torch.isfinite(loss) and all(torch.isfinite(p).all() and torch.isfinite(p.grad).all() for p in model.parameters())
            if not finite and seen_nonfinite is None:
                seen_nonfinite = step
            xray.take_graphs()
            optimizer.step()
        findings = xray.findings()
    assert seen_nonfinite is not None  # it really blew up
    flagged = [f for f in findings if f.rule in ("exploding_gradient", "nonfinite")]
    assert flagged and min(f.step for f in flagged) <= seen_nonfinite
    assert any(f.rule == "exploding_gradient" and f.step < seen_nonfinite for f in flagged)


@pytest.mark.parametrize("plant, step, layer, kind", [("grad", 47, "6", "weight_grad"), ("weight", 53, "4", "weight")])
def test_a_nan_among_many_layers_of_one_shape_is_named_at_its_step_and_layer_at_the_default_pace(tmp_path, plant, step, layer, kind):
    """Six Linear(16, 16) layers, whose gradients and weights the CPU sentinel sums as one batch
    (health.cpu_batches): the batch's sum trips, and each tensor is then checked on its own. Past the
    pace's warm-up, where most iterations are not measured, only the sentinel sees the gradient."""
    model = relu_mlp(sizes=(16, 16, 16, 16, 16, 16, 16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    target = model[int(layer)].weight
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=10) as xray:
        for index, (x, y) in enumerate(batches(60)):
            if plant == "weight" and index == step:
                with torch.no_grad():
                    target[5, 2] = float("inf")
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            if plant == "grad" and index == step:
                target.grad[2, 3] = float("nan")
            xray.take_graphs()
            optimizer.step()
        assert xray.first_nonfinite == NonFinite(step=step, layer=layer, kind=kind)
