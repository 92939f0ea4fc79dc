"""Per-iteration gradient and weight statistics, checked against numpy at every step and read back
from the event files with TensorBoard's reader; the model is left exactly as it was."""

from __future__ import annotations

import contextlib
import copy
import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from xray_tb import Xray, open_run
from xray_tb.devices import device_path_on_cpu
from xray_tb.health import HealthOptions

from tests.health.helpers import batches, gradient_stats, relu_mlp, scalars, weighted

STEPS = 25


def _train(model, xray, data, optimizer, every_call=True, due=None):
    expected: dict = {}
    weights_before: dict = {}
    for step, (x, y) in enumerate(data):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        for name, module in weighted(model).items():
            for stat, value in gradient_stats(module.weight.grad).items():
                expected.setdefault((name, stat), {})[step] = value
            w = module.weight.detach().double().numpy()
            expected.setdefault((name, "weight_l2"), {})[step] = float(np.sqrt((w * w).sum()))
            weights_before.setdefault(name, {})[step] = w.copy()
        if every_call or step in due:
            xray.take_graphs()
        optimizer.step()
    return expected, weights_before


SAME_SHAPE = (16, 16, 16, 16, 16, 16, 16, 4)  # six Linear(16, 16): reduced as one batch on a CPU (health.cpu_batches)


@pytest.mark.parametrize("sizes", [(16, 32, 16, 4), SAME_SHAPE], ids=["shapes-differ", "six-of-one-shape"])
def test_every_iteration_matches_numpy_read_back_from_the_event_files(tmp_path, sizes):
    model = relu_mlp(sizes=sizes)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=10, health=HealthOptions(every=1, update_every=1)) as xray:
        expected, before = _train(model, xray, batches(STEPS), optimizer)
    written = scalars(tmp_path)
    names = [str(2 * i) for i in range(len(sizes) - 1)]
    assert {layer for layer, _ in written} == set(names)
    for (layer, stat), by_step in expected.items():
        got = written[(layer, stat)]
        assert sorted(got) == list(range(STEPS)), (layer, stat)
        for step, value in by_step.items():
            # float32 sums: the mean (near 0 for the last layer) is exact to a millionth of the largest |g|
            tolerance = 1e-6 * expected[(layer, "grad_absmax")][step] if stat == "grad_mean" else 1e-12
            assert got[step] == pytest.approx(value, rel=1e-4 if stat == "grad_var" else 1e-5, abs=tolerance), (layer, stat, step)
    for layer, by_step in before.items():  # the update ratio: ||w(s) - w(s-1)|| / ||w(s-1)||
        ratios = written[(layer, "update_ratio")]
        assert sorted(ratios) == list(range(1, STEPS))
        for step in range(1, STEPS):
            previous = by_step[step - 1]
            want = np.linalg.norm(by_step[step] - previous) / np.linalg.norm(previous)
            assert ratios[step] == pytest.approx(want, rel=1e-4)
    # The full series (plugin data, kept whole) holds the same numbers, layers in dataflow order.
    layers, steps, values = open_run(tmp_path).health("grad_l2")
    assert layers == names and list(steps) == list(range(STEPS))
    for row, layer in enumerate(layers):
        np.testing.assert_allclose(values[row], [expected[(layer, "grad_l2")][s] for s in range(STEPS)], rtol=1e-5)


def test_update_ratio_is_sampled_one_iteration_in_update_every(tmp_path):
    model = relu_mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=10, health=HealthOptions(every=1)) as xray:  # update_every=10 by default
        _train(model, xray, batches(STEPS), optimizer)
    assert sorted(scalars(tmp_path)[("0", "update_ratio")]) == [1, 11, 21]


