"""SharedReductions: each reduction equals numpy's, is computed once per tensor within a scope, and is
never reused for a tensor written in place or once the scope ended."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from xray_tb import Xray
from xray_tb.capture.frame_statistics import frame_statistics
from xray_tb.capture.shared_reductions import SharedReductions


def conv_activation(seed: int = 0) -> torch.Tensor:
    return torch.randn(8, 6, 7, 5, generator=torch.Generator().manual_seed(seed)).relu()


def test_reductions_equal_numpy_references():
    tensor = conv_activation()
    values = tensor.numpy().astype(np.float64)
    reductions = SharedReductions()
    np.testing.assert_array_equal(reductions.unit_maxima(tensor, 1).numpy(), values.max(axis=(0, 2, 3)).astype(np.float32))
    sums, squares, count = reductions.channel_sums(tensor, 1)
    assert count == 8 * 7 * 5
    np.testing.assert_allclose(sums, values.sum(axis=(0, 2, 3)), rtol=1e-6)
    np.testing.assert_allclose(squares, (values ** 2).sum(axis=(0, 2, 3)), rtol=1e-6)
    assert reductions.extremes(tensor) == (values.min(), values.max())
    flat, total, square_total, low, high = reductions.whole(tensor)
    assert flat.shape == (tensor.numel(),) and (low, high) == (values.min(), values.max())
    assert total == pytest.approx(values.sum(), rel=1e-6) and square_total == pytest.approx((values ** 2).sum(), rel=1e-6)


@pytest.mark.parametrize("shape", [(4, 3), (8, 5), (37, 6), (128, 1024), (3, 5, 4, 1, 1)])
def test_channel_sums_of_a_linear_layers_features_are_float64_accurate(shape):
    """With nothing after the channel (a linear layer's features, a 1x1 map), the sums go over the rows,
    a few at a time in float32, then in float64: as close to float64 sums as the conv path's."""
    generator = torch.Generator().manual_seed(len(shape))
    tensor = torch.randn(*shape, generator=generator) * 3 + 100  # a large mean: float32 rows drift
    dim = 1 if len(shape) == 2 else 2
    values = np.moveaxis(tensor.numpy().astype(np.float64), dim, -1).reshape(-1, shape[dim])
    sums, squares, count = SharedReductions().channel_sums(tensor, dim)
    assert count == values.shape[0]
    np.testing.assert_allclose(sums, values.sum(axis=0), rtol=1e-7)
    np.testing.assert_allclose(squares, (values ** 2).sum(axis=0), rtol=1e-7)
    assert SharedReductions().channel_sums(torch.randn(1, 3), 1) is None  # one value a channel: no variance


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(16, 6, 28, 28), (64, 16, 10, 10), (2, 3, 5, 7, 9)])
def test_channel_sums_of_a_convs_maps_are_float64_accurate(shape, dtype):
    """A conv's channels: each map's positions summed first (torch's sum), its squares with einsum, then
    the rows in float64: as close to float64 sums as the features' path, float64 tensors in float64."""
    generator = torch.Generator().manual_seed(len(shape))
    tensor = (torch.randn(*shape, generator=generator) * 3 + 100).to(dtype)
    values = np.moveaxis(tensor.numpy().astype(np.float64), 1, -1).reshape(-1, shape[1])
    sums, squares, count = SharedReductions().channel_sums(tensor, 1)
    assert count == values.shape[0] and sums.dtype == squares.dtype == np.float64
    rtol = 1e-7 if dtype == torch.float32 else 1e-12
    np.testing.assert_allclose(sums, values.sum(axis=0), rtol=rtol)
    np.testing.assert_allclose(squares, (values ** 2).sum(axis=0), rtol=rtol)


def test_whole_tensor_reductions_come_from_the_unit_ones_within_a_scope():
    tensor = conv_activation(1)
    values = tensor.numpy().astype(np.float64)
    with SharedReductions() as reductions:
        reductions.unit_maxima(tensor, 1)
        sums, squares, _ = reductions.channel_sums(tensor, 1)
        view = tensor.detach()  # another reader's view of the same memory is the same entry
        maxima = reductions.unit_maxima(view, 1)
        assert maxima is reductions.unit_maxima(tensor, 1)
        assert reductions.extremes(view) == (values.min(), values.max())
        assert reductions.whole(view)[1:3] == (float(sums.sum()), float(squares.sum()))  # the channel sums, added in float64
        assert float(sums.sum()) == pytest.approx(values.sum(), rel=1e-6)
    assert not reductions._entries  # dropped when the scope ends: no tensor is held after take_graphs()


def test_a_tensor_written_in_place_is_reduced_again():
    tensor = conv_activation(2)
    with SharedReductions() as reductions:
        before = reductions.extremes(tensor)
        tensor[0, 0, 0, 0] = math.nan
        low, high = reductions.extremes(tensor)
        assert before[0] == 0.0 and math.isnan(low) and math.isnan(high)
        tensor[0, 0, 0, 0] = -5.0
        assert reductions.extremes(tensor) == (-5.0, before[1])


