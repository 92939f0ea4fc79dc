"""The contract between the Xray recorder and the Xray TensorBoard plugin.

The recorder (``xray_tb``) builds summaries with it and the plugin (``tb_plugin.xray_plugin``) parses
them with it; besides it, the recorder uses only ``tb_plugin.layout`` (how a frame is drawn) and the
plugin nothing of the recorder. It depends on numpy and TensorBoard's protos only, never on torch,
so TensorBoard starts fast.

Layout of the data in an event file:

* Every Xray summary uses plugin name :data:`PLUGIN_NAME` and data class ``BLOB_SEQUENCE`` (a rank-1
  string tensor), which both of TensorBoard's loaders read and serve blob by blob.
* A frame (one kind of one layer at one step) lives under tag ``xray/frame/<layer>/<kind>`` at the
  training step. Its two blobs are a JSON header (:class:`FrameHeader` fields) and the selected
  values as an ``.npy`` array.
* Each frame's statistics (:data:`STATS`, over the whole tensor, not just the kept filters) are
  ordinary scalars under ``xray_stats/<layer>/<kind>/<stat>``, so they show in the Scalars tab.
* The architecture and the plan are JSON documents under ``xray/meta/architecture`` and
  ``xray/meta/plan``, one blob each; their step is a version counter, the highest step is current.
* The plugin content of every tag is a small JSON object: ``{"version": 1, "type": "frame",
  "layer": ..., "kind": ...}`` or ``{"version": 1, "type": "architecture"}`` and so on. Readers skip
  tags whose version they do not know.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
from typing import Any, Callable, Optional, Sequence

import numpy as np
from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

PLUGIN_NAME = "xray"
CONTENT_VERSION = 1

#: What can be recorded for a layer, in display order.
KINDS = ("weight", "weight_grad", "output", "activation", "grad")
#: Kinds that hold a batch dimension (one value per sample of the batch).
BATCH_KINDS = ("output", "activation", "grad")

FRAME_TAG_PREFIX = "xray/frame/"
STATS_TAG_PREFIX = "xray_stats/"
#: Statistics written per frame as ordinary TensorBoard scalars, computed over the whole tensor.
STATS = ("mean", "std", "min", "max", "nonfinite")
ARCHITECTURE_TAG = "xray/meta/architecture"
PLAN_TAG = "xray/meta/plan"
META_TAGS = {ARCHITECTURE_TAG: "architecture", PLAN_TAG: "plan"}


@dataclasses.dataclass
class FrameHeader:
    """What a stored frame is, so every value can be traced back to the full tensor.

    The stored array is ``full[batch_index]`` (when ``batch_index`` is not None) with only
    ``indices`` kept along dimension ``dim`` of that tensor, in that order. ``path`` locates the
    tensor inside a tuple or dict output (``"[0]"``, ``"['logits']"``), ``""`` for a plain tensor.
    """

    run_id: str
    layer: str
    kind: str
    step: int
    wall_time: float
    original_shape: list[int]
    dtype: str
    dim: int
    indices: list[int]
    batch_index: Optional[int]
    selector: str
    path: str = ""

    @property
    def name(self) -> str:
        """The layer name shown and tagged: the layer, plus the path of the tensor inside a tuple or
        dict output (``"lstm[0]"``)."""
        return self.layer + self.path

    def to_json(self) -> bytes:
        return json.dumps(vars(self)).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes) -> "FrameHeader":
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in json.loads(data).items() if k in fields})


def frame_tag(layer: str, kind: str) -> str:
    """The tag of a layer's frames of one kind."""
    return f"{FRAME_TAG_PREFIX}{layer}/{kind}"


def parse_frame_tag(tag: str) -> Optional[tuple[str, str]]:
    """``(layer, kind)`` for a frame tag, None for any other tag."""
    if not tag.startswith(FRAME_TAG_PREFIX):
        return None
    layer, _, kind = tag[len(FRAME_TAG_PREFIX):].rpartition("/")
    if not layer or kind not in KINDS:
        return None
    return layer, kind


def stat_tag(layer: str, kind: str, stat: str) -> str:
    """The scalar tag of one statistic of a layer's frames of one kind."""
    return f"{STATS_TAG_PREFIX}{layer}/{kind}/{stat}"


