"""Reading a recorded run back from its event files, without the model::

    run = open_run("runs/exp1")
    run.records()                           # {layer: {kind: [steps]}}
    values, header = run.load("conv1", "weight", 20)
    stats = run.to_pandas()                 # one row per (step, layer, kind)
"""

from __future__ import annotations

import bisect
import copy
import dataclasses
import difflib
import json
import os
from typing import Any, Optional

import torch
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.compat.proto import event_pb2, summary_pb2, types_pb2
from tensorboard.util import tensor_util

from tb_plugin import metadata
from xray_tb.checksums import use_fast_crc32c

_EVENT_FILE_PREFIX = "events.out.tfevents."
_MAX_LISTED_STEPS = 10  # an error lists every recorded step up to this many, else the nearest ones


def open_run(logdir: str | os.PathLike) -> RecordedRun:
    """Open a finished run for reading.

    Args:
        logdir: one run directory, the one holding the ``events.out.tfevents.*`` files.

    Returns:
        The run, its event files read once.

    Raises:
        FileNotFoundError: ``logdir`` is not a directory.
        ValueError: ``logdir`` holds no event file (the message lists the run directories below it).
    """
    return RecordedRun(logdir)


@dataclasses.dataclass(frozen=True)
class _StoredFrame:
    header: bytes  # FrameHeader JSON
    values: bytes  # .npy


@dataclasses.dataclass
class _StoredStats:
    wall_time: float
    values: dict[str, float]


@dataclasses.dataclass
class _Contents:
    """Everything Xray wrote in a run's event files; a later write of a step replaces an earlier one."""

    #: layer → kind → step → frame
    frames: dict[str, dict[str, dict[int, _StoredFrame]]] = dataclasses.field(default_factory=dict)
    stats: dict[tuple[str, str, int], _StoredStats] = dataclasses.field(default_factory=dict)  # by (layer, kind, step)
    documents: dict[str, tuple[int, Any]] = dataclasses.field(default_factory=dict)  # meta tag → (step, document)


class RecordedRun:
    """The frames, statistics, architecture and plan of one recorded run (see :func:`open_run`).

    Frames are kept as the stored bytes and decoded by :meth:`load`.
    """

    def __init__(self, logdir: str | os.PathLike):
        self.logdir = os.fspath(logdir)
        self._contents = _Contents()
        self._loaders: dict[str, EventFileLoader] = {}
        self.reload()

    def reload(self) -> None:
        """Read what was written to the run's event files since the last read (new files too)."""
        use_fast_crc32c()
        for path in _event_files(self.logdir):
            loader = self._loaders.setdefault(path, EventFileLoader(path))
            for event in loader.Load():
                _add_event(self._contents, event)
        self._layer_key = metadata.layer_sort_key(self.architecture)

    def __repr__(self) -> str:
        steps = {step for kinds in self._contents.frames.values() for by_step in kinds.values() for step in by_step}
        return f"RecordedRun({self.logdir!r}: {len(self._contents.frames)} layers, {len(steps)} steps)"

    @property
    def architecture(self) -> Optional[dict]:
        """The latest architecture document, or None if the run has none."""
        return self._document(metadata.ARCHITECTURE_TAG)

    @property
    def plan(self) -> Optional[dict]:
        """The latest plan, ``{layer: {kind: bool}}``, or None if the run has none."""
        return self._document(metadata.PLAN_TAG)

    def records(self) -> dict[str, dict[str, list[int]]]:
        """What was recorded, ``{layer: {kind: [steps]}}``.

        Layers come in architecture order, kinds in :data:`~tb_plugin.metadata.KINDS` order, steps
        ascending.
        """
        return {
            layer: {kind: sorted(kinds[kind]) for kind in metadata.KINDS if kind in kinds}
            for layer, kinds in sorted(self._contents.frames.items(), key=lambda item: self._layer_key(item[0]))
        }

    def load(self, layer: str, kind: str, step: int) -> tuple[torch.Tensor, metadata.FrameHeader]:
        """The stored values of one frame and its header.

        The values are the selected part of the full tensor, as float32: see
        :class:`~tb_plugin.metadata.FrameHeader` for how they map back to it.

        Raises:
            ValueError: the layer, kind or step was not recorded (the message says what was).
        """
        by_step = self._steps(layer, kind)
        if step not in by_step:
            hint = _steps_hint(sorted(by_step), step)
            raise ValueError(f"{layer!r} {kind!r} was not recorded at step {step}; {hint}")
        return _decode(by_step[step])

    def frames(self, layer: str, kind: str) -> list[tuple[torch.Tensor, metadata.FrameHeader]]:
        """Every frame of one layer and kind, as :meth:`load` returns them, in step order."""
        by_step = self._steps(layer, kind)
        return [_decode(by_step[step]) for step in sorted(by_step)]

    def to_pandas(self):
        """The recorded statistics as a ``pandas.DataFrame``.

        One row per (step, layer, kind) with statistics, sorted that way (layers in architecture
        order); columns ``step``, ``wall_time``, ``layer``, ``kind`` and one per
        :data:`~tb_plugin.metadata.STATS` entry (NaN where a statistic is missing).

        Raises:
            ImportError: pandas is not installed.
        """
        try:
            import pandas
        except ImportError:
            raise ImportError("to_pandas needs pandas: pip install pandas") from None
        rows = []
        for layer, kind, step in sorted(self._contents.stats, key=self._stats_key):
            stats = self._contents.stats[(layer, kind, step)]
            values = {name: stats.values.get(name, float("nan")) for name in metadata.STATS}
            rows.append({"step": step, "wall_time": stats.wall_time, "layer": layer, "kind": kind, **values})
        return pandas.DataFrame(rows, columns=["step", "wall_time", "layer", "kind", *metadata.STATS])

    def _document(self, tag: str) -> Any:
        stored = self._contents.documents.get(tag)
        return None if stored is None else copy.deepcopy(stored[1])

    def _stats_key(self, key: tuple[str, str, int]) -> tuple:
        layer, kind, step = key
        return step, self._layer_key(layer), metadata.KINDS.index(kind)

    def _steps(self, layer: str, kind: str) -> dict[int, _StoredFrame]:
        """``{step: frame}`` of a recorded layer and kind; a ValueError saying what was recorded otherwise."""
        if kind not in metadata.KINDS:
            raise ValueError(f"unknown kind {kind!r}; valid kinds: {', '.join(metadata.KINDS)}")
        kinds = self._contents.frames.get(layer)
        if kinds is None:
            raise ValueError(_unknown_layer_message(layer, list(self.records()), self.logdir))
        if kind not in kinds:
            recorded = ", ".join(k for k in metadata.KINDS if k in kinds)
            raise ValueError(f"layer {layer!r} has no {kind!r} frames; recorded kinds: {recorded}")
        return kinds[kind]


