"""The training-health part of the contract between the recorder and the plugin (numpy and protos only).

Layout in the event files, all under plugin name :data:`tb_plugin.metadata.PLUGIN_NAME` unless said:

* The full series, which TensorBoard keeps whole: tag ``xray/health/series/<stat>``, one value per
  block of steps, at the block's first step. Four blobs: a JSON header ``{"layers": [...]}`` (dataflow
  order), the steps as an ``.npy`` int64 vector, the values as an ``.npy`` float32 matrix of
  layers × steps, and the absent mask as an ``.npy`` bool matrix of layers × steps (True where a
  layer has no value at a step; blocks written before it had three blobs: absent = NaN). Plugin
  content ``{"type": "health_series", "stat": ...}``.
* Per-unit vectors (``channel_var``: per-channel variance; ``dead``: 1.0 for a dead unit, 0.0 else):
  tag ``xray/health/vector/<stat>``, one value per health step: a JSON header ``{"layers": [...],
  "sizes": [...]}`` and the vectors concatenated in that order as ``.npy`` float32.
* The findings: tag ``xray/health/findings``, one JSON list per write; the highest step is current.
  Non-finite numbers are written as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``.
* The prune plan (``xray.prune(dry_run=True)``): tag ``xray/health/prune``, one JSON list of
  ``{"layer", "units", "parameters", "reason"}`` per change, at the last iteration's step.
* Epoch aggregates: tag ``xray/health/epochs``, at the epoch's index: a JSON header ``{"layers",
  "stats"}`` and an ``.npy`` float32 array 2 × layers × stats (mean, then variance; NaN where absent).
* Model-level scalars (plain ``simple_value``, no plugin, for the Scalars tab): :data:`GRAD_NORM_TAG`
  (global gradient L2 at measured iterations), :data:`UPDATE_RATIO_MAX_TAG`,
  :data:`DEAD_FRACTION_MAX_TAG` (at health steps) and :data:`FINDINGS_COUNT_TAG` (at flushes where
  the findings changed).
* Only with ``Xray(..., layer_scalars=True)``: per-layer scalars ``xray_health/<layer>/<stat>`` (one
  point per iteration, or per health step) and ``xray_health_epoch/<layer>/<stat>/mean`` and
  ``.../var``. ``<layer>`` is written with :func:`tb_plugin.metadata.encode_name`.
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
PRUNE_TAG = "xray/health/prune"
EPOCHS_TAG = "xray/health/epochs"
GRAD_NORM_TAG = "xray/grad_norm"
UPDATE_RATIO_MAX_TAG = "xray/update_ratio_max"
DEAD_FRACTION_MAX_TAG = "xray/dead_fraction_max"
FINDINGS_COUNT_TAG = "xray/findings"
#: The model-level scalars written by default, in the Scalars tab.
MODEL_SCALAR_TAGS = (GRAD_NORM_TAG, UPDATE_RATIO_MAX_TAG, DEAD_FRACTION_MAX_TAG, FINDINGS_COUNT_TAG)
HISTOGRAM_PREFIX = "xray_weights/"

#: Built-in per-iteration statistics of a layer's weight and weight gradient.
ITERATION_STATS = ("grad_mean", "grad_absmax", "grad_var", "grad_l1", "grad_l2", "weight_l2", "update_ratio")
#: Built-in statistics of a layer's activation, at health steps.
ACTIVATION_STATS = ("dead_fraction", "saturation", "channel_var")
#: Per-unit vectors written at health steps.
VECTOR_STATS = ("channel_var", "dead")
#: Statistics whose worst value is the one of largest magnitude (signed); for the others it is the largest.
SIGNED_STATS = ("grad_mean",)
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


def add_series(summary: summary_pb2.Summary, stat: str, layers: Sequence[str], steps: np.ndarray, values: np.ndarray,
               absent: Optional[np.ndarray] = None) -> None:
    """Append one block of a statistic's series: ``values`` and ``absent`` are layers × steps
    (``absent`` None: where ``values`` is NaN)."""
    values = np.asarray(values, np.float32)
    absent = np.isnan(values) if absent is None else np.asarray(absent, bool)
    if absent.shape != values.shape:
        raise ValueError(f"absent mask shape {absent.shape} differs from values shape {values.shape}")
    header = json.dumps({"layers": list(layers)}).encode("utf-8")
    blobs = [header, metadata.encode_array(np.asarray(steps, np.int64)), metadata.encode_array(values),
             metadata.encode_array(np.ascontiguousarray(absent))]
    metadata.add_blobs(summary, series_tag(stat), _metadata("health_series", stat), blobs)


Block = tuple[list[str], np.ndarray, np.ndarray, np.ndarray]


def decode_series(blobs: Sequence[bytes]) -> Block:
    """``(layers, steps, values, absent)`` of one block written by :func:`add_series` (a block of
    three blobs, written before the mask existed, is absent where NaN)."""
    layers = json.loads(blobs[0])["layers"]
    values = metadata.decode_array(blobs[2])
    absent = metadata.decode_array(blobs[3]).astype(bool) if len(blobs) > 3 else np.isnan(values)
    return layers, metadata.decode_array(blobs[1]), values, absent


def add_vectors(summary: summary_pb2.Summary, stat: str, layers: Sequence[str], vectors: Sequence[np.ndarray]) -> None:
    """Append one health step's per-unit vectors of a statistic, one per layer."""
    header = json.dumps({"layers": list(layers), "sizes": [int(v.size) for v in vectors]}).encode("utf-8")
    flat = np.concatenate([np.asarray(v, np.float32).reshape(-1) for v in vectors]) if vectors else np.zeros(0, np.float32)
    metadata.add_blobs(summary, vector_tag(stat), _metadata("health_vector", stat), [header, metadata.encode_array(flat)])


