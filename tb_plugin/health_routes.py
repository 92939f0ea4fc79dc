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

from tb_plugin import health_binning, health_metadata, params, responses, routes_common
from tb_plugin.health_data import HealthData, no_health

MAX_COLUMNS = 20000


def apps(reader) -> dict:
    """The routes for ``get_plugin_apps``, reading through ``reader`` (a :class:`tb_plugin.series.SeriesReader`)."""
    from tb_plugin import health_layer_routes  # it uses this module's parameters

    data = HealthData(reader)
    routes = HealthRoutes(data)
    return {"/health": routes.health_route, "/findings": routes.findings_route, **health_layer_routes.apps(data)}


def stat_param(args, name: str = "stat") -> str:
    """The ``stat`` parameter: a statistic name (letters, digits, ``_ . - [ ]``)."""
    stat = params.required_str(args, name)
    if not health_metadata.STAT_NAME.fullmatch(stat):
        raise errors.InvalidArgumentError(
            f"{name!r} must be a statistic name such as {', '.join(health_metadata.BUILTIN_STATS[:3])} (letters, digits, _ . - [ ]); got {stat[:40]!r}")
    return stat


def columns_param(args) -> Optional[int]:
    """The optional ``columns`` parameter: an integer from 1 to :data:`MAX_COLUMNS`."""
    if args.get("columns") in (None, ""):
        return None
    raw = args.get("columns")
    if not params._INTEGER.fullmatch(raw) or not 1 <= int(raw) <= MAX_COLUMNS:
        raise errors.InvalidArgumentError(f"'columns' must be an integer from 1 to {MAX_COLUMNS}, got {raw[:40]!r}")
    return int(raw)


def binned(matrix, stat: str, columns: Optional[int]) -> health_binning.Binned:
    """``matrix`` binned to ``columns`` (unchanged when None or when it fits)."""
    signed = stat in health_metadata.SIGNED_STATS
    return health_binning.bin_matrix(matrix.steps, matrix.values, matrix.present, columns or max(len(matrix.steps), 1), signed)


class HealthRoutes:
    def __init__(self, data: HealthData):
        self._data = data

    @responses.json_route
    def health_route(self, request):
        args = request.args
        return self.health_impl(*routes_common.context(request), run=params.required_str(args, "run"), stat=stat_param(args), columns=columns_param(args))

    @responses.json_route
    def findings_route(self, request):
        return self.findings_impl(*routes_common.context(request), run=params.required_str(request.args, "run"))

    def health_impl(self, ctx, experiment_id: str, *, run: str, stat: str, columns: Optional[int] = None) -> dict[str, Any]:
        tags, recorded = self._data.recorded(ctx, experiment_id, run)
        if stat not in recorded:
            if not recorded:
                raise no_health(run)
            raise errors.NotFoundError(f"run {run!r} has no health statistic {stat!r}; recorded: {', '.join(recorded)}")
        matrix = self._data.matrix(ctx, experiment_id, run, stat, tags)
        out = binned(matrix, stat, columns)
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
        tags = self._data.reader.run_tags(ctx, experiment_id, run)
        latest = self._data.latest_blob(ctx, experiment_id, run, health_metadata.FINDINGS_TAG, tags)
        return {"run": run, "findings": [] if latest is None else health_metadata.decode_findings(latest[1][0])}
