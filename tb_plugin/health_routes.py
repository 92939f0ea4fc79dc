"""The training-health routes (see ``http_api.md``):

* ``/health?run=&stat=``: one statistic as a layers × steps matrix, layers in dataflow order;
* ``/findings?run=``: the findings the recorder wrote last.

Parameters are validated like every route (:mod:`tb_plugin.params`): a missing or malformed one is a
JSON 400 naming it; a run or statistic that was not recorded is a JSON 404 saying what was.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
from tensorboard import errors, plugin_util

from tb_plugin import health_metadata, params, responses


def apps(reader) -> dict:
    """The routes for ``get_plugin_apps``, reading through ``reader`` (a :class:`tb_plugin.series.SeriesReader`)."""
    routes = HealthRoutes(reader)
    return {"/health": routes.health_route, "/findings": routes.findings_route}


def stat_param(args) -> str:
    """The ``stat`` parameter: a statistic name (letters, digits, ``_ . - [ ]``)."""
    stat = params.required_str(args, "stat")
    if not health_metadata.STAT_NAME.fullmatch(stat):
        raise errors.InvalidArgumentError(
            f"'stat' must be a statistic name such as {', '.join(health_metadata.BUILTIN_STATS[:3])} (letters, digits, _ . - [ ]); got {stat[:40]!r}")
    return stat


class HealthRoutes:
    def __init__(self, reader):
        self._reader = reader

    @responses.json_route
    def health_route(self, request):
        args = request.args
        return self.health_impl(*_context(request), run=params.required_str(args, "run"), stat=stat_param(args))

    @responses.json_route
    def findings_route(self, request):
        return self.findings_impl(*_context(request), run=params.required_str(request.args, "run"))

    def health_impl(self, ctx, experiment_id: str, *, run: str, stat: str) -> dict[str, Any]:
        tags = self._reader.run_tags(ctx, experiment_id, run)
        recorded = sorted(s for tag in tags if (s := health_metadata.parse_series_tag(tag)))
        if stat not in recorded:
            if not recorded:
                raise errors.NotFoundError(f"run {run!r} has no training-health statistics (recorded with health=False?)")
            raise errors.NotFoundError(f"run {run!r} has no health statistic {stat!r}; recorded: {', '.join(recorded)}")
        tag = health_metadata.series_tag(stat)
        data = self._reader.read(ctx, experiment_id, run, [tag]).get(tag, [])
        blocks = []
        for datum in sorted(data, key=lambda d: d.step):
            written = self._reader.last_write(ctx, experiment_id, run, tag, datum.step)
            if written is not None:
                blocks.append(health_metadata.decode_series(written.blobs))
        layers, steps, values = health_metadata.merge_blocks(blocks)
        return {
            "run": run,
            "stat": stat,
            "layers": layers,
            "steps": [int(step) for step in steps],
            "shape": [len(layers), len(steps)],
            "dtype": "float32",
            "values": base64.b64encode(np.ascontiguousarray(values, dtype="<f4").tobytes()).decode("ascii"),
            "stats": recorded,
        }

    def findings_impl(self, ctx, experiment_id: str, *, run: str) -> dict[str, Any]:
        tags = self._reader.run_tags(ctx, experiment_id, run)
        if health_metadata.FINDINGS_TAG not in tags:
            return {"run": run, "findings": []}
        written = self._reader.latest(ctx, experiment_id, run, health_metadata.FINDINGS_TAG)
        return {"run": run, "findings": [] if written is None else health_metadata.decode_findings(written.blobs[0])}


def _context(request) -> tuple:
    return plugin_util.context(request.environ), plugin_util.experiment_id(request.environ)
