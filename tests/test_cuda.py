"""The CUDA paths: training health's on-device reductions and a capture on a GPU model, each checked
against autograd, numpy or TensorBoard's own histogram. Each test runs twice: on a GPU (``cuda``,
skipped where none is, as in CI; on a GPU machine ``python -m pytest -m cuda``), and on the CPU with
the device path forced (``cpu_device_path``, :func:`xray_tb.devices.device_path_on_cpu`): the same
code an accelerator runs, value for value, on every machine."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tensorboard.plugins.histogram import summary_v2
from tensorboard.util import tensor_util
from torch import nn
from torch.nn import functional as F

from tb_plugin import health_metadata
from xray_tb import Xray, open_run
from xray_tb.health import HealthOptions
from xray_tb.health.findings import NonFinite

from tests.health.helpers import scalars, values_by_tag
from tests.helpers.devices import ConvNet, device  # noqa: F401 (device: the fixture)
from tests.helpers.host_reads import host_reads





def test_per_iteration_statistics_on_the_gpu_equal_autograds_gradients(tmp_path, device):
    torch.manual_seed(0)
    model = ConvNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(1)
    truth, weights = {}, {}
    with Xray(model, input_size=(1, 6, 6), logdir=str(tmp_path), every=3, health=HealthOptions(every=1, histograms_every=1)) as xray:
        for step in range(7):
            x, y = torch.randn(16, 1, 6, 6, generator=generator).to(device), torch.randint(0, 3, (16,), generator=generator).to(device)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            g = model.fc1.weight.grad.double().cpu().numpy()
            truth[step] = (g.mean(), np.abs(g).max(), (g * g).sum() ** 0.5, model.fc1.weight.double().norm().item())
            if step % 3 == 0:
                weights[step] = model.conv.weight.detach().cpu().numpy().copy()
                with torch.no_grad():
                    activation = torch.relu(model.conv(x)).double().cpu().numpy()
                truth[("var", step)] = activation.transpose(1, 0, 2, 3).reshape(8, -1).var(axis=1, ddof=1).mean()
                truth[("dead", step)] = activation.transpose(1, 0, 2, 3).reshape(8, -1).max(axis=1)
            xray.take_graphs()
            optimizer.step()
        assert xray.first_nonfinite is None
    written = scalars(tmp_path)
    for step in range(7):
        mean, absmax, l2, weight_l2 = truth[step]
        assert written[("fc1", "grad_mean")][step] == pytest.approx(mean, rel=1e-4, abs=1e-9)
        assert written[("fc1", "grad_absmax")][step] == pytest.approx(absmax, rel=1e-6)
        assert written[("fc1", "grad_l2")][step] == pytest.approx(l2, rel=1e-5)
        assert written[("fc1", "weight_l2")][step] == pytest.approx(weight_l2, rel=1e-5)
    layers, steps, values = open_run(tmp_path).health("grad_l2")
    assert list(steps) == list(range(7)) and values[layers.index("fc1")][6] == pytest.approx(truth[6][2], rel=1e-5)
    for step in (0, 3, 6):  # activation statistics at the captures, computed on the GPU
        assert written[("conv", "channel_var")][step] == pytest.approx(truth[("var", step)], rel=1e-4)
    window = np.max([truth[("dead", s)] for s in (0, 3, 6)], axis=0)
    assert written[("conv", "dead_fraction")][6] == pytest.approx((window <= 0).mean())
    histograms = values_by_tag(tmp_path, health_metadata.HISTOGRAM_PREFIX)[health_metadata.histogram_tag("conv")]
    for step, value in histograms:
        reference = summary_v2.histogram_pb("t", weights[step]).value[0].tensor
        np.testing.assert_array_equal(tensor_util.make_ndarray(value.tensor), tensor_util.make_ndarray(reference))


def test_a_nan_weight_on_the_gpu_is_named_with_its_step_and_layer(tmp_path, device):
    torch.manual_seed(0)
    model = ConvNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with Xray(model, input_size=(1, 6, 6), logdir=str(tmp_path), every=2, health=HealthOptions(every=1)) as xray:
        for step in range(6):
            if step == 4:
                with torch.no_grad():
                    model.fc2.weight[1, 2] = math.nan
            x, y = torch.randn(8, 1, 6, 6, device=device), torch.randint(0, 3, (8,), device=device)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            xray.take_graphs()
            optimizer.step()
        assert xray.first_nonfinite == NonFinite(step=4, layer="fc2", kind="weight")
        assert ("nonfinite", "fc2", 4) in [(f.rule, f.layer, f.step) for f in xray.findings()]


def test_planted_dead_units_on_the_gpu_are_found_and_pruned_without_changing_outputs(tmp_path, device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    dead = list(range(0, 64, 4))
    with torch.no_grad():
        model[0].weight[dead] = 0.0
        model[0].bias[dead] = -10.0
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    xray = Xray(model, input_size=(16,), logdir=str(tmp_path), every=2, health=HealthOptions(every=1))
    for _ in range(20):
        x, y = torch.randn(32, 16, device=device), torch.randint(0, 4, (32,), device=device)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        xray.take_graphs()
        optimizer.step()
    assert xray.dead_units() == {"0": dead}
    probe = torch.randn(128, 16, device=device)
    with torch.no_grad():
        before = model(probe)
    assert [(e.layer, e.units, e.applied) for e in xray.prune(dry_run=False)] == [("0", dead, True)]
    with torch.no_grad():
        assert torch.equal(model(probe), before)
    xray.close()


class TwoHeads(nn.Module):
    """An LSTM whose ``out`` is unused: autograd hands its gradient hook None on the GPU too."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 8)
        self.lstm = nn.LSTM(4, 3, batch_first=True)

    def forward(self, x):
        first, _ = self.fc(x).chunk(2, dim=1)
        out, (h, c) = self.lstm(first.unsqueeze(1))
        return h[-1]


