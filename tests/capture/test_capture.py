"""Schedules, probe captures, storage options, statistics and hygiene of the capture engine."""

from __future__ import annotations

import copy
import gc
import io
import pickle
import weakref

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from tests.event_files import read_xray_events
from tests.helpers.training import FULL, SmallCNN, assert_same_state, batch, state_of, train_step
from xray_tb import HealthOptions, Xray, open_run
from xray_tb.health.forward_replay import is_replay_hook
from xray_tb.schedules import at, every


@pytest.fixture
def model():
    torch.manual_seed(0)
    return SmallCNN()


def armed(model):
    """Whether a hook of Xray's is on the model, but training health's pre-hook on the root, which stays
    between health steps (it keeps a reference to each training forward's inputs: xray_tb.health.forward_replay)."""
    return any(m._forward_hooks or [hook for hook in m._forward_pre_hooks.values() if not is_replay_hook(hook)]
               for m in model.modules())


def test_schedule_counts_take_graphs_calls_and_arms_only_due_steps(model, tmp_path):
    xray = Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path), plan={"conv": {"output": True, "grad": True}}, every=3)
    recorded, armed_at = [], []
    for step in range(7):
        armed_at.append(armed(model))
        x, y = batch(step)
        train_step(model, x, y)
        with torch.no_grad():
            model(x)  # an eval forward does not count as a step
        recorded.append(xray.take_graphs())
    xray.close()
    assert recorded == [0, None, None, 3, None, None, 6]
    assert armed_at == [True, False, False, True, False, False, True]
    frames, _ = read_xray_events(str(tmp_path))
    assert sorted({step for _, _, step in frames}) == [0, 3, 6]


def test_schedule_counts_optimizer_steps(model, tmp_path):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    xray = Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path), plan={"fc1": {"output": True}}, every=at([2, 5]), optimizer=optimizer)
    recorded = []
    for step in range(6):
        train_step(model, *batch(step))
        if step in (2, 4, 5):  # the user calls take_graphs only now and then
            recorded.append(xray.take_graphs())
        optimizer.step()
    xray.close()
    assert recorded == [2, None, 5]
    assert not armed(model) and not optimizer._optimizer_step_post_hooks


def test_probe_records_a_fixed_batch_and_leaves_no_trace(model, tmp_path):
    model.add_module("drop", nn.Dropout(0.5))  # consumes RNG in train mode; never called, so untouched
    probe_x, probe_y = batch(seed=42, n=4)
    xray = Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path), plan={"conv": FULL}, probe=(probe_x, probe_y), loss_fn=F.cross_entropy)
    assert not armed(model)  # probe mode needs no hooks between captures
    train_step(model, *batch(0))
    before = state_of(model)
    xray.take_graphs(0)
    assert_same_state(before, state_of(model))
    assert not armed(model)
    xray.close()

    twin = copy.deepcopy(model).eval()
    out = twin.conv(probe_x)
    loss = F.cross_entropy(twin.fc2(twin.act(twin.fc1(twin.flatten(twin.pool(twin.relu(twin.bn(out))))))), probe_y)
    (grad,) = torch.autograd.grad(loss, out)
    frames, _ = read_xray_events(str(tmp_path))
    header, values = frames[("conv", "output", 0)]
    torch.testing.assert_close(torch.from_numpy(values), out[0, header.indices].detach())
    torch.testing.assert_close(torch.from_numpy(frames[("conv", "grad", 0)][1]), grad[0, header.indices])
    torch.testing.assert_close(torch.from_numpy(frames[("conv", "weight_grad", 0)][1]), model.conv.weight.grad[header.indices])


def test_probe_needs_a_loss_for_grads(model, tmp_path):
    with pytest.raises(ValueError, match="give loss_fn="):
        Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path), plan={"conv": {"grad": True}}, probe=batch()[0])
    with Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path), plan=["conv"]) as xray:
        x, y = batch()
        for step in range(2):
            train_step(model, x, y)
            assert xray.take_graphs() == step
        with pytest.raises(ValueError, match="needs a probe batch"):
            xray.take_graphs(probe=True)
        assert xray.take_graphs() == 2  # refused before anything changed: the step count too (it said 3)
        assert xray.records()["conv"]["output"] == [0, 1, 2]