def test_with_an_optimizer_every_step_counts_though_take_graphs_runs_at_captures_only(tmp_path):
    model = relu_mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    due = set(range(0, STEPS, 5))
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=5, optimizer=optimizer, health=HealthOptions(every=1)) as xray:
        expected, _ = _train(model, xray, batches(STEPS), optimizer, every_call=False, due=due)
        assert xray.records()["0"]["activation"] == sorted(due)
    written = scalars(tmp_path)
    for (layer, stat), by_step in expected.items():
        assert sorted(written[(layer, stat)]) == list(range(STEPS))
        for step, value in by_step.items():  # before the optimizer step moved the weights
            tolerance = 1e-6 * expected[(layer, "grad_absmax")][step] if stat == "grad_mean" else 1e-12
            assert written[(layer, stat)][step] == pytest.approx(value, rel=1e-4, abs=tolerance)


def test_the_model_is_left_exactly_as_it_was_and_every_hook_goes_on_close(tmp_path):
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 4))
    twin = copy.deepcopy(model)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, twin)]
    data = batches(12)
    xray = Xray(model, input_size=(16,), logdir=str(tmp_path), every=3, optimizer=optimizers[0], health=HealthOptions(every=1))
    for instrumented, (net, optimizer) in ((True, (model, optimizers[0])), (False, (twin, optimizers[1]))):
        torch.manual_seed(5)
        for step, (x, y) in enumerate(data):
            optimizer.zero_grad()
            F.cross_entropy(net(x), y).backward()
            if instrumented:
                xray.take_graphs()
                xray.findings()
            optimizer.step()
        rng = torch.get_rng_state()
        if instrumented:
            rng_model = rng
    assert torch.equal(rng_model, rng)
    for (name, a), (_, b) in zip(model.named_parameters(), twin.named_parameters()):
        assert torch.equal(a, b) and torch.equal(a.grad, b.grad), name
    assert model.training and all(m.training for m in model.modules())
    xray.close()
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert not optimizers[0]._optimizer_step_pre_hooks and not optimizers[0]._optimizer_step_post_hooks


def test_health_false_writes_nothing_of_health_and_says_so(tmp_path):
    model = relu_mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=5, health=False) as xray:
        _train(model, xray, batches(6), optimizer)
        with pytest.raises(RuntimeError, match="health=True"):
            xray.findings()
    assert scalars(tmp_path) == {}
    with pytest.raises(TypeError, match="health="):
        Xray(model, input_size=(16,), logdir=str(tmp_path), health="yes")
    with pytest.raises(ValueError, match="every"):
        HealthOptions(every=0)
    with pytest.raises(ValueError, match="unknown rules 'dead'"):
        Xray(model, input_size=(16,), logdir=str(tmp_path), health=HealthOptions(rules={"dead": {}}))


@pytest.mark.parametrize("options, message", [
    ({"rules": {"dead_units": {"fraction": "high"}}}, r"rules=\{'dead_units': \{'fraction': ...\}\}\) takes a finite number, got 'high'"),
    ({"rules": {"vanishing_gradient": {"patience": 2.5}}}, "'patience'.* takes a whole number >= 1, got 2.5"),
    ({"rules": {"dead_units": {"after": 0}}}, "'after'.* takes a whole number >= 1 or None, got 0"),
    ({"rules": ["saturation"]}, r"rules=...\) takes a dict"),
    ({"dead_threshold": "zero"}, r"dead_threshold=...\) takes a finite number"),
    ({"dead_threshold": math.nan}, r"dead_threshold=...\) takes a finite number"),
    ({"saturation_margin": None}, r"saturation_margin=...\) takes a number in \[0, 0.5\)"),
    ({"histograms": "yes"}, r"histograms=...\) takes True or False"),
])
def test_bad_health_options_are_refused_when_built_with_what_they_take(options, message):
    with pytest.raises(ValueError, match=message):
        HealthOptions(**options)


