"""What every route module shares: the request's TensorBoard context, and lists in error messages."""

from __future__ import annotations

from tensorboard import errors, plugin_util

from tb_plugin.close_matches import close_matches, nearest_steps

LISTED = 20  # names or steps an error message lists at most


def context(request) -> tuple:
    """``(RequestContext, experiment_id)`` of a request, the first two arguments of every ``*_impl``."""
    return plugin_util.context(request.environ), plugin_util.experiment_id(request.environ)


def listing(items: list, limit: int = LISTED) -> str:
    """``items`` for an error message, at most ``limit`` of them, then how many there are in all."""
    shown = ", ".join(str(item) for item in items[:limit])
    return shown + (f", ... ({len(items)} in all)" if len(items) > limit else "")


def steps_near(steps: list[int], step: int) -> str:
    """The recorded ``steps`` (ascending) for an error about ``step``: all of a few, else the nearest."""
    if len(steps) <= LISTED:
        return f"recorded steps: {listing(steps)}"
    near = ", ".join(map(str, nearest_steps(steps, step)))
    return f"nearest recorded steps: {near} ({len(steps)} steps from {steps[0]} to {steps[-1]})"


def unknown_layer(run: str, layer: str, layers: list[str], where: str = "") -> errors.NotFoundError:
    """The 404 of a layer name the run does not have: its close matches, else the layers it has."""
    close = close_matches(layer, layers)
    hint = f"; close matches: {', '.join(map(repr, close))}" if close else f"; recorded layers: {listing(layers)}" if layers else ""
    return errors.NotFoundError(f"run {run!r} has no layer {layer[:80]!r}{where}{hint}")


def unknown_run(run: str, runs: list[str]) -> errors.NotFoundError:
    """The 404 of a run without Xray data: the runs under it (``ranks="all"`` writes ``<run>/rank<k>``),
    else its close matches among the runs that have some, else those runs."""
    below = [name for name in runs if name.startswith(run.rstrip("/") + "/")] if run else []
    close = close_matches(run, runs)
    hint = (f"; the runs under it: {listing(below)}" if below else f"; close matches: {', '.join(map(repr, close))}" if close
            else f"; runs with Xray data: {listing(runs)}" if runs else "; no run holds Xray data yet")
    return errors.NotFoundError(f"no Xray data for run {run[:80]!r}{hint}")
