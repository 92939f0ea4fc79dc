"""Saturation, variance across channels and weight histograms, each checked against the test's own numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tensorboard.plugins.histogram import summary_v2
from tensorboard.util import tensor_util
from torch import nn
from torch.nn import functional as F

from tb_plugin import health_metadata
from xray_tb import Xray
from xray_tb.capture.shared_reductions import SharedReductions
from xray_tb.health import HealthOptions
from xray_tb.health.stats.saturation import saturated, saturated_fraction

from tests.health.helpers import scalars, values_by_tag


def _tanh_run(tmp_path, scale: float):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(1)
    expected = {}
    with Xray(model, input_size=(8,), logdir=str(tmp_path), every=2, health=HealthOptions(every=1)) as xray:
        for step in range(6):
            x, y = torch.randn(64, 8, generator=generator) * scale, torch.randint(0, 3, (64,), generator=generator)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            if step % 2 == 0:
                with torch.no_grad():
                    expected[step] = float((torch.tanh(model[0](x)).abs() >= 0.99).double().mean())
            xray.take_graphs()
            optimizer.step()
        findings = xray.findings()
    return scalars(tmp_path)[("0", "saturation")], expected, findings


def test_inputs_times_100_into_tanh_saturate_it_and_normal_inputs_do_not(tmp_path):
    got, expected, findings = _tanh_run(tmp_path / "big", 100.0)
    assert sorted(got) == [0, 2, 4] and all(got[s] == pytest.approx(expected[s], abs=1e-6) for s in got)
    assert min(got.values()) > 0.9
    assert [(f.rule, f.layer, f.step) for f in findings if f.rule == "saturation"] == [("saturation", "0", 0)]
    got, expected, findings = _tanh_run(tmp_path / "normal", 1.0)
    assert all(got[s] == pytest.approx(expected[s], abs=1e-6) for s in got) and max(got.values()) < 0.05
    assert not [f for f in findings if f.rule == "saturation"]


@pytest.mark.parametrize(
    "activation, params, values, expected",
    [
        ("Sigmoid", {}, [0.005, 0.5, 0.995, 0.999], 0.75),
        ("tanh", {}, [-0.995, 0.0, 0.5, 0.989], 0.25),
        ("Hardtanh", {"min_val": -2.0, "max_val": 2.0}, [-2.0, 2.0, 1.9, 0.0], 0.5),
        ("ReLU6", {}, [0.0, 6.0, 5.9, 6.0], 0.5),
        ("ReLU", {}, [0.0, 1.0], None),
    ],
)
def test_saturation_by_activation_type(activation, params, values, expected):
    result = saturated_fraction(activation, params, torch.tensor(values), margin=0.01)
    assert (result is None) if expected is None else float(result) == pytest.approx(expected)


@pytest.mark.parametrize("activation, params", [("tanh", {}), ("Sigmoid", {}), ("Hardtanh", {"min_val": -2.0, "max_val": 2.0}),
                                                 ("ReLU6", {}), ("Hardtanh", {"min_val": 1.0, "max_val": -1.0})])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_saturation_counted_through_shared_reductions_equals_the_torch_mask(activation, params, dtype):
    """On a CPU the saturated share is counted from the shared reductions (nothing counted when the
    extremes lie inside the bounds): the same number as the mask, with a NaN, at the bounds themselves
    and for bounds that cross (the mask's own path)."""
    generator = torch.Generator().manual_seed(0)
    at_bounds = torch.tensor({"tanh": [0.99, -0.99], "Sigmoid": [0.01, 0.99], "ReLU6": [6.0, 0.0]}.get(activation, [2.0, -2.0]))
    for scale, planted in [(0.05, None), (0.05, at_bounds), (0.05, at_bounds[1:]), (4.0, at_bounds), (4.0, torch.tensor([math.nan, 6.0]))]:
        values = (torch.randn(64, 100, generator=generator) * scale).clamp(-1.9, 5.9)
        values = torch.sigmoid(values * 3) if activation == "Sigmoid" else torch.tanh(values) if activation == "tanh" else values
        if planted is not None:  # the extremes exactly at the bounds, or a NaN
            values[0, :len(planted)] = planted
        tensor = values.to(dtype)
        shared = saturated_fraction(activation, params, tensor, 0.01, SharedReductions())
        assert float(shared) == float(saturated(activation, params, tensor, 0.01).float().mean())


def test_softmax_saturation_counts_rows_near_one_hot():
    rows = torch.tensor([[0.995, 0.005, 0.0], [0.5, 0.25, 0.25], [0.0, 1.0, 0.0], [0.3, 0.3, 0.4]])
    assert float(saturated_fraction("softmax", {"dim": 1}, rows, margin=0.01)) == 0.5
    assert float(saturated_fraction("Softmax", {"dim": 0}, rows.T, margin=0.01)) == 0.5


def _train(model: nn.Module, xray: Xray, batches: list, every: int, note) -> None:
    """Train ``model`` on ``batches`` (SGD), calling ``note(step, x)`` (no grad) before each capture."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, (x, y) in enumerate(batches):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        if step % every == 0:
            with torch.no_grad():
                note(step, x)
        xray.take_graphs()
        optimizer.step()


def _channel_var_vectors(logdir) -> dict[int, np.ndarray]:
    """Layer ``"0"``'s per-channel variances at each health step, read back from the event files."""
    tag = health_metadata.vector_tag("channel_var")
    return {step: health_metadata.decode_vectors(list(tensor_util.make_ndarray(value.tensor)))["0"]
            for step, value in values_by_tag(logdir, tag)[tag]}


def _batches(steps: int, shape: tuple, scale: float, seed: int) -> list:
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(*shape, generator=generator) * scale, torch.randint(0, 3, (shape[0],), generator=generator)) for _ in range(steps)]


