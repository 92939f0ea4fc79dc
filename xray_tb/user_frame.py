"""Where a warning points: at the user's line, not at Xray's own or torch's.

``warnings.warn(..., stacklevel=user_stacklevel())`` names the first frame outside ``xray_tb`` and
``torch`` (a hook that torch calls from ``optimizer.step()`` points at the user's ``step()`` call), so
a warning shows the line of the user's script that led to it, whatever the depth of the call inside.
"""

from __future__ import annotations

import os
import sys

import torch

_INTERNAL = tuple(os.path.dirname(os.path.abspath(module.__file__)) + os.sep for module in (sys.modules[__package__], torch))


def user_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` called by the caller of this function."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(_INTERNAL):
        frame, level = frame.f_back, level + 1
    return level