def _event_files(logdir: str) -> list[str]:
    """The event files directly in ``logdir``, in name order."""
    if not os.path.isdir(logdir):
        raise FileNotFoundError(f"no such run directory: {logdir!r}")
    names = sorted(name for name in os.listdir(logdir) if _is_event_file(logdir, name))
    if names:
        return [os.path.join(logdir, name) for name in names]
    runs = sorted(
        os.path.relpath(directory, logdir)
        for directory, _, files in os.walk(logdir)
        if directory != logdir and any(_is_event_file(directory, name) for name in files)
    )
    if runs:
        raise ValueError(
            f"{logdir!r} holds no event file but these run directories below it do: {', '.join(runs)}; "
            f"open one of them, e.g. open_run({os.path.join(logdir, runs[0])!r})"
        )
    raise ValueError(f"{logdir!r} holds no event file ({_EVENT_FILE_PREFIX}*), nor does any folder below it")


def _is_event_file(directory: str, name: str) -> bool:
    return name.startswith(_EVENT_FILE_PREFIX) and os.path.isfile(os.path.join(directory, name))


def _add_event(contents: _Contents, event: event_pb2.Event) -> None:
    """File every Xray value of ``event`` into ``contents``."""
    for value in event.summary.value:
        stat = metadata.parse_stat_tag(value.tag)
        if stat is not None:
            _add_stat(contents, stat, event, value)
            continue
        blobs = _xray_blobs(value)
        if blobs is None:
            continue
        frame = metadata.parse_frame_tag(value.tag)
        if frame is not None and len(blobs) >= 2:
            layer, kind = frame
            contents.frames.setdefault(layer, {}).setdefault(kind, {})[event.step] = _StoredFrame(*blobs[:2])
        elif value.tag in metadata.META_TAGS:
            current = contents.documents.get(value.tag)
            if current is None or event.step >= current[0]:
                contents.documents[value.tag] = (event.step, json.loads(blobs[0]))


def _add_stat(
    contents: _Contents, stat: tuple[str, str, str], event: event_pb2.Event, value: summary_pb2.Summary.Value
) -> None:
    layer, kind, name = stat
    stored = contents.stats.setdefault((layer, kind, event.step), _StoredStats(event.wall_time, {}))
    stored.wall_time = event.wall_time
    stored.values[name] = float(tensor_util.make_ndarray(value.tensor))  # EventFileLoader made simple_value a tensor


def _xray_blobs(value: summary_pb2.Summary.Value) -> Optional[list[bytes]]:
    """The blobs of an Xray blob-sequence value; None for other plugins' values and unknown versions."""
    plugin = value.metadata.plugin_data
    if plugin.plugin_name == metadata.PLUGIN_NAME:
        if metadata.parse_plugin_content(plugin.content) is None:
            return None
    elif plugin.plugin_name:  # no plugin name: metadata left out after a tag's first value
        return None
    if value.tensor.dtype != types_pb2.DT_STRING:
        return None
    return list(value.tensor.string_val)


def _decode(stored: _StoredFrame) -> tuple[torch.Tensor, metadata.FrameHeader]:
    values = torch.from_numpy(metadata.decode_array(stored.values)).float()
    return values, metadata.FrameHeader.from_json(stored.header)


def _unknown_layer_message(layer: str, recorded: list[str], logdir: str) -> str:
    message = f"run {logdir!r} has no layer {layer!r}"
    close = difflib.get_close_matches(layer, recorded, n=3)
    if close:
        message += f"; did you mean {' or '.join(map(repr, close))}?"
    return f"{message}; recorded layers: {', '.join(recorded) or '(none)'}"


def _steps_hint(steps: list[int], step: int) -> str:
    """The recorded steps, or the ones nearest ``step`` when there are many."""
    if len(steps) <= _MAX_LISTED_STEPS:
        return f"recorded steps: {steps}"
    at = bisect.bisect_left(steps, step)
    nearest = steps[max(at - 2, 0): at + 2]
    return f"nearest recorded steps: {nearest} ({len(steps)} steps from {steps[0]} to {steps[-1]})"
