"""The training-health part of the contract between the recorder and the plugin (numpy and protos only).

Layout in the event files, all under plugin name :data:`tb_plugin.metadata.PLUGIN_NAME` unless said:

* Per-layer scalars ``xray_health/<layer>/<stat>`` (plain ``simple_value``, no plugin), one point per
  iteration (or per health step for activation statistics), so they show in the Scalars and Time
  Series tabs. ``<layer>`` is written with :func:`tb_plugin.metadata.encode_name`.
* Epoch summaries ``xray_health_epoch/<layer>/<stat>/mean`` and ``.../var``, at the epoch's index.
* The full series, which TensorBoard keeps whole: tag ``xray/health/series/<stat>``, one value per
  block of steps, at the block's first step. Three blobs: a JSON header ``{"layers": [...]}`` (dataflow
  order), the steps as an ``.npy`` int64 vector, and the values as an ``.npy`` float32 matrix of
  layers × steps (NaN where a layer has no value at a step). Plugin content ``{"type": "health_series",
  "stat": ...}``.
* Per-unit vectors (the per-channel variance): tag ``xray/health/vector/<stat>``, one value per health
  step: a JSON header ``{"layers": [...], "sizes": [...]}`` and the vectors concatenated in that order
  as ``.npy`` float32.
* The findings: tag ``xray/health/findings``, one JSON list per write; the highest step is current.
  Non-finite numbers are written as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``.
"""

from __future__ import annotations

import functools
import json
import math
import re
from typing import Any, Optional, Sequence

import numpy as np
from tensorboard.compat.proto import summary_pb2

from tb_plugin import metadata

SCALAR_PREFIX = "xray_health/"
EPOCH_PREFIX = "xray_health_epoch/"
SERIES_PREFIX = "xray/health/series/"
VECTOR_PREFIX = "xray/health/vector/"
FINDINGS_TAG = "xray/health/findings"
HISTOGRAM_PREFIX = "xray_weights/"

#: Built-in per-iteration statistics of a layer's weight and weight gradient.
ITERATION_STATS = ("grad_mean", "grad_absmax", "grad_var", "grad_l1", "grad_l2", "weight_l2", "update_ratio")
#: Built-in statistics of a layer's activation, at health steps.
ACTIVATION_STATS = ("dead_fraction", "saturation", "channel_var")
BUILTIN_STATS = ITERATION_STATS + ACTIVATION_STATS
#: Names a statistic may have (custom ones included): they stand in tags as they are.
STAT_NAME = re.compile(r"[A-Za-z0-9_.\-\[\]]{1,64}")


def scalar_tag(layer: str, stat: str) -> str:
    """The TensorBoard scalar tag of one statistic of one layer."""
    return f"{SCALAR_PREFIX}{metadata.encode_name(layer)}/{stat}"


def parse_scalar_tag(tag: str) -> Optional[tuple[str, str]]:
    """``(layer, stat)`` of a health scalar tag, None for any other tag."""
    if not tag.startswith(SCALAR_PREFIX):
        return None
    layer, _, stat = tag[len(SCALAR_PREFIX):].rpartition("/")
    if not layer or not STAT_NAME.fullmatch(stat):
        return None
    return metadata.decode_name(layer), stat


def histogram_tag(layer: str) -> str:
    """The TensorBoard histogram tag of a planned layer's weight."""
    return f"{HISTOGRAM_PREFIX}{metadata.encode_name(layer)}/weight"


def epoch_tag(layer: str, stat: str, moment: str) -> str:
    """The scalar tag of an epoch's ``moment`` (``"mean"`` or ``"var"``) of a statistic."""
    return f"{EPOCH_PREFIX}{metadata.encode_name(layer)}/{stat}/{moment}"


def series_tag(stat: str) -> str:
    return SERIES_PREFIX + stat


def vector_tag(stat: str) -> str:
    return VECTOR_PREFIX + stat


def parse_series_tag(tag: str) -> Optional[str]:
    """The statistic of a series tag, None for any other tag."""
    if tag.startswith(SERIES_PREFIX) and STAT_NAME.fullmatch(tag[len(SERIES_PREFIX):]):
        return tag[len(SERIES_PREFIX):]
    return None


