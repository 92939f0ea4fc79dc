"""Reading Xray's blob series through TensorBoard's data provider, on either loader.

A step can be written twice: a crashed run resumed into the same folder writes a second event file
with the same steps, and a step can repeat within one file. The rule is that **the last write
wins**: the later file in file-name order (names start with the creation time), the later record
within a file. TensorBoard's two loaders resolve it differently, and this module hides that:

* The fast loader (the Rust data server) keeps only the last write: a record at step ``s`` evicts
  every point at step ``s`` or later that it read before, so a series it serves never repeats a
  step. (It thereby also forgets the later steps of the earlier write.)
* The Python loader (``--load_fast=false``) keeps every write, but its data provider serves the
  first write of a repeated step (``read_blob_sequences`` keeps the first, ``read_blob`` reads the
  first). So on that loader the blobs come from the multiplexer behind the provider, which holds
  every write in the order read, and the last one of the step is taken.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import operator
from typing import Any, Optional

import numpy as np
from tensorboard.backend.event_processing import data_provider as multiplexer_provider
from tensorboard.compat.proto import summary_pb2
from tensorboard.data import provider
from tensorboard.util import tensor_util

from tb_plugin import blob_connections, metadata, routes_common, run_listing, run_names

#: Blob reads in flight at once when a whole series is read (each is a round trip to the data server).
BLOB_READERS = 8

_MAX_STEPS = 1_000_000  # points per series asked from the data provider: every captured step
_GROUP = 256  # points whose blobs are read together on one connection of their own


@dataclasses.dataclass(frozen=True)
class Written:
    """One write of a blob series: its step, wall time and blobs."""

    step: int
    wall_time: float
    blobs: list[bytes]


class SeriesReader:
    """Lists and reads the Xray blob series of a logdir; a repeated step reads as its last write."""

    def __init__(self, data_provider, multiplexer=None, flags=None):
        """``multiplexer`` is ``TBContext.multiplexer``: TensorBoard passes it with the Python loader
        only; ``flags`` (``TBContext.flags``) give the credentials type of the data server's channel."""
        self._provider = data_provider
        self.blob_reads = blob_connections.BlobReads(data_provider, flags)
        uses_multiplexer = isinstance(data_provider, multiplexer_provider.MultiplexerDataProvider)
        self._multiplexer = multiplexer if uses_multiplexer else None
        self.listings = run_listing.ListingCache(self)

    def list(self, ctx, experiment_id: str, run: Optional[str] = None) -> dict[str, dict]:
        """``{run: {tag: BlobSequenceTimeSeries}}`` of the Xray tags whose content version we read."""
        if self._multiplexer is not None:
            runs = [run] if run is not None else sorted(self._multiplexer.Runs())
            return {name: listed for name in runs if (listed := self._listed_from_multiplexer(name)) or name == run}
        run_filter = provider.RunTagFilter(runs=[run]) if run is not None else None
        listing = self._provider.list_blob_sequences(
            ctx, experiment_id=experiment_id, plugin_name=metadata.PLUGIN_NAME, run_tag_filter=run_filter
        )
        return {
            run_name: {tag: ts for tag, ts in tags.items() if metadata.parse_plugin_content(ts.plugin_content)}
            for run_name, tags in (listing or {}).items()
        }

    def _listed_from_multiplexer(self, run: str) -> dict:
        """One run's listing on the Python loader, without the provider's look at every point's tensor
        (1.4 µs a point: 0.6 s for a run of 10,000 captures of 40 tags, on every new listing).
        ``max_step`` and ``max_wall_time`` are exact; ``max_length`` is the last point's blob count,
        which serves the same purpose here: a version that changes with the data."""
        listed = {}
        try:
            summaries = self._multiplexer.GetAccumulator(run).AllSummaryMetadata()
        except KeyError:  # no such run (any more)
            return listed
        for tag, summary in summaries.items():
            if summary.data_class != summary_pb2.DATA_CLASS_BLOB_SEQUENCE or summary.plugin_data.plugin_name != metadata.PLUGIN_NAME:
                continue
            if not metadata.parse_plugin_content(summary.plugin_data.content):
                continue
            events = _events(self._multiplexer, run, tag)
            if events:
                listed[tag] = provider.BlobSequenceTimeSeries(
                    max_step=max(map(_STEP, events)),
                    max_wall_time=max(map(_WALL_TIME, events)),
                    max_length=len(events[-1].tensor_proto.string_val),
                    plugin_content=summary.plugin_data.content,
                    description=summary.summary_description,
                    display_name=summary.display_name,
                )
        return listed

    def run_tags(self, ctx, experiment_id: str, run: str, probe: tuple[str, ...] = (), absent_ok: bool = False) -> dict:
        """The Xray tags of ``run``; 404 when it has none. With ``probe``, a listing kept while those
        tags are unchanged (:mod:`tb_plugin.run_listing`, which says what ``absent_ok`` does)."""
        if probe:
            return self.listings.run_tags(ctx, experiment_id, run, probe, absent_ok)
        tags = self.list(ctx, experiment_id, run).get(run)
        if not tags:
            raise routes_common.unknown_run(run, sorted(name for name, listed in self.list(ctx, experiment_id).items() if listed))
        return tags

    def versions(self, ctx, experiment_id: str, run: str, tags: tuple[str, ...]) -> dict[str, tuple]:
        """``{tag: version}`` of those of ``tags`` that ``run`` has: a value that changes when the tag gets
        new data. On the fast loader one small listing per tag: a data server's answer of more than about
        two tags waits ~40 ms on loopback for a delayed acknowledgement (Linux's default), one tag's
        answer does not (0.4 ms; ``bench/bench_long_run.py``). On the Python loader the last point of
        each tag (the provider's listing would walk every point there)."""
        if self._multiplexer is not None:
            found = {tag: _events(self._multiplexer, run, tag) for tag in tags}
            return {tag: (len(events), events[-1].step, events[-1].wall_time) for tag, events in found.items() if events}
        versions = {}
        for tag in tags:
            listing = self._provider.list_blob_sequences(
                ctx, experiment_id=experiment_id, plugin_name=metadata.PLUGIN_NAME, run_tag_filter=provider.RunTagFilter(runs=[run], tags=[tag])
            )
            versions.update({name: (ts.max_step, ts.max_wall_time, ts.max_length) for name, ts in (listing or {}).get(run, {}).items()})
        return versions

    def read(self, ctx, experiment_id: str, run: str, tags: list[str]) -> dict[str, list]:
        """``{tag: [BlobSequenceDatum]}``: every step of each tag, once, sorted."""
        result = self._provider.read_blob_sequences(
            ctx,
            experiment_id=experiment_id,
            plugin_name=metadata.PLUGIN_NAME,
            downsample=_MAX_STEPS,
            run_tag_filter=provider.RunTagFilter(runs=[run], tags=tags),
        )
        return (result or {}).get(run, {})

    def points(self, ctx, experiment_id: str, run: str, tags: list[str]) -> dict[str, list]:
        """``{tag: [point]}`` of every write, for an index: each point has its ``step`` and ``wall_time``.
        On the fast loader they are ``BlobSequenceDatum``s with their blob references. On the Python
        loader they are the multiplexer's own events, in the order read (blobs are read there by step,
        :meth:`last_write`): the data provider would turn every point's blob keys into strings first,
        and even a new object per point costs about a second for a run of 10,000 captures of 40 tags."""
        if self._multiplexer is None:
            return self.read(ctx, experiment_id, run, tags)
        return {tag: _events(self._multiplexer, run, tag) for tag in tags}

    def steps(self, ctx, experiment_id: str, run: str, tags: list[str]) -> dict[str, list[int]]:
        """``{tag: sorted steps}`` of each tag."""
        series = self.read(ctx, experiment_id, run, tags) if tags else {}
        return {tag: sorted({datum.step for datum in series.get(tag, [])}) for tag in tags}

    def last_write(self, ctx, experiment_id: str, run: str, tag: str, step: int) -> Optional[Written]:
        """The last write of ``tag`` at ``step``; None when the step was not recorded."""
        if self._multiplexer is not None:
            return _from_event(_last(_events(self._multiplexer, run, tag), lambda event: event.step == step))
        datum = _last(self.read(ctx, experiment_id, run, [tag]).get(tag, []), lambda datum: datum.step == step)
        return self._fetch(ctx, run, tag, datum, overlap=True)

    def latest(self, ctx, experiment_id: str, run: str, tag: str) -> Optional[Written]:
        """The point written last to ``tag`` (for the meta documents, whose step is a version
        counter that restarts with each Xray writing to the run); None when the tag is empty."""
        if self._multiplexer is not None:
            return _from_event(_last(_events(self._multiplexer, run, tag), lambda event: True))
        data = self.read(ctx, experiment_id, run, [tag]).get(tag, [])
        # The fast loader evicts every step at or after a rewritten one, so its highest step is the last write.
        return self._fetch(ctx, run, tag, max(data, key=lambda datum: datum.step) if data else None, overlap=True)

    def all_last_writes(self, ctx, experiment_id: str, run: str, tag: str) -> list[Written]:
        """The last write of every step of ``tag``, steps ascending, read in one pass."""
        return self.fetch(ctx, run, tag, self.last_points(ctx, experiment_id, run, tag))

    def last_points(self, ctx, experiment_id: str, run: str, tag: str) -> list:
        """The point of the last write of every step of ``tag``, steps ascending, blobs not read: each
        has its ``step`` and ``wall_time`` (:meth:`points`)."""
        by_step = {point.step: point for point in self.points(ctx, experiment_id, run, [tag]).get(tag, [])}  # a later write replaces
        return [by_step[step] for step in sorted(by_step)]

    def fetch(self, ctx, run: str, tag: str, points: list) -> list[Written]:
        """The writes of ``points`` (from :meth:`last_points`) with their blobs."""
        if self._multiplexer is not None:
            return [_from_event(event) for event in points]
        grouped = self._fetch_grouped(ctx, points)
        if grouped is not None:
            return grouped
        # Blob reads are round trips to the data server: a few at a time overlap their waits.
        if len(points) == 1:  # on this request's thread: on a connection of its own, with no delayed acknowledgement
            written = self._fetch(ctx, run, tag, points[0], overlap=True)
            return [written] if written is not None else []
        fetch = functools.partial(self._fetch, ctx, run, tag)
        fetched = _blob_readers().map(fetch, points)
        return [written for written in fetched if written is not None]

    def _fetch_grouped(self, ctx, points: list) -> Optional[list[Written]]:
        """The writes of ``points`` read in groups of :data:`_GROUP` points on connections of their own
        (a local data server, :mod:`tb_plugin.blob_connections`); None where that does not apply."""
        if self.blob_reads.address is None or len(points) < 2:
            return None
        written = []
        for start in range(0, len(points), _GROUP):
            group = points[start:start + _GROUP]
            blobs = self.blob_reads.read(ctx, [ref.blob_key for datum in group for ref in datum.values])
            if blobs is None:
                return None
            for datum in group:
                count = len(datum.values)
                written.append(Written(datum.step, datum.wall_time, blobs[:count]))
                blobs = blobs[count:]
        return written

    def _fetch(self, ctx, run: str, tag: str, datum, overlap: bool = False) -> Optional[Written]:
        """``datum``'s blobs; ``overlap`` (never on a blob thread): see :func:`read_blobs`."""
        if datum is None:
            return None
        blob_reads = self.blob_reads if overlap else None
        return Written(datum.step, datum.wall_time, read_blobs(self._provider, ctx, run, tag, datum.values, overlap=overlap, blob_reads=blob_reads))


