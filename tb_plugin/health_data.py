"""Reading training-health plugin data through a :class:`tb_plugin.series.SeriesReader`, with the merged
matrix of each (run, statistic) cached until TensorBoard's data provider reports the tag changed
(its max step, max wall time or length), so a warm ``/health`` decodes nothing."""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np
from tensorboard import errors

from tb_plugin import health_metadata, versioned_cache

_CACHED = 64  # merged matrices kept (runs × statistics)
#: Statistics one of which a run with training health writes (weights or activations): probed with a
#: tag that may be absent, so that a listing taken before health was first written is not kept.
_HEALTH_ON = ("grad_l2", "dead_fraction")


@dataclasses.dataclass(frozen=True)
class Matrix:
    """One statistic of a run: ``values`` and ``present`` are layers × steps (NaN where absent)."""

    layers: list[str]
    steps: np.ndarray
    values: np.ndarray
    present: np.ndarray


class HealthData:
    def __init__(self, reader):
        self.reader = reader
        self._cache = versioned_cache.VersionedCache(_CACHED)

    def recorded(self, ctx, experiment_id: str, run: str, stat: Optional[str] = None, tag: Optional[str] = None) -> tuple[dict, list[str]]:
        """The run's Xray tags and its recorded health statistics, sorted (404 when it has no Xray data).
        With ``stat`` (or ``tag``), the listing is kept while that statistic's series (that tag) is
        unchanged (:mod:`tb_plugin.run_listing`)."""
        if stat:
            tags = self.reader.run_tags(ctx, experiment_id, run, probe=(health_metadata.series_tag(stat),))
        elif tag:  # a tag a healthy run may never write (findings): probed with the series that say health is on
            probe = (tag, *(health_metadata.series_tag(s) for s in _HEALTH_ON))
            tags = self.reader.run_tags(ctx, experiment_id, run, probe=probe, absent_ok=True)
        else:
            tags = self.reader.run_tags(ctx, experiment_id, run)
        return tags, sorted(s for tag in tags if (s := health_metadata.parse_series_tag(tag)))

    def matrix(self, ctx, experiment_id: str, run: str, stat: str, tags: dict) -> Matrix:
        """The merged series of ``stat`` (which must be in ``tags``), from the cache when unchanged."""
        tag = health_metadata.series_tag(stat)
        version = _version(tags[tag])
        key = (experiment_id, run, stat)
        hit = self._cache.get(key, version)
        if hit is not None:
            return hit
        writes = sorted(self.reader.all_last_writes(ctx, experiment_id, run, tag), key=lambda written: written.wall_time)  # write order
        blocks = [health_metadata.decode_series(written.blobs) for written in writes]
        merged = Matrix(*health_metadata.merge_blocks(blocks))
        for array in (merged.steps, merged.values, merged.present):
            array.setflags(write=False)  # shared between requests
        self._cache.put(key, version, merged)
        return merged

    def last_points(self, ctx, experiment_id: str, run: str, tag: str, tags: dict) -> list:
        """The point of the last write of every step of ``tag`` (which must be in ``tags``), steps
        ascending, blobs not read; from the cache while the tag is unchanged, so that a request for one
        step (``/health_vector``) costs one blob read however many steps the run has."""
        version = _version(tags[tag])
        key = (experiment_id, run, "points", tag)
        hit = self._cache.get(key, version)
        if hit is None:
            hit = self.reader.last_points(ctx, experiment_id, run, tag)
            self._cache.put(key, version, hit)
        return hit

    def latest_blob(self, ctx, experiment_id: str, run: str, tag: str, tags: dict) -> Optional[tuple[int, list[bytes]]]:
        """``(step, blobs)`` written last to ``tag``; None when the run has no such tag. Kept while the
        tag is unchanged."""
        if tag not in tags:
            return None
        version, key = _version(tags[tag]), (experiment_id, run, "latest", tag)
        hit = self._cache.get(key, version)
        if hit is None:
            written = self.reader.latest(ctx, experiment_id, run, tag)
            hit = (None,) if written is None else (written.step, written.blobs)
            self._cache.put(key, version, hit)
        return None if hit == (None,) else hit


def no_health(run: str) -> errors.NotFoundError:
    return errors.NotFoundError(f"run {run!r} has no training-health statistics (recorded with health=False?)")


def _version(listed) -> tuple:
    """A listed tag's version: it changes with the tag's data (max step, max wall time, length)."""
    return getattr(listed, "max_step", None), getattr(listed, "max_wall_time", None), getattr(listed, "max_length", None)
