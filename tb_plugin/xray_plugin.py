"""The Xray TensorBoard plugin: routes over the data the recorder wrote (see ``http_api.md``).

Each route is a pair: ``*_route(request)`` parses and validates the request, ``*_impl(ctx, ...)``
reads through TensorBoard's data provider and returns a JSON-able body, so it can be tested without
HTTP. Data is read per request (never cached here), so new captures show up on reload.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, Optional

from tensorboard import errors, plugin_util
from tensorboard.data import provider
from tensorboard.plugins import base_plugin

from tb_plugin import layout, metadata, params, responses

_MAX_STEPS = 1_000_000  # points per series asked from the data provider: every captured step


def _static_root() -> Path:
    """Where the frontend files are: packaged in a wheel, else the repository's ``frontend/``."""
    packaged = Path(__file__).parent / "static"
    return packaged if packaged.is_dir() else Path(__file__).resolve().parent.parent / "frontend"


class XrayPlugin(base_plugin.TBPlugin):
    """Serves runs, layers, steps, architecture, plan and frames recorded by ``xray_tb``."""

    plugin_name = metadata.PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext):
        self._provider = context.data_provider
        self._static = _static_root()

    def get_plugin_apps(self):
        return {
            "/runs": self.runs_route,
            "/layers": self.layers_route,
            "/architecture": self.architecture_route,
            "/plan": self.plan_route,
            "/frame": self.frame_route,
            "/static/*": self.static_route,
        }

    def is_active(self) -> bool:
        return False  # TensorBoard activates the tab when the logdir holds data of plugin "xray"

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/static/index.js", tab_name="Xray")

    # Routes -------------------------------------------------------------------------------------

    @responses.json_route
    def runs_route(self, request):
        return self.runs_impl(*_context(request))

    @responses.json_route
    def layers_route(self, request):
        return self.layers_impl(*_context(request), params.required_str(request.args, "run"))

    @responses.json_route
    def architecture_route(self, request):
        return self.document_impl(*_context(request), params.required_str(request.args, "run"), metadata.ARCHITECTURE_TAG)

    @responses.json_route
    def plan_route(self, request):
        return self.document_impl(*_context(request), params.required_str(request.args, "run"), metadata.PLAN_TAG)

    @responses.json_route
    def frame_route(self, request):
        args = request.args
        return self.frame_impl(
            *_context(request),
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
        frame_tags = {tag: parsed for tag in tags if (parsed := metadata.parse_frame_tag(tag))}
        series = self._read(ctx, experiment_id, run, list(frame_tags)) if frame_tags else {}
        layers: dict[str, dict[str, list[int]]] = {}
        for tag, (layer, kind) in frame_tags.items():
            layers.setdefault(layer, {})[kind] = sorted({datum.step for datum in series.get(tag, [])})
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
        tag = metadata.frame_tag(layer, kind)
        if tag not in tags:
            recorded = sorted({parsed[0] for t in tags if (parsed := metadata.parse_frame_tag(t))})
            if layer not in recorded:
                raise errors.NotFoundError(f"run {run!r} has no layer {layer!r}; recorded layers: {_listing(recorded)}")
            raise errors.NotFoundError(f"layer {layer!r} of run {run!r} has no {kind!r} frames")
        data = self._read(ctx, experiment_id, run, [tag]).get(tag, [])
        datum = next((d for d in data if d.step == step), None)
        if datum is None:
            steps = sorted(d.step for d in data)
            raise errors.NotFoundError(f"{layer!r} {kind!r} was not recorded at step {step}; recorded steps: {_listing(steps)}")
        header_blob, values_blob = (self._provider.read_blob(ctx, blob_key=ref.blob_key) for ref in datum.values[:2])
        header = metadata.FrameHeader.from_json(header_blob)
        frame = metadata.decode_array(values_blob)
        panels = layout.to_panels(frame)
        low, high, nonfinite = layout.finite_range(panels)
        single = frame.ndim <= 2
        return {
            "run": run,
            "layer": layer,
            "kind": kind,
            "step": step,
            "wall_time": datum.wall_time,
            "meta": {
                "run_id": header.run_id,
                "original_shape": header.original_shape,
                "dtype": header.dtype,
                "dim": header.dim,
                "indices": header.indices,
                "batch_index": header.batch_index,
                "selector": header.selector,
            },
            "panels": [
                {
                    "index": None if single else header.indices[i],
                    "rows": int(panel.shape[0]),
                    "cols": int(panel.shape[1]),
                    "data": base64.b64encode(panel.astype("<f4").tobytes()).decode("ascii"),
                }
                for i, panel in enumerate(panels)
            ],
            "min": low,
            "max": high,
            "signed": low is not None and low < 0 < high,
            "nonfinite": nonfinite,
        }

    # Data access --------------------------------------------------------------------------------

    def _list(self, ctx, experiment_id: str, run: Optional[str] = None) -> dict[str, dict]:
        run_filter = provider.RunTagFilter(runs=[run]) if run is not None else None
        listing = self._provider.list_blob_sequences(
            ctx, experiment_id=experiment_id, plugin_name=metadata.PLUGIN_NAME, run_tag_filter=run_filter
        )
        return {
            run_name: {tag: ts for tag, ts in tags.items() if metadata.parse_plugin_content(ts.plugin_content)}
            for run_name, tags in (listing or {}).items()
        }

    def _run_tags(self, ctx, experiment_id: str, run: str) -> dict:
        tags = self._list(ctx, experiment_id, run).get(run)
        if not tags:
            raise errors.NotFoundError(f"no Xray data for run {run!r}")
        return tags

    def _read(self, ctx, experiment_id: str, run: str, tags: list[str]) -> dict[str, list]:
        result = self._provider.read_blob_sequences(
            ctx,
            experiment_id=experiment_id,
            plugin_name=metadata.PLUGIN_NAME,
            downsample=_MAX_STEPS,
            run_tag_filter=provider.RunTagFilter(runs=[run], tags=tags),
        )
        return (result or {}).get(run, {})

    def _document(self, ctx, experiment_id: str, run: str, tag: str, tags: dict) -> Any:
        if tag not in tags:
            return None
        data = self._read(ctx, experiment_id, run, [tag]).get(tag, [])
        if not data:
            return None
        latest = max(data, key=lambda datum: datum.step)
        return json.loads(self._provider.read_blob(ctx, blob_key=latest.values[0].blob_key))


def _listing(items: list, limit: int = 20) -> str:
    """``items`` for an error message, at most ``limit`` of them."""
    shown = ", ".join(str(item) for item in items[:limit])
    return shown + (f", ... ({len(items)} in all)" if len(items) > limit else "")


def _context(request) -> tuple:
    return plugin_util.context(request.environ), plugin_util.experiment_id(request.environ)


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
