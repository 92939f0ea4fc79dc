"""A recorded run read back (see :func:`xray_tb.io.reader.open_run`): what was recorded, each frame's
values, the statistics as a table, and the run's documents, findings and bias evaluations."""

from __future__ import annotations

import copy
import os
from typing import Any, Optional

import numpy as np
import torch

from tb_plugin import health_metadata, metadata
from xray_tb.numeric import whole
from xray_tb.io.run_contents import RunContents, StoredFrame
from xray_tb.io.run_files import RunFiles
from tb_plugin.close_matches import close_matches, nearest_steps

_MAX_LISTED_STEPS = 10  # an error lists every recorded step up to this many, else the nearest ones


class RecordedRun:
    """The frames, statistics, architecture and plan of one recorded run (see :func:`~xray_tb.io.reader.open_run`).

    Frames are kept as the stored bytes and decoded by :meth:`load`.
    """

    def __init__(self, logdir: str | os.PathLike, *, warn: bool = True):
        self.logdir = os.fspath(logdir)
        self._files = RunFiles(self.logdir, warn=warn)
        self._contents = self._files.contents
        self.reload()

    def reload(self) -> None:
        """Read what was written to the run's event files since the last read (new files too).

        A record still being written at the end of a file is read by a later reload, once complete.
        """
        self._files.read()
        self._layer_key = metadata.layer_sort_key(self.architecture)

    @property
    def contents(self) -> RunContents:
        """What the run's files hold, as read so far (see :mod:`xray_tb.io.run_contents`)."""
        return self._contents

    def unchanged_but_appended(self) -> bool:
        """Whether every file read is still there, grown or as it was (local files only): then a
        :meth:`reload` reads on where the last read stopped, else the run must be read anew."""
        return self._files.unchanged_but_appended()

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

    def findings(self) -> list:
        """The training-health findings last written to the run (see :mod:`xray_tb.health`)."""
        from xray_tb.health import reading  # health and bias decode their own values (and need torch)

        return reading.findings(self._contents)

    def health(self, stat: str, *, present: bool = False) -> tuple:
        """One training-health statistic: ``(layers, steps, values)``, values layers × steps, NaN where a
        layer has no value at a step. ``present=True`` adds a fourth item, layers × steps booleans, False
        there: a statistic measured as NaN (after a non-finite gradient) is then told from one never
        measured (the update ratio between its measurements, a layer without a gradient)."""
        from xray_tb.health import reading

        _check_name("stat", stat, "a statistic name such as 'grad_l2'")
        if not isinstance(present, bool):
            raise TypeError(f"health(present=...) takes True or False, got {present!r}")
        recorded = self._contents.health_series
        if stat not in recorded and stat not in health_metadata.BUILTIN_STATS:
            close = close_matches(stat, dict.fromkeys([*health_metadata.BUILTIN_STATS, *recorded]), n=3)
            hint = f"did you mean {', '.join(map(repr, close))}? " if close else ""
            raise ValueError(f"no training-health statistic {stat!r}; {hint}this run has: {', '.join(sorted(recorded)) or 'none'}")
        found = reading.series(self._contents, stat)
        return found if present else found[:3]

    def bias(self) -> dict:
        """The Attention-IoU evaluations written to the run, ``{evaluation: {step: BiasReport}}``
        (see :mod:`xray_tb.bias`)."""
        from xray_tb.bias.recording import read_reports

        return read_reports(self._contents)

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
        if whole(step) is None:
            raise TypeError(f"step= is a recorded step, a whole number; got {type(step).__name__} {step!r}")
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

    def _steps(self, layer: str, kind: str) -> dict[int, StoredFrame]:
        """``{step: frame}`` of a recorded layer and kind; a ValueError saying what was recorded otherwise."""
        _check_name("layer", layer, "a layer name such as 'conv1'")
        _check_name("kind", kind, f"one of {', '.join(metadata.KINDS)}")
        if kind not in metadata.KINDS:
            raise ValueError(f"unknown kind {kind!r}; valid kinds: {', '.join(metadata.KINDS)}")
        kinds = self._contents.frames.get(layer)
        if kinds is None:
            raise ValueError(_unknown_layer_message(layer, list(self.records()), self.logdir))
        if kind not in kinds:
            recorded = ", ".join(k for k in metadata.KINDS if k in kinds)
            raise ValueError(f"layer {layer!r} has no {kind!r} frames; recorded kinds: {recorded}")
        return kinds[kind]


def _decode(stored: StoredFrame) -> tuple[torch.Tensor, metadata.FrameHeader]:
    header, values = metadata.decode_frame(stored.header, stored.values)
    return torch.from_numpy(np.asarray(values, dtype=np.float32)), header


def _check_name(what: str, value, example: str) -> None:
    """A name argument (a layer, a kind, a statistic) must be a string: say so, with an example, before any lookup."""
    if not isinstance(value, str):
        raise TypeError(f"{what}= is {example}, a string; got {type(value).__name__} {value!r}")


def _unknown_layer_message(layer: str, recorded: list[str], logdir: str) -> str:
    message = f"run {logdir!r} has no layer {layer!r}"
    close = close_matches(layer, recorded, n=3, cutoff=0.6)
    if close:
        message += f" (did you mean {' or '.join(map(repr, close))}?)"
    return f"{message}; recorded layers: {', '.join(recorded) or '(none)'}"


def _steps_hint(steps: list[int], step: int) -> str:
    """The recorded steps, or the ones nearest ``step`` when there are many."""
    if len(steps) <= _MAX_LISTED_STEPS:
        return f"recorded steps: {steps}"
    return f"nearest recorded steps: {nearest_steps(steps, step)} ({len(steps)} steps from {steps[0]} to {steps[-1]})"
