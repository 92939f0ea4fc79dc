"""Every weight that trains is covered by training health, and the iterations keep being counted when
training changes under Xray: layers with several weights (LSTM, GRU, MultiheadAttention), weight-normed
and other parametrized layers, sparse gradients, a first layer frozen mid-run, a trunk added to the
optimizer later, parameters replaced by ``load_state_dict(..., assign=True)``. At the default pace, with
``take_graphs(step)`` every 10 steps as in the README."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import parametrizations

from xray_tb import Xray, open_run
from xray_tb.health import HealthOptions, NonFinite


class Recurrent(nn.Module):
    def __init__(self, kind: type):
        super().__init__()
        self.inp = nn.Linear(6, 8)
        self.rnn = kind(8, 8, num_layers=2, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        out, _ = self.rnn(torch.tanh(self.inp(x)))
        return self.head(out[:, -1])


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(6, 8)
        self.mha = nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        h = self.inp(x)
        return self.head(self.mha(h, h, h)[0].mean(dim=1))


def _train(model, batch, steps, *, plant=None, before=None, optimizer=None, calls_every=10, **options):
    """Train with the README loop; ``plant(step, model)`` writes into the model after the backward."""
    generator = torch.Generator().manual_seed(0)
    optimizer = optimizer or torch.optim.SGD(model.parameters(), lr=0.05)
    xray = Xray(model, batch(generator), logdir=options.pop("logdir"), **options)
    grads = {}
    with xray:
        for step in range(steps):
            if before is not None:
                before(step, model, optimizer)
            optimizer.zero_grad()
            x = batch(generator)
            F.cross_entropy(model(x), torch.randint(0, 3, (x.shape[0],), generator=generator)).backward()
            grads[step] = {name: p.grad.to_dense().clone() for name, p in model.named_parameters() if p.grad is not None}
            if plant is not None:
                plant(step, model)
            if step % calls_every == 0:
                xray.take_graphs(step)
            optimizer.step()
        found = xray.first_nonfinite
    return found, grads


def _sequences(generator):
    return torch.randn(4, 5, 6, generator=generator)


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU])
def test_a_nan_in_a_recurrent_weight_is_named_at_its_step_and_layer_and_its_gradient_norm_covers_every_weight(tmp_path, kind):
    torch.manual_seed(0)
    model = Recurrent(kind)

    def plant(step, model):
        if step == 13:
            with torch.no_grad():
                model.rnn.weight_hh_l1[0, 0] = math.nan

    found, grads = _train(model, _sequences, 20, plant=plant, logdir=str(tmp_path), health=HealthOptions(every=1))
    assert found == NonFinite(step=13, layer="rnn", kind="weight")
    layers, steps, values = open_run(tmp_path).health("grad_l2")
    names = [n for n, _ in model.rnn.named_parameters() if n.startswith("weight")]
    expected = [math.sqrt(sum(float(grads[s][f"rnn.{n}"].double().square().sum()) for n in names)) for s in range(5)]
    np.testing.assert_allclose(values[layers.index("rnn"), :5], expected, rtol=1e-5)


def test_an_infinite_gradient_of_attention_in_projection_is_named_in_that_layer(tmp_path):
    torch.manual_seed(0)
    model = Attention()

    def plant(step, model):
        if step == 23:
            model.mha.in_proj_weight.grad[0, 0] = math.inf

    found, _ = _train(model, _sequences, 30, plant=plant, logdir=str(tmp_path))
    assert found == NonFinite(step=23, layer="mha", kind="weight_grad")
    layers = open_run(tmp_path).health("grad_l2")[0]
    assert layers.index("mha.out_proj") == layers.index("mha") + 1  # out_proj is used by its parent, not called


def _mlp(*layers):
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), *layers, nn.ReLU(), nn.Linear(16, 3))


def _rows(generator):
    return torch.randn(16, 6, generator=generator)


def test_a_weight_normed_layer_is_covered_by_both_of_its_weights(tmp_path):
    torch.manual_seed(0)
    model = _mlp(parametrizations.weight_norm(nn.Linear(16, 16)))
    found, grads = _train(model, _rows, 12, logdir=str(tmp_path), health=HealthOptions(every=1))
    assert found is None
    layers, steps, values = open_run(tmp_path).health("grad_l2")
    keys = ["2.parametrizations.weight.original0", "2.parametrizations.weight.original1"]
    expected = [math.sqrt(sum(float(grads[s][k].double().square().sum()) for k in keys)) for s in range(12)]
    np.testing.assert_allclose(values[layers.index("2"), :12], expected, rtol=1e-5)
    assert "2.parametrizations.weight" not in layers  # its originals are layer 2's: no row of their own


def test_the_histogram_of_a_weight_normed_layer_is_of_the_weight_its_forward_uses(tmp_path):
    """Not its magnitude and direction side by side (4,160 values spanning both, for a weight of 4,096)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    from tb_plugin import health_metadata

    torch.manual_seed(0)
    model = _mlp(parametrizations.weight_norm(nn.Linear(16, 16)))
    x = torch.randn(16, 6)
    with Xray(model, x, logdir=str(tmp_path), health=HealthOptions(histograms_every=1)) as xray:
        F.cross_entropy(model(x), torch.zeros(16, dtype=torch.long)).backward()
        xray.take_graphs(0)
        with torch.no_grad():
            weight = model[2].weight.numpy().reshape(-1)
    accumulator = EventAccumulator(str(tmp_path), size_guidance={"tensors": 0}).Reload()
    event, = accumulator.Tensors(health_metadata.histogram_tag("2"))
    table = tensor_util.make_ndarray(event.tensor_proto)
    edges = np.append(table[:, 0], table[-1, 1])
    assert edges[0] == weight.min() and edges[-1] == weight.max()
    np.testing.assert_array_equal(table[:, 2], np.histogram(weight, bins=edges)[0])


