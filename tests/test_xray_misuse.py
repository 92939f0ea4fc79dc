"""Misuse and awkward models get clear errors or sensible records, never a broken training loop."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from tests.event_files import read_xray_events
from tests.helpers.training import SmallCNN, batch, train_step
from xray_tb import Selection, Selector, Xray


@pytest.fixture
def model():
    torch.manual_seed(0)
    return SmallCNN()


def test_schedule_with_occasional_calls_says_how_to_fix_it(model, tmp_path):
    xray = Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path), plan={"fc1": {"output": True}}, every=2)
    train_step(model, *batch())
    assert xray.take_graphs(0) == 0
    with pytest.warns(UserWarning, match="call it every step .* or pass optimizer="):
        xray.take_graphs(2)
    xray.close()


def test_optimizer_counting_with_the_users_own_step_numbers(model, tmp_path):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    xray = Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path), plan={"fc1": {"output": True}}, every=3, optimizer=optimizer)
    recorded = []
    for step in range(5000, 5007):  # a resumed training: the user's step numbers are not Xray's count
        train_step(model, *batch(step))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            recorded.append(xray.take_graphs(step))
        optimizer.step()
    xray.close()
    assert recorded == [5000, None, None, 5003, None, None, 5006]
    frames, _ = read_xray_events(str(tmp_path))
    assert sorted(step for _, kind, step in frames if kind == "output") == [5000, 5003, 5006]


def test_rejected_plan_in_the_constructor_leaves_nothing_behind(model, tmp_path):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with pytest.raises(ValueError, match="unknown layer"):
        Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path / "run"), plan=["nope"], every=2, optimizer=optimizer)
    assert not (tmp_path / "run").exists()
    assert not optimizer._optimizer_step_post_hooks
    train_step(model, *batch())
    optimizer.step()  # training goes on


class FailsOnSecondLayer(Selector):
    def select(self, tensor, info):
        if info.layer == "fc1":
            raise RuntimeError("selector bug")
        return Selection(tuple(range(tensor.shape[0])))


def test_a_failing_layer_costs_its_own_frame_only(model, tmp_path):
    xray = Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path), plan={"conv": {"output": True}, "fc1": {"output": True}}, selector=FailsOnSecondLayer())
    for step in range(2):
        train_step(model, *batch(step))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert xray.take_graphs(step) == step
        assert xray.last_report.missing == [("fc1", "output", "failed: RuntimeError: selector bug")]
        assert len([w for w in caught if "selector bug" in str(w.message)]) == (1 if step == 0 else 0)  # warned once
    assert xray.records() == {"conv": {"output": [0, 1]}}
    assert any(m._forward_hooks for m in model.modules())  # still armed for the next step
    xray.close()
    frames, _ = read_xray_events(str(tmp_path))
    assert set(frames) == {("conv", "output", 0), ("conv", "output", 1)}


def test_missing_kinds_are_reported_per_layer(model, tmp_path):
    xray = Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path), plan={"conv": {"weight_grad": True}, "fc1": {"weight_grad": True, "grad": True}})
    with pytest.warns(UserWarning) as caught:
        xray.take_graphs(0)
    assert {(layer, kind) for layer, kind, _ in xray.last_report.missing} == {("conv", "weight_grad"), ("fc1", "weight_grad"), ("fc1", "grad")}
    assert any("did not record 'fc1' grad: no forward pass ran" in str(w.message) for w in caught)
    xray.close()


def test_empty_batch_does_not_crash(tmp_path):
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU())
    with Xray(model, input_size=(1, 5, 5), logdir=str(tmp_path), plan={"0": {"output": True}}) as xray:
        model(torch.zeros(0, 1, 5, 5)).sum().backward()
        xray.take_graphs(0)
        values, header = xray.load("0", "output", 0)
    assert header.batch_index is None and header.original_shape == [0, 2, 3, 3] and values.numel() == 0


class Functionals(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 4)
        self.b = nn.Linear(3, 4)
        self.prelu_weight = nn.Parameter(torch.tensor([0.25]))

    def forward(self, x):
        return F.softmax(self.a(x), dim=1, dtype=torch.float64).float() + F.prelu(self.b(x), self.prelu_weight)


def test_recomputed_activations_ignore_dtype_and_skip_tensor_argument_ops(tmp_path):
    torch.manual_seed(0)
    model, x = Functionals(), torch.randn(2, 3)
    with Xray(model, x, logdir=str(tmp_path)) as xray:
        assert xray.plan["a"]["activation"] and not xray.plan["b"]["activation"]  # prelu needs its weight: not recomputed
        model(x).sum().backward()
        xray.take_graphs(0)
        values, _ = xray.load("a", "activation", 0)
    torch.testing.assert_close(values, F.softmax(model.a(x), dim=1).detach())


def test_a_single_layer_model_says_how_to_wrap_it(tmp_path):
    with Xray(nn.Linear(3, 2), input_size=(3,), logdir=str(tmp_path)) as xray:
        assert xray.plan == {}
        with pytest.raises(ValueError, match=r"single layer; wrap it, e.g. Xray\(nn.Sequential\(model\)"):
            xray.set_plan([""])


def test_sparse_weight_grads_are_recorded_dense(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 4, sparse=True), nn.Flatten(), nn.Linear(8, 2))
    tokens = torch.tensor([[1, 2], [3, 1]])
    with Xray(model, tokens, logdir=str(tmp_path), plan={"0": {"weight_grad": True}}) as xray:
        model(tokens).sum().backward()
        xray.take_graphs(0)
        values, _ = xray.load("0", "weight_grad", 0)
    torch.testing.assert_close(values, model[0].weight.grad.to_dense())


def test_closing_the_users_writer_first_is_fine(model, tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    xray = Xray(model, input_size=(1, 8, 8), writer=writer, plan=["conv"])
    train_step(model, *batch())
    xray.take_graphs(0)
    writer.close()
    xray.close()
    frames, _ = read_xray_events(str(tmp_path))
    assert ("conv", "output", 0) in frames


def test_input_size_follows_the_models_dtype(tmp_path):
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).double()
    with Xray(model, input_size=(3,), logdir=str(tmp_path)) as xray:
        assert xray.architecture["nodes"][0]["out_shapes"] == [[2, 3]]


def test_bias_of_a_layer_built_without_one_is_refused(tmp_path):
    model = nn.Sequential(nn.Linear(4, 3, bias=False), nn.ReLU())
    with Xray(model, input_size=(4,), logdir=str(tmp_path), plan={"0": {"weight": True}}) as xray:
        with pytest.raises(ValueError, match=r"'0' \(Linear\) has no bias \(it was built with bias=False\); turn off 'bias' and 'bias_grad'"):
            xray.set_plan({"0": {"weight": True, "bias": True}})
        assert xray.plan["0"]["weight"] and not xray.plan["0"]["bias"]


def test_a_logdir_that_is_a_file_says_to_give_a_folder(tmp_path):
    (tmp_path / "afile").write_text("not a folder")
    for logdir in (tmp_path / "afile", tmp_path / "afile" / "run"):
        with pytest.raises(ValueError, match=r"is a file: give a folder path such as 'runs/exp1'"):
            Xray(nn.Sequential(nn.Linear(4, 2)), torch.randn(2, 4), logdir=logdir)


def test_a_model_without_activations_records_its_layers_outputs(tmp_path):
    """A logistic regression (one Linear, nothing after it): the draft records its output, not nothing."""
    model = nn.Sequential(nn.Linear(4, 2))
    with Xray(model, torch.randn(2, 4), logdir=str(tmp_path)) as xray:
        assert xray.draft_plan()["0"]["output"]
        model(torch.randn(3, 4)).sum().backward()
        xray.take_graphs(0)
        assert xray.records() == {"0": {"output": [0]}}


def test_warnings_point_at_the_users_line(tmp_path):
    """A step going back and a folder holding captures already warn at the user's call, not inside Xray."""
    model = nn.Sequential(nn.Linear(4, 2))
    x = torch.randn(2, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Xray(model, x, logdir=str(tmp_path)) as xray:
            model(x).sum().backward()
            xray.take_graphs(5)
            xray.take_graphs(3)
        Xray(model, x, logdir=str(tmp_path)).close()
    messages = {str(w.message).split(":")[0]: w.filename for w in caught}
    assert any("after step 5" in m for m in messages) and any("already holds Xray captures" in m for m in messages)
    assert set(messages.values()) == {__file__}


def _hooks_on(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_a_second_xray_on_the_same_run_closes_the_first_and_keeps_what_it_recorded(model, tmp_path):
    """A notebook cell run again: the earlier Xray, still alive, would hook the model a second time."""
    first = Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path), plan={"fc1": {"output": True}}, every=1)
    train_step(model, *batch(0))
    first.take_graphs(0)
    alone = _hooks_on(model)
    with pytest.warns(UserWarning, match=r"earlier Xray on this model was still open .* it is closed now") as caught:
        second = Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path), plan={"fc1": {"output": True}}, every=1)
    assert caught[0].filename == __file__  # the warning points at the user's line
    assert first.closed and not second.closed
    assert _hooks_on(model) == alone  # one set of hooks, not two
    train_step(model, *batch(1))
    second.take_graphs(1)
    second.close()
    frames, _ = read_xray_events(str(tmp_path))
    assert {step for (layer, kind, step) in frames} == {0, 1}  # the first Xray's frame is kept


