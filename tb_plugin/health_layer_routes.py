"""The per-layer training-health routes (see ``http_api.md``):

* ``/health_layer?run&layer[&columns]``: every statistic of one layer (present values only, binned
  like ``/health`` with ``columns``) and its epoch aggregates;
* ``/health_vector?run&stat&layer&step``: a per-unit vector (``channel_var``, ``dead``) at the latest
  health step at or before ``step``;
* ``/prune?run``: the prune plan (``xray.prune(dry_run=True)``) written last.
"""

from __future__ import annotations

import bisect
from typing import Any

from tensorboard import errors

from tb_plugin import health_binning, health_metadata, params, responses, routes_common
from tb_plugin.health_data import HealthData, no_health


def apps(data: HealthData) -> dict:
    routes = LayerRoutes(data)
    return {"/health_layer": routes.layer_route, "/health_vector": routes.vector_route, "/prune": routes.prune_route}


def _unknown_layer(run: str, layer: str, layers: list[str], where: str) -> errors.NotFoundError:
    return routes_common.unknown_layer(run, layer, layers, f" in {where}")


class LayerRoutes:
    def __init__(self, data: HealthData):
        self._data = data

    @responses.json_route
    def layer_route(self, request):
        args = request.args
        return self.layer_impl(*routes_common.context(request), run=params.required_str(args, "run"), layer=params.required_str(args, "layer"),
                               columns=params.optional_int(args, "columns", health_binning.COLUMNS))

    @responses.json_route
    def vector_route(self, request):
        args = request.args
        return self.vector_impl(*routes_common.context(request), run=params.required_str(args, "run"), stat=params.statistic(args),
                                layer=params.required_str(args, "layer"), step=params.required_int(args, "step"))

    @responses.json_route
    def prune_route(self, request):
        return self.prune_impl(*routes_common.context(request), run=params.required_str(request.args, "run"))

    def layer_impl(self, ctx, experiment_id: str, *, run: str, layer: str, columns=None) -> dict[str, Any]:
        tags, recorded = self._data.recorded(ctx, experiment_id, run)
        if not recorded:
            raise no_health(run)
        stats, known = {}, set()
        for stat in recorded:
            matrix = self._data.matrix(ctx, experiment_id, run, stat, tags)
            known.update(matrix.layers)
            if layer not in matrix.layers:
                continue
            row = matrix.layers.index(layer)
            one = type(matrix)([layer], matrix.steps, matrix.values[row: row + 1], matrix.present[row: row + 1])
            out = health_binning.binned(one, stat, columns)
            keep = out.present[0]
            stats[stat] = {"steps": out.steps[keep].tolist(), "values": out.values[0][keep].tolist()}
        if not stats:
            raise _unknown_layer(run, layer, sorted(known), "any health statistic")
        return {"run": run, "layer": layer, "stats": stats, "epochs": self._epochs(ctx, experiment_id, run, layer, tags)}

    def _epochs(self, ctx, experiment_id: str, run: str, layer: str, tags: dict) -> dict[str, dict[str, list]]:
        if health_metadata.EPOCHS_TAG not in tags:
            return {}
        out: dict[str, dict[str, list]] = {}
        for written in self._data.reader.all_last_writes(ctx, experiment_id, run, health_metadata.EPOCHS_TAG):
            for stat, (mean, var) in health_metadata.decode_epochs(written.blobs).get(layer, {}).items():
                entry = out.setdefault(stat, {"epochs": [], "mean": [], "var": []})
                entry["epochs"].append(int(written.step))
                entry["mean"].append(mean)
                entry["var"].append(var)
        return out

    def vector_impl(self, ctx, experiment_id: str, *, run: str, stat: str, layer: str, step: int) -> dict[str, Any]:
        tag = health_metadata.vector_tag(stat)
        tags = self._data.reader.run_tags(ctx, experiment_id, run, probe=(tag,))  # kept while the vectors are unchanged
        if tag not in tags:
            written = sorted(t[len(health_metadata.VECTOR_PREFIX):] for t in tags if t.startswith(health_metadata.VECTOR_PREFIX))
            raise errors.NotFoundError(f"run {run!r} has no per-unit vectors of {stat!r}; recorded: {', '.join(written) or 'none'}")
        points = self._data.last_points(ctx, experiment_id, run, tag, tags)
        at = bisect.bisect_right([point.step for point in points], step) - 1
        if at < 0:
            shown = ", ".join(str(point.step) for point in points[:5]) + (", ..." if len(points) > 5 else "")
            raise errors.NotFoundError(f"run {run!r} has no {stat!r} vector at or before step {step}; its health steps: {shown or 'none'}")
        found = points[at].step
        written = self._data.reader.fetch(ctx, run, tag, [points[at]])
        vectors = health_metadata.decode_vectors(written[0].blobs) if written else {}
        if layer not in vectors:
            raise _unknown_layer(run, layer, list(vectors), f"the {stat!r} vectors of step {found}")
        return {"run": run, "layer": layer, "stat": stat, "step": int(found), "values": vectors[layer].tolist()}

    def prune_impl(self, ctx, experiment_id: str, *, run: str) -> dict[str, Any]:
        tags, recorded = self._data.recorded(ctx, experiment_id, run, tag=health_metadata.PRUNE_TAG)
        latest = self._data.latest_blob(ctx, experiment_id, run, health_metadata.PRUNE_TAG, tags)
        if latest is None:
            return {"run": run, "health": bool(recorded), "step": None, "entries": []}
        return {"run": run, "health": True, "step": int(latest[0]), "entries": health_metadata.decode_prune(latest[1][0])}
