"""Selectors choose bounded, stable, traceable filters; bad selectors are rejected by name."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from tests.event_files import read_xray_events
from xray_tb import FirstN, KeepAll, RandomFilters, ScoredRows, Selection, SelectionInfo, Selector, TopVariance, Xray

INFO = SelectionInfo(layer="features.3", kind="output", layer_type="Conv2d")


def test_separate_limits_for_filters_and_rows():
    selector = RandomFilters(max_filters=4, max_rows=6)
    assert len(selector.select(torch.zeros(32, 3, 3, 3), INFO).indices) == 4
    assert len(selector.select(torch.zeros(100, 20), INFO).indices) == 6
    assert selector.select(torch.zeros(50), INFO).indices == tuple(range(50))  # a vector is one row
    assert selector.select(torch.zeros(3, 5, 5), INFO).indices == (0, 1, 2)  # fits: kept whole


def test_random_filters_are_seeded_by_layer():
    a = RandomFilters(max_filters=5).select(torch.zeros(64, 3, 3), INFO).indices
    assert a == RandomFilters(max_filters=5).select(torch.ones(64, 8, 8), INFO).indices
    other = SelectionInfo(layer="features.6", kind="output", layer_type="Conv2d")
    assert a != RandomFilters(max_filters=5).select(torch.zeros(64, 3, 3), other).indices
    assert list(a) == sorted(a) and len(set(a)) == 5


def test_keep_all_below_a_size_threshold():
    small, big = torch.zeros(4, 3, 3), torch.zeros(40, 8, 8)
    selector = KeepAll(max_elements=100)
    assert selector.select(small, INFO).indices == (0, 1, 2, 3)
    assert selector.select(big, INFO).indices == RandomFilters().select(big, INFO).indices
    assert KeepAll(max_elements=100, otherwise=FirstN(max_filters=2)).select(big, INFO).indices == (0, 1)


def test_first_n_keep_all_and_top_variance():
    tensor = torch.zeros(10, 4, 4)
    tensor[7] = torch.randn(4, 4) * 10
    tensor[2] = torch.randn(4, 4)
    assert FirstN(max_filters=3).select(tensor, INFO).indices == (0, 1, 2)
    assert KeepAll().select(tensor, INFO).indices == tuple(range(10))
    top = TopVariance(max_filters=2)
    assert top.select(tensor, INFO).indices == (2, 7)
    assert top.select(torch.randn(10, 4, 4), INFO).indices == (2, 7)  # chosen once


class Largest(ScoredRows):
    def score(self, rows):
        return rows.amax(dim=1)


def test_scored_rows_keep_the_rows_of_highest_score_a_nan_last():
    tensor = torch.arange(12.0).reshape(6, 2)
    tensor[5, 0] = float("nan")
    assert Largest(max_rows=2).select(tensor, INFO).indices == (3, 4)
    assert Largest().select(torch.zeros(0, 3), INFO).indices == ()
    assert TopVariance().select(torch.zeros(0, 3, 3), INFO).indices == ()


class Broken(Selector):
    def select(self, tensor, info):
        return Selection((0, tensor.shape[0] + 5))


class NotASelection(Selector):
    def select(self, tensor, info):
        return [0, 1]


class ChoosesNone(Selector):
    def select(self, tensor, info):
        return Selection(())


def tiny():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 4 * 4, 2))


@pytest.mark.parametrize("make, message", [
    (lambda: RandomFilters(-1), r"RandomFilters\(max_filters=...\) takes a whole number >= 1, got -1"),
    (lambda: RandomFilters("8"), r"RandomFilters\(max_filters=...\) takes a whole number >= 1, got '8'"),
    (lambda: RandomFilters(seed="x"), r"RandomFilters\(seed=...\) takes a whole number >= 0, got 'x'"),
    (lambda: FirstN(2.5), r"FirstN\(max_filters=...\) takes a whole number >= 1, got 2.5"),
    (lambda: FirstN(max_rows=0), r"FirstN\(max_rows=...\) takes a whole number >= 1, got 0"),
    (lambda: TopVariance(max_rows=True), r"TopVariance\(max_rows=...\) takes a whole number >= 1, got True"),
    (lambda: KeepAll(0), r"KeepAll\(max_elements=...\) takes a whole number >= 1, got 0"),
    (lambda: KeepAll(otherwise="random"), r"KeepAll\(otherwise=...\) takes a Selector such as RandomFilters\(\), got str"),
])
def test_bad_selector_options_are_refused_when_the_selector_is_made(make, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make()  # not at a capture, where the failed frame would only be reported missing


@pytest.mark.parametrize("selector, message", [(Broken(), r"Broken.select returned indices \[13\] outside"), (NotASelection(), "NotASelection.select must return a Selection, got list"),
                                               (ChoosesNone(), r"ChoosesNone.select returned no index of the first axis of size 8; a frame needs one at least")])
def test_bad_selectors_are_named(tmp_path, selector, message):
    plan = {"0": {"weight": True}, "3": {"weight": True, "selector": KeepAll()}}
    with Xray(tiny(), input_size=(1, 6, 6), logdir=str(tmp_path), plan=plan, selector=selector) as xray:
        with pytest.warns(UserWarning, match=message):
            assert xray.take_graphs(0) == 0  # the selector's bug costs its own frame, not the capture
        assert [(layer, kind) for layer, kind, _ in xray.last_report.missing] == [("0", "weight")]
        assert xray.records() == {"3": {"weight": [0]}}


def test_plan_names_a_selector_per_layer_and_indices_trace_back(tmp_path):
    model = tiny()
    plan = {"0": {"weight": True, "selector": FirstN(max_filters=2)}, "3": {"weight": True}}
    with Xray(model, input_size=(1, 6, 6), logdir=str(tmp_path), plan=plan, selector=KeepAll()) as xray:
        assert isinstance(xray.plan["0"]["selector"], FirstN)
        xray.take_graphs(0)
    frames, documents = read_xray_events(str(tmp_path))
    header, values = frames[("0", "weight", 0)]
    assert header.indices == [0, 1] and header.selector == "FirstN(max_filters=2, max_rows=64)"
    assert values.shape == (2, 1, 3, 3)
    assert frames[("3", "weight", 0)][0].indices == [0, 1]  # KeepAll for the rest
    assert documents["xray/meta/plan"][-1][1]["0"]["selector"] == "FirstN(max_filters=2, max_rows=64)"


def test_tuple_outputs_are_recorded_with_their_paths(tmp_path):
    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(4, 6, batch_first=True)
            self.head = nn.Linear(6, 2)

        def forward(self, x):
            out, (h, c) = self.lstm(x)
            return self.head(out[:, -1])

    torch.manual_seed(0)
    model, x = Classifier(), torch.randn(3, 5, 4)
    with Xray(model, x, logdir=str(tmp_path), plan={"lstm": {"output": True, "grad": True}}) as xray:
        F.cross_entropy(model(x), torch.tensor([0, 1, 1])).backward()
        xray.take_graphs(0)
        assert set(xray.records()) == {"lstm[0]", "lstm[1][0]", "lstm[1][1]"}
    frames, _ = read_xray_events(str(tmp_path))
    header, values = frames[("lstm[0]", "output", 0)]
    assert header.layer == "lstm" and header.path == "[0]" and header.original_shape == [3, 5, 6]
    torch.testing.assert_close(torch.from_numpy(values), model.lstm(x)[0][0].detach())
    assert ("lstm[0]", "grad", 0) in frames  # h and c get no gradient from this loss (only out does)


class NumpyIndices(Selector):
    def select(self, tensor, info):
        import numpy as np

        return Selection(tuple(np.arange(2)))


class BoolIndices(Selector):
    def select(self, tensor, info):
        return Selection((True, False))


def test_numpy_indices_are_whole_numbers_and_bools_are_not(tmp_path):
    with Xray(tiny(), input_size=(1, 6, 6), logdir=str(tmp_path), plan={"0": {"weight": True}}, selector=NumpyIndices()) as xray:
        xray.take_graphs(0)
        assert xray.load("0", "weight", 0)[1].indices == [0, 1]
    with Xray(tiny(), input_size=(1, 6, 6), logdir=str(tmp_path / "b"), plan={"0": {"weight": True}}, selector=BoolIndices()) as xray:
        with pytest.warns(UserWarning, match="BoolIndices.select returned True among its indices"):
            xray.take_graphs(0)
        assert xray.records() == {}


def _train_and_capture(model, x, plan, selector, tmp_path, **options):
    with Xray(model, x, logdir=str(tmp_path), plan=plan, selector=selector, health=False, **options) as xray:
        model(x).pow(2).mean().backward()
        xray.take_graphs(0)
    from xray_tb import open_run

    return open_run(tmp_path)


@pytest.mark.parametrize("plan", [{"conv": {"weight": True, "bias": True}}, {"conv": {"bias": True, "output": True}}])
def test_a_bias_is_kept_whole_and_never_decides_its_layers_filters(tmp_path, plan):
    """ScoredRows chose once per (layer, first-axis size): a bias took its weight's 4 filters, or its whole
    32 became the outputs' choice, past max_filters."""
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("conv", nn.Conv2d(3, 32, 3))
    run = _train_and_capture(model, torch.randn(2, 3, 8, 8), plan, TopVariance(max_filters=4), tmp_path)
    assert run.load("conv", "bias", 0)[1].indices == list(range(32))
    other = "weight" if "weight" in plan["conv"] else "output"
    values, header = run.load("conv", other, 0)
    assert len(header.indices) == 4