def test_a_spectral_normed_layer_is_a_layer_whose_weight_is_recorded_without_changing_the_model(tmp_path):
    torch.manual_seed(0)
    model = _mlp(parametrizations.spectral_norm(nn.Linear(16, 16)))
    x = torch.randn(16, 6)
    with Xray(model, x, logdir=str(tmp_path), plan={"2": {"weight": True, "output": True}}) as xray:
        F.cross_entropy(model(x), torch.zeros(16, dtype=torch.long)).backward()
        buffers = {name: b.clone() for name, b in model.named_buffers()}
        xray.take_graphs(0)
        for name, b in model.named_buffers():  # the power iteration's vectors: reading the weight ran none
            assert torch.equal(b, buffers[name]), name
    run = open_run(tmp_path)
    np.testing.assert_allclose(run.load("2", "weight", 0)[0].numpy(), model[2].weight.detach().numpy(), rtol=1e-6)
    assert [node["type"] for node in run.architecture["nodes"] if node.get("module") == "2"] == ["Linear"]


def test_sparse_embedding_gradients_are_measured_and_checked(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(50, 8, sparse=True), nn.Flatten(), nn.Linear(32, 3))

    def plant(step, model):
        if step == 17:
            grad = model[0].weight.grad.coalesce()
            values = grad.values().clone()
            values[0, 0] = math.inf
            model[0].weight.grad = torch.sparse_coo_tensor(grad.indices(), values, grad.shape, check_invariants=True)

    tokens = lambda generator: torch.randint(0, 50, (4, 4), generator=generator)
    found, grads = _train(model, tokens, 20, plant=plant, logdir=str(tmp_path), health=HealthOptions(every=1))
    assert found == NonFinite(step=17, layer="0", kind="weight_grad")
    run = open_run(tmp_path)
    for stat, reference in (("grad_l2", lambda g: g.norm()), ("grad_l1", lambda g: g.abs().sum()), ("grad_mean", lambda g: g.mean()),
                            ("grad_absmax", lambda g: g.abs().max())):
        layers, steps, values = run.health(stat)
        np.testing.assert_allclose(values[layers.index("0"), :5], [float(reference(grads[s]["0.weight"].double())) for s in range(5)],
                                   rtol=1e-5, err_msg=stat)


