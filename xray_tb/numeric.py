"""What counts as a number in a user's argument: numpy's numbers count, bools do not (Python counts
``True`` as an int). Shared by every check of the public API."""

from __future__ import annotations

import numbers
from typing import Any, Optional

import numpy as np


def is_number(value: Any) -> bool:
    """A real number (an int, a float, a numpy one), not a bool (which Python counts as an int)."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def whole(value: Any) -> Optional[int]:
    """``value`` as an int when it is a whole number (an int or a numpy integer, not a bool), else None."""
    return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else None


def plain_number(value: Any) -> Any:
    """A number as a Python int or float (numpy ones included); anything else as it is."""
    if not is_number(value):
        return value
    return whole(value) if whole(value) is not None else float(value)
