"""What Xray wrote in a run's event files, filed by layer, kind and step, unreadable values skipped.

One rule for everything it holds (frames, frame statistics, documents, health series blocks,
findings, bias results and their examples): the last write of a step wins, in write order. Files
count in name order (their names start with their creation time), records in file order. So a
crashed run resumed into the same folder, whose new Xray writes a new event file with the same steps,
shows the new captures. The document (architecture, plan) and the findings written last are current,
as on TensorBoard's loaders and in the plugin. Health and bias values are kept as their stored blobs;
:mod:`xray_tb.health.reading` and :mod:`xray_tb.bias.recording` decode them.

An event that does not parse, or a frame, statistic or document whose bytes do not decode, is
skipped with a :class:`~xray_tb.io.records.DamagedEventFileWarning` naming the file and the byte
offset of its record; every other value is read.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import warnings
import zlib
from typing import Any, Optional

import numpy as np
from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2, summary_pb2, types_pb2
from tensorboard.util import tensor_util

from tb_plugin import bias_metadata, frame_stats, health_metadata, metadata
from xray_tb.io.records import DamagedEventFileWarning, Record

#: Where a value was written: (event file name, byte offset of its record). Later is greater.
Origin = tuple[str, int]


@dataclasses.dataclass(frozen=True)
class StoredFrame:
    header: bytes  # FrameHeader JSON
    values: bytes  # .npy
    origin: Origin


@dataclasses.dataclass
class StoredStats:
    wall_time: float
    values: dict[str, float] = dataclasses.field(default_factory=dict)
    origins: dict[str, Origin] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class RunContents:
    """Everything Xray wrote in a run's event files; a later write of a step replaces an earlier one."""

    #: layer → kind → step → frame
    frames: dict[str, dict[str, dict[int, StoredFrame]]] = dataclasses.field(default_factory=dict)
    stats: dict[tuple[str, str, int], StoredStats] = dataclasses.field(default_factory=dict)  # by (layer, kind, step)
    #: meta tag → ((file name, byte offset), document): the one written last
    documents: dict[str, tuple[Origin, Any]] = dataclasses.field(default_factory=dict)
    #: health statistic → [(origin, blobs)] of its series blocks, in write order
    health_series: dict[str, list[tuple[Origin, list[bytes]]]] = dataclasses.field(default_factory=dict)
    #: (origin, blob) of the findings written last, or None
    findings: Optional[tuple[Origin, bytes]] = None
    #: (evaluation, step) → (origin, blobs) of a bias result, and of its examples
    bias_results: dict[tuple[str, int], tuple[Origin, list[bytes]]] = dataclasses.field(default_factory=dict)
    bias_examples: dict[tuple[str, int], tuple[Origin, list[bytes]]] = dataclasses.field(default_factory=dict)
    #: whether unreadable values are warned about (:class:`~xray_tb.io.records.DamagedEventFileWarning`)
    warn: bool = True

    def add_record(self, path: str, record: Record) -> None:
        """File every Xray value of one record's event; warn once about what cannot be read."""
        try:
            event = event_pb2.Event.FromString(record.data)
        except DecodeError as error:
            if self.warn:
                _warn(path, record.offset, f"its data is not a TensorBoard event ({error}); skipped it")
            return
        origin = (os.path.basename(path), record.offset)
        problems = []
        for value in event.summary.value:
            problem = self._add_value(event, value, origin)
            if problem is not None:
                problems.append(f"{value.tag!r} ({problem})")
        if problems and self.warn:
            _warn(path, record.offset, f"step {event.step}: skipped {', '.join(problems)}; read the rest")

    def _add_value(self, event: event_pb2.Event, value: summary_pb2.Summary.Value, origin: Origin) -> Optional[str]:
        """File one value; what is wrong with it when it cannot be read."""
        stat = metadata.parse_stat_tag(value.tag)
        if stat is not None:
            return self._add_stat(stat, event, value, origin)
        blobs = xray_blobs(value)
        if blobs is None:
            return None
        frame = metadata.parse_frame_tag(value.tag)
        if frame is not None:
            problem = _frame_problem(blobs)
            if problem is None:
                by_step = self.frames.setdefault(frame[0], {}).setdefault(frame[1], {})
                current = by_step.get(event.step)
                if current is None or origin >= current.origin:
                    by_step[event.step] = StoredFrame(blobs[0], blobs[1], origin)
            return problem
        if self._add_health_or_bias(event.step, value.tag, blobs, origin):
            return None
        if value.tag == frame_stats.FRAME_STATS_TAG:
            try:
                entries = frame_stats.decode_frame_stats(blobs)
            except (ValueError, KeyError, TypeError, IndexError, RecursionError):
                return "not frame statistics"
            for layer, kind, stats in entries:
                for name, number in stats.items():
                    self._add_stat((layer, kind, name), event, number, origin)
            return None
        if value.tag in metadata.META_TAGS:
            try:
                document = json.loads(blobs[0]) if blobs else None
            except (ValueError, RecursionError):  # RecursionError: nested too deep
                return "not JSON"
            problem = _document_problem(value.tag, document)
            version = origin  # the document written last is current, as on TensorBoard's loaders
            current = self.documents.get(value.tag)
            if problem is None and (current is None or version >= current[0]):
                self.documents[value.tag] = (version, document)
            return problem
        return None

    def _add_health_or_bias(self, step: int, tag: str, blobs: list[bytes], origin: Origin) -> bool:
        """File a health or bias value (kept as its blobs); whether ``tag`` was one."""
        if tag == health_metadata.FINDINGS_TAG:
            if blobs and (self.findings is None or origin >= self.findings[0]):
                self.findings = (origin, blobs[0])
            return True
        stat = health_metadata.parse_series_tag(tag)
        if stat is not None:
            self.health_series.setdefault(stat, []).append((origin, blobs))
            return True
        bias = bias_metadata.parse_tag(tag)
        if bias is None:
            return False
        evaluation, part = bias
        kept = self.bias_results if part == "result" else self.bias_examples
        current = kept.get((evaluation, step))
        if blobs and (current is None or origin >= current[0]):
            kept[(evaluation, step)] = (origin, blobs)
        return True

    def _add_stat(self, stat: tuple[str, str, str], event, value, origin: Origin) -> Optional[str]:
        """File one statistic (a summary value, or a number read from the frame statistics)."""
        number = value if isinstance(value, float) else _number(value)
        if number is None:
            return "not a number"
        layer, kind, name = stat
        stored = self.stats.setdefault((layer, kind, event.step), StoredStats(event.wall_time))
        if name not in stored.origins or origin >= stored.origins[name]:
            stored.values[name], stored.origins[name] = number, origin
            if origin >= max(stored.origins.values()):
                stored.wall_time = event.wall_time
        return None


