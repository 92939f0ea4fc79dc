"""The first non-finite value is exact at the default pace: the sentinel checks every iteration's
weights and gradients, so a NaN planted at step 37 is named at step 37 in its layer even when the
statistics measure one iteration in many, with and without ``optimizer=``."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.optim.optimizer import _global_optimizer_pre_hooks

from xray_tb import Xray, open_run
from xray_tb.health import HealthOptions, NonFinite
from xray_tb.schedules import at
from xray_tb.health.nonfinite import FlagRows
from xray_tb.health.sentinel import NonFiniteSentinel
from xray_tb.health.weight_versions import MIN_SIZE

from tests.health.helpers import batches



def three_layers(width: int = 32) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("first", nn.Linear(16, width))
    model.add_module("act1", nn.ReLU())
    model.add_module("second", nn.Linear(width, 32))
    model.add_module("act2", nn.ReLU())
    model.add_module("third", nn.Linear(32, 4))
    return model


def train(model, xray, optimizer, steps: int, plant=None, use_optimizer_hook: bool = False):
    for step, (x, y) in enumerate(batches(steps)):
        if plant is not None:
            plant(step, model)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        if not use_optimizer_hook:
            xray.take_graphs()
        optimizer.step()
        if use_optimizer_hook:
            xray.take_graphs()


def nan_weight_at_37(step: int, model) -> None:
    if step == 37:
        with torch.no_grad():
            model.second.weight[5, 3] = math.nan


@pytest.mark.parametrize("with_optimizer", [False, True])
def test_a_nan_weight_at_step_37_is_named_at_37_at_the_default_pace(tmp_path, with_optimizer):
    model = three_layers()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    extra = {"optimizer": optimizer} if with_optimizer else {}
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=10, **extra) as xray:
        assert xray._health.monitor._pacer.auto  # the defaults: the statistics are paced
        train(model, xray, optimizer, 60, nan_weight_at_37, use_optimizer_hook=with_optimizer)
        assert xray.first_nonfinite == NonFinite(step=37, layer="second", kind="weight")
        nonfinite = [(f.layer, f.step) for f in xray.findings() if f.rule == "nonfinite"]
    assert nonfinite == [("second", 37)]
    assert [(f.layer, f.step) for f in open_run(tmp_path).findings() if f.rule == "nonfinite"] == [("second", 37)]


@pytest.mark.parametrize("optimizer_first", [False, True])
def test_the_readme_loop_that_takes_graphs_every_10_steps_names_the_nan_at_37(tmp_path, optimizer_first):
    """No every=, no optimizer=, take_graphs(step) at captures only: the optimizer that steps the model
    counts the iterations in between, whichever of the two calls comes first."""
    model = three_layers()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    other = torch.optim.SGD([nn.Parameter(torch.zeros(3))], lr=0.1)  # steps nothing of the model: not followed
    with Xray(model, input_size=(16,), logdir=str(tmp_path)) as xray:
        for step, (x, y) in enumerate(batches(60)):
            nan_weight_at_37(step, model)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            other.step()
            if optimizer_first:
                optimizer.step()
            if step % 10 == 0:
                xray.take_graphs(step)
            if not optimizer_first:
                optimizer.step()
        assert xray.first_nonfinite == NonFinite(step=37, layer="second", kind="weight")
        assert xray._health.monitor._iterations == 60  # each backward once
    run = open_run(tmp_path)
    assert [(f.layer, f.step) for f in run.findings() if f.rule == "nonfinite"] == [("second", 37)]
    layers, steps, values = run.health("grad_l2")
    assert 37 in steps.tolist()  # the iteration that went non-finite is measured, whatever the pace
    assert math.isnan(values[layers.index("second"), steps.tolist().index(37)])
    *_, present = run.health("grad_l2", present=True)
    assert present[layers.index("second"), steps.tolist().index(37)]  # measured as NaN, not missing
    _, ratio_steps, ratios, ratio_present = run.health("update_ratio", present=True)
    assert np.isnan(ratios[~ratio_present]).all() and not ratio_present.all()  # measured one iteration in 10
    with pytest.raises(ValueError, match=r"no training-health statistic 'grad_l3'; did you mean 'grad_l1', 'grad_l2', 'grad_var'\? this run has: .*grad_l2"):
        run.health("grad_l3")
    assert set(range(10)) <= set(steps.tolist())  # iterations between captures carry their own steps


def test_the_follower_hooks_are_removed_at_close(tmp_path):
    model = three_layers()
    global_hooks = dict(_global_optimizer_pre_hooks)
    xray = Xray(model, input_size=(16,), logdir=str(tmp_path))
    assert model.first.weight._post_accumulate_grad_hooks  # the marker: the first layer the forward calls
    xray.close()
    assert dict(_global_optimizer_pre_hooks) == global_hooks
    assert not model.first.weight._post_accumulate_grad_hooks


def test_a_gradient_infinite_at_one_iteration_only_is_named_at_that_iteration(tmp_path):
    model = three_layers()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # the weights stay finite afterwards
    spike = {"step": None}

    def hook(grad):
        return grad * math.inf if spike["step"] == 23 else grad

    model.third.weight.register_hook(hook)
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=10) as xray:
        for step, (x, y) in enumerate(batches(40)):
            spike["step"] = step
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            xray.take_graphs()
            optimizer.step()
        assert xray.first_nonfinite == NonFinite(step=23, layer="third", kind="weight_grad")
        assert [(f.layer, f.step) for f in xray.findings() if f.rule == "nonfinite"] == [("third", 23)]


def test_finite_tensors_whose_sums_overflow_are_not_flagged():
    sentinel = NonFiniteSentinel(["a", "b"])
    big = torch.full((4,), 3e38)
    sentinel.check(0, [big, torch.ones(2)], [big.clone(), None])
    assert not sentinel.done
    sentinel.check(1, [big, torch.tensor([1.0, -math.inf])], [big.clone(), torch.ones(2)])
    rows = FlagRows()
    sentinel.take(rows)
    assert rows.by_step == {1: {"weight": {"b"}}}


def test_the_device_path_keeps_the_first_flagged_iteration_without_reading_it():
    """The GPU path (flags kept on the device, read once), run here on CPU tensors."""
    sentinel = NonFiniteSentinel(["a", "b", "c"])
    weights = [torch.ones(3), torch.ones(2, 2), torch.ones(5, dtype=torch.float64)]
    grads = [torch.ones(3), None, torch.ones(5, dtype=torch.float64)]

    def run(step):
        tensors = [*weights, *grads]
        positions = [i for i, t in enumerate(tensors) if t is not None]
        sentinel._check_on_device(step, tensors, positions, [tensors[i] for i in positions])

    run(0)
    grads[2] = torch.tensor([1.0, math.nan, 0, 0, 0], dtype=torch.float64)
    run(1)
    weights[0] = torch.tensor([math.inf, 0.0, 0.0])
    run(2)  # later: not the first
    rows = FlagRows()
    sentinel.take(rows)
    assert rows.by_step == {1: {"weight_grad": {"c"}}} and sentinel.done


def test_a_shared_sentinel_reports_what_the_ranks_agreed_and_its_own_find_once_they_no_longer_can():
    """Under FSDP: before close only an agreement counts; after close (agreement or not) a find stands."""
    sentinel = NonFiniteSentinel(["a", "b"])
    sentinel.shared = True
    sentinel.check(4, [torch.ones(2), torch.ones(2)], [torch.ones(2), torch.tensor([math.nan, 0.0])])

    def taken() -> dict:
        rows = FlagRows()
        sentinel.take(rows)
        return rows.by_step

    assert sentinel.local_find() == (4, [False, False, False, True]) and taken() == {}
    sentinel.shared = False  # closed without an agreement: this rank's own find
    assert taken() == {4: {"weight_grad": {"b"}}}
    sentinel.agree(3, [False, True, False, False])  # another rank saw a NaN weight earlier: the agreement wins
    assert taken() == {3: {"weight": {"b"}}}


def _readme_loop(model, plant, steps: int = 45, **options):
    """The README loop (take_graphs(step) every 10 steps) at the default pace; the first non-finite value."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with Xray(model, input_size=(16,), logdir=options.pop("logdir"), **options) as xray:
        for step, (x, y) in enumerate(batches(steps)):
            plant(step, model)
            optimizer.zero_grad()
            F.cross_entropy(model(x.abs()), y).backward()
            if step % 10 == 0:
                xray.take_graphs(step)
            optimizer.step()
        return xray.first_nonfinite