def decode_vectors(blobs: Sequence[bytes]) -> dict[str, np.ndarray]:
    """``{layer: vector}`` of one value written by :func:`add_vectors`."""
    header = json.loads(blobs[0])
    flat = metadata.decode_array(blobs[1])
    bounds = np.cumsum([0, *header["sizes"]])
    return {layer: flat[bounds[i]: bounds[i + 1]] for i, layer in enumerate(header["layers"])}


def merge_blocks(blocks: list[Block]) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """``(layers, steps, values, present)`` from decoded series blocks in the order they were written:
    layers × steps float32 values (NaN where absent) and bool ``present``; steps ascending; a later
    block wins a step written twice. A block whose first step is at or before a step written earlier
    starts the run again from there (a run resumed from an older checkpoint): every earlier value at
    that step or later is dropped, as TensorBoard drops a run's later steps when its steps go back, so
    that the iterations only the abandoned attempt measured (a NaN it ran into) do not stay in the series.
    Layers in the dataflow order of the latest block (the model as it is now, when a resumed run
    added a layer), a layer only older blocks have right after the layer before it there."""
    blocks = _superseded_rows_dropped(blocks)
    layers = {layer: index for index, layer in enumerate(_layer_order([block[0] for block in blocks]))}
    steps = np.unique(np.concatenate([block[1] for block in blocks])) if blocks else np.zeros(0, np.int64)
    matrix = np.full((len(layers), len(steps)), np.nan, dtype=np.float32)
    present = np.zeros((len(layers), len(steps)), dtype=bool)
    for block_layers, block_steps, values, absent in blocks:
        columns = np.searchsorted(steps, block_steps)
        rows = np.asarray([layers[layer] for layer in block_layers], dtype=np.intp)
        if rows.size:
            matrix[np.ix_(rows, columns)] = np.where(absent, np.nan, values)
            present[np.ix_(rows, columns)] = ~absent
    return list(layers), steps, matrix, present


