"""The recorder records the real numbers, leaves the model alone, and says what was wrong."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from tests.event_files import read_xray_events
from tests.helpers.training import FULL, SmallCNN, assert_same_state, batch, state_of, train_step
from xray_tb import FirstN, RandomFilters, Xray


def reference_output_grads(model, x, y, layers):
    """d loss / d output of each layer, by autograd on a hook-free copy of the model."""
    twin = copy.deepcopy(model)
    outputs = {}
    handles = [dict(twin.named_modules())[name].register_forward_hook(lambda m, i, o, name=name: outputs.__setitem__(name, o)) for name in layers]
    loss = F.cross_entropy(twin(x), y)
    grads = torch.autograd.grad(loss, [outputs[name] for name in layers])
    for h in handles:
        h.remove()
    return {name: (outputs[name].detach(), g) for name, g in zip(layers, grads)}


@pytest.fixture
def model():
    torch.manual_seed(0)
    return SmallCNN()


def test_frames_equal_parameters_outputs_and_autograd(model, tmp_path):
    x, y = batch()
    xray = Xray(model, x, logdir=str(tmp_path), plan={"conv": FULL, "fc1": FULL}, selector=RandomFilters(max_filters=4, max_rows=3))
    train_step(model, x, y)
    reference = reference_output_grads(model, x, y, ["conv", "fc1"])
    xray.take_graphs(7)
    xray.close()
    frames, _ = read_xray_events(str(tmp_path))

    header, values = frames[("conv", "weight", 7)]
    assert header.original_shape == [6, 1, 3, 3] and len(header.indices) == 4 and header.dim == 0
    torch.testing.assert_close(torch.from_numpy(values), model.conv.weight.detach()[header.indices])
    header, values = frames[("conv", "weight_grad", 7)]
    torch.testing.assert_close(torch.from_numpy(values), model.conv.weight.grad[header.indices])
    for layer in ("conv", "fc1"):  # a bias is a vector, kept whole
        bias = dict(model.named_modules())[layer].bias
        header, values = frames[(layer, "bias", 7)]
        assert header.original_shape == list(bias.shape) and header.indices == list(range(bias.numel()))
        torch.testing.assert_close(torch.from_numpy(values), bias.detach())
        torch.testing.assert_close(torch.from_numpy(frames[(layer, "bias_grad", 7)][1]), bias.grad)
    # The bias gradient is the summed output gradient: checked against autograd, not just .grad.
    torch.testing.assert_close(torch.from_numpy(frames[("conv", "bias_grad", 7)][1]), reference["conv"][1].sum(dim=(0, 2, 3)))

    out, grad = reference["conv"]
    for kind, expected in (("output", out), ("grad", grad)):
        header, values = frames[("conv", kind, 7)]
        assert header.batch_index == 0 and header.dim == 1 and header.original_shape == [5, 6, 8, 8]
        torch.testing.assert_close(torch.from_numpy(values), expected[0, header.indices])
    # conv → BatchNorm → ReLU: the ReLU is the conv's activation (through the norm layer).
    header, values = frames[("conv", "activation", 7)]
    bn_out = F.batch_norm(out, None, None, model.bn.weight, model.bn.bias, training=True)
    torch.testing.assert_close(torch.from_numpy(values), torch.relu(bn_out)[0, header.indices].detach(), atol=1e-5, rtol=1e-4)

    out, grad = reference["fc1"]
    header, values = frames[("fc1", "grad", 7)]
    assert header.batch_index is None and header.original_shape == [5, 20] and len(header.indices) == 3
    torch.testing.assert_close(torch.from_numpy(values), grad[header.indices])
    header, values = frames[("fc1", "activation", 7)]
    torch.testing.assert_close(torch.from_numpy(values), torch.tanh(out)[header.indices])


def test_same_indices_across_captures_and_kinds(model, tmp_path):
    xray = Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path), plan={"conv": FULL}, selector=RandomFilters(max_filters=3))
    for step in range(3):
        x, y = batch(step)
        train_step(model, x, y)
        xray.take_graphs()
    xray.close()
    frames, _ = read_xray_events(str(tmp_path))
    kinds = [kind for kind in FULL if not kind.startswith("bias")]  # a bias vector is kept whole
    indices = {frames[("conv", kind, step)][0].indices.__repr__() for kind in kinds for step in range(3)}
    assert len(indices) == 1 and len(eval(indices.pop())) == 3
    assert sorted({key[2] for key in frames}) == [0, 1, 2]  # step=None counts captures


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_model_untouched(model, tmp_path, mode):
    x, y = batch()
    train_step(model, x, y)  # .grad present and BatchNorm stats moved
    getattr(model, mode)()
    model.fc2.eval()  # mixed modes survive too
    before = state_of(model)
    hooks_before = {k: (dict(m._forward_hooks), dict(m._forward_pre_hooks), dict(m._backward_hooks)) for k, m in model.named_modules()}
    xray = Xray(model, x, logdir=str(tmp_path), plan={"conv": FULL, "fc1": FULL, "fc2": dict(FULL, activation=False)})
    assert_same_state(before, state_of(model))
    train_step(model, x, y)
    before = state_of(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # everything planned is there to record
        xray.take_graphs(0)
    assert_same_state(before, state_of(model))
    xray.close()
    hooks_after = {k: (dict(m._forward_hooks), dict(m._forward_pre_hooks), dict(m._backward_hooks)) for k, m in model.named_modules()}
    assert hooks_after == hooks_before


def test_context_manager_removes_hooks(model, tmp_path):
    from xray_tb.trace.state import _HOOK_REGISTRIES

    with Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path)) as xray:
        assert any(m._forward_hooks for m in model.modules())
        assert model._load_state_dict_post_hooks  # training health finds parameters a checkpoint replaced
    assert not any(getattr(m, name, None) for m in model.modules() for name in _HOOK_REGISTRIES)  # every kind of hook
    with pytest.raises(RuntimeError, match="closed"):
        xray.take_graphs()


def test_validation_forward_does_not_replace_training_frames(model, tmp_path):
    x, y = batch(0)
    xray = Xray(model, x, logdir=str(tmp_path), plan={"fc1": {"output": True}}, selector=FirstN())
    train_step(model, x, y)
    expected = model.fc1(model.flatten(model.pool(model.relu(model.bn(model.conv(x)))))).detach()
    with torch.no_grad():
        model(batch(1)[0])
    xray.take_graphs(1)
    xray.close()
    frames, _ = read_xray_events(str(tmp_path))
    torch.testing.assert_close(torch.from_numpy(frames[("fc1", "output", 1)][1]), expected)


def test_writer_shares_the_users_run(model, tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    x, y = batch()
    xray = Xray(model, x, writer=writer, plan=["conv"])
    writer.add_scalar("loss", 1.0, 0)
    train_step(model, x, y)
    xray.take_graphs(0)
    xray.close()
    writer.close()
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 1
    frames, documents = read_xray_events(str(tmp_path))
    assert {(layer, kind) for layer, kind, _ in frames} == {("conv", "output"), ("conv", "activation")}
    assert documents["xray/meta/plan"][-1][1]["conv"]["output"] is True


def test_plan_draft_edit_and_aliases(model, tmp_path):
    xray = Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path))
    draft = xray.draft_plan()
    assert draft["conv"] == {"weight": False, "weight_grad": False, "bias": False, "bias_grad": False, "output": True, "activation": True, "grad": False}
    assert draft["fc1"]["activation"] is True and draft["fc1"]["output"] is False
    assert draft["fc2"]["activation"] is False  # no activation follows the last layer
    assert not any(draft["pool"].values())
    xray.set_plan({"fc2": {"layer": True, "grad": True}})
    assert xray.plan == {"fc2": {"weight": False, "weight_grad": False, "bias": False, "bias_grad": False, "output": True, "activation": False, "grad": True}}
    xray.set_plan(["conv", "pool"])
    assert xray.plan["conv"] == draft["conv"] and xray.plan["pool"]["output"] is True
    xray.close()


@pytest.mark.parametrize(
    "plan, error, message",
    [
        ({"conv1": {"output": True}}, ValueError, r"unknown layer 'conv1'; did you mean 'conv'"),
        ({"fc": {"output": True}}, ValueError, r"did you mean 'fc1', 'fc2'\?"),
        ({"conv": {"activations": True}}, ValueError, r"unknown kind 'activations'.*valid kinds: weight, weight_grad, bias, bias_grad, output, activation, grad"),
        ({"pool": {"weight": True}}, ValueError, r"'pool' \(MaxPool2d\) has no weight; turn off 'weight' and 'weight_grad'"),
        ({"pool": {"bias_grad": True}}, ValueError, r"'pool' \(MaxPool2d\) has no bias; turn off 'bias' and 'bias_grad'"),
        ({"fc2": {"activation": True}}, ValueError, r"no activation directly follows layer 'fc2'"),
        ({"": {"output": True}}, ValueError, r"root model is not a layer"),
        ("conv", TypeError, r"a plan is a dict"),
    ],
)
def test_bad_plans_say_what_is_wrong(model, tmp_path, plan, error, message):
    xray = Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path), plan=["conv"])
    with pytest.raises(error, match=message):
        xray.set_plan(plan)
    assert xray.plan == {"conv": xray.draft_plan()["conv"]}  # the plan in force is kept
    xray.close()


def test_bad_constructor_arguments(model, tmp_path):
    with pytest.raises(ValueError, match="exactly one of example_input"):
        Xray(model, logdir=str(tmp_path))
    with pytest.raises(ValueError, match="give logdir=.* or writer="):
        Xray(model, input_size=(1, 8, 8))
    with pytest.raises(TypeError, match="torch.nn.Module"):
        Xray("model", input_size=(1, 8, 8), logdir=str(tmp_path))


def _no_hooks(model, optimizer) -> bool:
    from xray_tb.trace.state import _HOOK_REGISTRIES

    return (not any(getattr(m, name, None) for m in model.modules() for name in _HOOK_REGISTRIES)
            and not optimizer._optimizer_step_pre_hooks and not optimizer._optimizer_step_post_hooks)


def test_a_bad_health_argument_is_refused_before_anything_is_traced_or_written(model, tmp_path):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for health in ("yes", 1, {"every": 1}):
        with pytest.raises(TypeError, match=r"health= takes True, False or a HealthOptions\(...\), got"):
            Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path / "run"), every=5, optimizer=optimizer, health=health)
    assert not (tmp_path / "run").exists()  # no event file: TensorBoard lists no half-made run
    assert _no_hooks(model, optimizer)


def test_a_construction_that_fails_after_the_event_file_opened_releases_everything_at_once(model, tmp_path, monkeypatch):
    from xray_tb import xray as facade

    def failing_health(*args, **kwargs):
        raise RuntimeError("training health failed")  # as a collective timing out under DDP would

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    monkeypatch.setattr(facade, "TrainingHealth", failing_health)
    with pytest.raises(RuntimeError, match="training health failed") as raised:
        Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path), every=5, optimizer=optimizer)
    # The traceback still holds the half-built Xray (as a notebook's last error does): released all the same.
    half_built = raised.traceback[-2].frame.f_locals["self"]
    assert half_built.closed and _no_hooks(model, optimizer)
    x, y = batch()
    train_step(model, x, y)  # trains as without Xray
    optimizer.step()
    monkeypatch.undo()
    with Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path), every=5, optimizer=optimizer):  # the run is usable
        pass
    assert _no_hooks(model, optimizer)


def test_a_wait_that_is_no_number_of_seconds_is_refused_and_the_xray_stays_open(model, tmp_path):
    xray = Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path))
    for timeout in ("30", -1, float("nan"), True, None):
        for call in (xray.flush, xray.close):
            with pytest.raises(ValueError, match=rf"timeout= is how many seconds to wait .* a number >= 0; got {timeout!r}"):
                call(timeout=timeout)
    assert not xray.closed  # a refused close() closed nothing
    xray.close(timeout=0)
    assert xray.closed


def test_take_graphs_before_backward_records_what_exists(model, tmp_path):
    xray = Xray(model, input_size=(1, 8, 8), logdir=str(tmp_path), plan={"conv": FULL})
    model(batch()[0])
    with pytest.warns(UserWarning, match="did not record 'conv' weight_grad, 'conv' bias_grad: no .grad on the parameter"):
        xray.take_graphs(0)
    xray.close()
    frames, _ = read_xray_events(str(tmp_path))
    assert {kind for _, kind, _ in frames} == {"weight", "bias", "output", "activation"}


def test_inplace_relu_output_is_the_pre_activation(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(inplace=True), nn.Flatten(), nn.Linear(2 * 6 * 6, 2))
    x, y = torch.randn(3, 1, 8, 8), torch.tensor([0, 1, 0])
    twin = copy.deepcopy(model)
    twin[1].inplace = False
    out, grad = reference_output_grads(twin, x, y, ["0"])["0"]
    xray = Xray(model, x, logdir=str(tmp_path), plan={"0": {"output": True, "activation": True, "grad": True}})
    train_step(model, x, y)
    xray.take_graphs(0)
    xray.close()
    frames, _ = read_xray_events(str(tmp_path))
    assert out[0].min() < 0
    torch.testing.assert_close(torch.from_numpy(frames[("0", "output", 0)][1]), out[0])
    torch.testing.assert_close(torch.from_numpy(frames[("0", "activation", 0)][1]), torch.relu(out[0]))
    torch.testing.assert_close(torch.from_numpy(frames[("0", "grad", 0)][1]), grad[0])