def test_a_conv1d_output_shows_the_same_channels_as_its_weights_filters(tmp_path):
    """A sample of a Conv1d output is channels x length: filters, not rows (it kept 64 other channels)."""
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("conv", nn.Conv1d(4, 100, 3))
    model.add_module("act", nn.ReLU())
    plan = {"conv": {"weight": True, "output": True, "activation": True, "grad": True}}
    run = _train_and_capture(model, torch.randn(8, 4, 16), plan, RandomFilters(), tmp_path)
    chosen = {kind: run.load("conv", kind, 0)[1].indices for kind in plan["conv"]}
    assert len(chosen["weight"]) == 16 and all(indices == chosen["weight"] for indices in chosen.values())


def test_float16_storage_keeps_in_float32_a_frame_it_cannot_hold(tmp_path):
    """Values beyond 65504 were stored as infinities that the frame's statistics did not count, and weights
    around 1e-9 as zeros."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8))
    with torch.no_grad():
        model[0].weight.mul_(1e6)
        model[1].weight.mul_(1e-9)
    plan = {name: {"weight": True} for name in ("0", "1", "2")}
    run = _train_and_capture(model, torch.randn(4, 8), plan, KeepAll(), tmp_path, dtype="float16")
    for name, stored in (("0", torch.float32), ("1", torch.float32), ("2", torch.float16)):
        values, header = run.load(name, "weight", 0)
        weight = model[int(name)].weight.detach()
        assert torch.isfinite(values).all()
        torch.testing.assert_close(values, weight.to(stored).float(), rtol=0, atol=0, msg=f"layer {name}")
