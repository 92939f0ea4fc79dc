"""The training-health routes (see ``http_api.md``):

* ``/health?run=&stat=[&columns=]``: one statistic as a layers × steps matrix, layers in dataflow
  order, binned on the server to at most ``columns`` columns (:mod:`tb_plugin.health_binning`);
* ``/findings?run=``: the findings the recorder wrote last;
* ``/health_layer``, ``/health_vector``, ``/prune``: see :mod:`tb_plugin.health_layer_routes`.

Parameters are validated like every route (:mod:`tb_plugin.params`): a missing or malformed one is a
JSON 400 naming it; a run or statistic that was not recorded is a JSON 404 saying what was.
"""

from __future__ import annotations

import base64
from typing import Any, Optional

import numpy as np
from tensorboard import errors

from tb_plugin import health_binning, health_layer_routes, health_metadata, params, responses, routes_common
from tb_plugin.close_matches import close_matches
from tb_plugin.health_data import HealthData, no_health

def apps(reader) -> dict:
    """The routes for ``get_plugin_apps``, reading through ``reader`` (a :class:`tb_plugin.series.SeriesReader`)."""
    data = HealthData(reader)
    routes = HealthRoutes(data)
    return {"/health": routes.health_route, "/findings": routes.findings_route, **health_layer_routes.apps(data)}


class HealthRoutes:
    def __init__(self, data: HealthData):
        self._data = data

    @responses.json_route
    def health_route(self, request):
        args = request.args
        return self.health_impl(*routes_common.context(request), run=params.required_str(args, "run"), stat=params.statistic(args), columns=params.optional_int(args, "columns", health_binning.COLUMNS))

    @responses.json_route
    def findings_route(self, request):
        return self.findings_impl(*routes_common.context(request), run=params.required_str(request.args, "run"))

    def health_impl(self, ctx, experiment_id: str, *, run: str, stat: str, columns: Optional[int] = None) -> dict[str, Any]:
        tags, recorded = self._data.recorded(ctx, experiment_id, run, stat)
        if stat not in recorded:
            if not recorded:
                raise no_health(run)
            close = close_matches(stat, recorded, n=3)
            hint = f"; did you mean {', '.join(map(repr, close))}? " if close else "; "
            raise errors.NotFoundError(f"run {run!r} has no health statistic {stat!r}{hint}recorded: {', '.join(recorded)}")
        matrix = self._data.matrix(ctx, experiment_id, run, stat, tags)
        out = health_binning.binned(matrix, stat, columns)
        return {
            "run": run,
            "stat": stat,
            "layers": matrix.layers,
            "steps": out.steps.tolist(),
            "last_steps": out.last_steps.tolist(),
            "binned": out.binned,
            "total_steps": len(matrix.steps),
            "shape": [len(matrix.layers), len(out.steps)],
            "dtype": "float32",
            "values": base64.b64encode(np.ascontiguousarray(out.values, dtype="<f4").tobytes()).decode("ascii"),
            "present": base64.b64encode(np.ascontiguousarray(out.present, dtype=np.uint8).tobytes()).decode("ascii"),
            "stats": recorded,
        }

    def findings_impl(self, ctx, experiment_id: str, *, run: str) -> dict[str, Any]:
        tags, recorded = self._data.recorded(ctx, experiment_id, run, tag=health_metadata.FINDINGS_TAG)
        latest = self._data.latest_blob(ctx, experiment_id, run, health_metadata.FINDINGS_TAG, tags)
        findings = [] if latest is None else health_metadata.decode_findings(latest[1][0])
        return {"run": run, "health": bool(recorded or findings), "findings": findings}
