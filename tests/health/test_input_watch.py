"""Issue 16's bar 1 on an accelerator: a NaN the batch brought between two health steps is named at its
step and in the layer it entered, as on a CPU (where the forward is run again), although the sentinel's
flags are read only at the next write. Each test runs on a GPU (``cuda``) and on the CPU with the device
path forced, the code an accelerator runs."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from xray_tb import Xray
from xray_tb.health import HealthOptions
from xray_tb.health.device_finds import DeviceFinds
from xray_tb.health.findings import NonFinite
from xray_tb.health.input_watch import InputWatch

from tests.helpers.devices import ConvNet, device  # noqa: F401 (device: the fixture)
from tests.helpers.host_reads import host_reads


class TwoInputs(nn.Module):
    """An image branch and a table branch, joined: a NaN in the table enters at ``table``."""

    def __init__(self):
        super().__init__()
        self.image = nn.Linear(12, 16)
        self.table = nn.Linear(5, 16)
        self.head = nn.Linear(32, 3)

    def forward(self, image, table):
        return self.head(torch.cat([torch.relu(self.image(image)), torch.relu(self.table(table))], dim=1))


def _batch(generator: torch.Generator, device: torch.device, step: int, plant: int):
    x, y = torch.randn(16, 1, 6, 6, generator=generator), torch.randint(0, 3, (16,), generator=generator)
    if step == plant:
        x[3, 0, 2, 2] = math.nan
    return x.to(device), y.to(device)


@pytest.mark.parametrize("pace", ["default", "every_iteration"])
@pytest.mark.parametrize("counted", ["calls", "optimizer"])
def test_a_nan_in_the_batch_between_captures_is_named_where_it_entered_without_a_host_read(tmp_path, device, pace, counted):
    """At step 37 (captures every 10 steps) the batch holds a NaN: every gradient is NaN, and the answer is
    the first layer (``conv``'s output) with the data named in the finding, at the default pace and when
    every iteration is measured. Between captures neither the forward (where the batch is checked) nor
    take_graphs() and the optimizer step read anything back."""
    torch.manual_seed(0)
    model = ConvNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(3)
    options = {"health": HealthOptions(every=1)} if pace == "every_iteration" else {}
    counting = {"optimizer": optimizer} if counted == "optimizer" else {}
    reads = {}
    with Xray(model, input_size=(1, 6, 6), logdir=str(tmp_path), every=10, **options, **counting) as xray:
        for step in range(45):
            x, y = _batch(generator, device, step, plant=37)
            with host_reads(device) as found:
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                captured = xray.take_graphs()
                optimizer.step()
            reads[step] = (captured, found)
        assert {step: found for step, (captured, found) in reads.items() if captured is None and found and step > 0} == {}
        assert xray.first_nonfinite == NonFinite(step=37, layer="conv", kind="output")
        [finding] = [f for f in xray.findings() if f.rule == "nonfinite"]
        assert (finding.layer, finding.step) == ("conv", 37)
        assert "the batch of that step held NaN or Inf values" in finding.message


def test_a_nan_in_the_second_input_names_the_layer_that_takes_it(tmp_path, device):
    torch.manual_seed(0)
    model = TwoInputs().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(4)
    example = (torch.randn(2, 12, device=device), torch.randn(2, 5, device=device))
    with Xray(model, example, logdir=str(tmp_path), every=10) as xray:
        for step in range(25):
            image, table, y = torch.randn(8, 12, generator=generator), torch.randn(8, 5, generator=generator), torch.randint(0, 3, (8,), generator=generator)
            if step == 14:
                table[2, 1] = math.inf
            optimizer.zero_grad()
            F.cross_entropy(model(image.to(device), table.to(device)), y.to(device)).backward()
            xray.take_graphs()
            optimizer.step()
        assert xray.first_nonfinite == NonFinite(step=14, layer="table", kind="output")


def test_a_nan_the_model_masks_makes_no_find_and_a_later_weight_is_still_named(tmp_path, device):
    """An input flag never makes a find alone: a batch whose NaN the model replaces (``nan_to_num``) leaves
    every weight and gradient finite; the NaN written into ``fc1``'s weight later is the first found."""

    class Masking(ConvNet):
        def forward(self, x):
            return super().forward(torch.nan_to_num(x))

    torch.manual_seed(0)
    model = Masking().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(5)
    with Xray(model, input_size=(1, 6, 6), logdir=str(tmp_path), every=10) as xray:
        for step in range(35):
            x, y = _batch(generator, device, step, plant=12)
            if step == 23:
                with torch.no_grad():
                    model.fc1.weight[3, 5] = math.nan
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            xray.take_graphs()
            optimizer.step()
        assert xray.first_nonfinite == NonFinite(step=23, layer="fc1", kind="weight")
        [finding] = [f for f in xray.findings() if f.rule == "nonfinite"]
        assert "the batch" not in finding.message


def test_the_readme_loop_numbered_from_100_files_the_batch_at_its_step(tmp_path, device):
    """take_graphs(step) every 10 steps, the first at 105, the NaN batch at 102: the iterations counted
    before the first call are filed again under the steps it names, the batch's origin with them."""
    torch.manual_seed(0)
    model = ConvNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(6)
    with Xray(model, input_size=(1, 6, 6), logdir=str(tmp_path)) as xray:
        for step in range(100, 130):
            x, y = _batch(generator, device, step, plant=102)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            if step % 10 == 5:
                xray.take_graphs(step)
            optimizer.step()
        assert xray.first_nonfinite == NonFinite(step=102, layer="conv", kind="output")


def test_the_watch_leaves_the_model_as_it_was_and_its_hook_goes_at_close(tmp_path, device):
    torch.manual_seed(0)
    model = ConvNet().to(device)
    hooks_before = len(model._forward_pre_hooks)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(7)
    xray = Xray(model, input_size=(1, 6, 6), logdir=str(tmp_path), every=10)
    assert len(model._forward_pre_hooks) > hooks_before
    for step in range(12):
        x, y = _batch(generator, device, step, plant=-1)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        xray.take_graphs()
        optimizer.step()
    xray.close()
    assert len(model._forward_pre_hooks) == hooks_before
    assert xray.first_nonfinite is None


def test_a_watchs_flags_go_to_the_checks_of_one_step_only():
    """The flags of the forwards since the last check go to that step's checks (a second optimizer's too),
    OR-ed over accumulated forwards; a later check with no forward since gets none; validation
    forwards are not watched; the hook goes at remove()."""
    model = nn.Linear(3, 2)
    watch = InputWatch(model, torch.device("cpu"), [""])
    model(torch.tensor([[math.nan, 0.0, 0.0]]))
    assert watch.flags(5)[1].tolist() == [True]
    assert watch.flags(5)[1].tolist() == [True]
    assert watch.flags(6) is None
    model(torch.zeros(1, 3))
    model(torch.tensor([[0.0, math.inf, 0.0]]))
    assert watch.flags(7)[1].tolist() == [True]
    model(torch.zeros(1, 3))
    assert watch.flags(8)[1].tolist() == [False]
    with torch.no_grad():
        model(torch.full((1, 3), math.nan))
    assert watch.flags(9) is None
    watch.remove()
    assert not model._forward_pre_hooks


def test_checks_without_input_flags_keep_the_first_find_on_the_device_unread():
    """A check that brings no input flags (no forward of the root since the last one) changes no layout:
    nothing is read back, and the first find keeps its batch's flags."""
    finds = DeviceFinds()
    clean, flagged = torch.zeros(3, dtype=torch.bool), torch.tensor([False, True, False])
    with host_reads(torch.device("cpu")) as found:
        finds.merge(1, clean, [0, 1, 2], 3, ((0,), torch.tensor([False])))
        finds.merge(2, clean, [0, 1, 2], 3, None)
        finds.merge(3, flagged, [0, 1, 2], 3, ((0,), torch.tensor([True])))
        finds.merge(4, flagged, [0, 1, 2], 3, None)
    assert found == []
    assert finds.read() == (3, [False, True, False], ((0,), [True]))


def test_a_nan_in_a_batch_under_autocast_is_named_where_it_entered(tmp_path, device):
    torch.manual_seed(0)
    model = ConvNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(8)
    with Xray(model, input_size=(1, 6, 6), logdir=str(tmp_path), every=10) as xray:
        for step in range(25):
            x, y = _batch(generator, device, step, plant=16)
            optimizer.zero_grad()
            with torch.autocast(device.type, dtype=torch.bfloat16):
                logits = model(x)
            F.cross_entropy(logits.float(), y).backward()
            xray.take_graphs()
            optimizer.step()
        assert xray.first_nonfinite == NonFinite(step=16, layer="conv", kind="output")