def test_a_second_xray_on_another_run_warns_and_both_record(model, tmp_path):
    first = Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path / "a"), plan={"fc1": {"output": True}}, every=1)
    with pytest.warns(UserWarning, match=r"another Xray on this model is still open and recording into .*a'"):
        second = Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path / "b"), plan={"fc1": {"output": True}}, every=1)
    train_step(model, *batch(0))
    first.take_graphs(0), second.take_graphs(0)
    first.close(), second.close()
    for run in ("a", "b"):
        assert read_xray_events(str(tmp_path / run))[0]


def test_a_second_xray_that_fails_to_build_leaves_the_first_recording(model, tmp_path):
    first = Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path), plan={"fc1": {"output": True}}, every=1)
    with pytest.raises(ValueError, match="unknown layer"):
        Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path), plan=["nope"], every=1)
    assert not first.closed
    train_step(model, *batch(0))
    assert first.take_graphs(0) == 0
    first.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # closed first: nothing to say
        Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path / "next"), plan={"fc1": {"output": True}}, every=1).close()


def test_a_step_captured_again_without_a_step_number_says_why_not_a_step_the_user_never_passed(tmp_path):
    """optimizer= counts optimizer steps: a skipped step makes take_graphs() capture the same step twice,
    and the warning says so, without naming a take_graphs(step=...) call the user never made."""
    model = nn.Sequential(nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Xray(model, torch.randn(2, 4), logdir=str(tmp_path), every=1, optimizer=optimizer) as xray:
            for step in range(3):
                optimizer.zero_grad()
                model(torch.randn(2, 4)).sum().backward()
                xray.take_graphs()
                if step != 1:
                    optimizer.step()  # step 1 skipped: the next call captures step 1 again
    messages = [str(w.message) for w in caught if "again" in str(w.message)]
    assert len(messages) == 1 and messages[0].startswith("take_graphs() captured step 1 again after step 1")
    assert "optimizer steps" in messages[0] and "take_graphs(step=" not in messages[0]