@pytest.mark.parametrize("make_model", ["three_layers", "wide_layers"])
def test_an_infinite_weight_that_a_relu_hides_is_named_at_its_step(tmp_path, make_model):
    """-inf in the first layer's row 0 on positive inputs: the ReLU clamps that unit to 0, so the loss
    and every gradient stay finite; the weight is non-finite all the same."""
    def plant(step, model):
        if step == 33:
            with torch.no_grad():
                model.first.weight[0, :] = -math.inf

    model = globals()[make_model]()  # small weights are read at every check, large ones when written
    assert _readme_loop(model, plant, logdir=str(tmp_path)) == NonFinite(step=33, layer="first", kind="weight")


class CustomWeight(nn.Module):
    """A layer whose weight is a parameter of another name, used through F.linear."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(32, 16) * 0.2)

    def forward(self, x):
        return F.linear(x, self.w)


@pytest.mark.parametrize("where, expected", [
    ("custom", NonFinite(step=23, layer="first", kind="weight")),
    ("bias", NonFinite(step=23, layer="second", kind="bias")),
])
def test_a_nan_in_a_custom_weight_or_a_bias_is_named_in_its_own_layer(tmp_path, where, expected):
    model = three_layers()
    model.first = CustomWeight()

    def plant(step, model):
        if step == 23:
            with torch.no_grad():
                (model.first.w if where == "custom" else model.second.bias)[3] = math.nan

    assert _readme_loop(model, plant, logdir=str(tmp_path)) == expected


def test_a_model_holding_its_parameters_itself_says_health_watches_no_weight(tmp_path):
    class Bare(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 16))

        def forward(self, x):
            return F.linear(x, self.w)

    model = Bare()
    with pytest.warns(UserWarning, match="training health watches no weights"):
        xray = Xray(model, input_size=(16,), logdir=str(tmp_path))
    with xray, warnings.catch_warnings():
        warnings.simplefilter("error")  # no health failure warned: nothing per iteration to measure
        model(torch.randn(2, 16)).sum().backward()
        xray.take_graphs()


class _SumsRead(torch.overrides.TorchFunctionMode):
    """The parameters and gradients whose values are summed while the mode is on (by identity), one by one
    or copied into a batch of small tensors (:mod:`xray_tb.health.cpu_batches`)."""

    def __init__(self):
        super().__init__()
        self.read: list[int] = []
        self._copies: set[int] = set()  # batches and their sums: what the sentinel made, not the model's

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func is torch.Tensor.sum and id(args[0]) not in self._copies:
            self.read.append(id(args[0]))
        if func in (torch.cat, torch.stack):
            self.read.extend(id(t) for t in args[0] if id(t) not in self._copies)
        if func in (torch.cat, torch.stack, torch.Tensor.reshape, torch.Tensor.view, torch.Tensor.sum):
            self._copies.add(id(result))
        return result


def wide_layers() -> nn.Module:
    """Two weights large enough to be followed (weight_versions.MIN_SIZE values) and a small one."""
    return three_layers(width=1024)


@pytest.mark.parametrize("optimizer_class", [torch.optim.SGD, torch.optim.Adam])
def test_a_large_weight_only_the_optimizer_stepped_is_not_read_again(tmp_path, optimizer_class):
    """Between measured iterations the CPU sentinel reads each gradient, each small weight, and a large
    weight only when something other than an optimizer step (from the gradients it checked) wrote it
    since it was found finite."""
    model = wide_layers()
    optimizer = optimizer_class(model.parameters(), lr=0.01)
    weights = [model.first.weight, model.second.weight, model.third.weight]
    assert [w.numel() >= MIN_SIZE for w in weights] == [True, True, False]
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=at([]), health=HealthOptions(every=1000)) as xray:
        for step, (x, y) in enumerate(batches(8)):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            if step == 6:
                with torch.no_grad():
                    model.second.weight.mul_(1.0)  # a write of the user's: read again
            with _SumsRead() as sums:
                xray.take_graphs()
            optimizer.step()
            read = sorted([*(id(w.grad) for w in weights), id(model.third.weight)])
            if step in (4, 5):
                assert sorted(sums.read) == read
            if step == 6:
                assert sorted(sums.read) == sorted([*read, id(model.second.weight)])


def test_a_gradient_clipped_after_the_call_is_read_again_before_the_step_and_its_weight_stays_clean(tmp_path):
    """take_graphs() checks the iteration, clip_grad_norm_ then writes the gradients in place: before the
    optimizer step the sentinel reads again the gradient that changed (the one the step applies), not the
    one that did not, and the weight stepped from it is not read at the next check."""
    model = wide_layers()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=at([]), health=HealthOptions(every=1000)) as xray:
        for step, (x, y) in enumerate(batches(6)):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            with _SumsRead() as at_call:
                xray.take_graphs()
            torch.nn.utils.clip_grad_norm_(model.second.parameters(), 1e-3)  # in place, after the check
            with _SumsRead() as at_step:
                optimizer.step()
            if step >= 4:
                assert id(model.second.weight) not in at_call.read and id(model.first.weight) not in at_call.read
                assert id(model.second.weight.grad) in at_step.read and id(model.first.weight.grad) not in at_step.read


def test_an_infinite_weight_written_between_the_call_and_the_step_is_named_at_that_iteration(tmp_path):
    """Written after take_graphs() read the weights, before the optimizer steps from them (a ReLU hides it
    from every gradient of the next iteration): the check before that step finds it."""
    model = wide_layers()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=10) as xray:
        for step, (x, y) in enumerate(batches(30)):
            optimizer.zero_grad()
            F.cross_entropy(model(x.abs()), y).backward()
            xray.take_graphs()
            if step == 17:
                with torch.no_grad():
                    model.first.weight[0, :] = -math.inf
            optimizer.step()
        assert xray.first_nonfinite == NonFinite(step=17, layer="first", kind="weight")


@pytest.mark.parametrize("written", ["weight", "grad"])
def test_a_value_written_between_the_call_and_the_step_shows_in_the_statistics_at_its_own_step(tmp_path, written):
    """Found by the check before the optimizer step, after the call's iteration was passed over by the
    pace: that iteration is measured then, so the series show the NaN at 37 (not first at a later measured
    step). A fixed pace of one in 10 (the automatic one thins the same way on slower-stepping models)."""
    model = three_layers()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=10, health=HealthOptions(every=10)) as xray:
        for step, (x, y) in enumerate(batches(60)):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            xray.take_graphs()
            if step == 37:
                with torch.no_grad():
                    (model.second.weight if written == "weight" else model.second.weight.grad)[0, 0] = math.nan
            optimizer.step()
        assert xray.first_nonfinite == NonFinite(step=37, layer="second", kind=written if written == "weight" else "weight_grad")
    run = open_run(tmp_path)
    stat = "weight_l2" if written == "weight" else "grad_l2"
    layers, steps, values, present = run.health(stat, present=True)
    row, at = layers.index("second"), steps.tolist().index(37)
    assert present[row, at] and math.isnan(values[row, at])  # measured at its own step, as NaN
    before = present[row] & (steps < 37)
    assert before.any() and np.isfinite(values[row, before]).all()  # finite until then
    assert 36 not in steps.tolist() and 38 not in steps.tolist()  # the pace measured one iteration in 10


def test_the_weight_version_hooks_are_removed_at_close(tmp_path):
    from torch.optim.optimizer import _global_optimizer_post_hooks

    before = (dict(_global_optimizer_pre_hooks), dict(_global_optimizer_post_hooks))
    model = three_layers()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with Xray(model, input_size=(16,), logdir=str(tmp_path)) as xray:
        train(model, xray, optimizer, 3)
        # the weights' versions, the forward replay's (an optimizer step drops the forwards it keeps) and
        # the update ratio's (its copy is measured and dropped right after the step)
        assert len(_global_optimizer_post_hooks) == len(before[1]) + 3
    assert (dict(_global_optimizer_pre_hooks), dict(_global_optimizer_post_hooks)) == before


def test_a_weight_whose_data_is_replaced_is_read_again(tmp_path):
    """``weight.data = ...`` bumps no version counter; the data's new place is seen."""
    def plant(step, model):
        if step == 26:
            model.first.weight.data = model.first.weight.data.clone().index_fill_(0, torch.tensor([0]), -math.inf)

    assert _readme_loop(wide_layers(), plant, logdir=str(tmp_path)) == NonFinite(step=26, layer="first", kind="weight")


