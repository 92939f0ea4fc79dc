"""The routes the bias view reads: Attention-IoU evaluations written by ``xray.attention_iou``.

Like the plugin's other routes, each is a pair: ``*_route(request)`` validates the parameters (400
naming the parameter), ``*_impl(ctx, experiment_id, ...)`` reads through
:class:`tb_plugin.series.SeriesReader` (a repeated step reads as its last write, on both loaders)
and answers 404 for a run, evaluation or step that is not there. See ``http_api.md``.
"""

from __future__ import annotations

import base64
from typing import Any, Optional

import numpy as np
from tensorboard import errors

from tb_plugin import bias_metadata, params, responses, routes_common
from tb_plugin.series import SeriesReader


def apps(series: SeriesReader) -> dict[str, Any]:
    """``{route: WSGI app}`` of the bias routes, for ``XrayPlugin.get_plugin_apps``."""
    return BiasRoutes(series).apps()


class BiasRoutes:
    """Serves the bias evaluations of a logdir."""

    def __init__(self, series: SeriesReader):
        self._series = series

    def apps(self) -> dict[str, Any]:
        return {
            "/bias/evaluations": self.evaluations_route,
            "/bias/result": self.result_route,
            "/bias/series": self.series_route,
            "/bias/examples": self.examples_route,
        }

    # Routes -------------------------------------------------------------------------------------

    @responses.json_route
    def evaluations_route(self, request):
        return self.evaluations_impl(*routes_common.context(request), params.required_str(request.args, "run"))

    @responses.json_route
    def result_route(self, request):
        args = request.args
        return self.result_impl(
            *routes_common.context(request),
            params.required_str(args, "run"),
            params.required_str(args, "evaluation"),
            params.required_int(args, "step"),
        )

    @responses.json_route
    def series_route(self, request):
        args = request.args
        return self.series_impl(
            *routes_common.context(request), params.required_str(args, "run"), params.required_str(args, "evaluation")
        )

    @responses.json_route
    def examples_route(self, request):
        args = request.args
        return self.examples_impl(
            *routes_common.context(request),
            params.required_str(args, "run"),
            params.required_str(args, "evaluation"),
            params.required_int(args, "step"),
        )

    # Implementations ----------------------------------------------------------------------------

    def evaluations_impl(self, ctx, experiment_id: str, run: str) -> dict[str, Any]:
        """Every evaluation of ``run`` with the steps it was written at (empty when none), and the steps
        whose examples are current (read in one pass over the points: their steps and wall times, no blob)."""
        tags = self._bias_tags(ctx, experiment_id, run)
        all_tags = [tag for parts in tags.values() for tag in parts.values()]
        points = self._series.points(ctx, experiment_id, run, all_tags) if all_tags else {}
        walls = {tag: _last_walls(points.get(tag, [])) for tag in all_tags}
        evaluations = []
        for name in sorted(tags):
            parts = tags[name]
            if "result" not in parts:
                continue
            results, examples = walls[parts["result"]], walls.get(parts.get("examples"), {})
            evaluations.append({"name": name, "steps": sorted(results),
                                "example_steps": sorted(step for step, wall in examples.items() if _current(wall, results.get(step)))})
        return {"run": run, "evaluations": evaluations}

    def result_impl(self, ctx, experiment_id: str, run: str, evaluation: str, step: int) -> dict[str, Any]:
        """The result document of one evaluation at one step, with its step and wall time."""
        tag = self._tag(ctx, experiment_id, run, evaluation, "result")
        written = self._written(ctx, experiment_id, run, evaluation, tag, step)
        return dict(bias_metadata.decode_result(written.blobs), step=written.step, wall_time=written.wall_time)

    def series_impl(self, ctx, experiment_id: str, run: str, evaluation: str) -> dict[str, Any]:
        """Every score of one evaluation over its steps: per subgroup, the means, chance levels and
        counts, one per step (null where a step lacks the score)."""
        tag = self._tag(ctx, experiment_id, run, evaluation, "result")
        steps = self._series.steps(ctx, experiment_id, run, [tag])[tag]
        documents = []
        for step in steps:
            written = self._series.last_write(ctx, experiment_id, run, tag, step)
            if written is not None:
                documents.append((step, bias_metadata.decode_result(written.blobs)))
        scores: dict[str, dict] = {}
        for position, (_, document) in enumerate(documents):
            for score in document.get("scores", []):
                entry = scores.setdefault(
                    score["label"],
                    {"kind": score["kind"], "region": score.get("region"), "label": score["label"], "subgroups": {}},
                )
                for subgroup, stats in score["subgroups"].items():
                    series = entry["subgroups"].setdefault(
                        subgroup, {key: [None] * len(documents) for key in ("mean", "chance", "count")}
                    )
                    for key in series:
                        series[key][position] = stats.get(key)
        latest = documents[-1][1] if documents else {}
        return {
            "run": run,
            "evaluation": evaluation,
            "steps": [step for step, _ in documents],
            "target": latest.get("target"),
            "protected": latest.get("protected"),
            "scores": list(scores.values()),
        }

    def examples_impl(self, ctx, experiment_id: str, run: str, evaluation: str, step: int) -> dict[str, Any]:
        """The example images of one evaluation at one step, with their maps (float32, [0, 1])."""
        tag = self._tag(ctx, experiment_id, run, evaluation, "examples")
        written = self._written(ctx, experiment_id, run, evaluation, tag, step)
        result_tag = self._tag(ctx, experiment_id, run, evaluation, "result")
        result_wall = _last_walls(self._series.points(ctx, experiment_id, run, [result_tag]).get(result_tag, [])).get(step)
        if not _current(written.wall_time, result_wall):  # the step's last write had no examples
            raise errors.NotFoundError(f"bias evaluation {evaluation!r} of run {run!r} was written again at step {step} "
                                       "without examples (examples=0): its earlier examples are replaced")
        header, images, maps = bias_metadata.decode_examples(written.blobs)
        labels, subgroups, indices = header.get("labels", []), header.get("subgroups", []), header.get("indices", [])
        examples = []
        for i in range(images.shape[0]):
            examples.append(
                {
                    "index": indices[i] if i < len(indices) else i,
                    "labels": labels[i] if i < len(labels) else None,
                    "subgroup": subgroups[i] if i < len(subgroups) else None,
                    "rows": int(images.shape[1]),
                    "cols": int(images.shape[2]),
                    "image": base64.b64encode(np.ascontiguousarray(images[i], dtype=np.uint8).tobytes()).decode(
                        "ascii"
                    ),
                    "maps": [
                        base64.b64encode(maps[i, m].astype("<f4").tobytes()).decode("ascii")
                        for m in range(maps.shape[1])
                    ],
                }
            )
        return {
            "run": run,
            "evaluation": evaluation,
            "step": written.step,
            "map_names": header.get("map_names", []),
            "attributes": header.get("attributes", []),
            "examples": examples,
        }

    # Data access --------------------------------------------------------------------------------

    def _bias_tags(self, ctx, experiment_id: str, run: str) -> dict[str, dict[str, str]]:
        """``{evaluation: {part: tag}}`` of ``run``; 404 when the run has no Xray data."""
        found: dict[str, dict[str, str]] = {}
        for tag in self._series.run_tags(ctx, experiment_id, run):
            parsed = bias_metadata.parse_tag(tag)
            if parsed is not None:
                found.setdefault(parsed[0], {})[parsed[1]] = tag
        return found

    def _tag(self, ctx, experiment_id: str, run: str, evaluation: str, part: str) -> str:
        tags = self._bias_tags(ctx, experiment_id, run)
        if evaluation not in tags or "result" not in tags[evaluation]:
            names = sorted(name for name, parts in tags.items() if "result" in parts)
            listed = routes_common.listing(names) if names else "none (run xray.attention_iou(...) to write one)"
            raise errors.NotFoundError(f"run {run!r} has no bias evaluation {evaluation!r}; evaluations: {listed}")
        if part not in tags[evaluation]:
            raise errors.NotFoundError(f"bias evaluation {evaluation!r} of run {run!r} has no {part}")
        return tags[evaluation][part]

    def _written(self, ctx, experiment_id: str, run: str, evaluation: str, tag: str, step: int):
        written = self._series.last_write(ctx, experiment_id, run, tag, step)
        if written is None:
            steps = self._series.steps(ctx, experiment_id, run, [tag])[tag]
            raise errors.NotFoundError(
                f"bias evaluation {evaluation!r} of run {run!r} was not written at step {step}; "
                f"steps: {routes_common.listing(steps)}"
            )
        return written


def _last_walls(points: list) -> dict[int, float]:
    """``{step: wall time of its last write}`` of one tag's points (in write order: a later write replaces)."""
    return {point.step: point.wall_time for point in points}


def _current(examples_wall: float, result_wall: Optional[float]) -> bool:
    """Whether examples written at ``examples_wall`` belong to the step's last result (one event holds both;
    a later write of the step without examples makes them stale)."""
    return result_wall is None or examples_wall >= result_wall
