"""The batched reductions behind the activation statistics and the weight histograms, each against its
plain definition (numpy, or TensorBoard's own histogram_pb) on the cases that bend batching: empty,
constant and non-finite pieces, mixed dtypes, a window that fills and then slides."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tensorboard.compat.proto import summary_pb2
from tensorboard.plugins.histogram import summary_v2
from tensorboard.util import tensor_util

from tb_plugin import health_metadata
from xray_tb.health.scope import ActivationLayer
from xray_tb.health.stats import ActivationValue, DeadUnits
from xray_tb.health.stats.channel_variance import channel_variances
from xray_tb.health.stats.histograms import add_weight_histograms, batch_buckets
from xray_tb.health.stats.outputs import nonfinite_flags


def test_batched_histograms_equal_tensorboards_bit_for_bit():
    rng = np.random.default_rng(0)
    pieces = [rng.standard_normal(n).astype(np.float32) * s for n, s in ((60, 1.0), (880, 3.0), (4160, 1e-3), (1, 1.0), (2080, 7.0))]
    pieces += [np.zeros(0, np.float32), np.full(5, 3.0, np.float32), np.array([np.nan, 1, 2, np.inf, -np.inf], np.float32),
               np.array([np.nan], np.float32), np.array([np.nan, 2.0], np.float32)]
    got = batch_buckets(torch.from_numpy(np.concatenate(pieces)), [p.size for p in pieces])
    for piece, buckets in zip(pieces, got):
        reference = summary_v2.histogram_pb("t", piece[np.isfinite(piece)]).value[0].tensor
        np.testing.assert_array_equal(buckets, tensor_util.make_ndarray(reference))
    weights = {"a": torch.randn(6, 1, 3, 3), "b": torch.full((4,), 0.5), "c": torch.randn(10, 64)}
    summary = summary_pb2.Summary()
    add_weight_histograms(summary, weights)
    for value, weight in zip(summary.value, weights.values()):
        reference = summary_v2.histogram_pb("t", weight.numpy()).value[0]
        assert value.tensor == reference.tensor and value.metadata == reference.metadata


def test_nonfinite_flags_mark_exactly_the_tensors_holding_nan_or_inf():
    tensors = [None, torch.tensor([1.0, math.nan]), torch.tensor([[1.0, -math.inf]]), torch.ones(3, 2),
               torch.arange(3), torch.tensor([3e38, 3e38]),  # finite, though its sum overflows
               torch.tensor([1.0, 2.0], dtype=torch.float16), torch.tensor([1.0, math.inf], dtype=torch.bfloat16)]
    flags = nonfinite_flags(tensors)
    expected = [None, 1.0, 1.0, 0.0, None, 0.0, 0.0, 1.0]
    assert [None if f is None else float(f) for f in flags] == expected
    assert nonfinite_flags([None, torch.arange(2)]) == [None, None] and nonfinite_flags([]) == []  # nothing to check


def test_channel_variances_match_numpy_along_every_dimension():
    generator = torch.Generator().manual_seed(0)
    for shape in ((32, 6, 8, 8), (16, 10, 64), (7, 3)):
        tensor = torch.randn(shape, generator=generator) * 50 + 1e3  # a large mean: a one-pass formula would lose it
        values = tensor.double().numpy()
        for dim in range(len(shape)):
            expected = np.moveaxis(values, dim, 0).reshape(shape[dim], -1).var(axis=1, ddof=1)
            np.testing.assert_allclose(channel_variances(tensor, dim).numpy(), expected, rtol=1e-5)
        np.testing.assert_allclose(channel_variances(tensor, -1).numpy(), np.moveaxis(values, -1, 0).reshape(shape[-1], -1).var(axis=1, ddof=1), rtol=1e-5)


@pytest.mark.parametrize("offset", [0.0, 1.0, 1e4], ids=["centred", "mean-like-spread", "cancellation"])
def test_channel_variances_of_conv_activations_one_pass_or_two(offset):
    tensor = torch.randn(16, 5, 6, 7, generator=torch.Generator().manual_seed(3)) + offset
    tensor[:, 2] = offset  # a constant channel: variance exactly 0
    values = tensor.double().numpy()
    for dim in range(4):
        expected = np.moveaxis(values, dim, 0).reshape(tensor.shape[dim], -1).var(axis=1, ddof=1)
        np.testing.assert_allclose(channel_variances(tensor, dim).numpy(), expected, rtol=1e-5, atol=1e-6 * (1 + offset))


def test_dead_units_follow_the_window_as_it_fills_and_slides():
    layer = ActivationLayer("fc", None, None, "relu", {}, last_dim_units=True, prunable=None)
    family = DeadUnits(["fc"], window=3, threshold=0.0)
    rng = np.random.default_rng(1)
    seen = []
    for step in range(7):
        activation = np.maximum(rng.standard_normal((5, 4)), 0.0)
        activation[:, rng.integers(0, 4)] = 0.0  # one unit silent at each step, a different one now and then
        seen.append(activation.max(axis=0))
        result = family.compute([ActivationValue(layer, torch.tensor(activation, dtype=torch.float32), None)], torch.tensor(math.nan))
        window = np.max(seen[-3:], axis=0)
        assert float(result["dead_fraction"][0]) == (window <= 0).mean()
        assert family.dead() == ({"fc": [int(u) for u in np.flatnonzero(window <= 0)]} if (window <= 0).any() else {})
        assert family.dead(threshold=0.5) == ({"fc": [int(u) for u in np.flatnonzero(window <= 0.5)]} if (window <= 0.5).any() else {})


def test_dead_units_at_a_threshold_just_below_or_above_each_maximum():
    """The rings keep bfloat16 maxima rounded up: exact at thresholds bfloat16 represents, and for any
    other threshold never dead where a value rose above it."""
    layer = ActivationLayer("fc", None, None, "relu", {}, last_dim_units=True, prunable=None)
    family = DeadUnits(["fc"], window=2, threshold=0.0)
    maxima = np.array([0.0, 1e-30, 0.1, 0.5, 0.50001, 1.0, 1.0000001, 3.0], dtype=np.float32)
    family.compute([ActivationValue(layer, torch.tensor(maxima[None, :]), None)], torch.tensor(math.nan))
    for threshold in (0.0, 0.5, 1.0, 2.0, -1.0):  # represented by bfloat16: exact
        expected = [int(u) for u in np.flatnonzero(maxima <= np.float32(threshold))]
        assert family.dead(threshold=threshold) == ({"fc": expected} if expected else {}), threshold
    for threshold in (0.1, 0.50001, 0.7, 1.0000001):  # not represented: never a unit above it called dead
        dead = set(family.dead(threshold=threshold).get("fc", []))
        assert all(maxima[u] <= np.float32(threshold) for u in dead), threshold
        assert {int(u) for u in np.flatnonzero(maxima <= np.float32(threshold) * (1 - 2 ** -8))} <= dead, threshold


def test_rounding_up_to_bfloat16_on_the_bits_equals_torch_nextafter():
    """The CPU path (numpy on the bits) and the accelerator path (torch ops) write the same rows."""
    from xray_tb.health.stats.dead_units import _write_rounded_up, rounded_up

    special = [0.1, 1.0, -0.1, 0.0, -0.0, 3e38, 3.4028235e38, math.inf, -math.inf, math.nan, 1e-40, -1e-40, 0.50001, -0.50001]
    values = torch.cat([torch.tensor(special), torch.randn(10_000, generator=torch.Generator().manual_seed(0)) * 100])
    row = torch.empty(len(values), dtype=torch.bfloat16)
    _write_rounded_up(row, values)
    expected = rounded_up(values)
    assert torch.equal(row.isnan(), expected.isnan())
    assert torch.equal(row[~row.isnan()].float(), expected[~expected.isnan()].float())
    assert bool((row.float()[~row.isnan()] >= values[~row.isnan()]).all())  # never below the value


def test_nonfinite_flags_on_the_host_equal_the_device_path():
    from xray_tb.health.stats.outputs import device_flags, nonfinite_flags

    tensors = [torch.randn(4, 5), torch.tensor([1.0, math.nan]), torch.tensor([-math.inf, 0.0]), torch.randn(3).half(),
               torch.tensor([math.inf]).bfloat16(), torch.randn(2, dtype=torch.float64), None, torch.arange(3)]
    host = nonfinite_flags(tensors)
    assert [None if f is None else float(f) for f in host] == [0.0, 1.0, 1.0, 0.0, 1.0, 0.0, None, None]
    present = [t for t in tensors if t is not None and t.is_floating_point()]
    assert [float(f) for f in device_flags(present)] == [float(f) for f in host if f is not None]


def test_histograms_read_back_by_tensorboard_equal_numpy_histogram_on_the_same_edges(tmp_path):
    """Through TensorBoard's own reader: a small layer counted exactly, a large one (over SAMPLE values)
    from its strided sample plus exact extremes, counts scaled to its size."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    from xray_tb.health.stats.histograms import SAMPLE, sampled_pieces

    generator = torch.Generator().manual_seed(0)
    weights = {"small": torch.randn(40, 30, generator=generator), "large": torch.randn(700, 300, generator=generator) * 0.1}
    weights["large"][123, 45] = 4.0  # an outlier the stride misses: the edges still reach it
    assert weights["large"].numel() > SAMPLE >= weights["small"].numel()
    summary = summary_pb2.Summary()
    add_weight_histograms(summary, weights)
    with SummaryWriter(str(tmp_path)) as writer:
        writer._get_file_writer().add_summary(summary, global_step=3)
    accumulator = EventAccumulator(str(tmp_path), size_guidance={"tensors": 0}).Reload()
    pieces, scales = sampled_pieces(list(weights.values()))
    for (layer, weight), piece, scale in zip(weights.items(), pieces, scales):
        event, = accumulator.Tensors(health_metadata.histogram_tag(layer))
        table = tensor_util.make_ndarray(event.tensor_proto)
        edges = np.append(table[:, 0], table[-1, 1])
        values = weight.numpy().reshape(-1)
        assert edges[0] == values.min() and edges[-1] == values.max()  # the exact extremes
        expected, _ = np.histogram(piece.numpy(), bins=edges)
        np.testing.assert_allclose(table[:, 2], expected * scale, rtol=1e-12)
        assert table[:, 2].sum() == pytest.approx(values.size)
        if layer == "small":
            assert scale == 1.0 and piece.numel() == values.size
        else:
            assert scale > 1.0 and piece.numel() < values.size / 2


