"""Bad inputs get a clear error at the call that caused them, and leave nothing changed (issue 8, item 6)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from tests.event_files import read_xray_events
from tests.helpers.training import SmallCNN, batch, train_step
from xray_tb import RandomFilters, Xray


@pytest.fixture
def model():
    torch.manual_seed(0)
    return SmallCNN()


def kwargs(tmp_path, **extra):
    return dict(input_size=(1, 8, 8), logdir=str(tmp_path / "run"), plan={"fc1": {"output": True}}, **extra)


@pytest.mark.parametrize(
    "step, error, message",
    [
        (2**70, ValueError, r"step must fit TensorBoard's int64 steps .* got 1180591620717411303424"),
        (7.9, TypeError, "step must be a whole number \\(an int\\), got float 7.9"),
        (7.0, TypeError, "step must be a whole number \\(an int\\), got float 7.0"),
        (True, TypeError, "step must be a whole number, got the bool True"),
        ("abc", TypeError, "step must be a whole number \\(an int\\), got str 'abc'"),
    ],
)
def test_a_bad_step_is_refused_before_anything_changes(model, tmp_path, step, error, message):
    xray = Xray(model, **kwargs(tmp_path))
    train_step(model, *batch())
    with pytest.raises(error, match=message):
        xray.take_graphs(step)
    assert xray.records() == {}
    assert xray.take_graphs(3) == 3  # the next call works: nothing was left half-changed
    assert xray.take_graphs(np.int64(4)) == 4  # numpy whole numbers are fine
    xray.close()
    frames, _ = read_xray_events(str(tmp_path / "run"))
    assert sorted(frames) == [("fc1", "output", 3), ("fc1", "output", 4)]


def test_steps_at_the_ends_of_int64_are_recorded(model, tmp_path):
    with Xray(model, **kwargs(tmp_path)) as xray:
        train_step(model, *batch())
        assert xray.take_graphs(2**63 - 1) == 2**63 - 1
    frames, _ = read_xray_events(str(tmp_path / "run"))
    assert ("fc1", "output", 2**63 - 1) in frames


@pytest.mark.parametrize(
    "option, error, message",
    [
        (dict(writer="runs/x"), TypeError, r"writer= expects a torch.utils.tensorboard.SummaryWriter, got str; to write into the folder 'runs/x', pass logdir='runs/x'"),
        (dict(optimizer="sgd", every=2), TypeError, r"optimizer= expects the torch.optim.Optimizer that trains the model .* got str 'sgd'"),
        (dict(selector="random"), TypeError, r"selector= expects a xray_tb.Selector instance such as RandomFilters\(\).* got str 'random'"),
        (dict(selector=RandomFilters), TypeError, r"a class: add the parentheses"),
        (dict(plan={"fc1": {"output": "no"}}), ValueError, r"plan\['fc1'\]\['output'\] must be True or False, got str 'no'"),
        (dict(plan={"fc1": {"output": 1}}), ValueError, r"plan\['fc1'\]\['output'\] must be True or False, got int 1"),
        (dict(input_size=(1, 8, 8.7)), ValueError, r"input_size is one sample's shape .* whole positive numbers.* got \(1, 8, 8.7\)"),
        (dict(input_size=(1, 0, 8)), ValueError, r"input_size is one sample's shape"),
        (dict(loss_fn="mse"), TypeError, r"loss_fn= is called as loss_fn\(output, y\)"),
    ],
    ids=["writer-str", "optimizer-str", "selector-str", "selector-class", "plan-str", "plan-int", "input_size-float", "input_size-zero", "loss_fn-str"],
)
def test_bad_options_are_refused_at_construction_with_the_fix(model, tmp_path, option, error, message):
    options = kwargs(tmp_path)
    if "writer" in option:
        options.pop("logdir")
    options.update(option)
    with pytest.raises(error, match=message):
        Xray(model, **options)
    assert not (tmp_path / "run").exists()  # nothing was opened
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_logdir_of_the_wrong_type_says_what_a_logdir_is(model):
    with pytest.raises(TypeError, match=r"logdir= is the run directory, a str or path such as 'runs/exp1'; got int 123"):
        Xray(model, input_size=(1, 8, 8), logdir=123)


def test_a_path_object_is_a_fine_logdir(model, tmp_path):
    with Xray(model, input_size=(1, 8, 8), logdir=tmp_path / "run", plan=["fc1"]) as xray:
        assert xray.logdir == str(tmp_path / "run")


def test_a_wrong_example_input_says_tracing_failed_and_with_which_shape(model, tmp_path):
    with pytest.raises(ValueError, match=r"tracing the model failed with the example input of shape \(2, 3\): RuntimeError: .*example_input="):
        Xray(model, torch.randn(2, 3), logdir=str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_a_model_on_the_meta_device_is_refused_at_construction(tmp_path):
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
    with pytest.raises(ValueError, match=r"'0.weight' is on the 'meta' device .* model.to_empty\(device='cpu'\)"):
        Xray(model, input_size=(3,), logdir=str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_a_closed_xray_still_raises(model, tmp_path):
    xray = Xray(model, **kwargs(tmp_path))
    xray.close()
    with pytest.raises(RuntimeError, match="this Xray is closed"):
        xray.take_graphs(0)


def test_a_step_beyond_what_a_browser_holds_exactly_is_recorded_with_a_warning(model, tmp_path, monkeypatch):
    from xray_tb.trace import arguments

    monkeypatch.setattr(arguments, "_warned_inexact", False)
    with Xray(model, **kwargs(tmp_path)) as xray:
        train_step(model, *batch())
        with pytest.warns(UserWarning, match=r"step 9007199254740993 is beyond 2\*\*53: .* the Xray tab .* cannot show it exactly"):
            assert xray.take_graphs(2**53 + 1) == 2**53 + 1
    frames, _ = read_xray_events(str(tmp_path / "run"))
    assert sorted(frames) == [("fc1", "output", 2**53 + 1)]