def test_freezing_the_first_layer_mid_run_keeps_every_iteration_checked(tmp_path):
    torch.manual_seed(0)
    model = _mlp(nn.Linear(16, 16))

    def before(step, model, optimizer):
        if step == 10:
            model[0].requires_grad_(False)
        if step == 23:
            with torch.no_grad():
                model[2].weight[0, 0] = math.nan

    found, _ = _train(model, _rows, 30, before=before, logdir=str(tmp_path), health=HealthOptions(every=1))
    assert found == NonFinite(step=23, layer="2", kind="weight")
    layers, steps, values = open_run(tmp_path).health("grad_l2")
    assert steps.tolist()[:23] == list(range(23))


def test_an_optimizer_of_the_head_only_is_followed_and_a_trunk_added_later_kept(tmp_path):
    """The optimizer steps the head only while the trunk still requires grad (fine-tuning without
    freezing), then the trunk joins it: every iteration is counted, none warned about."""
    torch.manual_seed(0)
    model = _mlp(nn.Linear(16, 16))
    head = torch.optim.SGD([*model[2].parameters(), *model[4].parameters()], lr=0.05)

    def before(step, model, optimizer):
        if step == 20:
            optimizer.add_param_group({"params": list(model[0].parameters())})

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _train(model, _rows, 40, before=before, optimizer=head, logdir=str(tmp_path), health=HealthOptions(every=1))
    assert not [w for w in caught if "no torch.optim optimizer" in str(w.message)]
    steps = open_run(tmp_path).health("grad_l2")[1].tolist()
    assert steps == list(range(40))  # followed from its second step, the first counted by the call


def test_parameters_replaced_by_load_state_dict_with_assign_are_found_again(tmp_path):
    torch.manual_seed(0)
    model = _mlp(nn.Linear(16, 16))
    saved = {}

    def before(step, model, optimizer):
        if step == 5:
            saved.update({k: v.clone() for k, v in model.state_dict().items()})
        if step == 15:
            model.load_state_dict(saved, assign=True)
            optimizer.param_groups[0]["params"] = list(model.parameters())
        if step == 27:
            with torch.no_grad():
                model[2].weight[0, 0] = math.nan

    found, _ = _train(model, _rows, 30, before=before, logdir=str(tmp_path), health=HealthOptions(every=1))
    assert found == NonFinite(step=27, layer="2", kind="weight")
    assert open_run(tmp_path).health("grad_l2")[1].tolist()[:27] == list(range(27))


