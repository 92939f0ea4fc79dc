"""Weight distributions over time: at each capture, a TensorBoard histogram of each planned layer's
weight, in TensorBoard's own histogram format (plugin ``histograms``, a [buckets, 3] tensor of left
edge, right edge, count: the layout and bucketing of ``tensorboard.summary.v1.histogram_pb``), so it
shows in the Histograms and Time Series tabs.

All layers are bucketed together, where the weights are (on the GPU for a GPU model): their values
in float64, as TensorBoard computes; per-layer minima and maxima with one ``scatter_reduce`` each;
and one ``bincount`` over layer-offset bucket indices, rather than TensorBoard's values × buckets
one-hot matrix per layer. Only the minima, maxima and counts come to the host, where the edges are
made with TensorBoard's own ``linspace``."""

from __future__ import annotations

import math

import numpy as np
import torch
from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
from tensorboard.plugins.histogram import metadata as histogram_metadata

from tb_plugin import health_metadata

BUCKETS = 30


def batch_buckets(values: torch.Tensor, sizes: list[int], buckets: int = BUCKETS) -> list[np.ndarray]:
    """``[buckets, 3]`` (left edge, right edge, count, bucketed as TensorBoard's ``histogram_pb``, with
    non-finite values left out) for each of the consecutive pieces of ``sizes`` values in ``values``
    (1-d, any float dtype), computed in one pass over all of them on their device."""
    device = values.device if values.device.type in ("cpu", "cuda") else torch.device("cpu")  # float64 there
    flat = values.detach().to(device=device, dtype=torch.float64)
    count = len(sizes)
    owner = torch.repeat_interleave(torch.arange(count, device=device), torch.as_tensor(sizes, device=device))
    finite = torch.isfinite(flat)
    if not bool(finite.all()):
        flat, owner = flat[finite], owner[finite]
    lows = torch.full((count,), math.inf, dtype=torch.float64, device=device).scatter_reduce(0, owner, flat, "amin")
    highs = torch.full((count,), -math.inf, dtype=torch.float64, device=device).scatter_reduce(0, owner, flat, "amax")
    spans = highs - lows
    widths = torch.where(spans > 0, spans, torch.ones_like(spans)) / buckets
    index = torch.floor((flat - lows[owner]) / widths[owner]).long().clamp_(max=buckets - 1)
    counts = torch.bincount(owner * buckets + index, minlength=count * buckets).reshape(count, buckets)
    kept = torch.bincount(owner, minlength=count)
    low, high, span = torch.stack([lows, highs, spans]).cpu().numpy()
    counts, kept = counts.cpu().numpy().astype(np.float64), kept.cpu().numpy()
    out = [np.zeros((buckets, 3)) for _ in range(count)]
    filled = np.flatnonzero(kept)
    if not filled.size:
        return out
    low, high, span, counts = low[filled], high[filled], span[filled], counts[filled]
    # A zero span anywhere would switch linspace to another formula for every row: give those rows a
    # span of 1 (their edges are set below), so each row's edges are the ones TensorBoard computes.
    edges = np.linspace(low, np.where(span > 0, high, low + 1.0), buckets + 1, axis=1)
    table = np.stack([edges[:, :-1], edges[:, 1:], counts], axis=2)
    single = span == 0  # one value: every edge at it, all counted in the last bucket
    if single.any():
        table[single, :, :2] = low[single, None, None]
        table[single, :, 2] = 0.0
        table[single, -1, 2] = kept[filled][single]
    for row, piece in enumerate(filled.tolist()):
        out[piece] = table[row]
    return out


_METADATA = histogram_metadata.create_summary_metadata(display_name=None, description=None)


def add_weight_histograms(summary: summary_pb2.Summary, weights: dict[str, torch.Tensor]) -> None:
    """Append a histogram of each ``{layer: weight}`` to ``summary`` (non-finite values left out)."""
    if not weights:
        return
    flat = torch.cat([weight.detach().reshape(-1) for weight in weights.values()])
    for layer, buckets in zip(weights, batch_buckets(flat, [weight.numel() for weight in weights.values()])):
        summary.value.add(tag=health_metadata.histogram_tag(layer), metadata=_METADATA, tensor=_double_tensor(buckets))


def _double_tensor(array: np.ndarray) -> tensor_pb2.TensorProto:
    """The TensorProto ``tensor_util.make_tensor_proto(array, dtype=np.float64)`` makes, built directly."""
    shape = tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=n) for n in array.shape])
    return tensor_pb2.TensorProto(dtype=types_pb2.DT_DOUBLE, tensor_shape=shape, tensor_content=np.ascontiguousarray(array, dtype="<f8").tobytes())
