"""What every route module shares: the request's TensorBoard context, and lists in error messages."""

from __future__ import annotations

from tensorboard import errors, plugin_util

from tb_plugin.close_matches import close_matches

LISTED = 20  # names or steps an error message lists at most


def context(request) -> tuple:
    """``(RequestContext, experiment_id)`` of a request, the first two arguments of every ``*_impl``."""
    return plugin_util.context(request.environ), plugin_util.experiment_id(request.environ)


def listing(items: list, limit: int = LISTED) -> str:
    """``items`` for an error message, at most ``limit`` of them, then how many there are in all."""
    shown = ", ".join(str(item) for item in items[:limit])
    return shown + (f", ... ({len(items)} in all)" if len(items) > limit else "")


def unknown_layer(run: str, layer: str, layers: list[str], where: str = "") -> errors.NotFoundError:
    """The 404 of a layer name the run does not have: its close matches, else the layers it has."""
    close = close_matches(layer, layers)
    hint = f"; close matches: {', '.join(map(repr, close))}" if close else f"; recorded layers: {listing(layers)}" if layers else ""
    return errors.NotFoundError(f"run {run!r} has no layer {layer[:80]!r}{where}{hint}")
