"""Each layer's value range over a run, for ``/ranges``: every capture's frame statistics
(:mod:`tb_plugin.frame_stats`) read once, and kept.

A capture is kept under its step and wall time, which change when the step is written again (a resumed
run), so a request reads the blobs of the captures it has not seen yet and nothing else: while the tag
is unchanged (the run's listing says), nothing; once it grew, a listing of its points and the new
blobs, whatever the number of captures. The last :data:`RUNS` runs are kept, each
as a few numbers per frame of a capture (about 10 MB for 10,000 captures of 40 frames).
"""

from __future__ import annotations

import collections
import math
import threading
from typing import Optional

from tb_plugin import frame_stats, versioned_cache
from tb_plugin.series import SeriesReader

RUNS = 16

#: ``{(layer, kind): (min, max)}`` of one capture, finite values only.
Capture = dict


class FrameRanges:
    def __init__(self, reader: SeriesReader):
        self._reader = reader
        self._runs: collections.OrderedDict = collections.OrderedDict()  # (experiment, run): (version, {(step, wall): Capture})
        self._lock = threading.Lock()
        self._answers = versioned_cache.VersionedCache(64)  # (experiment, run, layer, kinds): ranges

    def of(self, ctx, experiment_id: str, run: str, layer: str, kinds: list[str], version: tuple) -> dict[str, Optional[dict[str, float]]]:
        """``{kind: {"min", "max"} or None}``: the range of ``layer``'s finite values over every capture
        (the last write of each step); ``version`` changes when the tag gets new data (the run's
        listing has it)."""
        key = (experiment_id, run, layer, tuple(kinds))
        found = self._answers.get(key, version)
        if found is not None:
            return found
        extremes = Extremes(kinds)
        for capture in self._captures(ctx, experiment_id, run, version).values():
            for kind in kinds:
                found = capture.get((layer, kind))
                if found is not None:
                    extremes.add(kind, *found)
        ranges = extremes.ranges()
        self._answers.put(key, version, ranges)
        return ranges

    def _captures(self, ctx, experiment_id: str, run: str, version: tuple) -> dict:
        tag = frame_stats.FRAME_STATS_TAG
        with self._lock:
            kept_version, known = self._runs.pop((experiment_id, run), (None, {}))
        if version != kept_version:
            points = self._reader.last_points(ctx, experiment_id, run, tag)
            keys = [(point.step, point.wall_time) for point in points]
            new = [point for point, key in zip(points, keys) if key not in known]
            if new:
                for written in self._reader.fetch(ctx, run, tag, new):
                    known[(written.step, written.wall_time)] = _capture(written.blobs)
            known = {key: known[key] for key in keys if key in known}  # steps gone or written again: dropped
        with self._lock:
            self._runs[(experiment_id, run)] = (version, known)
            while len(self._runs) > RUNS:
                self._runs.popitem(last=False)
        return known


class Extremes:
    """The smallest minimum and largest maximum seen of each kind (non-finite values left out)."""

    def __init__(self, kinds: list[str]):
        self._found: dict[str, list[float]] = {kind: [math.inf, -math.inf] for kind in kinds}

    def add(self, kind: str, low: float, high: float) -> None:
        entry = self._found[kind]
        if math.isfinite(low):
            entry[0] = min(entry[0], low)
        if math.isfinite(high):
            entry[1] = max(entry[1], high)

    def ranges(self) -> dict[str, Optional[dict[str, float]]]:
        """``{kind: {"min", "max"}}``, None for a kind with no finite minimum or maximum."""
        return {kind: {"min": low, "max": high} if math.isfinite(low) and math.isfinite(high) else None
                for kind, (low, high) in self._found.items()}


def _capture(blobs: list[bytes]) -> Capture:
    return frame_stats.frame_extremes(blobs)