def test_a_probe_the_model_or_its_loss_cannot_take_is_refused_at_construction(model, tmp_path):
    x, y = batch(n=4)
    train_step(model, x, y)  # gradients and BatchNorm statistics to keep
    before = state_of(model)
    with pytest.raises(ValueError, match=r"probe= does not run through the model: model\(probe\) failed with inputs of "
                                         r"shape \(4, 1, 6, 6\): RuntimeError"):
        Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path / "run"), probe=(x[:, :, :6, :6], y), loss_fn=F.cross_entropy)
    with pytest.raises(ValueError, match=r"loss_fn= fails on the probe batch: loss_fn\(output, y\) raised ValueError: "
                                         r"Expected input batch_size \(4\) to match target batch_size \(3\)"):
        Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path / "run"), probe=(x, y[:3]), loss_fn=F.cross_entropy)
    assert not (tmp_path / "run").exists()  # refused before anything was written
    assert_same_state(before, state_of(model))  # the check's forward left no trace (eval mode, no gradients)
    with Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path / "run"), probe=(x, y), loss_fn=F.cross_entropy):
        assert_same_state(before, state_of(model))  # a probe that runs is checked the same way
    assert not armed(model)


def test_float16_storage_budget_and_report(model, tmp_path):
    x, y = batch()
    xray = Xray(model, x, logdir=str(tmp_path), plan={"conv": FULL, "fc1": {"output": True}}, dtype="float16", budget_bytes=1000)
    train_step(model, x, y)
    with pytest.warns(UserWarning, match="budget of 1000 bytes and skipped"):
        xray.take_graphs(0)
    report = xray.last_report
    xray.close()
    frames, _ = read_xray_events(str(tmp_path))
    assert report.bytes <= 1000 and report.frames == len(frames) and report.skipped
    for (layer, kind, _), (_, values) in frames.items():  # float16, but a frame it cannot hold (gradients below 6.1e-5)
        tiny = np.nanmax(np.abs(values)) < np.finfo(np.float16).tiny
        assert values.dtype == (np.float32 if tiny else np.float16), (layer, kind)
    header, values = frames[("conv", "weight", 0)]
    np.testing.assert_array_equal(values, model.conv.weight.detach()[header.indices].numpy().astype(np.float16))


def test_statistics_are_scalars_over_the_whole_tensor(model, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    x, y = batch()
    with Xray(model, x, logdir=str(tmp_path), plan={"conv": {"weight": True}}, layer_scalars=True) as xray:
        train_step(model, x, y)
        with torch.no_grad():
            model.conv.weight[0, 0, 0, 0] = float("nan")
        xray.take_graphs(3)
    scalars = EventAccumulator(str(tmp_path)).Reload()
    value = lambda stat: scalars.Scalars(f"xray_stats/conv/weight/{stat}")[0].value  # noqa: E731
    assert scalars.Scalars("xray_stats/conv/weight/mean")[0].step == 3
    assert value("nonfinite") == 1 and np.isnan(value("mean")) and np.isnan(value("max"))
    frames, _ = read_xray_events(str(tmp_path))
    assert np.isnan(frames[("conv", "weight", 3)][1]).sum() == 1  # recorded as it is


def test_statistics_values(model, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    x, y = batch()
    with Xray(model, x, logdir=str(tmp_path), plan={"fc1": {"weight": True}}, layer_scalars=True) as xray:
        xray.take_graphs(0)
    scalars = EventAccumulator(str(tmp_path)).Reload()
    weight = model.fc1.weight.detach()
    for stat, expected in {"mean": weight.mean(), "std": weight.std(), "min": weight.min(), "max": weight.max()}.items():
        assert scalars.Scalars(f"xray_stats/fc1/weight/{stat}")[0].value == pytest.approx(float(expected), rel=1e-5)


def test_hooks_removed_when_garbage_collected(model, tmp_path):
    xray = Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path), plan=["conv"])
    assert armed(model)
    reference = weakref.ref(xray)
    del xray
    gc.collect()
    assert reference() is None and not armed(model)


