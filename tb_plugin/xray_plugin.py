"""The Xray TensorBoard plugin: routes over the data the recorder wrote (see ``http_api.md``).

Each route is a pair: ``*_route(request)`` parses and validates the request, ``*_impl(ctx, ...)``
reads through TensorBoard's data provider and returns a JSON-able body, so it can be tested without
HTTP. Data is read per request (never cached here), so new captures show up on reload. Reading goes
through :class:`tb_plugin.series.SeriesReader`, which makes the last write of a repeated step win
on both of TensorBoard's loaders.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, Optional

from tensorboard import errors
from tensorboard.plugins import base_plugin

from tb_plugin import bias_routes, frame_transport, health_routes, metadata, params, responses, routes_common, series, tab_routes


def _static_root() -> Path:
    """Where the frontend files are: packaged in a wheel, else the repository's ``frontend/``."""
    packaged = Path(__file__).parent / "static"
    return packaged if packaged.is_dir() else Path(__file__).resolve().parent.parent / "frontend"


class XrayPlugin(base_plugin.TBPlugin):
    """Serves runs, layers, steps, architecture, plan and frames recorded by ``xray_tb``."""

    plugin_name = metadata.PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext):
        self._provider = context.data_provider
        self._series = series.SeriesReader(context.data_provider, context.multiplexer)
        self._tab = tab_routes.TabRoutes(context.data_provider, self._series)  # /frame_bin, /ranges, /gif
        self._static = _static_root()
        responses.hide_server_paths(context.logdir, self._static)

    def get_plugin_apps(self):
        return {
            "/runs": self.runs_route,
            "/layers": self.layers_route,
            "/architecture": self.architecture_route,
            "/plan": self.plan_route,
            "/frame": self.frame_route,
            **self._tab.apps(),
            **health_routes.apps(self._series),  # /health, /findings
            **bias_routes.apps(self._series),  # /bias/evaluations, /bias/result, /bias/series, /bias/examples
            "/static/*": self.static_route,
            "/static": self.static_route,  # an empty or cut-off file name: a JSON 404 too
        }

    def is_active(self) -> bool:
        return False  # TensorBoard activates the tab when the logdir holds data of plugin "xray"

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/static/index.js", tab_name="Xray")

    # Routes -------------------------------------------------------------------------------------

    @responses.json_route
    def runs_route(self, request):
        return self.runs_impl(*routes_common.context(request))

    @responses.json_route
    def layers_route(self, request):
        return self.layers_impl(*routes_common.context(request), params.required_str(request.args, "run"))

    @responses.json_route
    def architecture_route(self, request):
        return self.document_impl(*routes_common.context(request), params.required_str(request.args, "run"), metadata.ARCHITECTURE_TAG)

    @responses.json_route
    def plan_route(self, request):
        return self.document_impl(*routes_common.context(request), params.required_str(request.args, "run"), metadata.PLAN_TAG)

    @responses.json_route
    def frame_route(self, request):
        args = request.args
        return self.frame_impl(
            *routes_common.context(request),
            run=params.required_str(args, "run"),
            layer=params.required_str(args, "layer"),
            kind=params.one_of(args, "kind", metadata.KINDS),
            step=params.required_int(args, "step"),
        )

    @responses.json_route
    def static_route(self, request):
        relative = request.path.split("/static/", 1)[-1]
        return responses.static_file(request, self._static, relative)

    # Implementations ----------------------------------------------------------------------------

    def runs_impl(self, ctx, experiment_id: str) -> dict[str, Any]:
        listing = self._list(ctx, experiment_id)
        return {"runs": sorted(run for run, tags in listing.items() if tags)}

    def layers_impl(self, ctx, experiment_id: str, run: str) -> dict[str, Any]:
        tags = self._run_tags(ctx, experiment_id, run)
        frame_tags = _frame_tags(tags)
        steps = self._series.steps(ctx, experiment_id, run, list(frame_tags.values()))
        layers: dict[str, dict[str, list[int]]] = {}
        for (layer, kind), tag in frame_tags.items():
            layers.setdefault(layer, {})[kind] = steps[tag]
        architecture = self._document(ctx, experiment_id, run, metadata.ARCHITECTURE_TAG, tags)
        types = metadata.module_types(architecture)
        names = sorted(layers, key=metadata.layer_sort_key(architecture))
        return {
            "run": run,
            "layers": [
                {
                    "name": name,
                    "type": types.get(metadata.base_layer(name)),
                    "kinds": {k: layers[name][k] for k in metadata.KINDS if k in layers[name]},
                }
                for name in names
            ],
            "steps": sorted({step for kinds in layers.values() for steps in kinds.values() for step in steps}),
        }

    def document_impl(self, ctx, experiment_id: str, run: str, tag: str) -> Any:
        document = self._document(ctx, experiment_id, run, tag, self._run_tags(ctx, experiment_id, run))
        if document is None:
            raise errors.NotFoundError(f"run {run!r} has no {metadata.META_TAGS[tag]} record")
        return document

    def frame_impl(self, ctx, experiment_id: str, *, run: str, layer: str, kind: str, step: int) -> dict[str, Any]:
        tags = self._run_tags(ctx, experiment_id, run)
        frame_tags = _frame_tags(tags)
        tag = frame_tags.get((layer, kind))
        if tag is None:
            recorded = sorted({name for name, _ in frame_tags})
            if layer not in recorded:
                raise errors.NotFoundError(f"run {run!r} has no layer {layer!r}; recorded layers: {routes_common.listing(recorded)}")
            raise errors.NotFoundError(f"layer {layer!r} of run {run!r} has no {kind!r} frames")
        written = self._series.last_write(ctx, experiment_id, run, tag, step)
        if written is None:
            steps = self._series.steps(ctx, experiment_id, run, [tag])[tag]
            raise errors.NotFoundError(f"{layer!r} {kind!r} was not recorded at step {step}; recorded steps: {routes_common.listing(steps)}")
        header, frame = checked_frame(written.blobs[0], written.blobs[1])
        description, panels = frame_transport.describe_frame(
            header, frame, run=run, layer=layer, kind=kind, step=step, wall_time=written.wall_time
        )
        for entry, panel in zip(description["panels"], panels):
            entry["data"] = base64.b64encode(panel.astype("<f4").tobytes()).decode("ascii")
        return description

    # Data access (see tb_plugin.series) -------------------------------------------------------

    def _list(self, ctx, experiment_id: str, run: Optional[str] = None) -> dict[str, dict]:
        return self._series.list(ctx, experiment_id, run)

    def _run_tags(self, ctx, experiment_id: str, run: str) -> dict:
        return self._series.run_tags(ctx, experiment_id, run)

    def _document(self, ctx, experiment_id: str, run: str, tag: str, tags: dict) -> Any:
        """The document written last under a meta tag, or None."""
        written = self._series.latest(ctx, experiment_id, run, tag) if tag in tags else None
        return json.loads(written.blobs[0]) if written is not None else None


