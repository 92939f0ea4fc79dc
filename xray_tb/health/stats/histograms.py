"""Weight distributions over time: at each capture, a TensorBoard histogram of each planned layer's
weight, in TensorBoard's own histogram format (plugin ``histograms``, a [buckets, 3] tensor of left
edge, right edge, count: the layout and bucketing of ``tensorboard.summary.v1.histogram_pb``), so it
shows in the Histograms and Time Series tabs.

All layers are bucketed together: one copy of their weights to the host (float64, as TensorBoard
computes), per-layer minima and maxima with one ``reduceat`` each, and one ``bincount`` over
layer-offset bucket indices, rather than TensorBoard's values × buckets one-hot matrix per layer."""

from __future__ import annotations

import numpy as np
import torch
from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
from tensorboard.plugins.histogram import metadata as histogram_metadata

from tb_plugin import health_metadata

BUCKETS = 30


def batch_buckets(flat: np.ndarray, sizes: list[int], buckets: int = BUCKETS) -> list[np.ndarray]:
    """``[buckets, 3]`` (left edge, right edge, count, bucketed as TensorBoard's ``histogram_pb``, with
    non-finite values left out) for each of the consecutive pieces of ``sizes`` values in ``flat``
    (float64), computed in one pass over all of them."""
    sizes = np.asarray(sizes, dtype=np.int64)
    owner = np.repeat(np.arange(sizes.size), sizes)
    finite = np.isfinite(flat)
    if not finite.all():
        flat, owner = flat[finite], owner[finite]
        sizes = np.bincount(owner, minlength=sizes.size)
    out = [np.zeros((buckets, 3)) for _ in range(sizes.size)]
    filled = np.flatnonzero(sizes)
    if not filled.size:
        return out
    starts = np.concatenate(([0], np.cumsum(sizes[filled])[:-1]))
    lows, highs = np.minimum.reduceat(flat, starts), np.maximum.reduceat(flat, starts)
    spans = highs - lows
    widths = np.where(spans > 0, spans, 1.0) / buckets
    rank = np.cumsum(sizes > 0)[owner] - 1  # each value's row among the filled pieces
    index = np.minimum(np.floor((flat - lows[rank]) / widths[rank]).astype(np.int64), buckets - 1)
    counts = np.bincount(rank * buckets + index, minlength=filled.size * buckets).reshape(filled.size, buckets)
    # A zero span anywhere would switch linspace to another formula for every row: give those rows a
    # span of 1 (their edges are set below), so each row's edges are the ones TensorBoard computes.
    edges = np.linspace(lows, np.where(spans > 0, highs, lows + 1.0), buckets + 1, axis=1)
    table = np.stack([edges[:, :-1], edges[:, 1:], counts.astype(np.float64)], axis=2)
    single = spans == 0  # one value: every edge at it, all counted in the last bucket
    if single.any():
        table[single, :, :2] = lows[single, None, None]
        table[single, :, 2] = 0.0
        table[single, -1, 2] = sizes[filled][single]
    for row, piece in enumerate(filled.tolist()):
        out[piece] = table[row]
    return out


_METADATA = histogram_metadata.create_summary_metadata(display_name=None, description=None)


def add_weight_histograms(summary: summary_pb2.Summary, weights: dict[str, torch.Tensor]) -> None:
    """Append a histogram of each ``{layer: weight}`` to ``summary`` (non-finite values left out)."""
    if not weights:
        return
    flat = torch.cat([weight.detach().reshape(-1) for weight in weights.values()]).double().cpu().numpy()
    for layer, buckets in zip(weights, batch_buckets(flat, [weight.numel() for weight in weights.values()])):
        summary.value.add(tag=health_metadata.histogram_tag(layer), metadata=_METADATA, tensor=_double_tensor(buckets))


def _double_tensor(array: np.ndarray) -> tensor_pb2.TensorProto:
    """The TensorProto ``tensor_util.make_tensor_proto(array, dtype=np.float64)`` makes, built directly."""
    shape = tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=n) for n in array.shape])
    return tensor_pb2.TensorProto(dtype=types_pb2.DT_DOUBLE, tensor_shape=shape, tensor_content=np.ascontiguousarray(array, dtype="<f8").tobytes())