def parse_stat_tag(tag: str) -> Optional[tuple[str, str, str]]:
    """``(layer, kind, stat)`` for a statistics tag, None for any other tag."""
    if not tag.startswith(STATS_TAG_PREFIX):
        return None
    rest, _, stat = tag[len(STATS_TAG_PREFIX):].rpartition("/")
    layer, _, kind = rest.rpartition("/")
    if not layer or kind not in KINDS or stat not in STATS:
        return None
    return layer, kind, stat


def stats_values(layer: str, kind: str, stats: dict[str, float]) -> list[summary_pb2.Summary.Value]:
    """Plain TensorBoard scalars (``simple_value``) for a frame's statistics."""
    return [summary_pb2.Summary.Value(tag=stat_tag(layer, kind, name), simple_value=float(value)) for name, value in stats.items()]


def module_types(architecture: Optional[dict]) -> dict[str, Optional[str]]:
    """``{module name: class name}`` of the modules an architecture calls, in order of first call."""
    types: dict[str, Optional[str]] = {}
    for node in (architecture or {}).get("nodes", []):
        if node.get("kind") == "module" and node.get("module") is not None:
            types.setdefault(node["module"], node.get("type"))
    return types


def base_layer(name: str) -> str:
    """The module name of a recorded layer name (``"lstm[0]"`` → ``"lstm"``)."""
    return name.split("[", 1)[0]


def layer_sort_key(architecture: Optional[dict]) -> Callable[[str], tuple[int, str]]:
    """A sort key putting recorded layer names in execution order, names the architecture lacks last."""
    order = {name: index for index, name in enumerate(module_types(architecture))}
    return lambda name: (order.get(base_layer(name), len(order)), name)


def create_summary_metadata(content: dict[str, Any]) -> summary_pb2.SummaryMetadata:
    """Summary metadata for an Xray tag; ``content`` describes the tag (see module docstring)."""
    return _summary_metadata(json.dumps(dict(content, version=CONTENT_VERSION), sort_keys=True))


@functools.lru_cache(maxsize=4096)
def _summary_metadata(content_json: str) -> summary_pb2.SummaryMetadata:
    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=PLUGIN_NAME, content=content_json.encode("utf-8")),
        data_class=summary_pb2.DATA_CLASS_BLOB_SEQUENCE,
    )


def parse_plugin_content(content: bytes) -> Optional[dict[str, Any]]:
    """The tag description written by :func:`create_summary_metadata`; None if unreadable or newer."""
    try:
        parsed = json.loads(content.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(parsed, dict) or parsed.get("version") != CONTENT_VERSION:
        return None
    return parsed


def _blob_value(tag: str, content: dict[str, Any], blobs: Sequence[bytes]) -> summary_pb2.Summary.Value:
    """A summary value holding ``blobs`` as a rank-1 string tensor (the blob-sequence layout)."""
    tensor = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_STRING,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=len(blobs))]),
        string_val=list(blobs),
    )
    return summary_pb2.Summary.Value(tag=tag, metadata=create_summary_metadata(content), tensor=tensor)


def frame_value(header: FrameHeader, values: np.ndarray) -> summary_pb2.Summary.Value:
    """A summary value holding one frame: its header and its selected values."""
    content = {"type": "frame", "layer": header.name, "kind": header.kind}
    return _blob_value(frame_tag(header.name, header.kind), content, [header.to_json(), encode_array(values)])


def json_summary(tag: str, document: Any) -> summary_pb2.Summary:
    """A summary holding one JSON document under a meta tag (architecture or plan)."""
    return summary_pb2.Summary(value=[_blob_value(tag, {"type": META_TAGS[tag]}, [json.dumps(document).encode("utf-8")])])


def encode_array(values: np.ndarray) -> bytes:
    """``.npy`` bytes of an array (no pickling)."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(values), allow_pickle=False)
    return buffer.getvalue()


def decode_array(data: bytes) -> np.ndarray:
    """The array stored by :func:`encode_array`."""
    return np.load(io.BytesIO(data), allow_pickle=False)
