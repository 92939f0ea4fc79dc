"""Iterations between take_graphs() calls, followed from the optimizer that steps the model's first
layer: exact under training loops users write (a head used on some steps, a module never called, a GAN
with two optimizers, clipping after take_graphs(), a hand-written update, accumulation)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from tests.health.helpers import scaler_steps
from xray_tb import Xray, open_run
from xray_tb.health import HealthOptions, NonFinite, weight_versions


class Trunk(nn.Module):
    """Two layers and an auxiliary head used on even steps only, plus a layer the forward never calls."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 4)
        self.aux = nn.Linear(16, 4)
        self.spare = nn.Linear(4, 4)
        self.use_aux = True

    def forward(self, x):
        hidden = torch.relu(self.fc1(x))
        out = self.fc2(hidden)
        return out + self.aux(hidden) if self.use_aux else out


@pytest.fixture(autouse=True, params=["small read", "all followed"])
def followed_weights(request, monkeypatch):
    """Each loop twice: as the sentinel treats these small weights (read at every check), and with every
    weight followed across optimizer steps (xray_tb.health.weight_versions), as large ones are."""
    if request.param == "all followed":
        monkeypatch.setattr(weight_versions, "MIN_SIZE", 0)
    return request.param


def small_model(lr: float = 0.01):
    """A seeded 8-16-4 ReLU MLP and its SGD optimizer."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    return model, torch.optim.SGD(model.parameters(), lr=lr)


def nan_gradient(module: nn.Module, at: dict):
    module.weight.register_hook(lambda grad: grad * math.nan if at["step"] == 37 else grad)


def test_a_head_used_on_some_steps_and_a_module_never_called_leave_every_iteration_followed(tmp_path):
    torch.manual_seed(0)
    model = Trunk()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # the weights stay finite: the gradient alone goes NaN
    at = {"step": None}
    nan_gradient(model.fc2, at)
    norms = {}
    with Xray(model, torch.randn(4, 8), logdir=str(tmp_path), health=HealthOptions(every=1)) as xray:
        for step in range(50):
            at["step"], model.use_aux = step, step % 2 == 0
            optimizer.zero_grad()
            F.cross_entropy(model(torch.randn(4, 8)), torch.randint(0, 4, (4,))).backward()
            norms[step] = model.fc1.weight.grad.norm().item()
            if step % 10 == 0:
                xray.take_graphs(step)
            optimizer.step()
        assert xray.first_nonfinite == NonFinite(step=37, layer="fc2", kind="weight_grad")
    layers, steps, values = open_run(tmp_path).health("grad_l2")
    assert steps.tolist() == list(range(50))  # every iteration, each under its own step
    np.testing.assert_allclose(values[layers.index("fc1"), :37], [norms[s] for s in range(37)], rtol=1e-5)


@pytest.mark.parametrize("n_critic, detach", [(1, True), (5, False)])
def test_a_gan_is_followed_through_the_optimizer_of_the_network_the_forward_runs_first(tmp_path, n_critic, detach):
    """Also with the discriminator stepped 5 times per generator step on fakes not detached, whose
    backward reaches the generator's first layer before the generator's optimizer ever steps."""
    torch.manual_seed(0)
    model = nn.ModuleDict({"G": nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 6)),
                           "D": nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 1))})
    model.forward = lambda z: model["D"](model["G"](z))  # what Xray traces: D(G(z))
    generator, discriminator = model["G"], model["D"]
    opt_g = torch.optim.SGD(generator.parameters(), lr=0.01)
    opt_d = torch.optim.SGD(discriminator.parameters(), lr=0.01)
    at = {"step": None}
    nan_gradient(generator[0], at)
    g_norms = {}
    with Xray(model, torch.randn(4, 4), logdir=str(tmp_path), health=HealthOptions(every=1)) as xray:
        for step in range(45):
            at["step"] = step
            for _ in range(n_critic):
                real, z = torch.randn(8, 6), torch.randn(8, 4)
                opt_d.zero_grad()
                fake = generator(z).detach() if detach else generator(z)
                (F.softplus(-discriminator(real)).mean() + F.softplus(discriminator(fake)).mean()).backward()
                opt_d.step()  # stepped first: not the optimizer that counts
            opt_g.zero_grad()
            F.softplus(-discriminator(generator(z))).mean().backward()
            g_norms[step] = generator[0].weight.grad.norm().item()
            if step % 10 == 0:
                xray.take_graphs(step)
            opt_g.step()
        assert xray.first_nonfinite == NonFinite(step=37, layer="G.0", kind="weight_grad")
    layers, steps, values = open_run(tmp_path).health("grad_l2")
    row = dict(zip(steps.tolist(), values[layers.index("G.0")]))
    np.testing.assert_allclose([row[s] for s in range(37)], [g_norms[s] for s in range(37)], rtol=1e-5)  # this step's, not the last


def test_clipping_between_take_graphs_and_the_step_gives_one_consistent_series(tmp_path):
    model, optimizer = small_model(lr=1e-3)
    clipped = {}
    with Xray(model, torch.randn(8, 8), logdir=str(tmp_path), health=HealthOptions(every=1)) as xray:
        for step in range(41):
            optimizer.zero_grad()
            F.cross_entropy(model(torch.randn(8, 8)), torch.randint(0, 4, (8,))).backward()
            if step % 10 == 0:
                xray.take_graphs(step)
            nn.utils.clip_grad_norm_(model.parameters(), 0.001)
            clipped[step] = model[2].weight.grad.norm().item()
            optimizer.step()
        assert not [f for f in xray.findings() if f.rule == "exploding_gradient"]
    layers, steps, values = open_run(tmp_path).health("grad_l2")
    assert steps.tolist() == list(range(41))
    # Captures included; step 0 comes before the first optimizer step, so its call counts it (unclipped).
    np.testing.assert_allclose(values[layers.index("2"), 1:], [clipped[s] for s in range(1, 41)], rtol=1e-5)


@pytest.mark.parametrize("write", ["in place", "replaced"])
def test_a_gradient_made_infinite_after_a_call_every_step_is_named_at_that_step(tmp_path, write):
    """take_graphs() after every backward counts the iteration itself; a gradient that goes infinite after
    it, before the optimizer step applies it, is found by the check before that step: at its step, as a
    gradient, not as the weights it spreads to."""
    model, optimizer = small_model()
    with Xray(model, torch.randn(8, 8), logdir=str(tmp_path), every=10) as xray:
        for step in range(45):
            optimizer.zero_grad()
            F.cross_entropy(model(torch.randn(8, 8)), torch.randint(0, 4, (8,))).backward()
            xray.take_graphs()
            if step == 37:
                grad = model[2].weight.grad
                if write == "in place":
                    grad[1, 1] = math.inf
                else:
                    model[2].weight.grad = grad * math.inf
            optimizer.step()
        assert xray.first_nonfinite == NonFinite(step=37, layer="2", kind="weight_grad")
        assert [(f.step, f.layer) for f in xray.findings() if f.rule == "nonfinite"] == [(37, "2")]


def test_a_hand_written_update_warns_that_only_take_graphs_calls_are_checked(tmp_path):
    model, _ = small_model()
    with Xray(model, torch.randn(8, 8), logdir=str(tmp_path)) as xray:
        with pytest.warns(UserWarning, match=r"10 backward passes ran since the last take_graphs\(\) call and no torch.optim optimizer"):
            for step in range(31):
                model.zero_grad()
                F.cross_entropy(model(torch.randn(8, 8)), torch.randint(0, 4, (8,))).backward()
                with torch.no_grad():
                    for param in model.parameters():
                        param -= 0.01 * param.grad
                if step % 10 == 0:
                    xray.take_graphs(step)


def test_gradient_accumulation_with_a_call_per_backward_counts_every_call(tmp_path):
    model, optimizer = small_model()
    norms = {}
    with Xray(model, torch.randn(8, 8), logdir=str(tmp_path), health=HealthOptions(every=1)) as xray:
        for step in range(24):
            F.cross_entropy(model(torch.randn(8, 8)), torch.randint(0, 4, (8,))).backward()
            norms[step] = model[0].weight.grad.norm().item()  # accumulated so far
            xray.take_graphs(step)
            if step % 4 == 3:
                optimizer.step()
                optimizer.zero_grad()
    layers, steps, values = open_run(tmp_path).health("grad_l2")
    assert steps.tolist() == list(range(24))
    np.testing.assert_allclose(values[layers.index("0"), 8:], [norms[s] for s in range(8, 24)], rtol=1e-5)


def test_accumulation_with_a_call_per_optimizer_step_follows_the_optimizer_without_a_warning(tmp_path):
    """Two backwards per optimizer step, take_graphs() after the second (the DDP no_sync pattern): the
    optimizer is followed from its first step on, nothing is warned, and each step's statistics are
    those of the accumulated gradients it applies."""
    model, optimizer = small_model()
    norms = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Xray(model, torch.randn(8, 8), logdir=str(tmp_path), health=HealthOptions(every=1)) as xray:
            for step in range(6):
                optimizer.zero_grad()
                for _ in range(2):
                    F.cross_entropy(model(torch.randn(8, 8)), torch.randint(0, 4, (8,))).backward()
                norms[step] = model[0].weight.grad.norm().item()
                xray.take_graphs()
                optimizer.step()
    layers, steps, values = open_run(tmp_path).health("grad_l2")
    assert steps.tolist() == list(range(6))
    np.testing.assert_allclose(values[layers.index("0")], [norms[s] for s in range(6)], rtol=1e-5)


def test_sparse_calls_without_a_step_keep_the_iterations_numbers(tmp_path):
    """The README loop with take_graphs() (no step) every 10 steps: the calls file their captures under
    the iteration they follow (0, 10, 20), not a count of calls, so a NaN keeps its step."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    norms, taken = {}, []
    with Xray(model, torch.randn(8, 8), logdir=str(tmp_path), health=HealthOptions(every=1)) as xray:
        for step in range(30):
            if step == 27:
                with torch.no_grad():
                    model[2].weight[3, 3] = math.nan
            optimizer.zero_grad()
            F.cross_entropy(model(torch.randn(8, 8)), torch.randint(0, 4, (8,))).backward()
            norms[step] = model[0].weight.grad.norm().item()
            if step % 10 == 0:
                taken.append(xray.take_graphs())
            optimizer.step()
        assert xray.first_nonfinite == NonFinite(step=27, layer="2", kind="weight")
    assert taken == [0, 10, 20]
    layers, steps, values = open_run(tmp_path).health("grad_l2")
    assert steps.tolist()[:27] == list(range(27))
    np.testing.assert_allclose(values[layers.index("0"), :27], [norms[s] for s in range(27)], rtol=1e-5)


