"""Turning host blocks of statistics into TensorBoard events (see :mod:`tb_plugin.health_metadata`)."""

from __future__ import annotations

import dataclasses
import struct
from typing import TYPE_CHECKING, Optional

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2

from tb_plugin import health_metadata
from xray_tb.devices import host_array

if TYPE_CHECKING:
    from xray_tb.health.buffer import Block


@dataclasses.dataclass
class Series:
    """One statistic over a block: ``values`` is steps × layers, ``absent`` marks values never measured."""

    layers: list[str]
    values: np.ndarray
    absent: np.ndarray


def scalar_events(steps: np.ndarray, walls: np.ndarray, series: dict[str, Series]) -> list[event_pb2.Event]:
    """One event per step holding each present value as a plain scalar ``xray_health/<layer>/<stat>``
    (written with ``Xray(..., layer_scalars=True)`` only). Non-finite values are written as they are;
    absent ones are left out."""
    tags = [health_metadata.scalar_tag(layer, stat) for stat, entry in series.items() for layer in entry.layers]
    if not tags or not len(steps):
        return []
    values = np.concatenate([entry.values for entry in series.values()], axis=1)
    absent = np.concatenate([entry.absent for entry in series.values()], axis=1)
    return plain_scalar_events(steps, walls, tags, values, absent)


def plain_scalar_events(steps: np.ndarray, walls: np.ndarray, tags: list[str], values: np.ndarray, absent: np.ndarray) -> list[event_pb2.Event]:
    """One event per step with a present value: ``values`` and ``absent`` are steps × tags.

    This can run for every buffered iteration, so the events are encoded with numpy: the bytes of one
    step's summary are a fixed template per set of present values, with the float32 values filled in,
    and protobuf parses the result (in C) into events.
    """
    encoded = [tag.encode("utf-8") for tag in tags]
    values = np.asarray(values).astype("<f4")
    absent = np.asarray(absent, bool)
    bodies: list[bytes] = [b""] * len(steps)
    patterns, inverse = np.unique(absent, axis=0, return_inverse=True)
    for index, pattern in enumerate(patterns):
        rows = np.flatnonzero(inverse.reshape(-1) == index)
        present = np.flatnonzero(~pattern)
        if not present.size:
            continue
        template, offsets = _summary_template([encoded[k] for k in present])
        filled = np.tile(np.frombuffer(template, dtype=np.uint8), (len(rows), 1))
        filled[:, (offsets[:, None] + np.arange(4)).reshape(-1)] = values[np.ix_(rows, present)].view(np.uint8).reshape(len(rows), -1)
        for row, body in zip(rows.tolist(), filled):
            bodies[row] = body.tobytes()
    events = []
    for step, wall, body in zip(np.asarray(steps).tolist(), np.asarray(walls).tolist(), bodies):
        if body:
            data = b"".join((b"\x09", struct.pack("<d", wall), b"\x10", _varint(step & (2**64 - 1)), b"\x2a", _varint(len(body)), body))
            events.append(event_pb2.Event.FromString(data))
    return events


def _summary_template(tags: list[bytes]) -> tuple[bytes, np.ndarray]:
    """A serialized ``Summary`` with one ``simple_value`` per tag (zeros), and where each float starts."""
    parts, offsets, position = [], [], 0
    for tag in tags:
        inner = b"\x0a" + _varint(len(tag)) + tag + b"\x15"
        head = b"\x0a" + _varint(len(inner) + 4) + inner
        parts.append(head + b"\x00\x00\x00\x00")
        offsets.append(position + len(head))
        position += len(head) + 4
    return b"".join(parts), np.asarray(offsets, dtype=np.int64)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def series_event(steps: np.ndarray, wall: float, series: dict[str, Series]) -> event_pb2.Event:
    """One event, at the block's first step, holding every statistic's full block (layers × steps)."""
    summary = summary_pb2.Summary()
    for stat, entry in series.items():
        health_metadata.add_series(summary, stat, entry.layers, steps, entry.values.T, entry.absent.T)
    return event_pb2.Event(step=int(steps[0]), wall_time=wall, summary=summary)


def vector_events(vectors: list) -> tuple[list[event_pb2.Event], Optional[dict[str, np.ndarray]]]:
    """The events of buffered per-unit vectors ``[(step, wall, {stat: (layers, tensors)})]`` (one host
    copy per tensor), and the latest ``dead`` vectors on the host, ``{layer: vector}`` (None: none)."""
    events, dead = [], None
    for step, wall, by_stat in vectors:
        for stat, (layers, tensors) in by_stat.items():
            kept = [(name, t) for name, t in zip(layers, tensors) if t is not None]
            arrays = [host_array(t.float().cpu()) for _, t in kept]
            if stat == "dead":
                dead = {name: array for (name, _), array in zip(kept, arrays)}
            if kept:
                events.append(vector_event(step, wall, stat, [name for name, _ in kept], arrays))
    return events, dead


def vector_event(step: int, wall: float, stat: str, layers: list[str], vectors: list[np.ndarray]) -> event_pb2.Event:
    summary = summary_pb2.Summary()
    health_metadata.add_vectors(summary, stat, layers, vectors)
    return event_pb2.Event(step=int(step), wall_time=wall, summary=summary)


def epochs_event(epoch: int, wall: float, moments: dict[str, dict[str, tuple[float, float]]]) -> event_pb2.Event:
    """The epoch's aggregates as plugin data (:data:`tb_plugin.health_metadata.EPOCHS_TAG`) at step ``epoch``."""
    return event_pb2.Event(step=int(epoch), wall_time=wall, summary=health_metadata.epochs_summary(moments))


def epoch_event(epoch: int, wall: float, moments: dict[str, dict[str, tuple[float, float]]]) -> event_pb2.Event:
    """Scalars ``xray_health_epoch/<layer>/<stat>/mean`` and ``.../var`` at step ``epoch``."""
    event = event_pb2.Event(step=int(epoch), wall_time=wall)
    for layer, stats in moments.items():
        for stat, (mean, var) in stats.items():
            event.summary.value.add(tag=health_metadata.epoch_tag(layer, stat, "mean"), simple_value=mean)
            event.summary.value.add(tag=health_metadata.epoch_tag(layer, stat, "var"), simple_value=var)
    return event


def block_series(block: Optional[Block], families: list) -> dict[str, Series]:
    """The written statistics of ``families`` over ``block``: ``{stat: Series}``."""
    if block is None:
        return {}
    out = {}
    for index, family in enumerate(families):
        columns = {column: block.columns[(index, column)] for column in family.columns}
        absent = np.logical_or.reduce([block.absent[(index, column)] for column in family.columns]) if family.columns else None
        for stat, values in family.finalize(columns).items():
            out[stat] = Series(list(family.layers), values, absent)
    return out