def test_custom_statistics_and_epochs_match_numpy(tmp_path):
    model = relu_mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = batches(10)
    expected: dict = {}
    activation_means: dict = {}
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=2, health=HealthOptions(every=1)) as xray:
        xray.add_statistic("wmax", lambda t: float(t.abs().max()), kinds=("weight",))
        xray.add_statistic("amean", lambda t: t.mean(), kinds=("activation",))
        with pytest.raises(ValueError, match="exists already"):
            xray.add_statistic("grad_l2", lambda t: 0.0, kinds=("weight",))
        xray.add_statistic("clash", lambda t: 0.0, kinds=("weight", "weight_grad"))
        with pytest.raises(ValueError, match=r"'clash\[weight\]' exists already"):
            xray.add_statistic("clash", lambda t: 0.0, kinds=("activation", "weight"))
        assert "clash[activation]" not in {c for f in xray._health.monitor.families.activation for c in f.columns}  # all or none
        with pytest.raises(ValueError, match="kinds must be some of"):
            xray.add_statistic("x", lambda t: 0.0, kinds=("bias",))
        epochs = []
        for epoch in range(2):
            for step in range(5):
                x, y = data[epoch * 5 + step]
                optimizer.zero_grad()
                hidden = F.relu(model[0](x))
                F.cross_entropy(model(x), y).backward()
                s = epoch * 5 + step
                expected.setdefault(epoch, []).append({name: gradient_stats(m.weight.grad)["grad_l2"] for name, m in weighted(model).items()})
                expected.setdefault("wmax", {})[s] = float(model[4].weight.detach().abs().max())
                if s % 2 == 0:
                    activation_means[s] = float(hidden.detach().double().mean())
                xray.take_graphs()
                optimizer.step()
            epochs.append(xray.end_epoch())
    written = scalars(tmp_path)
    for step, value in expected["wmax"].items():
        assert written[("4", "wmax")][step] == pytest.approx(value, rel=1e-6)
    assert sorted(written[("0", "amean")]) == sorted(activation_means)
    for step, value in activation_means.items():
        assert written[("0", "amean")][step] == pytest.approx(value, rel=1e-5)
    for epoch, moments in enumerate(epochs):
        for layer in ("0", "2", "4"):
            series = np.array([row[layer] for row in expected[epoch]])
            mean, var = moments[layer]["grad_l2"]
            assert mean == pytest.approx(series.mean(), rel=1e-5) and var == pytest.approx(series.var(ddof=1), rel=1e-3)
    assert "update_ratio" in epochs[0]["0"] and "wmax" in epochs[1]["4"]


def test_a_failing_custom_statistic_costs_its_own_values_only(tmp_path):
    model = relu_mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=2, health=HealthOptions(every=1)) as xray:
        calls = {"n": 0}

        def fails_every_other(t):  # a user's bug that shows on some tensors only
            calls["n"] += 1
            if calls["n"] % 2:
                raise ZeroDivisionError("division by zero")
            return t.abs().max()

        xray.add_statistic("flaky", fails_every_other)
        xray.add_statistic("worded", lambda t: "high")
        xray.add_statistic("amean", lambda t: t.missing(), kinds=("activation",))  # no such method
        with pytest.warns(UserWarning) as caught:
            expected, _ = _train(model, xray, batches(6), optimizer)
    messages = [str(w.message) for w in caught if "statistic '" in str(w.message)]
    assert len(messages) == 3  # one per statistic, however often it fails
    assert "statistic 'flaky' failed on a weight's gradient (ZeroDivisionError: division by zero)" in messages[0]
    assert any("statistic 'worded' failed on a weight's gradient (ValueError: statistic 'worded' returned str" in m for m in messages)
    assert any("statistic 'amean' failed on the activation of layer '0' (AttributeError" in m for m in messages)
    assert not any("training health failed" in str(w.message) for w in caught)  # the built-ins were not skipped
    run = open_run(tmp_path)
    layers, steps, grad_l2 = run.health("grad_l2")
    assert list(steps) == list(range(6)) and np.isfinite(grad_l2).all()
    for k, layer in enumerate(layers):
        np.testing.assert_allclose(grad_l2[k], [expected[(layer, "grad_l2")][s] for s in range(6)], rtol=1e-5)
    _, _, flaky = run.health("flaky")
    assert np.isnan(flaky).any() and np.isfinite(flaky).any()  # missing where it failed, kept where it did not


