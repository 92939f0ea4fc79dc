"""An index of each run's frames, built once per data reload, so that a frame request finds its
point directly instead of reading every step of its tag.

A run's index maps ``(layer, kind)`` to the tag and ``{step: datum}``. It is rebuilt when the run's
listing changes, that is on the first request after TensorBoard's reload saw new data for it: the
fingerprint is every Xray tag of the run with its ``max_step``, ``max_wall_time`` and ``max_length``
(a run rewritten with the same steps has new wall times). The listing itself is kept while the
:data:`PROBE` tags are unchanged (:mod:`tb_plugin.run_listing`); the index is one
``read_blob_sequences`` call for all the run's frame tags together.

A frame at a step the index holds is read with no listing at all; any other step looks at the run
again, so a live run's new steps are found on the first request for them. Blobs are read for that
one point. On the Python loader (``--load_fast=false``) they are read through
:class:`tb_plugin.series.SeriesReader`, which makes the last write of a repeated step win (the index
still answers which steps exist).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from typing import Optional

from tensorboard import errors
from tensorboard.backend.event_processing import data_provider as multiplexer_provider

from tb_plugin import frame_stats, metadata, routes_common, series

_MAX_RUNS = 256  # indexes kept; the least recently built go first
#: Tags whose change means the run's frames (or its architecture) changed: every capture writes the
#: frame statistics in the same event as its frames (see :mod:`tb_plugin.run_listing`).
PROBE = (frame_stats.FRAME_STATS_TAG, metadata.ARCHITECTURE_TAG)


@dataclasses.dataclass(frozen=True)
class FrameSeries:
    """The frames of one layer and kind of a run."""

    tag: str
    steps: list[int]
    data: dict  # step -> its point: a BlobSequenceDatum, or on the Python loader the multiplexer's event


@dataclasses.dataclass(frozen=True)
class RunFrames:
    """A run's frame series by ``(layer, kind)``, and the listing they were built from."""

    fingerprint: tuple
    series: dict[tuple[str, str], FrameSeries]
    tags: dict  # the run's Xray tags, as listed

    def layers(self) -> list[str]:
        return sorted({layer for layer, _ in self.series})


class RunIndex:
    """Per-run frame indexes over a :class:`~tb_plugin.series.SeriesReader`, rebuilt on new data."""

    def __init__(self, data_provider, reader: series.SeriesReader):
        self._provider = data_provider
        self._reader = reader
        self._via_reader = isinstance(data_provider, multiplexer_provider.MultiplexerDataProvider)
        self._indexes: dict[tuple[str, str], RunFrames] = {}
        self._lock = threading.Lock()
        self.builds = 0  # how many indexes were built (for tests)

    def frames(self, ctx, experiment_id: str, run: str) -> RunFrames:
        """The run's index, rebuilt when the run's listing changed; 404 for a run without Xray data."""
        tags = self._reader.run_tags(ctx, experiment_id, run, probe=PROBE)
        fingerprint = tuple(sorted((tag, ts.max_step, ts.max_wall_time, ts.max_length) for tag, ts in tags.items()))
        key = (experiment_id, run)
        with self._lock:
            known = self._indexes.get(key)
        if known is not None and known.fingerprint == fingerprint:
            return known
        frame_tags = {parsed: tag for tag in tags if (parsed := metadata.parse_frame_tag(tag))}
        data = self._reader.points(ctx, experiment_id, run, list(frame_tags.values())) if frame_tags else {}
        built = {}
        for key_lk, tag in frame_tags.items():
            by_step = {datum.step: datum for datum in data.get(tag, ())}  # a repeated step: the later datum wins
            built[key_lk] = FrameSeries(tag, sorted(by_step), by_step)
        index = RunFrames(fingerprint, built, tags)
        with self._lock:
            self._indexes.pop(key, None)
            self._indexes[key] = index
            while len(self._indexes) > _MAX_RUNS:
                self._indexes.pop(next(iter(self._indexes)))
            self.builds += 1
        return index

    def series_of(self, ctx, experiment_id: str, run: str, layer: str, kind: str) -> FrameSeries:
        """The series of one layer and kind; 404 naming what the run has."""
        index = self.frames(ctx, experiment_id, run)
        found = index.series.get((layer, kind))
        if found is None:
            recorded = index.layers()
            if layer not in recorded:
                raise routes_common.unknown_layer(run, layer, recorded)
            kinds = sorted(k for (name, k) in index.series if name == layer)
            raise errors.NotFoundError(f"layer {layer!r} of run {run!r} has no {kind!r} frames; recorded kinds: {', '.join(kinds)}")
        return found

    def frame(self, ctx, experiment_id: str, run: str, layer: str, kind: str, step: int) -> series.Written:
        """The frame's header and values blobs at ``step``; 404 naming the recorded steps.

        A step the run's index already holds is read straight away, with no listing: a blob is read by
        its step, so it is the step's last write even when the index is older. Any other step, or one
        that is gone since (a resumed run's fast loader drops later steps), looks at the run again."""
        with self._lock:
            known = self._indexes.get((experiment_id, run))
        found = known.series.get((layer, kind)) if known is not None else None
        if found is not None and step in found.data:
            with contextlib.suppress(errors.NotFoundError):
                written = self.read(ctx, experiment_id, run, found.tag, found.data[step])
                if written is not None:
                    return written
        found = self.series_of(ctx, experiment_id, run, layer, kind)
        datum = found.data.get(step)
        if datum is None:
            raise errors.NotFoundError(f"{layer!r} {kind!r} was not recorded at step {step}; {routes_common.steps_near(found.steps, step)}")
        written = self.read(ctx, experiment_id, run, found.tag, datum)
        if written is None:  # gone since the index was built
            raise errors.NotFoundError(f"{layer!r} {kind!r} at step {step} of run {run!r} is no longer there; reload")
        return written

    def read(self, ctx, experiment_id: str, run: str, tag: str, datum) -> Optional[series.Written]:
        """The blobs of one indexed point (the last write of its step)."""
        if self._via_reader:
            return self._reader.last_write(ctx, experiment_id, run, tag, datum.step)
        blobs = series.read_blobs(self._provider, ctx, run, tag, datum.values, overlap=True, blob_reads=self._reader.blob_reads)
        return series.Written(datum.step, datum.wall_time, blobs)
