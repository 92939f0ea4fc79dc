"""Every route that serves frames (see ``http_api.md``): one frame as JSON or binary, colour ranges, GIFs.

* ``/frame?run&layer&kind&step``: one frame as JSON, its panels' values base64 float32, checked
  against the CRC the recorder stored (:func:`checked_frame`).
* ``/frame_bin?run&layer&kind&step``: one frame in the compact binary form of
  :mod:`tb_plugin.frame_transport`, found through the per-reload :class:`~tb_plugin.run_index.RunIndex`.
* ``/ranges?run&layer``: each recorded kind's value range over every step (the recorder's ``min`` and
  ``max`` statistics, :mod:`tb_plugin.frame_stats`), for a colour scale fixed over the timeline.
* ``/gif?run&layer&kind[&fps][&max_frames]``: an animated GIF of one kind over the timeline, drawn
  by :mod:`tb_plugin.gif` with Pillow in the tab's colours, on one colour scale.

Every parameter is validated with :mod:`tb_plugin.params`; errors are JSON 400/404 like every route.
"""

from __future__ import annotations

import base64
import math
from typing import Any, Optional

import numpy as np
from tensorboard import errors
from tensorboard.data import provider
from werkzeug import wrappers

from tb_plugin import frame_ranges, frame_stats, frame_transport, gif, metadata, params, responses, routes_common, run_index

_GIF_FPS = range(1, 31)
_GIF_FRAMES = range(1, 501)
_MAX_POINTS = 1_000_000