def test_a_linear_layers_channel_variance_and_saturation_read_back_equal_numpy(tmp_path):
    """Features last (a linear layer's activation): the per-feature variances and the saturation written
    at each capture equal numpy's on the same activation (the blocked row sums, end to end)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 24), nn.Sigmoid(), nn.Linear(24, 3))
    variances, saturations = {}, {}

    def note(step, x):
        activation = torch.sigmoid(model[0](x)).double().numpy()
        variances[step] = activation.var(axis=0, ddof=1)
        saturations[step] = float(((activation <= 0.01) | (activation >= 0.99)).mean())

    with Xray(model, input_size=(8,), logdir=str(tmp_path), every=2, health=HealthOptions(every=1)) as xray:
        _train(model, xray, _batches(5, (37, 8), 10.0, seed=2), 2, note)
    vectors = _channel_var_vectors(tmp_path)
    assert sorted(vectors) == [0, 2, 4]
    for step, vector in vectors.items():
        np.testing.assert_allclose(vector, variances[step], rtol=1e-5)
    saturation = scalars(tmp_path)[("0", "saturation")]
    assert min(saturations.values()) > 0.05  # inputs scaled by 10: some units sit at the bounds
    assert all(saturation[s] == pytest.approx(saturations[s], abs=1e-6) for s in saturations)


def test_channel_variance_vectors_and_weight_histograms(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 3))
    variances, weights = {}, {}

    def note(step, x):
        activation = F.relu(model[0](x)).double().numpy()
        variances[step] = activation.transpose(1, 0, 2, 3).reshape(4, -1).var(axis=1, ddof=1)
        weights[step] = {name: model[int(name)].weight.detach().numpy().copy() for name in ("0", "3")}

    with Xray(model, input_size=(1, 6, 6), logdir=str(tmp_path), every=3, health=HealthOptions(every=1, histograms_every=1)) as xray:
        _train(model, xray, _batches(7, (16, 1, 6, 6), 1.0, seed=0), 3, note)
    vectors = _channel_var_vectors(tmp_path)
    assert sorted(vectors) == [0, 3, 6]
    for step, vector in vectors.items():
        np.testing.assert_allclose(vector, variances[step], rtol=1e-5)
    channel_var = scalars(tmp_path)[("0", "channel_var")]
    assert all(channel_var[s] == pytest.approx(variances[s].mean(), rel=1e-5) for s in variances)
    # Weight histograms of the planned layers at each capture, in TensorBoard's histogram format.
    histograms = values_by_tag(tmp_path, health_metadata.HISTOGRAM_PREFIX)
    assert set(histograms) == {health_metadata.histogram_tag("0"), health_metadata.histogram_tag("3")}
    for layer in ("0", "3"):
        written = histograms[health_metadata.histogram_tag(layer)]
        assert [step for step, _ in written] == [0, 3, 6]
        for step, value in written:
            assert value.metadata.plugin_data.plugin_name == "histograms"
            reference = summary_v2.histogram_pb("t", weights[step][layer]).value[0]
            np.testing.assert_allclose(tensor_util.make_ndarray(value.tensor), tensor_util.make_ndarray(reference.tensor), rtol=1e-6)


def test_weight_histograms_are_written_at_captures_histograms_every_steps_apart(tmp_path):
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with Xray(model, input_size=(4,), logdir=str(tmp_path), every=10) as xray:  # the default: 100 steps apart
        for step in range(250):
            optimizer.zero_grad()
            model(torch.randn(8, 4)).sum().backward()
            xray.take_graphs()
            optimizer.step()
    written = values_by_tag(tmp_path, health_metadata.HISTOGRAM_PREFIX)
    assert written and all([step for step, _ in values] == [0, 100, 200] for values in written.values())
    with pytest.raises(ValueError, match="histograms_every"):
        HealthOptions(histograms_every=0)


def test_a_channel_dim_that_some_activations_lack_is_said_once_and_the_others_are_measured(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 3), nn.ReLU())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(UserWarning, match=r"channel_dim=2\) is not a dimension of the activations of 3 \(2-D\)") as caught:
        with Xray(model, input_size=(1, 6, 6), logdir=str(tmp_path), every=1, health=HealthOptions(every=1, channel_dim=2)) as xray:
            for _ in range(3):
                optimizer.zero_grad()
                F.cross_entropy(model(torch.randn(8, 1, 6, 6)), torch.randint(0, 3, (8,))).backward()
                xray.take_graphs()
                optimizer.step()
    assert sum("channel_dim" in str(w.message) for w in caught) == 1
    channel_var = scalars(tmp_path)
    assert ("0", "channel_var") in channel_var and ("3", "channel_var") not in channel_var  # rows of the conv: measured