def test_a_gradient_that_never_arrives_on_the_gpu_is_reported_not_raised(tmp_path, device):
    torch.manual_seed(0)
    model, x = TwoHeads().to(device), torch.randn(5, 4, device=device)
    with Xray(model, x, logdir=str(tmp_path), plan={"lstm": {"grad": True, "output": True}}) as xray:
        model(x).sum().backward()
        with pytest.warns(UserWarning, match="no gradient reached the output"):
            xray.take_graphs(0)
        assert ("lstm[0]", "grad") in {(layer, kind) for layer, kind, _ in xray.last_report.missing}
        values, _ = xray.load("lstm[0]", "output", 0)
        assert torch.isfinite(values).all()


def test_weight_histograms_bucketed_on_the_gpu_equal_tensorboards_bit_for_bit(device):
    from xray_tb.health.stats.histograms import batch_buckets

    rng = np.random.default_rng(0)
    pieces = [rng.standard_normal(n).astype(np.float32) for n in (60, 36864, 1)]
    pieces += [np.zeros(0, np.float32), np.full(5, 3.0, np.float32), np.array([np.nan, 1, 2, np.inf], np.float32)]
    got = batch_buckets(torch.from_numpy(np.concatenate(pieces)).to(device), [p.size for p in pieces])
    for piece, buckets in zip(pieces, got):
        reference = summary_v2.histogram_pb("t", piece[np.isfinite(piece)]).value[0].tensor
        np.testing.assert_array_equal(buckets, tensor_util.make_ndarray(reference))