@pytest.mark.parametrize("loaded_at", [17, 20])  # 20: a capture step, whose activations come first
def test_with_optimizer_a_checkpoint_loaded_with_assign_is_checked_from_its_first_iteration(tmp_path, loaded_at):
    """optimizer= and take_graphs() every step: a checkpoint holding a NaN, loaded with
    load_state_dict(..., assign=True), the optimizer pointed at the new parameters before zero_grad (the
    replaced ones keep their last gradient, which nobody resets). The new parameters are checked from the
    next iteration on (the old ones were checked until a capture's output checks saw the NaN, at 20)."""
    torch.manual_seed(0)
    model = _mlp(nn.Linear(16, 16))
    generator = torch.Generator().manual_seed(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with Xray(model, _rows(generator), logdir=str(tmp_path), every=10, optimizer=optimizer) as xray:
        for step in range(30):
            if step == loaded_at:
                saved = {k: v.clone() for k, v in model.state_dict().items()}
                saved["2.weight"][1, 2] = math.nan
                model.load_state_dict(saved, assign=True)
                optimizer.param_groups[0]["params"] = list(model.parameters())
            optimizer.zero_grad()
            F.cross_entropy(model(_rows(generator)), torch.randint(0, 3, (16,), generator=generator)).backward()
            xray.take_graphs()
            optimizer.step()
        assert xray.first_nonfinite == NonFinite(step=loaded_at, layer="2", kind="weight")


@pytest.mark.parametrize("remove", [False, True])
def test_pruning_mid_run_keeps_every_iteration_checked(tmp_path, remove):
    """prune() renames the weight to weight_orig (or, with remove=True, makes a new parameter): the
    iterations between take_graphs() calls are still counted, once each."""
    torch.manual_seed(0)
    model = _mlp(nn.Linear(16, 16))
    with torch.no_grad():
        model[0].bias[:4] = -100.0  # 4 units of the first layer never fire

    def before(step, model, optimizer):
        if step == 12:
            entries = xray.prune(dry_run=False, remove=remove)
            assert any(entry.applied for entry in entries)

    generator = torch.Generator().manual_seed(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with Xray(model, _rows(generator), logdir=str(tmp_path), health=HealthOptions(every=1, activations=1)) as xray:
        for step in range(30):
            before(step, model, optimizer)
            optimizer.zero_grad()
            F.cross_entropy(model(_rows(generator)), torch.randint(0, 3, (16,), generator=generator)).backward()
            if step % 10 == 0:
                xray.take_graphs(step)
            optimizer.step()
    assert open_run(tmp_path).health("grad_l2")[1].tolist() == list(range(30))


@pytest.mark.parametrize("assign", [False, True])
def test_an_optimizer_built_anew_mid_run_is_followed(tmp_path, assign):
    """After load_state_dict(..., assign=True), or between fine-tuning stages, a new optimizer steps
    the model: every iteration stays checked, and a NaN is named at its step and layer."""
    torch.manual_seed(0)
    model = _mlp(nn.Linear(16, 16))
    generator = torch.Generator().manual_seed(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with Xray(model, _rows(generator), logdir=str(tmp_path), health=HealthOptions(every=1)) as xray:
        for step in range(30):
            if step == 15:
                if assign:
                    model.load_state_dict({k: v.clone() for k, v in model.state_dict().items()}, assign=True)
                optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
            if step == 18:
                with torch.no_grad():
                    model[2].weight[0, 0] = math.nan
            optimizer.zero_grad()
            F.cross_entropy(model(_rows(generator)), torch.randint(0, 3, (16,), generator=generator)).backward()
            if step % 10 == 0:
                xray.take_graphs(step)
            optimizer.step()
        assert xray.first_nonfinite == NonFinite(step=18, layer="2", kind="weight")
    assert open_run(tmp_path).health("grad_l2")[1].tolist()[:18] == list(range(18))


def test_planning_a_spectral_normed_weight_leaves_the_model_as_it_was(tmp_path):
    torch.manual_seed(0)
    model = _mlp(parametrizations.spectral_norm(nn.Linear(16, 16)))
    buffers = {name: b.clone() for name, b in model.named_buffers()}
    with Xray(model, torch.randn(16, 6), logdir=str(tmp_path)) as xray:
        xray.set_plan({"2": {"weight": True}})
    for name, b in model.named_buffers():
        assert torch.equal(b, buffers[name]), name


@pytest.mark.parametrize("call", ["before the step", "after the step"])
def test_a_resumed_run_files_the_iterations_before_its_first_call_under_their_own_steps(tmp_path, call):
    """The README loop resumed from a checkpoint at step 16 calls take_graphs() first at 20: the
    iterations 16 to 19, counted at the optimizer's steps before any call named a step, are filed as
    16 to 19, not as 0 to 3 over the earlier attempt's; also when the call comes after the optimizer
    step, which has counted step 20's iteration already (it was filed one step early, 15 to 19)."""
    def attempt(steps, seed):
        torch.manual_seed(seed)
        model = _mlp(nn.Linear(16, 16))
        generator = torch.Generator().manual_seed(seed)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        norms = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "already holds Xray captures"
            xray = Xray(model, _rows(generator), logdir=str(tmp_path), health=HealthOptions(every=1))
        with xray:
            for step in steps:
                optimizer.zero_grad()
                F.cross_entropy(model(_rows(generator)), torch.randint(0, 3, (16,), generator=generator)).backward()
                norms[step] = model[0].weight.grad.norm().item()
                if step % 10 == 0 and call == "before the step":
                    xray.take_graphs(step)
                optimizer.step()
                if step % 10 == 0 and call == "after the step":
                    xray.take_graphs(step)
        return norms

    first = attempt(range(0, 25), seed=0)
    second = attempt(range(16, 40), seed=1)
    layers, steps, values = open_run(tmp_path).health("grad_l2")
    assert steps.tolist() == list(range(40))
    row = values[layers.index("0")]
    np.testing.assert_allclose(row[:16], [first[s] for s in range(16)], rtol=1e-5)  # the first attempt's, untouched
    np.testing.assert_allclose(row[16:], [second[s] for s in range(16, 40)], rtol=1e-5)
