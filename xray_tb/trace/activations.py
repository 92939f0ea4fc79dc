"""Which modules and functional ops are activations, and recomputing a functional one."""

from __future__ import annotations

import torch
from torch.nn import functional as F

ACTIVATION_MODULES = frozenset(
    "ReLU ReLU6 LeakyReLU PReLU RReLU ELU SELU CELU GELU SiLU Mish Sigmoid LogSigmoid Tanh Hardtanh "
    "Hardswish Hardsigmoid Softplus Softsign Softmax LogSoftmax Threshold".split()
)

#: Functional activations Xray recomputes from the traced op, with the arguments that matter.
#: Ops with tensor arguments (``prelu``) or randomness (``rrelu``) are left out: they cannot be
#: recomputed exactly, so they are not taken as a layer's activation.
FUNCTIONAL_ACTIVATIONS: dict[str, tuple] = {
    "relu": (F.relu, ()),
    "relu6": (F.relu6, ()),
    "leaky_relu": (F.leaky_relu, ("negative_slope",)),
    "elu": (F.elu, ("alpha",)),
    "selu": (F.selu, ()),
    "celu": (F.celu, ("alpha",)),
    "gelu": (F.gelu, ("approximate",)),
    "silu": (F.silu, ()),
    "mish": (F.mish, ()),
    "sigmoid": (torch.sigmoid, ()),
    "logsigmoid": (F.logsigmoid, ()),
    "tanh": (torch.tanh, ()),
    "hardtanh": (F.hardtanh, ("min_val", "max_val")),
    "hardswish": (F.hardswish, ()),
    "hardsigmoid": (F.hardsigmoid, ()),
    "softplus": (F.softplus, ("beta", "threshold")),
    "softsign": (F.softsign, ()),
    "softmax": (F.softmax, ("dim",)),
    "log_softmax": (F.log_softmax, ("dim",)),
    "threshold": (F.threshold, ("threshold", "value")),
}


#: How the tracer writes non-finite floats into JSON (see :mod:`xray_tb.trace.tracer`), back to their values.
_NON_FINITE = {"inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}


def recompute(op: str, kwargs: dict, tensor: torch.Tensor) -> torch.Tensor:
    """``op(tensor)`` with the traced arguments that matter (see :data:`FUNCTIONAL_ACTIVATIONS`);
    non-finite numbers, stored by the tracer as ``"inf"``, ``"-inf"`` and ``"nan"``, are passed as
    the floats they were."""
    function, names = FUNCTIONAL_ACTIVATIONS[op]
    arguments = traced_arguments({name: kwargs[name] for name in names if name in kwargs})
    with torch.no_grad():
        return function(tensor, **arguments)


def traced_arguments(kwargs) -> dict:
    """A traced op's arguments (a dict or its items) with non-finite numbers back as floats."""
    items = kwargs.items() if isinstance(kwargs, dict) else kwargs
    return {name: _NON_FINITE.get(value, value) if isinstance(value, str) else value for name, value in items}