def test_a_step_written_twice_is_listed_once_in_records(tmp_path):
    """optimizer= and a call per micro-batch: both calls of a step write it; the run keeps the last write,
    and records() lists the step once, as the run does."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with Xray(model, torch.randn(4, 4), logdir=str(tmp_path), every=1, optimizer=optimizer,
              plan={"0": {"weight_grad": True}}) as xray:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the second write of a step is warned about
            for _ in range(3):
                optimizer.zero_grad()
                for _ in range(2):
                    F.mse_loss(model(torch.randn(4, 4)), torch.randn(4, 2)).backward()
                    xray.take_graphs()
                optimizer.step()
        assert xray.records() == {"0": {"weight_grad": [0, 1, 2]}} == open_run(tmp_path).records()


def _scaled_loop(tmp_path, steps: int, overflow=(), nan_from=None, plant=None, call="before the step"):
    """A GradScaler loop with take_graphs() every step, after unscale_ and before scaler.step (the
    documented AMP order), or after scaler.update(); ``overflow`` steps overflow the scaled backward,
    which the scaler skips."""
    model, optimizer = small_model()
    scaler = torch.amp.GradScaler("cpu")
    skipped = []
    with Xray(model, torch.randn(4, 8), logdir=str(tmp_path), health=HealthOptions(every=1)) as xray:
        for step in range(steps):
            if plant is not None:
                plant(step, model)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(torch.randn(4, 8)), torch.randint(0, 4, (4,)))
            if step in overflow:
                loss = loss * 1e38
            if nan_from is not None and step >= nan_from:
                loss = loss * math.nan
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            if call == "before the step":
                xray.take_graphs(step)
            if scaler_steps(scaler, optimizer):
                skipped.append(step)
            if call == "after the step":
                xray.take_graphs(step)
        return xray.first_nonfinite, skipped


@pytest.mark.parametrize("call", ["before the step", "after the step"])
def test_an_overflow_the_grad_scaler_skips_is_no_iteration_and_no_nonfinite_value(tmp_path, call):
    found, skipped = _scaled_loop(tmp_path, 30, overflow=(5, 6, 20), call=call)
    assert skipped == [5, 6, 20] and found is None
    steps = open_run(tmp_path).health("grad_l2")[1].tolist()
    assert steps == [s for s in range(30) if s not in skipped]


@pytest.mark.parametrize("call", ["before the step", "after the step"])
def test_under_a_grad_scaler_a_nan_weight_and_a_loss_that_stays_nan_are_still_found(tmp_path, call):
    def plant(step, model):
        if step == 17:
            with torch.no_grad():
                model[2].weight[1, 1] = math.nan

    assert _scaled_loop(tmp_path / "weight", 25, plant=plant, call=call)[0] == NonFinite(step=17, layer="2", kind="weight")
    # every step skipped from 31 on: past the scaler's reach, the first of them is reported
    assert _scaled_loop(tmp_path / "loss", 31 + 30, nan_from=31, call=call)[0] == NonFinite(step=31, layer="2", kind="weight_grad")


def test_a_finite_step_the_loop_skips_stands_spike_and_all(tmp_path):
    """A loop that skips the optimizer step on a loss spike (finite gradients): the spike's iteration
    is kept, with its own gradient norm."""
    model, optimizer = small_model()
    norms = {}
    with Xray(model, torch.randn(4, 8), logdir=str(tmp_path), health=HealthOptions(every=1)) as xray:
        for step in range(12):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(torch.randn(4, 8)), torch.randint(0, 4, (4,)))
            (loss * 1e4 if step == 7 else loss).backward()
            norms[step] = model[2].weight.grad.norm().item()
            xray.take_graphs(step)
            if step != 7:
                optimizer.step()
    layers, steps, values = open_run(tmp_path).health("grad_l2")
    assert steps.tolist() == list(range(12))
    np.testing.assert_allclose(values[layers.index("2")], [norms[s] for s in range(12)], rtol=1e-5)


@pytest.mark.parametrize("call", ["before the step", "after the step"])
def test_a_step_the_loop_skips_on_a_nan_loss_keeps_the_nan(tmp_path, call):
    """No GradScaler: a loop that skips optimizer.step() when the loss is NaN (a guard), with a NaN in the
    data at step 15 only: the NaN is reported at 15 (only a scaler's overflow is withdrawn), whichever
    of take_graphs(step) and the guarded step comes first (after the step, the call was left to count
    at the next optimizer step, with the next backward's gradients, and the NaN was lost). Captures
    every 10 steps, so that only the sentinel sees step 15, not the output checks of a capture: the
    forward of step 15 is run again, and the NaN is named where the batch brought it in."""
    model, optimizer = small_model()
    with Xray(model, torch.randn(4, 8), logdir=str(tmp_path), every=10, health=HealthOptions(every=1)) as xray:
        for step in range(25):
            optimizer.zero_grad()
            x = torch.randn(4, 8)
            if step == 15:
                x[0, 0] = math.nan
            loss = F.cross_entropy(model(x), torch.randint(0, 4, (4,)))
            loss.backward()
            if call == "before the step":
                xray.take_graphs(step)
            if torch.isfinite(loss):
                optimizer.step()
            if call == "after the step":
                xray.take_graphs(step)
        assert xray.first_nonfinite == NonFinite(step=15, layer="0", kind="output")


@pytest.mark.parametrize("loop", ["README loop, take_graphs(step) after the steps", "optimizer=, take_graphs() before the steps"])
@pytest.mark.parametrize("fault", ["nan weight", "inf gradient"])
def test_a_model_split_over_two_optimizers_the_head_stepping_first_keeps_the_nan_in_its_layer(tmp_path, loop, fault):
    """One optimizer over the first layer, another over the rest that steps first: the weights and gradients
    are checked before the head's step, so a NaN written into the last layer's weight (or an infinite
    gradient of it) at step 23 is named there, not in the layer the head's step spread it to (which the
    check at the first layer's optimizer step saw)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
    trunk = torch.optim.SGD(model[0].parameters(), lr=0.05)
    head = torch.optim.SGD([*model[2].parameters(), *model[4].parameters()], lr=0.05)
    at = {"step": None}
    if fault == "inf gradient":
        model[4].weight.register_hook(lambda grad: grad * math.inf if at["step"] == 23 else grad)
    options = {"every": 10, "optimizer": trunk} if loop.startswith("optimizer=") else {}
    with Xray(model, torch.randn(8, 16), logdir=str(tmp_path), **options) as xray:
        for step in range(30):
            at["step"] = step
            if step == 23 and fault == "nan weight":
                with torch.no_grad():
                    model[4].weight[0, 0] = math.nan
            trunk.zero_grad()
            head.zero_grad()
            F.cross_entropy(model(torch.randn(8, 16)), torch.randint(0, 4, (8,))).backward()
            if options:
                xray.take_graphs()
            head.step()
            trunk.step()
            if not options and step % 10 == 0:
                xray.take_graphs(step)
        expected = NonFinite(step=23, layer="4", kind="weight" if fault == "nan weight" else "weight_grad")
        assert xray.first_nonfinite == expected


def test_the_marker_hook_on_a_weight_does_not_keep_the_follower_alive():
    """The marker's hook lives on the model's weight, and the step pre-hook in torch's global table, until
    remove(); both hold the follower weakly, so a follower let go of without remove() is collected, and a
    backward and an optimizer step afterwards count nothing."""
    import gc
    import weakref

    from xray_tb.health.iteration_follower import IterationFollower

    model, optimizer = small_model()
    weights = [model[0].weight, model[2].weight]
    counted = []
    follower = IterationFollower(weights, counted.append, 0, modules=[model[0], model[2]])
    model(torch.randn(2, 8)).sum().backward()
    optimizer.step()
    assert counted == [0]  # followed: the optimizer's step counted the backward
    alive = weakref.ref(follower)
    assert weights[0]._post_accumulate_grad_hooks  # the marker is on the first layer's weight
    del follower
    gc.collect()
    assert alive() is None
    model(torch.randn(2, 8)).sum().backward()  # the orphaned hooks run and do nothing
    optimizer.step()
    assert counted == [0]
