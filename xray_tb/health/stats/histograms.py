"""Weight distributions over time: at each capture, a TensorBoard histogram of each planned layer's
weight, in TensorBoard's own histogram format (plugin ``histograms``, a [buckets, 3] tensor of left
edge, right edge, count: the layout of ``tensorboard.summary.v1.histogram_pb``), so it shows in the
Histograms and Time Series tabs. Buckets are counted with one ``bincount`` rather than TensorBoard's
values × buckets one-hot matrix, so a big layer costs one pass over its weight."""

from __future__ import annotations

import numpy as np
import torch
from tensorboard.compat.proto import summary_pb2
from tensorboard.plugins.histogram import metadata as histogram_metadata
from tensorboard.util import tensor_util

from tb_plugin import health_metadata

BUCKETS = 30


def histogram_buckets(values: np.ndarray, buckets: int = BUCKETS) -> np.ndarray:
    """``[buckets, 3]``: left edge, right edge and count, bucketed as TensorBoard's ``histogram_pb``."""
    data = np.asarray(values, dtype=np.float64).reshape(-1)
    data = data[np.isfinite(data)]
    if data.size == 0:
        return np.zeros((buckets, 3))
    low, high = data.min(), data.max()
    if high == low:
        counts = np.zeros(buckets)
        counts[-1] = data.size
        return np.stack([np.full(buckets, low), np.full(buckets, low), counts], axis=1)
    width = (high - low) / buckets
    index = np.minimum(np.floor((data - low) / width).astype(np.int64), buckets - 1)
    edges = np.linspace(low, high, buckets + 1)
    return np.stack([edges[:-1], edges[1:], np.bincount(index, minlength=buckets).astype(np.float64)], axis=1)


def add_weight_histograms(summary: summary_pb2.Summary, weights: dict[str, torch.Tensor]) -> None:
    """Append a histogram of each ``{layer: weight}`` to ``summary`` (non-finite values left out)."""
    meta = histogram_metadata.create_summary_metadata(display_name=None, description=None)
    for layer, weight in weights.items():
        values = weight.detach().float().cpu().numpy()
        tensor = tensor_util.make_tensor_proto(histogram_buckets(values), dtype=np.float64)
        summary.value.add(tag=health_metadata.histogram_tag(layer), metadata=meta, tensor=tensor)