@pytest.mark.filterwarnings("ignore:take_graphs")
def test_model_with_xray_attached_pickles_copies_and_saves(model, tmp_path):
    xray = Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path), plan={"conv": FULL})
    train_step(model, *batch())
    twin = copy.deepcopy(model)
    restored = pickle.loads(pickle.dumps(model))
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    x = batch(1)[0]
    for other in (twin, restored, loaded):
        torch.testing.assert_close(other(x), model(x))
    xray.take_graphs(0)
    xray.close()


def test_bad_options_say_what_is_wrong(model, tmp_path):
    kwargs = dict(input_size=(1, 8, 8), logdir=str(tmp_path))
    with pytest.raises(ValueError, match="'float32' or 'float16'"):
        Xray(model, dtype="int8", **kwargs)
    with pytest.raises(ValueError, match="positive number of bytes"):
        Xray(model, budget_bytes=0, **kwargs)
    with pytest.raises(TypeError, match="every= takes a whole number"):
        Xray(model, every="often", **kwargs)
    with pytest.raises(ValueError, match="every\\(n\\) needs a whole number n >= 1"):
        every(0)
    with pytest.raises(ValueError, match=r"every= takes a whole number of steps >= 1 or a callable step -> bool, got 0"):
        Xray(model, every=0, **kwargs)
    with pytest.raises(ValueError, match=r"every\(n, offset=...\) needs a whole number, the first due step; got 2.5"):
        every(5, offset=2.5)
    for steps, wrong in (("15", "'15'"), ([10, 20.5], "20.5 among them"), (None, "None")):  # at("15") is not steps 1 and 5
        with pytest.raises(TypeError, match=rf"at\(steps\) takes .*such as at\(\[0, 50, 1000\]\); got {wrong}"):
            at(steps)
    assert at(100).steps == {100} and at(np.arange(0, 30, 10)).steps == {0, 10, 20} and every(np.int64(5))(10)
    with pytest.raises(TypeError, match=r"HealthOptions\(activations=...\) takes a whole number of steps or a callable"):
        HealthOptions(activations="captures")
    with pytest.raises(ValueError, match="give every= too"):
        Xray(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), **kwargs)


def test_records_lists_what_was_written(model, tmp_path):
    with Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path), plan={"conv": {"weight": True, "grad": True}}) as xray:
        for step in (0, 5):
            train_step(model, *batch(step))
            xray.take_graphs(step)
        assert xray.records() == {"conv": {"weight": [0, 5], "grad": [0, 5]}}


def test_a_schedule_is_asked_once_per_step(model, tmp_path):
    asked = []

    def coin(step):
        asked.append(step)
        return len(asked) % 2 == 1  # answers differently when asked again

    xray = Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path), plan={"fc1": {"output": True}}, every=coin)
    for step in range(4):
        train_step(model, *batch(step))
        xray.take_graphs()
    xray.close()
    assert asked == [0, 1, 2, 3, 4]  # 4: arming for the next step


@pytest.mark.parametrize("every", [None, 2])
def test_a_loop_that_calls_a_submodule_and_never_the_root_still_records_outputs(tmp_path, every):
    """Call counts restart every step (at take_graphs()), not only in the root's forward."""

    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))

        def forward(self, x):
            return self.net(x)

    torch.manual_seed(0)
    model = Wrapper()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    expected = {}
    with Xray(model, torch.randn(2, 4), logdir=str(tmp_path), every=every, plan={"net.0": {"output": True}}, health=False) as xray:
        for step in range(4):
            x = torch.randn(3, 4)
            optimizer.zero_grad()
            model.net(x).sum().backward()  # the root module's forward never runs
            expected[step] = model.net[0](x).detach()
            xray.take_graphs(step)
            optimizer.step()
    run = open_run(tmp_path)
    steps = [0, 1, 2, 3] if every is None else [0, 2]
    assert run.records() == {"net.0": {"output": steps}}
    for step in steps:
        values, header = run.load("net.0", "output", step)
        np.testing.assert_allclose(values.numpy(), expected[step][header.indices].numpy(), rtol=1e-6)


