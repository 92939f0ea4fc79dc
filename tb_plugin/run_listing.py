"""Each run's listing of Xray tags, kept between requests until a cheap probe says the run changed.

Listing a whole run is the costly call of most routes. On the fast loader it is a round trip to
TensorBoard's data server whose answer, for a run of a few dozen tags, waits about 40 ms for the
client's delayed TCP acknowledgement (the data server does not set ``TCP_NODELAY``); on the Python
loader it walks every point of every tag, so it grows with the number of captures. A route therefore
asks for the run's tags with a *probe*: a few tags that change whenever the data the route serves
changes (for frames, ``xray/frame_stats``, written at every capture in the same event as the
frames). Probing them is one small call on the fast loader and a look at the last point of each on
the Python loader (:meth:`tb_plugin.series.SeriesReader.versions`). When every probed tag is there
and none changed since the listing was taken, that listing is served again; otherwise the run is
listed anew. A run that lacks a probed tag (written by an older recorder) is listed on every request,
as before.

What a probe does not cover can be stale until a probed tag changes: a route that probes the health
series of one statistic sees a statistic recorded for the first time once that series grows too.
"""

from __future__ import annotations

from tb_plugin import versioned_cache

_MAX_LISTINGS = 256  # (run, probe) listings kept; the least recently used go first


class ListingCache:
    """``run_tags`` through a :class:`tb_plugin.series.SeriesReader`, reusing a listing while its probe is unchanged."""

    def __init__(self, reader):
        self._reader = reader
        self._listings = versioned_cache.VersionedCache(_MAX_LISTINGS)

    def run_tags(self, ctx, experiment_id: str, run: str, probe: tuple[str, ...], absent_ok: bool = False) -> dict:
        """The Xray tags of ``run`` (404 when it has none), from the cache while ``probe``'s tags are
        unchanged. ``absent_ok``: a listing is kept also while some probed tags are absent (one that
        appears changes the probe): for tags a healthy run may never write, such as its findings."""
        versions = self._reader.versions(ctx, experiment_id, run, probe)
        key = (experiment_id, run, probe)
        tags = self._listings.get(key, versions)
        if tags is not None:
            return tags
        tags = self._reader.run_tags(ctx, experiment_id, run)
        if absent_ok or len(versions) == len(probe):  # probed before listing: a change in between shows at the next probe
            self._listings.put(key, versions, tags)
        return tags