@pytest.mark.parametrize("device_path", [False, True])
def test_the_update_ratio_skips_an_iteration_whose_weight_changed_shape_since_the_copy(device_path):
    """A weight given another shape through ``.data`` between the copy and the next iteration has no
    update to measure: that iteration gives no ratio (nothing raises), and the next copy starts afresh."""
    from xray_tb.devices import device_path_on_cpu
    from xray_tb.health.stats import IterationView, UpdateRatio

    ratio, nan = UpdateRatio(["a", "b"], every=1), torch.tensor(math.nan)
    with device_path_on_cpu() if device_path else contextlib.nullcontext():
        ratio.compute(IterationView([torch.ones(3, 2), torch.ones(4)], [None, None], nan, 0))  # the copy
        grown = [torch.full((3, 2), 2.0), torch.ones(5)]  # b grew
        assert ratio.compute(IterationView(grown, [None, None], nan, 1)) == {"update_l2": [None, None], "update_base_l2": [None, None]}
        stepped = [grown[0] * 1.5, grown[1] + 1.0]
        measured = ratio.compute(IterationView(stepped, [None, None], nan, 2))  # from the copy of iteration 1
    np.testing.assert_allclose(measured["update_l2"].numpy(), [math.sqrt(6), math.sqrt(5)], rtol=1e-6)
    np.testing.assert_allclose(measured["update_base_l2"].numpy(), [math.sqrt(24), math.sqrt(5)], rtol=1e-6)


@pytest.mark.parametrize("how", ["one-optimizer", "two-optimizers", "by-hand"])
def test_the_weights_copy_lives_until_the_optimizer_step_only_and_the_ratio_stays_exact(tmp_path, how):
    """The update ratio's copy of the weights is dropped right after the optimizer step that makes the
    update (each optimizer's weights after its own step), not held through the next forward and
    backward; the ratio is still ||w(s) - w(s-1)|| / ||w(s-1)||. An update by hand, which no step hook
    sees, keeps its copies until the next iteration, as before."""
    model = relu_mlp()
    linears = [module for module in model if isinstance(module, nn.Linear)]
    if how == "one-optimizer":
        optimizers = [torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)]
    elif how == "two-optimizers":
        optimizers = [torch.optim.SGD(linears[0].parameters(), lr=0.1),
                      torch.optim.Adam([p for m in linears[1:] for p in m.parameters()], lr=0.01)]
    else:
        optimizers = []
    before: dict = {}
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=10, health=HealthOptions(every=1, update_every=3)) as xray:
        ratio = xray._health.monitor.families.update_ratio
        for step, (x, y) in enumerate(batches(STEPS)):
            model.zero_grad()
            F.cross_entropy(model(x), y).backward()
            before[step] = [m.weight.detach().double().numpy().copy() for m in linears]
            xray.take_graphs()
            assert ratio.held_copies == (3 if step % 3 == 0 else 0), step
            if not optimizers:
                with torch.no_grad():
                    for p in model.parameters():
                        p -= 0.1 * p.grad
            for k, optimizer in enumerate(optimizers):
                optimizer.step()
                if how == "two-optimizers" and k == 0 and step % 3 == 0:
                    assert ratio.held_copies == 2  # the first optimizer's weight is measured, the others wait
            assert ratio.held_copies == (3 if step % 3 == 0 and not optimizers else 0), step
    written = scalars(tmp_path)
    for k, layer in enumerate(("0", "2", "4")):
        ratios = written[(layer, "update_ratio")]
        assert sorted(ratios) == list(range(1, STEPS, 3))
        for step in ratios:
            previous = before[step - 1][k]
            assert ratios[step] == pytest.approx(np.linalg.norm(before[step][k] - previous) / np.linalg.norm(previous), rel=1e-4)