def test_sparse_captures_of_a_loop_that_never_runs_the_root_record_the_latest_forward(tmp_path):
    """Without a schedule the hooks stay armed over the steps between two take_graphs() calls; each
    forward that bypasses the root still keeps its own outputs (calls counted per traced forward),
    also for a module called twice per forward, and the gradients are those of the latest backward."""

    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = Twice()

        def forward(self, x):
            return self.net(x)

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.shared = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x):
            return self.shared(torch.tanh(self.shared(self.first(x))))

    torch.manual_seed(0)
    model = Wrapper()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    plan = {"net.first": {"output": True, "grad": True}, "net.shared": {"output": True}}
    expected = {}
    with Xray(model, torch.randn(2, 4), logdir=str(tmp_path), plan=plan, health=False) as xray:
        for step in range(25):
            x = torch.randn(3, 4)
            optimizer.zero_grad()
            first_layer, shared = model.net.first, model.net.shared  # the reference calls no module
            first = F.linear(x, first_layer.weight, first_layer.bias).detach().requires_grad_()
            F.linear(torch.tanh(F.linear(first, shared.weight, shared.bias)), shared.weight, shared.bias).sum().backward()
            expected[step] = (first.detach(), F.linear(first, shared.weight, shared.bias).detach(), first.grad)
            optimizer.zero_grad()
            model.net(x).sum().backward()  # the root module's forward never runs
            if step % 10 == 0:
                xray.take_graphs(step)
            optimizer.step()
    run = open_run(tmp_path)
    assert run.records() == {"net.first": {"output": [0, 10, 20], "grad": [0, 10, 20]}, "net.shared": {"output": [0, 10, 20]}}
    for step in (0, 10, 20):
        output, grad, shared = (run.load(*key, step) for key in (("net.first", "output"), ("net.first", "grad"), ("net.shared", "output")))
        np.testing.assert_allclose(output[0].numpy(), expected[step][0][output[1].indices].numpy(), rtol=1e-6)
        np.testing.assert_allclose(shared[0].numpy(), expected[step][1][shared[1].indices].numpy(), rtol=1e-6)
        np.testing.assert_allclose(grad[0].numpy(), expected[step][2][grad[1].indices].numpy(), rtol=1e-5)


def test_a_forward_that_calls_a_module_more_often_than_the_trace_still_records_its_first_call(tmp_path):
    """Calls are counted from the root's forward when it runs: a dynamic loop longer than the traced one
    does not wrap around to the traced count (that is for forwards that bypass the root)."""

    class Loop(nn.Module):
        def __init__(self):
            super().__init__()
            self.shared, self.turns = nn.Linear(4, 4), 2

        def forward(self, x):
            for _ in range(self.turns):
                x = torch.tanh(self.shared(x))
            return x

    torch.manual_seed(0)
    model = Loop()
    with Xray(model, torch.randn(2, 4), logdir=str(tmp_path), plan={"shared": {"output": True}}, health=False) as xray:
        model.turns = 3  # one call more than the trace saw
        x = torch.randn(3, 4)
        model(x).sum().backward()
        xray.take_graphs(0)
    values, header = open_run(tmp_path).load("shared", "output", 0)
    first = F.linear(x, model.shared.weight, model.shared.bias).detach()
    np.testing.assert_allclose(values.numpy(), first[header.indices].numpy(), rtol=1e-6)


class Skippable(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.use_b = True

    def forward(self, x):
        x = torch.relu(self.a(x))
        return self.b(x) if self.use_b else x


def test_without_a_schedule_a_layer_the_forward_skipped_is_missing_not_its_last_output_again(tmp_path):
    """Without every=, the kept outputs were never cleared between captures: step 1 recorded step 0's
    output and gradient again, bit for bit, with nothing said."""
    torch.manual_seed(0)
    model = Skippable()
    with Xray(model, torch.randn(3, 4), logdir=str(tmp_path), health=False, plan={"b": {"output": True, "grad": True}}) as xray:
        for step, use in enumerate([True, False, True]):
            model.use_b = use
            model.zero_grad()
            model(torch.randn(3, 4)).sum().backward()
            xray.take_graphs(step)
            if not use:
                assert xray.last_report.missing == [("b", "output", "forward"), ("b", "grad", "forward")]
    assert xray.records()["b"] == {"output": [0, 2], "grad": [0, 2]}
