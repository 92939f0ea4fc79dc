"""What every route module shares: the request's TensorBoard context, and lists in error messages."""

from __future__ import annotations

from tensorboard import plugin_util

LISTED = 20  # names or steps an error message lists at most


def context(request) -> tuple:
    """``(RequestContext, experiment_id)`` of a request, the first two arguments of every ``*_impl``."""
    return plugin_util.context(request.environ), plugin_util.experiment_id(request.environ)


def listing(items: list, limit: int = LISTED) -> str:
    """``items`` for an error message, at most ``limit`` of them, then how many there are in all."""
    shown = ", ".join(str(item) for item in items[:limit])
    return shown + (f", ... ({len(items)} in all)" if len(items) > limit else "")