def test_many_layers_are_bucketed_from_smaller_samples_with_their_exact_extremes():
    """Thousands of small layers would each be counted exactly; together they are held to about TOTAL
    values, each layer from a strided sample (never below FLOOR values) plus its exact extremes, with
    counts scaled to the layer's size."""
    from xray_tb.health.stats.histograms import FLOOR, SAMPLE, TOTAL, sampled_pieces

    generator = torch.Generator().manual_seed(1)
    weights = [torch.randn(64, 64, generator=generator) for _ in range(400)]  # 1.6 M values, each layer under SAMPLE
    assert weights[0].numel() <= SAMPLE and 400 * weights[0].numel() > TOTAL
    pieces, scales = sampled_pieces(weights)
    assert sum(piece.numel() for piece in pieces) <= 1.1 * max(TOTAL, 400 * FLOOR)
    for weight, piece, scale in zip(weights, pieces, scales):
        assert FLOOR <= piece.numel() < weight.numel() and scale == pytest.approx(weight.numel() / piece.numel())
        assert piece.min() == weight.min() and piece.max() == weight.max()  # the edges are the exact ones
    few = [torch.randn(64, 64, generator=generator) for _ in range(3)]  # well under TOTAL: counted exactly
    assert all(scale == 1.0 for scale in sampled_pieces(few)[1])


@pytest.mark.parametrize("shape", [(256, 256), (64, 64, 3, 3), (1024, 784), (128, 128, 3, 3)])
def test_a_sampled_layer_buckets_at_least_half_the_sample_and_visits_every_row(shape):
    """A stride that must skip the primes dividing the dimensions (5 for 64x64x3x3, where 2 would do)
    takes neighbours at each stride: before, that conv was bucketed from 7,373 of its 36,864 weights."""
    from xray_tb.health.stats.histograms import SAMPLE, sampled_pieces

    weight = torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape)
    (piece,), (scale,) = sampled_pieces([weight])
    assert SAMPLE // 2 <= piece.numel() - 2 <= SAMPLE  # the sample, then the exact minimum and maximum
    assert scale == pytest.approx(weight.numel() / piece.numel())
    rows = (piece[:-2].long() // math.prod(shape[1:])).unique()
    assert len(rows) == shape[0]  # every row (filter) is visited
