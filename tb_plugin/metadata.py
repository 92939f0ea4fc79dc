"""The contract between the Xray recorder and the Xray TensorBoard plugin.

The recorder (``xray_tb``) builds summaries with it and the plugin (``tb_plugin``'s route modules)
parses them with it; besides it, the recorder uses only ``tb_plugin.layout`` (how a frame is drawn) and the
plugin nothing of the recorder. It depends on numpy and TensorBoard's protos only, never on torch,
so TensorBoard starts fast. It stays one module, a little over 300 lines, so that the whole contract
reads in one place (its test: ``tests/plugin/test_metadata_contract.py``).

Layout of the data in an event file:

* Every Xray summary uses plugin name :data:`PLUGIN_NAME` and data class ``BLOB_SEQUENCE`` (a rank-1
  string tensor), which both of TensorBoard's loaders read and serve blob by blob.
* A frame (one kind of one layer at one step) lives under tag ``xray/frame/<layer>/<kind>`` at the
  training step. Its two blobs are a JSON header (:class:`FrameHeader` fields) and the selected
  values as an ``.npy`` array.
* Each frame's statistics (:data:`STATS`, over the whole tensor, not just the kept filters) are
  plugin data under ``xray/frame_stats`` (:mod:`tb_plugin.frame_stats`), and, with
  ``Xray(..., layer_scalars=True)``, ordinary scalars ``xray_stats/<layer>/<kind>/<stat>``.
* ``<layer>`` in a tag is the recorded name (the module name plus the tensor's path in a tuple or
  dict output, ``head['logits']``) encoded by :func:`encode_name`: letters, digits, space and
  ``. _ - [ ] ' ( ) < > : , = + @ ! * ~`` stay as they are, and every other character becomes ``%XX``
  escapes of its UTF-8 bytes (``"`` is ``%22``, ``\\`` ``%5C``, a tab ``%09``, ``/`` ``%2F``, ``%``
  ``%25``, ``ü`` ``%C3%BC``). TensorBoard's fast loader cannot read a tag holding ``"``, ``\\`` or a
  control character ("failed to parse blob key"), and ``/`` separates the parts of a tag, so this
  makes every name work on both loaders. The real name is kept everywhere else: in the frame
  header, in the plugin content of the tag, and in what the plugin serves (:func:`parse_frame_tag`
  decodes it). Only TensorBoard's own Scalars tab shows the encoded form of the statistics' tags.
* The architecture and the plan are JSON documents under ``xray/meta/architecture`` and
  ``xray/meta/plan``, one blob each; their step is a version counter, and the one written last is current.
* The plugin content of every tag is a small JSON object: ``{"version": 1, "type": "frame",
  "layer": ..., "kind": ...}`` or ``{"version": 1, "type": "architecture"}`` and so on. Readers skip
  tags whose version they do not know.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import re
import zlib
from typing import Any, Callable, Optional, Sequence

import numpy as np
from tensorboard.compat.proto import summary_pb2, types_pb2

PLUGIN_NAME = "xray"
CONTENT_VERSION = 1

#: What can be recorded for a layer, in display order.
KINDS = ("weight", "weight_grad", "bias", "bias_grad", "output", "activation", "grad")
#: Kinds that are a parameter of the layer or its ``.grad``: ``{kind: (parameter name, is_grad)}``.
PARAMETER_KINDS = {"weight": ("weight", False), "weight_grad": ("weight", True), "bias": ("bias", False), "bias_grad": ("bias", True)}
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

    The stored array keeps only ``indices``, in that order, along dimension ``dim`` of the full
    tensor (``original_shape``), and, when ``batch_index`` is not None, only that sample of
    dimension 0: it is ``full[batch_index]`` with ``indices`` kept along its dimension ``dim - 1``
    (a conv output ``[N, C, H, W]``: ``dim`` 1, stored ``[k, H, W]``). ``path`` locates the
    tensor inside a tuple or dict output (``"[0]"``, ``"['logits']"``), ``""`` for a plain tensor.
    ``crc32`` is the CRC-32 of the stored ``.npy`` bytes (None in frames written before it existed):
    TensorBoard's fast loader serves a record without checking its checksum, so readers check this.
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
    crc32: Optional[int] = None

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


#: Characters a name keeps as they are inside a tag; every other one is written ``%XX`` (UTF-8 bytes).
#: TensorBoard's fast loader cannot carry ``"``, ``\\`` or control characters in a tag, ``/`` separates
#: the parts of a tag, and ``%`` starts an escape.
_TAG_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-[]'()<>:,=+@!*~ ")


@functools.lru_cache(maxsize=8192)
def encode_name(name: str) -> str:
    """A layer or tensor name as it stands inside a tag: common names unchanged, any other character
    as ``%XX`` escapes of its UTF-8 bytes, so that every name works on both of TensorBoard's loaders."""
    if all(char in _TAG_SAFE for char in name):
        return name
    return "".join(char if char in _TAG_SAFE else "".join(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass")) for char in name)


_ESCAPES = re.compile(r"(?:%[0-9A-F]{2})+")


def decode_name(text: str) -> str:
    """The name :func:`encode_name` encoded (tags written before names were encoded read unchanged)."""
    if "%" not in text:
        return text
    return _ESCAPES.sub(lambda match: _utf8(bytes.fromhex(match.group(0).replace("%", ""))), text)


def _utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8", "surrogatepass")  # a lone surrogate in a name round-trips too
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace")


def frame_tag(layer: str, kind: str) -> str:
    """The tag of a layer's frames of one kind."""
    return f"{FRAME_TAG_PREFIX}{encode_name(layer)}/{kind}"


def parse_frame_tag(tag: str) -> Optional[tuple[str, str]]:
    """``(layer, kind)`` for a frame tag, None for any other tag."""
    if not tag.startswith(FRAME_TAG_PREFIX):
        return None
    layer, _, kind = tag[len(FRAME_TAG_PREFIX):].rpartition("/")
    if not layer or kind not in KINDS:
        return None
    return decode_name(layer), kind


def stat_tag(layer: str, kind: str, stat: str) -> str:
    """The scalar tag of one statistic of a layer's frames of one kind."""
    return f"{STATS_TAG_PREFIX}{encode_name(layer)}/{kind}/{stat}"


def parse_stat_tag(tag: str) -> Optional[tuple[str, str, str]]:
    """``(layer, kind, stat)`` for a statistics tag, None for any other tag."""
    if not tag.startswith(STATS_TAG_PREFIX):
        return None
    rest, _, stat = tag[len(STATS_TAG_PREFIX):].rpartition("/")
    layer, _, kind = rest.rpartition("/")
    if not layer or kind not in KINDS or stat not in STATS:
        return None
    return decode_name(layer), kind, stat


def stats_values(layer: str, kind: str, stats: dict[str, float]) -> list[summary_pb2.Summary.Value]:
    """Plain TensorBoard scalars (``simple_value``) for a frame's statistics."""
    summary = summary_pb2.Summary()
    add_stats(summary, layer, kind, stats)
    return list(summary.value)


def add_stats(summary: summary_pb2.Summary, layer: str, kind: str, stats: dict[str, float]) -> None:
    """Append a frame's statistics to ``summary`` as plain scalars (``simple_value``)."""
    tags = _stat_tags(layer, kind)
    for name, value in stats.items():
        summary.value.add(tag=tags[name], simple_value=value)


@functools.lru_cache(maxsize=4096)
def _stat_tags(layer: str, kind: str) -> dict[str, str]:
    return {name: stat_tag(layer, kind, name) for name in STATS}


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
    except (UnicodeDecodeError, ValueError, RecursionError):  # RecursionError: JSON nested too deep (a hostile file)
        return None
    if not isinstance(parsed, dict) or parsed.get("version") != CONTENT_VERSION:
        return None
    return parsed


def add_blobs(summary: summary_pb2.Summary, tag: str, metadata: summary_pb2.SummaryMetadata, blobs: Sequence[bytes]) -> None:
    """Append a value holding ``blobs`` as a rank-1 string tensor (the blob-sequence layout), built
    in place so that the blobs are copied once."""
    value = summary.value.add(tag=tag)
    value.metadata.CopyFrom(metadata)
    value.tensor.dtype = types_pb2.DT_STRING
    value.tensor.tensor_shape.dim.add(size=len(blobs))
    value.tensor.string_val.extend(blobs)


def add_frame(summary: summary_pb2.Summary, header: FrameHeader, values: np.ndarray) -> None:
    """Append one frame to ``summary``: its header (with the checksum of the values) and its
    selected values."""
    tag, metadata = _frame_tag_and_metadata(header.name, header.kind)
    encoded = encode_array(values)
    header.crc32 = zlib.crc32(encoded)
    add_blobs(summary, tag, metadata, [header.to_json(), encoded])


class DamagedFrameError(ValueError):
    """A stored frame whose values do not match the checksum in its header."""


def decode_frame(header_blob: bytes, values_blob: bytes) -> tuple[FrameHeader, np.ndarray]:
    """A stored frame's header and values, checked against the header's checksum.

    Raises:
        DamagedFrameError: the values were damaged on disk, or do not decode (TensorBoard's fast
            loader does not check record checksums, so a flipped byte would otherwise show as a
            wrong value).
    """
    header = FrameHeader.from_json(header_blob)
    where = f"the stored values of {header.name!r} {header.kind!r} at step {header.step}"
    if header.crc32 is not None and zlib.crc32(values_blob) != header.crc32:
        raise DamagedFrameError(f"{where} are damaged (checksum mismatch)")
    try:
        return header, decode_array(values_blob)
    except ValueError as error:
        raise DamagedFrameError(f"{where} are damaged (they do not decode: {error})") from None


def frame_value(header: FrameHeader, values: np.ndarray) -> summary_pb2.Summary.Value:
    """A summary value holding one frame (see :func:`add_frame`)."""
    summary = summary_pb2.Summary()
    add_frame(summary, header, values)
    return summary.value[0]


@functools.lru_cache(maxsize=4096)
def _frame_tag_and_metadata(name: str, kind: str) -> tuple[str, summary_pb2.SummaryMetadata]:
    return frame_tag(name, kind), create_summary_metadata({"type": "frame", "layer": name, "kind": kind})


def json_summary(tag: str, document: Any) -> summary_pb2.Summary:
    """A summary holding one JSON document under a meta tag (architecture or plan)."""
    return encoded_json_summary(tag, json.dumps(document, separators=(",", ":"), check_circular=False).encode("utf-8"))


def encoded_json_summary(tag: str, encoded: bytes) -> summary_pb2.Summary:
    """:func:`json_summary` of a document already encoded as UTF-8 JSON."""
    summary = summary_pb2.Summary()
    add_blobs(summary, tag, create_summary_metadata({"type": META_TAGS[tag]}), [encoded])
    return summary


def encode_array(values: np.ndarray) -> bytes:
    """``.npy`` bytes of an array of numbers (what ``np.save`` writes, without pickling)."""
    values = np.asarray(values)
    if values.dtype.hasobject:
        raise ValueError("only arrays of numbers are stored")
    header = _npy_header(values.dtype.str, values.shape)
    if values.ndim and values.size and values.flags.c_contiguous:
        return b"".join((header, memoryview(values).cast("B")))  # one copy
    return header + values.tobytes(order="C")


@functools.lru_cache(maxsize=4096)
def _npy_header(descr: str, shape: tuple[int, ...]) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def decode_array(data: bytes) -> np.ndarray:
    """The array stored by :func:`encode_array`."""
    return np.load(io.BytesIO(data), allow_pickle=False)
