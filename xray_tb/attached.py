"""One open Xray per model and run: what a second ``Xray()`` on a model that an open one still hooks does.

In a notebook, running the cell ``xray = Xray(model, ...)`` again leaves the earlier Xray open (the
notebook's output history or a variable keeps it alive): both would hook the model, cost twice and,
with the same logdir, write two event files into one run, whose steps TensorBoard would mix. So:

* the same run directory: once the new Xray is built, the earlier one is closed (what it recorded is
  flushed and kept), with a warning;
* another run directory: both record, as asked, with a warning that each costs its own hooks.

A new Xray that fails to build (a bad plan, a bad option) leaves the earlier one open and recording.
"""

from __future__ import annotations

import os
import warnings
import weakref
from typing import Any, Optional

from torch import nn

from xray_tb.user_frame import user_stacklevel

#: The open Xrays of each model (the inner module, without DDP's or torch.compile's wrapper), with their runs.
_open: "weakref.WeakKeyDictionary[nn.Module, list[tuple[weakref.ref, Optional[str]]]]" = weakref.WeakKeyDictionary()


def run_key(logdir: Optional[str]) -> Optional[str]:
    """The run directory as compared between Xrays: absolute for a local path, as given for a URL."""
    if logdir is None:
        return None
    return logdir if "://" in logdir else os.path.realpath(logdir)


def attach(model: nn.Module, xray: Any, run: Optional[str]) -> None:
    """``xray`` (built, writing to ``run``) now hooks ``model``: close or name the open ones before it."""
    still_open = [(other, where) for ref, where in _open.get(model, []) if (other := ref()) is not None and not other.closed]
    for other, where in still_open:
        if where == run:
            warnings.warn(
                f"an earlier Xray on this model was still open and recording into {where!r}: it is closed now "
                "(what it recorded is kept), so that two Xrays do not both hook the model and write one run. "
                "Call xray.close() when a run ends, or use `with Xray(...) as xray:`",
                stacklevel=user_stacklevel(),
            )
            other.close()
        else:
            warnings.warn(
                f"another Xray on this model is still open and recording into {where!r}: both hook the model, and "
                "each costs its own captures and health; close() the one you no longer need",
                stacklevel=user_stacklevel(),
            )
    kept = [(weakref.ref(other), where) for other, where in still_open if not other.closed]
    _open[model] = [*kept, (weakref.ref(xray), run)]