def test_a_failure_while_measuring_the_update_at_the_step_costs_that_ratio_only(tmp_path, monkeypatch):
    """The update is measured inside the user's optimizer.step(): a failure there is not raised into it.
    That update has no ratio, its copies are dropped, and the next copies measure as before."""
    from xray_tb.health.stats import update

    model, data = relu_mlp(), batches(8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    failing = {"on": False}
    real_norms = update._Copy._norms

    def norms(self, *args):
        if failing["on"]:
            raise RuntimeError("planted")
        return real_norms(self, *args)

    monkeypatch.setattr(update._Copy, "_norms", norms)
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=10, health=HealthOptions(every=1, update_every=3)) as xray:
        ratio = xray._health.monitor.families.update_ratio
        for step, (x, y) in enumerate(data):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            xray.take_graphs()
            failing["on"] = step == 3
            optimizer.step()  # raises nothing
            failing["on"] = False
            assert ratio.held_copies == 0
    assert sorted(scalars(tmp_path)[("0", "update_ratio")]) == [1, 7]


def test_two_xrays_training_side_by_side_measure_their_updates_at_each_step(tmp_path):
    """Two recordings in one process, each with its optimizer: every step runs both update ratios'
    step hooks (torch iterates one table of global hooks, which no hook changes while it runs), and
    each ratio is its own model's."""
    models = [relu_mlp(seed=0), relu_mlp(seed=1)]
    optimizers = [torch.optim.SGD(models[0].parameters(), lr=0.1), torch.optim.Adam(models[1].parameters(), lr=0.01)]
    before: dict = {0: {}, 1: {}}
    with contextlib.ExitStack() as stack:
        xrays = [stack.enter_context(Xray(model, input_size=(16,), logdir=str(tmp_path / f"run{k}"), every=10,
                                          health=HealthOptions(every=1, update_every=2))) for k, model in enumerate(models)]
        for step, (x, y) in enumerate(batches(10)):
            for k, (model, xray, optimizer) in enumerate(zip(models, xrays, optimizers)):
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                before[k][step] = model[0].weight.detach().double().numpy().copy()
                xray.take_graphs()
            for k, optimizer in enumerate(optimizers):
                optimizer.step()
                assert xrays[k]._health.monitor.families.update_ratio.held_copies == 0
    for k in (0, 1):
        ratios = scalars(tmp_path / f"run{k}")[("0", "update_ratio")]
        assert sorted(ratios) == [1, 3, 5, 7, 9]
        for step, got in ratios.items():
            previous = before[k][step - 1]
            assert got == pytest.approx(np.linalg.norm(before[k][step] - previous) / np.linalg.norm(previous), rel=1e-4)


@pytest.mark.parametrize("value", [-math.inf, math.inf, math.nan], ids=["-inf", "inf", "nan"])
def test_a_non_finite_gradient_has_the_statistics_torch_gives_it(tmp_path, value):
    """A gradient holding -inf, inf or NaN: each statistic as torch computes it on that gradient (its
    variance NaN, never a negative infinity), read back from the event files."""
    model = relu_mlp(sizes=(16, 32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=10, health=HealthOptions(every=1)) as xray:
        for step, (x, y) in enumerate(batches(3)):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            if step == 2:
                model[2].weight.grad[0, 0] = value
                g = model[2].weight.grad.double()
                want = {"grad_mean": g.mean(), "grad_var": g.var(), "grad_absmax": g.abs().max(),
                        "grad_l1": g.abs().sum(), "grad_l2": g.norm()}
            xray.take_graphs()
    written = scalars(tmp_path)
    for stat, reference in want.items():
        got, expected = written[("2", stat)][2], float(reference)
        assert (math.isnan(got) and math.isnan(expected)) or got == expected, (stat, got, expected)


class TwoWeights(nn.Module):
    """A layer of two weights, the second used on even steps only (a backward it misses leaves no gradient)."""

    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(4, 4))
        self.w2 = nn.Parameter(torch.randn(4, 12))
        self.use_w2 = True

    def forward(self, x):
        y = F.linear(x, self.w1)
        return y + F.linear(torch.ones(x.shape[0], 12), self.w2) if self.use_w2 else y


