"""The Xray TensorBoard plugin: routes over the data the recorder wrote (see ``http_api.md``).

Each route is a pair: ``*_route(request)`` parses and validates the request, ``*_impl(ctx, ...)``
reads through TensorBoard's data provider and returns a JSON-able body, so it can be tested without
HTTP. What is derived from a run (its listing, frame index, documents, the /layers body) is kept
only under the version of the data it came from, checked at each request by a cheap probe
(:mod:`tb_plugin.run_listing`), so new captures show up on reload. Reading goes
through :class:`tb_plugin.series.SeriesReader`, which makes the last write of a repeated step win
on both of TensorBoard's loaders.

This module serves runs, layers, documents and the frontend's files, and gathers the other routes:
the frames' (:mod:`tb_plugin.frame_routes`), health's (:mod:`tb_plugin.health_routes`) and bias'
(:mod:`tb_plugin.bias_routes`). Shared request helpers are in :mod:`tb_plugin.routes_common` and
:mod:`tb_plugin.params`. No module of the plugin imports torch or ``xray_tb``: the recorder imports
the contract modules (``metadata``, ``health_metadata``, ``bias_metadata``), never the other way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from tensorboard import errors
from tensorboard.plugins import base_plugin

from tb_plugin import bias_routes, frame_routes, health_routes, metadata, params, responses, routes_common, series, versioned_cache
from tb_plugin.close_matches import close_matches


_DOCUMENTS = 512  # meta documents kept (runs × tags); the least recently used go first


def _static_root() -> Path:
    """Where the frontend files are: packaged in a wheel, else the repository's ``frontend/``."""
    packaged = Path(__file__).parent / "static"
    return packaged if packaged.is_dir() else Path(__file__).resolve().parent.parent / "frontend"


class XrayPlugin(base_plugin.TBPlugin):
    """Serves what ``xray_tb`` recorded: runs, layers, steps, architecture, plan, and the other modules' routes."""

    plugin_name = metadata.PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext):
        self._provider = context.data_provider
        self._series = series.SeriesReader(context.data_provider, context.multiplexer, context.flags)
        self._frames = frame_routes.FrameRoutes(context.data_provider, self._series)
        self._documents = versioned_cache.VersionedCache(_DOCUMENTS)  # (experiment, run, tag): (document,)
        self._layers = versioned_cache.VersionedCache(_DOCUMENTS)  # (experiment, run): [/layers body, gzipped]
        self._static = _static_root()
        responses.hide_server_paths(context.logdir, self._static)

    def get_plugin_apps(self):
        return {
            "/runs": self.runs_route,
            "/layers": self.layers_route,
            "/architecture": self.architecture_route,
            "/plan": self.plan_route,
            **self._frames.apps(),  # /frame, /frame_bin, /ranges, /gif
            **health_routes.apps(self._series),  # /health, /findings
            **bias_routes.apps(self._series),  # /bias/evaluations, /bias/result, /bias/series, /bias/examples
            "/static/*": self.static_route,
            "/static": self.static_route,  # an empty or cut-off file name: a JSON 404 too
            "/*": self.unknown_route,  # checked after every other route: a JSON 404 naming close routes
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
        entry = self._layers_entry(*routes_common.context(request), params.required_str(request.args, "run"))
        if entry[1] is None:  # encoded once per listing: a long run's body lists every step of every layer
            entry[1] = responses.gzipped_json(entry[0])
        return responses.precompressed_json(request, entry[1])

    @responses.json_route
    def architecture_route(self, request):
        return self.document_impl(*routes_common.context(request), params.required_str(request.args, "run"), metadata.ARCHITECTURE_TAG)

    @responses.json_route
    def plan_route(self, request):
        return self.document_impl(*routes_common.context(request), params.required_str(request.args, "run"), metadata.PLAN_TAG)

    @responses.json_route
    def static_route(self, request):
        relative = request.path.split("/static/", 1)[-1]
        return responses.static_file(request, self._static, relative)

    @responses.json_route
    def unknown_route(self, request):
        route = "/" + request.path.split(f"/{metadata.PLUGIN_NAME}/", 1)[-1]
        known = sorted(path for path in self.get_plugin_apps() if "*" not in path)
        close = close_matches(route, known, n=3)
        hint = f"did you mean {', '.join(map(repr, close))}? " if close else ""
        raise errors.NotFoundError(f"the xray plugin has no route {route[:80]!r}; {hint}routes: {', '.join(known)}")

    # Implementations ----------------------------------------------------------------------------

    def runs_impl(self, ctx, experiment_id: str) -> dict[str, Any]:
        listing = self._list(ctx, experiment_id)
        return {"runs": sorted(run for run, tags in listing.items() if tags)}

    def layers_impl(self, ctx, experiment_id: str, run: str) -> dict[str, Any]:
        return self._layers_entry(ctx, experiment_id, run)[0]

    def _layers_entry(self, ctx, experiment_id: str, run: str) -> list:
        """``[body, its gzipped JSON (None until a request encodes it)]``, kept under the listing the
        run's frame index was built from (the architecture's included)."""
        index = self._frames.index.frames(ctx, experiment_id, run)  # kept while the run's frames are unchanged
        entry = self._layers.get((experiment_id, run), index.fingerprint)
        if entry is None:
            entry = [self._layers_body(ctx, experiment_id, run, index), None]
            self._layers.put((experiment_id, run), index.fingerprint, entry)
        return entry

    def _layers_body(self, ctx, experiment_id: str, run: str, index) -> dict[str, Any]:
        layers: dict[str, dict[str, list[int]]] = {}
        for (layer, kind), found in index.series.items():
            layers.setdefault(layer, {})[kind] = found.steps
        architecture = self._document(ctx, experiment_id, run, metadata.ARCHITECTURE_TAG, index.tags)
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

    # Data access (see tb_plugin.series) -------------------------------------------------------

    def _list(self, ctx, experiment_id: str, run: Optional[str] = None) -> dict[str, dict]:
        return self._series.list(ctx, experiment_id, run)

    def _run_tags(self, ctx, experiment_id: str, run: str) -> dict:
        return self._series.run_tags(ctx, experiment_id, run)

    def _document(self, ctx, experiment_id: str, run: str, tag: str, tags: dict) -> Any:
        """The document written last under a meta tag, or None; kept while the tag's listing is unchanged."""
        if tag not in tags:
            return None
        listed = tags[tag]
        version, key = (listed.max_step, listed.max_wall_time, listed.max_length), (experiment_id, run, tag)
        known = self._documents.get(key, version)
        if known is not None:
            return known[0]
        written = self._series.latest(ctx, experiment_id, run, tag)
        document = json.loads(written.blobs[0]) if written is not None else None
        self._documents.put(key, version, (document,))
        return document


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