def test_each_optimizer_keeps_the_marks_of_the_weights_it_steps_from_checked_gradients(tmp_path):
    """Two optimizers over two parts of a model, iterations counted at the first one's steps: each part's
    large weight is not read again after its own optimizer's step; a part stepped with gradients that no
    check saw (scaled in place by its optimizer's own pre-hook, which runs after the check Xray makes
    before every optimizer of the model's weights) is read at the next check."""
    model = wide_layers()
    first = torch.optim.SGD(model.first.parameters(), lr=0.01)
    rest = torch.optim.SGD([*model.second.parameters(), *model.third.parameters()], lr=0.01)

    def halve_second_gradients(optimizer, args, kwargs) -> None:
        for param in model.second.parameters():
            param.grad.mul_(0.5)

    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=at([]), health=HealthOptions(every=1000), optimizer=first):
        for step, (x, y) in enumerate(batches(9)):
            first.zero_grad()
            rest.zero_grad()
            F.cross_entropy(model(x), y).backward()
            with _SumsRead() as sums:
                first.step()  # the check, in its step pre-hook
                if step == 6:  # the rest steps with gradients changed after every check
                    scaled = rest.register_step_pre_hook(halve_second_gradients)
                rest.step()
                if step == 6:
                    scaled.remove()
            read = {id(model.first.weight), id(model.second.weight)} & set(sums.read)
            if step >= 2:
                assert read == ({id(model.second.weight)} if step == 7 else set()), step