def read_blobs(data_provider, ctx, run: str, tag: str, refs, *, overlap: bool = False,
               blob_reads: Optional[blob_connections.BlobReads] = None) -> list[bytes]:
    """The blobs of ``refs`` (``BlobReference``s). With ``overlap``, they are read at once: on a local
    fast-loader data server on a connection of their own (``blob_reads``, see
    :mod:`tb_plugin.blob_connections`), else on the blob threads, where each read waits about 40 ms
    for a delayed TCP acknowledgement and reads in flight together wait once (never from a blob
    thread itself)."""
    with run_names.explain_unreadable(run, tag):
        if overlap and blob_reads is not None:
            fresh = blob_reads.read(ctx, [ref.blob_key for ref in refs])
            if fresh is not None:
                return fresh
        if overlap and len(refs) > 1:
            return list(_blob_readers().map(lambda ref: data_provider.read_blob(ctx, blob_key=ref.blob_key), refs))
        return [data_provider.read_blob(ctx, blob_key=ref.blob_key) for ref in refs]


@functools.lru_cache(maxsize=1)
def _blob_readers() -> concurrent.futures.ThreadPoolExecutor:
    """Threads that read blobs from TensorBoard's data server concurrently (made once, on first use)."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=BLOB_READERS, thread_name_prefix="xray-blobs")


_STEP, _WALL_TIME = operator.attrgetter("step"), operator.attrgetter("wall_time")


def _events(multiplexer, run: str, tag: str) -> list:
    try:
        return multiplexer.Tensors(run, tag)
    except KeyError:  # the run or tag went away since it was listed
        return []


def _last(items: list, matches) -> Any:
    return next((item for item in reversed(items) if matches(item)), None)


def _from_event(event) -> Optional[Written]:
    if event is None:
        return None
    blobs = np.asarray(tensor_util.make_ndarray(event.tensor_proto), dtype=object).ravel()
    return Written(event.step, event.wall_time, list(blobs))