def xray_blobs(value: summary_pb2.Summary.Value) -> Optional[list[bytes]]:
    """The blobs of an Xray blob-sequence value; None for other plugins' values and unknown versions."""
    if not holds_xray_blobs(value):
        return None
    return list(value.tensor.string_val)


def holds_xray_blobs(value: summary_pb2.Summary.Value) -> bool:
    """Whether ``value`` is an Xray blob sequence (without copying its blobs)."""
    plugin = value.metadata.plugin_data
    if plugin.plugin_name == metadata.PLUGIN_NAME:
        if metadata.parse_plugin_content(plugin.content) is None:
            return False
    elif plugin.plugin_name:  # no plugin name: metadata left out after a tag's first value
        return False
    return value.tensor.dtype == types_pb2.DT_STRING


def _number(value: summary_pb2.Summary.Value) -> Optional[float]:
    """A statistic's value: a ``simple_value``, or a one-element numeric tensor."""
    which = value.WhichOneof("value")
    if which == "simple_value":
        return float(value.simple_value)
    if which != "tensor":
        return None
    try:
        array = tensor_util.make_ndarray(value.tensor)
    except Exception:  # noqa: BLE001 - any tensor that does not decode is unreadable
        return None
    if array.size != 1 or array.dtype.kind not in "fiub":
        return None
    return float(array.reshape(()))


def _frame_problem(blobs: list[bytes]) -> Optional[str]:
    """What keeps ``blobs`` from decoding as a frame (header JSON, .npy values), checked without
    decoding the values; None when they decode."""
    if len(blobs) < 2:
        return f"a frame has 2 blobs, this one {len(blobs)}"
    try:
        header = metadata.FrameHeader.from_json(blobs[0])
    except (ValueError, TypeError, AttributeError, RecursionError):
        return "its header is not a frame header"
    problem = _array_problem(blobs[1])
    if problem is None and header.crc32 is not None and zlib.crc32(blobs[1]) != header.crc32:
        return "its values fail the checksum in its header"
    return problem


_NPY_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _array_problem(blob: bytes) -> Optional[str]:
    """What keeps ``blob`` from decoding as an ``.npy`` array of numbers; None when it decodes."""
    stream = io.BytesIO(blob)
    try:
        version = np.lib.format.read_magic(stream)
        shape, _, dtype = _NPY_HEADER_READERS[version](stream)
    except Exception:  # noqa: BLE001 - numpy raises several kinds on a damaged header
        return "its values are not an .npy array"
    if dtype.kind not in "fiub" or dtype.fields is not None:
        return f"its values are {dtype}, not numbers"
    expected = math.prod(shape) * dtype.itemsize
    if len(blob) - stream.tell() != expected:
        return f"its values hold {len(blob) - stream.tell()} bytes, their header says {expected}"
    return None


def _document_problem(tag: str, document: Any) -> Optional[str]:
    """What keeps ``document`` from being an architecture or a plan; None when it is one."""
    if not isinstance(document, dict):
        return "not a JSON object"
    if tag == metadata.ARCHITECTURE_TAG:
        nodes = document.get("nodes", [])
        if not isinstance(nodes, list) or not all(
            isinstance(node, dict) and isinstance(node.get("module"), (str, type(None))) for node in nodes
        ):
            return "its nodes are not a list of nodes"
    return None


def _warn(path: str, offset: int, message: str) -> None:
    warnings.warn(f"event file {path}: record at byte {offset}: {message}", DamagedEventFileWarning, stacklevel=4)
