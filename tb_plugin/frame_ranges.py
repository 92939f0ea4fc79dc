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
        self._answers = versioned_cache.VersionedCache(64)  # (experiment, run, layer, kinds): found

    def of(self, ctx, experiment_id: str, run: str, layer: str, kinds: list[str], version: tuple) -> dict[str, dict[str, list[float]]]:
        """``{kind: {"min": [...], "max": [...]}}``: the finite minimum and maximum of each capture of
        ``layer`` (the last write of each step); ``version`` changes when the tag gets new data (the
        run's listing has it)."""
        key = (experiment_id, run, layer, tuple(kinds))
        found = self._answers.get(key, version)
        if found is not None:
            return found
        current = self._captures(ctx, experiment_id, run, version)
        found = {}
        for capture in current.values():
            for kind in kinds:
                extremes = capture.get((layer, kind))
                if extremes is not None:
                    entry = found.setdefault(kind, {"min": [], "max": []})
                    entry["min"].append(extremes[0])
                    entry["max"].append(extremes[1])
        self._answers.put(key, version, found)
        return found

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


def _capture(blobs: list[bytes]) -> Capture:
    capture = {}
    for layer, kind, stats in frame_stats.decode_frame_stats(blobs):
        low, high = stats.get("min", math.nan), stats.get("max", math.nan)
        if math.isfinite(low) and math.isfinite(high):
            capture[(layer, kind)] = (low, high)
    return capture