def _frame_tags(tags) -> dict[tuple[str, str], str]:
    """``{(layer, kind): tag}`` of the frame tags among ``tags``, layer names decoded."""
    return {parsed: tag for tag in tags if (parsed := metadata.parse_frame_tag(tag))}




class XrayLoader(base_plugin.TBLoader):
    """Loads :class:`XrayPlugin` and makes TensorBoard keep every Xray step.

    TensorBoard keeps only a reservoir sample of a custom plugin's summaries per tag (10 blobs by
    default), which would cap the scrubber. Unless the user passed ``--samples_per_plugin=xray=N``,
    we ask for all of them.
    """

    def fix_flags(self, flags):
        samples = getattr(flags, "samples_per_plugin", None)
        if isinstance(samples, dict):
            samples.setdefault(metadata.PLUGIN_NAME, 0)

    def load(self, context):
        return XrayPlugin(context)


def checked_frame(header_blob: bytes, values_blob: bytes):
    """A stored frame's header and values; a 422 when its values fail their checksum."""
    try:
        return metadata.decode_frame(header_blob, values_blob)
    except metadata.DamagedFrameError as error:
        raise responses.DamagedDataError(
            f"{error}. TensorBoard's fast loader serves records without checking their checksums; start TensorBoard "
            "with --load_fast=false to skip damaged records"
        ) from None
