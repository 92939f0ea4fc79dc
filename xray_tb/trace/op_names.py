"""Naming the tracer's function nodes and keeping their JSON-scalar arguments (see the schema in
:mod:`xray_tb.trace.tracer`: ``op`` names and ``kwargs``)."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from functools import cache
from typing import Any

import torch
from torch.overrides import get_testing_overrides

_TENSOR_PROPERTIES = frozenset({"T", "mT", "H", "mH", "real", "imag"})
_NEVER_NODES = frozenset({"requires_grad_", "retain_grad", "detach_", "share_memory_", "pin_memory"})
_BINARY_DUNDERS = {
    "add": "add",
    "sub": "sub",
    "mul": "mul",
    "truediv": "div",
    "div": "div",
    "floordiv": "floor_divide",
    "mod": "remainder",
    "pow": "pow",
    "matmul": "matmul",
    "and": "bitwise_and",
    "or": "bitwise_or",
    "xor": "bitwise_xor",
    "lshift": "bitwise_left_shift",
    "rshift": "bitwise_right_shift",
}
_COMMUTATIVE = frozenset({"add", "mul", "bitwise_and", "bitwise_or", "bitwise_xor"})
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def op_name(func: Callable) -> tuple[str | None, bool]:
    """Short op name of ``func`` and whether it is in-place; name None when never a node."""
    name = getattr(func, "__name__", None)
    if name is None:
        return None, False
    if name == "__get__":  # property getter, e.g. Tensor.T
        prop = getattr(getattr(func, "__self__", None), "__name__", None)
        return (prop, False) if prop in _TENSOR_PROPERTIES else (None, False)
    if name in _NEVER_NODES:
        return None, False
    if name.startswith("__") and name.endswith("__"):
        return _dunder_name(name[2:-2])
    if name.endswith("_") and not name.startswith("_"):
        return name[:-1], True
    return name, False


def _dunder_name(inner: str) -> tuple[str, bool]:
    """Op name and in-place flag for a dunder method's inner name (``"iadd"`` -> add, True)."""
    if inner == "setitem":
        return "setitem", True
    if inner in _BINARY_DUNDERS:
        return _BINARY_DUNDERS[inner], False
    if inner[:1] == "i" and inner[1:] in _BINARY_DUNDERS:
        return _BINARY_DUNDERS[inner[1:]], True
    if inner[:1] == "r" and inner[1:] in _BINARY_DUNDERS:
        base = _BINARY_DUNDERS[inner[1:]]
        return (base if base in _COMMUTATIVE else "r" + base), False
    return inner, False


@cache
def _override_stubs() -> dict[Callable, Callable]:
    """torch's table of overridable functions to stubs with their Python signatures, built uncached
    (torch's own cache would hold its ~250 KB for the life of the process): see :func:`release_stubs`."""
    return getattr(get_testing_overrides, "__wrapped__", get_testing_overrides)()


def release_stubs() -> None:
    """Drop the table once a trace is over (the signatures it gave stay cached, per function)."""
    _override_stubs.cache_clear()


@cache
def _parameters(func: Callable) -> tuple[inspect.Parameter, ...]:
    """Parameters of ``func`` (from torch's override stub, else ``inspect``); () if unknown."""
    for candidate in (_override_stubs().get(func), func):
        if candidate is None:
            continue
        try:
            return tuple(inspect.signature(candidate).parameters.values())
        except (TypeError, ValueError):
            continue
    return ()


def _named_arguments(func: Callable, args: tuple, kwargs: dict) -> dict[str, Any]:
    """Arguments of a call by parameter name, defaults included; tolerant of varargs calls."""
    params = _parameters(func)
    positional = [p.name for p in params if p.kind in _POSITIONAL]
    if positional and len(args) > len(positional):  # x.view(2, -1) -> shape=(2, -1)
        args = (*args[: len(positional) - 1], tuple(args[len(positional) - 1 :]))
    named = {positional[i] if i < len(positional) else f"arg{i}": v for i, v in enumerate(args)}
    named.update(kwargs)
    for param in params:
        if param.default is not inspect.Parameter.empty:
            named.setdefault(param.name, param.default)
    return named


def _json_scalar(value: Any) -> Any:
    """``value`` as a JSON scalar (or flat list of them), or None when it is not one."""
    if isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, (tuple, list)):
        items = [_json_scalar(item) for item in value]
        if all(item is not None and not isinstance(item, list) for item in items):
            return items
    return None


def op_kwargs(func: Callable, args: tuple, kwargs: dict, inplace: bool) -> dict[str, Any]:
    """The JSON-scalar arguments of an op call, plus ``inplace: True`` for in-place variants."""
    result = {}
    for name, value in _named_arguments(func, args, kwargs).items():
        scalar = _json_scalar(value)
        if scalar is not None and not name.startswith("_"):
            result[name] = scalar
    if inplace:
        result["inplace"] = True
    return result