@functools.lru_cache(maxsize=256)
def _metadata(kind: str, stat: Optional[str]) -> summary_pb2.SummaryMetadata:
    content = {"type": kind} if stat is None else {"type": kind, "stat": stat}
    return metadata.create_summary_metadata(content)


def _add_blobs(summary: summary_pb2.Summary, tag: str, meta: summary_pb2.SummaryMetadata, blobs: Sequence[bytes]) -> None:
    value = summary.value.add(tag=tag)
    value.metadata.CopyFrom(meta)
    value.tensor.dtype = 7  # DT_STRING
    value.tensor.tensor_shape.dim.add(size=len(blobs))
    value.tensor.string_val.extend(blobs)


def add_series(summary: summary_pb2.Summary, stat: str, layers: Sequence[str], steps: np.ndarray, values: np.ndarray) -> None:
    """Append one block of a statistic's series: ``values`` is layers × steps."""
    header = json.dumps({"layers": list(layers)}).encode("utf-8")
    blobs = [header, metadata.encode_array(np.asarray(steps, np.int64)), metadata.encode_array(np.asarray(values, np.float32))]
    _add_blobs(summary, series_tag(stat), _metadata("health_series", stat), blobs)


def decode_series(blobs: Sequence[bytes]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """``(layers, steps, values)`` of one block written by :func:`add_series`."""
    layers = json.loads(blobs[0])["layers"]
    return layers, metadata.decode_array(blobs[1]), metadata.decode_array(blobs[2])


def add_vectors(summary: summary_pb2.Summary, stat: str, layers: Sequence[str], vectors: Sequence[np.ndarray]) -> None:
    """Append one health step's per-unit vectors of a statistic, one per layer."""
    header = json.dumps({"layers": list(layers), "sizes": [int(v.size) for v in vectors]}).encode("utf-8")
    flat = np.concatenate([np.asarray(v, np.float32).reshape(-1) for v in vectors]) if vectors else np.zeros(0, np.float32)
    _add_blobs(summary, vector_tag(stat), _metadata("health_vector", stat), [header, metadata.encode_array(flat)])


def decode_vectors(blobs: Sequence[bytes]) -> dict[str, np.ndarray]:
    """``{layer: vector}`` of one value written by :func:`add_vectors`."""
    header = json.loads(blobs[0])
    flat = metadata.decode_array(blobs[1])
    bounds = np.cumsum([0, *header["sizes"]])
    return {layer: flat[bounds[i]: bounds[i + 1]] for i, layer in enumerate(header["layers"])}


def merge_blocks(blocks: list[tuple[list[str], np.ndarray, np.ndarray]]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """One layers × steps float32 matrix from decoded series blocks: layers in the order first met,
    steps ascending, NaN where a layer has no value; a later block wins a step written twice."""
    layers: dict[str, int] = {}
    for block_layers, _, _ in blocks:
        for layer in block_layers:
            layers.setdefault(layer, len(layers))
    steps = np.unique(np.concatenate([block[1] for block in blocks])) if blocks else np.zeros(0, np.int64)
    matrix = np.full((len(layers), len(steps)), np.nan, dtype=np.float32)
    for block_layers, block_steps, values in blocks:
        columns = np.searchsorted(steps, block_steps)
        for row, layer in enumerate(block_layers):
            matrix[layers[layer], columns] = values[row]
    return list(layers), steps, matrix


def findings_summary(findings: list[dict[str, Any]]) -> summary_pb2.Summary:
    """A summary holding the findings as one JSON list."""
    summary = summary_pb2.Summary()
    _add_blobs(summary, FINDINGS_TAG, _metadata("health_findings", None), [json.dumps(_json_safe(findings)).encode("utf-8")])
    return summary


def decode_findings(blob: bytes) -> list[dict[str, Any]]:
    """The findings written by :func:`findings_summary`, with non-finite numbers back as floats."""
    return [{key: _from_json(value) if key == "value" else value for key, value in item.items()} for item in json.loads(blob)]


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    return value


def _from_json(value: Any) -> Any:
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(value, value) if isinstance(value, str) else value