class FrameRoutes:
    """The frame routes; ``apps()`` gives them for ``get_plugin_apps``."""

    def __init__(self, data_provider, reader):
        self._provider = data_provider
        self._reader = reader
        self.index = run_index.RunIndex(data_provider, reader)
        self._ranges = frame_ranges.FrameRanges(reader)

    def apps(self) -> dict:
        return {"/frame": self.frame_route, "/frame_bin": self.frame_bin_route, "/ranges": self.ranges_route, "/gif": self.gif_route}

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

    def frame_impl(self, ctx, experiment_id: str, *, run: str, layer: str, kind: str, step: int) -> dict[str, Any]:
        written = self.index.frame(ctx, experiment_id, run, layer, kind, step)
        header, frame = checked_frame(written.blobs[0], written.blobs[1])
        description, panels = frame_transport.describe_frame(
            header, frame, run=run, layer=layer, kind=kind, step=step, wall_time=written.wall_time
        )
        for entry, panel in zip(description["panels"], panels):
            entry["data"] = base64.b64encode(panel.astype("<f4").tobytes()).decode("ascii")
        return description

    @responses.json_route
    def frame_bin_route(self, request):
        args = request.args
        body = self.frame_bin_impl(
            *routes_common.context(request),
            run=params.required_str(args, "run"),
            layer=params.required_str(args, "layer"),
            kind=params.one_of(args, "kind", metadata.KINDS),
            step=params.required_int(args, "step"),
        )
        return wrappers.Response(body, content_type="application/octet-stream", headers={"X-Content-Type-Options": "nosniff"})

    def frame_bin_impl(self, ctx, experiment_id: str, *, run: str, layer: str, kind: str, step: int) -> bytes:
        written = self.index.frame(ctx, experiment_id, run, layer, kind, step)
        header = metadata.FrameHeader.from_json(written.blobs[0])
        values = metadata.decode_array(written.blobs[1])
        return frame_transport.frame_body(header, values, run=run, layer=layer, kind=kind, step=step, wall_time=written.wall_time)

    @responses.json_route
    def ranges_route(self, request):
        args = request.args
        return self.ranges_impl(*routes_common.context(request), run=params.required_str(args, "run"), layer=params.required_str(args, "layer"))

    def ranges_impl(self, ctx, experiment_id: str, *, run: str, layer: str) -> dict:
        """``{"run", "layer", "ranges": {kind: {"min", "max"} or None}}`` over every recorded step."""
        index = self.index.frames(ctx, experiment_id, run)
        kinds = [kind for kind in metadata.KINDS if (layer, kind) in index.series]
        if not kinds:
            self.index.series_of(ctx, experiment_id, run, layer, metadata.KINDS[0])  # raises the 404 naming the layers
        listed = index.tags.get(frame_stats.FRAME_STATS_TAG)
        if listed is not None:
            version = (listed.max_step, listed.max_wall_time, listed.max_length)
            ranges = self._ranges.of(ctx, experiment_id, run, layer, kinds, version)
        else:  # written by an Xray that wrote the statistics as scalars only
            ranges = self._stat_scalars(ctx, experiment_id, run, layer, kinds)
        return {"run": run, "layer": layer, "ranges": ranges}

    def _stat_scalars(self, ctx, experiment_id: str, run: str, layer: str, kinds: list[str]) -> dict[str, Optional[dict[str, float]]]:
        tags = {metadata.stat_tag(layer, kind, stat): (kind, stat) for kind in kinds for stat in ("min", "max")}
        scalars = self._provider.read_scalars(
            ctx,
            experiment_id=experiment_id,
            plugin_name="scalars",
            downsample=_MAX_POINTS,
            run_tag_filter=provider.RunTagFilter(runs=[run], tags=list(tags)),
        )
        found = frame_ranges.Extremes(kinds)
        for tag, points in (scalars or {}).get(run, {}).items():
            kind, stat = tags[tag]
            for point in points:
                found.add(kind, *((point.value, math.nan) if stat == "min" else (math.nan, point.value)))
        return found.ranges()

    @responses.json_route
    def gif_route(self, request):
        args = request.args
        fps = params.optional_int(args, "fps", _GIF_FPS, default=4)
        max_frames = params.optional_int(args, "max_frames", _GIF_FRAMES, default=120)
        body = self.gif_impl(
            *routes_common.context(request),
            run=params.required_str(args, "run"),
            layer=params.required_str(args, "layer"),
            kind=params.one_of(args, "kind", metadata.KINDS),
            fps=fps,
            max_frames=max_frames,
        )
        name = f"{run_safe(args.get('run'))}_{run_safe(args.get('layer'))}_{args.get('kind')}.gif"
        return wrappers.Response(body, content_type="image/gif", headers={"Content-Disposition": f'attachment; filename="{name}"',
                                                                             "X-Content-Type-Options": "nosniff"})

    def gif_impl(self, ctx, experiment_id: str, *, run: str, layer: str, kind: str, fps: int, max_frames: int) -> bytes:
        """GIF bytes of ``kind`` of ``layer`` over at most ``max_frames`` steps, evenly spread."""
        found = self.index.series_of(ctx, experiment_id, run, layer, kind)
        steps = found.steps
        if len(steps) > max_frames:
            picks = np.linspace(0, len(steps) - 1, max_frames).round().astype(int)
            steps = [steps[i] for i in sorted(set(picks.tolist()))]
        frames = []
        for step in steps:
            written = self.index.read(ctx, experiment_id, run, found.tag, found.data[step])
            if written is not None:
                frames.append((metadata.FrameHeader.from_json(written.blobs[0]), metadata.decode_array(written.blobs[1])))
        if not frames:
            raise errors.NotFoundError(f"{layer!r} {kind!r} of run {run!r} has no frames left; reload")
        frames = [(header, values) for header, values in frames if values.size]  # an empty selection: nothing to draw
        if not frames:
            raise errors.NotFoundError(f"the frames of {layer!r} {kind!r} in run {run!r} hold no values (their selector chose none)")
        return gif.draw_gif(frames, fps)


def run_safe(text) -> str:
    """A file-name-safe form of a run or layer name for Content-Disposition."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in str(text or ""))[:80] or "xray"


def checked_frame(header_blob: bytes, values_blob: bytes):
    """A stored frame's header and values; a 422 when its values fail their checksum."""
    try:
        return metadata.decode_frame(header_blob, values_blob)
    except metadata.DamagedFrameError as error:
        raise responses.DamagedDataError(
            f"{error}. TensorBoard's fast loader serves records without checking their checksums; start TensorBoard "
            "with --load_fast=false to skip damaged records"
        ) from None