@pytest.mark.parametrize("device_path", [False, True])
def test_the_gradient_mean_and_variance_of_a_layer_are_over_its_weights_that_have_a_gradient(tmp_path, device_path):
    """An LSTM whose weight_hh_l0 is frozen, and a layer one of whose weights misses every other backward:
    their missing gradients are not zeros (before, the mean and variance were taken over all the weights)."""
    torch.manual_seed(0)
    lstm = nn.LSTM(3, 4, batch_first=True)
    lstm.weight_hh_l0.requires_grad_(False)
    two = TwoWeights()
    model = nn.ModuleDict({"lstm": lstm, "two": two})

    def forward(x):
        return two(lstm(x)[0][:, -1])

    model.forward = forward
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.01)
    expected = []
    with device_path_on_cpu() if device_path else contextlib.nullcontext():
        with Xray(model, torch.randn(2, 5, 3), logdir=str(tmp_path), health=HealthOptions(every=1)) as xray:
            for step in range(4):
                two.use_w2 = step % 2 == 0
                optimizer.zero_grad()
                model(torch.randn(2, 5, 3)).pow(2).mean().backward()
                row = {}
                for name, module in (("lstm", lstm), ("two", two)):
                    grads = torch.cat([p.grad.double().flatten() for n, p in module.named_parameters()
                                       if not n.startswith("bias") and p.grad is not None])
                    row[name] = (grads.mean().item(), grads.var().item())
                expected.append(row)
                xray.take_graphs(step)
                optimizer.step()
    run = open_run(str(tmp_path))
    for stat, index in (("grad_mean", 0), ("grad_var", 1)):
        layers, steps, values = run.health(stat)
        assert list(steps) == [0, 1, 2, 3]
        for name in ("lstm", "two"):
            got = np.asarray(values)[layers.index(name)]  # layers x steps
            np.testing.assert_allclose(got, [row[name][index] for row in expected], rtol=1e-4, atol=1e-9, err_msg=f"{stat} {name}")


@pytest.mark.parametrize("with_optimizer", [False, True])
@pytest.mark.parametrize("as_keyword", [False, True])
def test_a_step_whose_closure_runs_the_last_backward_is_measured_on_the_gradient_it_applies(tmp_path, with_optimizer, as_keyword):
    """Accumulation of two micro-batches where the second runs in optimizer.step(closure), as Lightning
    does, take_graphs() inside the closure: the step's pre-hooks come before that backward."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    extra = {"optimizer": optimizer} if with_optimizer else {}
    applied = []
    generator = torch.Generator().manual_seed(1)
    with Xray(model, input_size=(8,), logdir=str(tmp_path), every=5, health=HealthOptions(every=1), **extra) as xray:
        for step in range(6):
            x = torch.randn(16, 8, generator=generator)
            (F.cross_entropy(model(x), (x[:, 0] > 0).long()) / 2).backward()  # micro-batch 1

            def closure(step=step):
                x = torch.randn(16, 8, generator=generator)
                loss = F.cross_entropy(model(x), (x[:, 0] > 0).long()) / 2
                loss.backward()  # micro-batch 2
                applied.append(float(model[0].weight.grad.double().norm()))
                xray.take_graphs(None if with_optimizer else step)
                return loss

            optimizer.step(closure=closure) if as_keyword else optimizer.step(closure)
            optimizer.zero_grad()
    layers, steps, values = open_run(str(tmp_path)).health("grad_l2")
    assert list(steps) == list(range(6))  # the last step was missing
    np.testing.assert_allclose(values[layers.index("0")], applied, rtol=1e-5)  # each row held the next step's first half