def conv_bn_relu() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("conv", nn.Conv2d(1, 4, 3))
    model.add_module("bn", nn.BatchNorm2d(4))
    model.add_module("relu", nn.ReLU())  # the conv's activation, after the BatchNorm
    model.add_module("flat", nn.Flatten())
    model.add_module("fc", nn.Linear(4 * 6 * 6, 3))
    return model


@pytest.mark.parametrize("flush_seconds", [None, 0.0])  # 0: every capture writes its block (slow steps)
@pytest.mark.parametrize("with_optimizer", [False, True])
@pytest.mark.parametrize("planted", [0, 37, 40])
def test_a_nan_norm_weight_is_named_in_the_norm_at_a_capture_step_too(tmp_path, planted, with_optimizer, flush_seconds):
    """At a capture the forward checks see the NaN in the conv's activation (its ReLU after the
    BatchNorm), before the iteration's own check of the BatchNorm's weight: the weight still comes first."""
    model = conv_bn_relu()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    extra = {"optimizer": optimizer} if with_optimizer else {}
    health = HealthOptions() if flush_seconds is None else HealthOptions(flush_seconds=flush_seconds)
    generator = torch.Generator().manual_seed(1)
    data = [(torch.randn(8, 1, 8, 8, generator=generator), torch.randint(0, 3, (8,), generator=generator)) for _ in range(45)]
    with Xray(model, data[0][0], logdir=str(tmp_path), every=10, health=health, **extra) as xray:
        for step, (x, y) in enumerate(data):
            optimizer.zero_grad()
            if step == planted:
                with torch.no_grad():
                    model.bn.weight[1] = math.nan
            F.cross_entropy(model(x), y).backward()
            xray.take_graphs()
            optimizer.step()
        assert xray.first_nonfinite == NonFinite(step=planted, layer="bn", kind="weight")
        assert [(f.layer, f.step) for f in xray.findings() if f.rule == "nonfinite"] == [("bn", planted)]


@pytest.mark.parametrize("where", ["weight", "bias"])
def test_a_nan_written_before_the_first_step_is_named_as_the_parameter_with_optimizer(tmp_path, where):
    """With optimizer= the first capture writes its block at once, before the optimizer step checks the
    weights: the output check alone would name the layer's output."""
    model = three_layers()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    def plant(step, model):
        if step == 0:
            with torch.no_grad():
                getattr(model.second, where).view(-1)[0] = math.nan

    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=10, optimizer=optimizer) as xray:
        train(model, xray, optimizer, 12, plant)
        assert xray.first_nonfinite == NonFinite(step=0, layer="second", kind=where)