def test_signed_sums_and_norms_on_the_gpu_equal_per_tensor_math(device):
    from xray_tb.health import reductions

    generator = torch.Generator(device=device).manual_seed(0)
    tensors = [torch.randn(n, device=device, generator=generator) for n in (7, 300, 4096, 1)] + [torch.randn(50, device=device, generator=generator).half()]
    for got, t in zip(reductions.SignedSums()(tensors), tensors):
        assert float(got) == pytest.approx(float(t.double().sum()), rel=1e-4, abs=1e-4)
    for ord in (1, 2, math.inf):
        for got, t in zip(reductions.norms(tensors, ord), tensors):
            assert float(got) == pytest.approx(float(torch.linalg.vector_norm(t.double(), ord)), rel=1e-3)


@pytest.mark.parametrize("pace", ["default", "every_iteration"])
@pytest.mark.parametrize("counted", ["calls", "optimizer", "optimizer_after_its_step"])
def test_between_captures_no_iteration_reads_the_gpu_and_a_nan_is_still_named_exactly(tmp_path, device, pace, counted):
    """Issue 16's bar 1: weights and gradients checked on the device every iteration "without a host sync
    per step" (the sentinel's flags kept on the GPU, read with the next block). Between captures (every
    10 steps), a take_graphs() and the optimizer step read nothing back, at the default pace and when
    every iteration is measured, and a NaN planted between two captures is still named with its step
    and layer once read."""
    torch.manual_seed(0)
    model = ConvNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(2)
    options = {"health": HealthOptions(every=1)} if pace == "every_iteration" else {}
    counting = {"optimizer": optimizer} if counted != "calls" else {}
    reads = {}
    with Xray(model, input_size=(1, 6, 6), logdir=str(tmp_path), every=10, **options, **counting) as xray:
        for step in range(35):
            if step == 23:
                with torch.no_grad():
                    model.fc1.weight[3, 5] = float("nan")
            x, y = torch.randn(16, 1, 6, 6, generator=generator).to(device), torch.randint(0, 3, (16,), generator=generator).to(device)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            with host_reads(device) as found:  # with optimizer=, the step's pre-hook runs the iteration
                if counted == "optimizer_after_its_step":
                    optimizer.step()
                    captured = xray.take_graphs()
                else:
                    captured = xray.take_graphs()
                    optimizer.step()
            reads[step] = (captured, found)
        due = [9, 19, 29] if counted == "optimizer_after_its_step" else [0, 10, 20, 30]  # steps counted before the call
        assert [step for step, (captured, _) in reads.items() if captured is not None] == due
        # From the first capture on: before it, what is made once per layout (a scratch's segment lengths,
        # copied from the host) may be set up at the first measured iterations.
        assert {step: found for step, (captured, found) in reads.items() if captured is None and found and step > due[0]} == {}
        assert reads[due[1]][1], "a capture reads its frames back: the recorder above sees host reads"
        assert xray.first_nonfinite == NonFinite(step=23, layer="fc1", kind="weight")


def test_a_gradient_made_infinite_after_a_call_is_named_at_its_step_and_an_untouched_one_is_not_read_again(tmp_path, device, monkeypatch):
    """take_graphs() after every backward, before the optimizer step, counts the iteration (no
    optimizer=): the check again before the step finds a gradient written after the call at its own
    step, on the device as on a CPU, and dispatches no norm at all where nothing changed since the call."""
    from xray_tb.health import reductions

    torch.manual_seed(0)
    model = ConvNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    norms = []
    stacked = reductions.stacked_norms
    monkeypatch.setattr(reductions, "stacked_norms", lambda *args, **kwargs: norms.append(1) or stacked(*args, **kwargs))
    with Xray(model, input_size=(1, 6, 6), logdir=str(tmp_path), every=10) as xray:
        for step in range(9):
            x, y = torch.randn(8, 1, 6, 6, device=device), torch.randint(0, 3, (8,), device=device)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            xray.take_graphs()
            if step == 7:
                model.fc2.weight.grad[0, 1] = math.inf
            norms.clear()
            optimizer.step()
            if 2 <= step < 7:
                assert norms == [], step  # untouched since the call: versions compared, nothing read
        assert xray.first_nonfinite == NonFinite(step=7, layer="fc2", kind="weight_grad")