def test_nested_scopes_keep_entries_until_the_outermost_ends():
    tensor = conv_activation(3)
    reductions = SharedReductions()
    with reductions:
        with reductions:
            first = reductions.unit_maxima(tensor, 1)
        assert reductions.unit_maxima(tensor, 1) is first
    assert reductions.unit_maxima(tensor, 1) is not first  # outside a scope nothing is kept


def test_a_nan_shows_in_every_reduction():
    tensor = conv_activation(4)
    tensor[3, 2, 1, 0] = math.nan
    with SharedReductions() as reductions:
        assert math.isnan(reductions.unit_maxima(tensor, 1)[2])
        assert all(math.isnan(v) for v in reductions.extremes(tensor))
        assert math.isnan(reductions.whole(tensor)[1])
        (stats,) = frame_statistics([tensor], reductions)
    assert stats["nonfinite"] == 1.0 and math.isnan(stats["mean"]) and math.isnan(stats["max"])


@pytest.mark.parametrize("size", [1000, 5 * 32768])  # numpy's passes below TORCH_FROM values, torch's from it
@pytest.mark.parametrize("planted", [None, math.nan, math.inf, -math.inf])
def test_a_whole_tensors_extremes_and_sums_equal_numpys(size, planted):
    """With and without unit maxima taken first: the minimum and maximum equal numpy's exactly, a NaN
    shows in both and an infinity in its own, and the flat sums of the values and of their squares are
    numpy's float64 ones to float32 rounding."""
    from xray_tb.capture.shared_reductions import TORCH_FROM

    assert (size >= TORCH_FROM) == (size > 1000)
    tensor = torch.randn(size // 20, 4, 5, generator=torch.Generator().manual_seed(size)) * 2 + 1
    if planted is not None:
        tensor[size // 40, 1, 3] = planted
    values = tensor.numpy().astype(np.float64)
    for maxima_first in (False, True):
        with SharedReductions() as reductions:
            if maxima_first:
                reductions.unit_maxima(tensor, 1)
            low, high = reductions.extremes(tensor)
            total, squares = reductions.whole(tensor)[1:3]
        if planted is not None and math.isnan(planted):
            assert math.isnan(low) and math.isnan(high) and math.isnan(total) and math.isnan(squares)
            continue
        assert (low, high) == (values.min(), values.max())
        if planted is None:
            assert total == pytest.approx(values.sum(), rel=1e-5, abs=1e-2)
            assert squares == pytest.approx((values ** 2).sum(), rel=1e-6)
        else:
            assert total == planted and squares == math.inf


def test_frames_at_a_capture_reuse_what_health_reduced_and_stay_exact(tmp_path, monkeypatch):
    """Training health reduces the conv's activation first (dead units, channel variance); the frame's
    statistics are taken from those reductions and equal the activation's own."""
    from xray_tb.capture import capture as capture_module

    seen = []

    def spy(tensors, reductions=None):
        reused = [any(entry.channels for _, entry in reductions._entries.values())]  # health's channel sums are there
        results = frame_statistics(tensors, reductions)
        seen.append((tensors, results, reused))
        return results

    monkeypatch.setattr(capture_module, "frame_statistics", spy)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    x = torch.randn(16, 1, 8, 8)
    with Xray(model, x, logdir=str(tmp_path), every=1) as xray:
        xray.set_plan({"0": {"activation": True}})
        model(x).square().mean().backward()
        xray.take_graphs(0)
        assert xray.dead_units() is not None
    (tensors, results, reused), = seen
    assert reused == [True]
    values = torch.relu(model[0](x)).detach().numpy().astype(np.float64)
    (stats,) = results
    assert stats["mean"] == pytest.approx(values.mean(), rel=1e-6)
    assert stats["std"] == pytest.approx(values.std(ddof=1), rel=1e-5)
    assert stats["min"] == values.min() and stats["max"] == pytest.approx(values.max(), rel=1e-6)
    assert stats["nonfinite"] == 0.0


def test_with_optimizer_health_takes_activations_before_the_frames_once_per_health_step(tmp_path, monkeypatch):
    """With optimizer= the iteration runs in the optimizer's step pre-hook, after take_graphs(): the
    health step's activations are taken before the capture instead (the frames reuse them), once."""
    from xray_tb.capture import capture as capture_module

    reused = []

    def spy(tensors, reductions=None):
        reused.append(any(entry.channels for _, entry in reductions._entries.values()))
        return frame_statistics(tensors, reductions)

    monkeypatch.setattr(capture_module, "frame_statistics", spy)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 1, 8, 8)
    with Xray(model, x, logdir=str(tmp_path), every=2, optimizer=optimizer) as xray:
        xray.set_plan({"0": {"activation": True}})
        for _ in range(5):
            optimizer.zero_grad()
            model(x).square().mean().backward()
            xray.take_graphs()
            optimizer.step()
        assert xray._health.monitor.families.dead._rings[0]._written == 3  # health steps 0, 2, 4: one row each, not two
    assert reused == [True, True, True]
