"""Parsing and validating request parameters; every failure is a 400 that names the parameter."""

from __future__ import annotations

import re
from typing import Iterable, Optional

from tensorboard import errors

from tb_plugin import health_metadata

_INTEGER = re.compile(r"-?[0-9]{1,40}")  # longer ones are answered as out of range below
_INT64 = range(-(2**63), 2**63)  # TensorBoard's steps are int64


def required_str(args, name: str) -> str:
    """The non-empty string parameter ``name``."""
    value = args.get(name)
    if value is None or value == "":
        raise errors.InvalidArgumentError(f"missing required parameter {name!r}")
    return value


def required_int(args, name: str) -> int:
    """The integer parameter ``name``: decimal digits with an optional minus sign, in int64 range."""
    raw = required_str(args, name)
    if not _INTEGER.fullmatch(raw):
        raise errors.InvalidArgumentError(f"{name!r} must be an integer, got {raw[:40]!r}")
    if int(raw) not in _INT64:
        raise errors.InvalidArgumentError(f"{name!r} must be an integer from -2**63 to 2**63 - 1 (TensorBoard's int64 steps), got {raw}")
    return int(raw)


def one_of(args, name: str, choices: Iterable[str]) -> str:
    """The parameter ``name``, which must be one of ``choices``."""
    value = required_str(args, name)
    choices = tuple(choices)
    if value not in choices:
        raise errors.InvalidArgumentError(f"{name!r} must be one of {', '.join(choices)}; got {value!r}")
    return value


def optional_int(args, name: str, allowed: range, default: Optional[int] = None) -> Optional[int]:
    """The optional integer parameter ``name``, which must lie in ``allowed``; ``default`` when missing or empty."""
    raw = args.get(name)
    if raw in (None, ""):
        return default
    if not _INTEGER.fullmatch(raw) or int(raw) not in allowed:
        raise errors.InvalidArgumentError(f"{name!r} must be an integer from {allowed.start} to {allowed.stop - 1}, got {raw[:40]!r}")
    return int(raw)


def statistic(args, name: str = "stat") -> str:
    """A health statistic's name (letters, digits, ``_ . - [ ]``; :data:`tb_plugin.health_metadata.STAT_NAME`)."""
    stat = required_str(args, name)
    if not health_metadata.STAT_NAME.fullmatch(stat):
        raise errors.InvalidArgumentError(
            f"{name!r} must be a statistic name such as {', '.join(health_metadata.BUILTIN_STATS[:3])} (letters, digits, _ . - [ ]); got {stat[:40]!r}")
    return stat