def _superseded_rows_dropped(blocks: list[Block]) -> list[Block]:
    """``blocks`` (in write order), each cut to the steps before the first step of any later block that
    went back to a step already written."""
    kept: list[Block] = []
    last = None  # the latest step written so far
    for block in blocks:
        steps = block[1]
        if steps.size:
            if last is not None and steps[0] <= last:
                kept = [_before(earlier, steps[0]) for earlier in kept]
            last = int(steps[-1]) if last is None or steps[0] <= last else max(last, int(steps[-1]))
        kept.append(block)
    return kept


def _before(block: Block, step: int) -> Block:
    layers, steps, values, absent = block
    keep = steps < step
    return block if keep.all() else (layers, steps[keep], values[:, keep], absent[:, keep])


def _layer_order(orders: list[list[str]]) -> list[str]:
    if not orders:
        return []
    newest = orders[-1]
    seen = set(newest)
    after: dict = {}  # a layer (None: the start): the layers only older blocks have, that follow it there
    for order in reversed(orders[:-1]):
        previous = None
        for layer in order:
            if layer not in seen:
                after.setdefault(previous, []).append(layer)
                seen.add(layer)
            previous = layer
    placed: list[str] = []
    stack = [*reversed(newest), *reversed(after.get(None, ()))]
    while stack:
        layer = stack.pop()
        placed.append(layer)
        stack.extend(reversed(after.get(layer, ())))
    return placed


def prune_summary(entries: list[dict[str, Any]]) -> summary_pb2.Summary:
    """A summary holding a prune plan (``{"layer", "units", "parameters", "reason"}`` each) as JSON."""
    summary = summary_pb2.Summary()
    metadata.add_blobs(summary, PRUNE_TAG, _metadata("health_prune", None), [json.dumps(entries).encode("utf-8")])
    return summary


def decode_prune(blob: bytes) -> list[dict[str, Any]]:
    return [{key: item.get(key) for key in ("layer", "units", "parameters", "reason")} for item in json.loads(blob)]


def epochs_summary(moments: dict[str, dict[str, tuple[float, float]]]) -> summary_pb2.Summary:
    """One epoch's ``{layer: {stat: (mean, var)}}`` as a JSON header and a 2 × layers × stats array."""
    layers = list(moments)
    stats = list(dict.fromkeys(stat for by_stat in moments.values() for stat in by_stat))
    array = np.full((2, len(layers), len(stats)), np.nan, dtype=np.float32)
    for i, layer in enumerate(layers):
        for stat, (mean, var) in moments[layer].items():
            array[:, i, stats.index(stat)] = (mean, var)
    summary = summary_pb2.Summary()
    header = json.dumps({"layers": layers, "stats": stats}).encode("utf-8")
    metadata.add_blobs(summary, EPOCHS_TAG, _metadata("health_epochs", None), [header, metadata.encode_array(array)])
    return summary


def decode_epochs(blobs: Sequence[bytes]) -> dict[str, dict[str, tuple[float, float]]]:
    """``{layer: {stat: (mean, var)}}`` of one value written by :func:`epochs_summary`."""
    header = json.loads(blobs[0])
    array = metadata.decode_array(blobs[1])
    return {layer: {stat: (float(array[0, i, j]), float(array[1, i, j])) for j, stat in enumerate(header["stats"])
                    if not (np.isnan(array[0, i, j]) and np.isnan(array[1, i, j]))}
            for i, layer in enumerate(header["layers"])}


def findings_summary(findings: list[dict[str, Any]]) -> summary_pb2.Summary:
    """A summary holding the findings as one JSON list."""
    summary = summary_pb2.Summary()
    metadata.add_blobs(summary, FINDINGS_TAG, _metadata("health_findings", None), [json.dumps(json_safe(findings)).encode("utf-8")])
    return summary


def decode_findings(blob: bytes) -> list[dict[str, Any]]:
    """The findings written by :func:`findings_summary`, with non-finite numbers back as floats."""
    return [{key: _from_json(value) if key == "value" else value for key, value in item.items()} for item in json.loads(blob)]


def json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def _from_json(value: Any) -> Any:
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(value, value) if isinstance(value, str) else value
