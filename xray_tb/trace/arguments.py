"""Checking what a user passes to :class:`~xray_tb.Xray`: every bad argument is refused at the call that
got it, with a message that names the parameter and the fix, before any state changes."""

from __future__ import annotations

import operator
import os
import sys
import warnings
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
import torch
from torch import nn

from xray_tb import distributed, sharding
from xray_tb.capture.selectors import Selector
from xray_tb.numeric import is_number
from xray_tb.trace.state import preserved
from xray_tb.trace.tracer import trace
from xray_tb.user_frame import user_stacklevel

#: TensorBoard files steps as int64.
STEP_RANGE = (-(2**63), 2**63 - 1)
_STORAGE_DTYPES = {"float32": np.float32, "float16": np.float16}


def whole_number(value: Any, name: str) -> int:
    """``value`` as an int when it is a whole number type (int, numpy or 0-d torch integer), else a
    TypeError: ``7.9``, ``"7"`` and ``True`` are refused, never rounded or coerced."""
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, torch.Tensor) and value.dtype == torch.bool):
        raise TypeError(f"{name} must be a whole number, got the bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be a whole number (an int), got {type(value).__name__} {value!r}") from None


def step(value: Any) -> int:
    """A training step: a whole number in TensorBoard's int64 range."""
    number = whole_number(value, "step")
    low, high = STEP_RANGE
    if not low <= number <= high:
        raise ValueError(f"step must fit TensorBoard's int64 steps ({low} to {high}), got {number}")
    if abs(number) > EXACT_IN_BROWSER and not _warned_inexact:
        _warn_inexact(number)
    return number


#: The largest step a browser holds exactly (JavaScript numbers are float64).
EXACT_IN_BROWSER = 2**53
_warned_inexact = False


def _warn_inexact(number: int) -> None:
    global _warned_inexact
    _warned_inexact = True
    warnings.warn(
        f"step {number} is beyond 2**53: it is recorded, and open_run() reads it, but the Xray tab (and TensorBoard's "
        "own tabs) hold steps as JavaScript numbers and cannot show it exactly; number steps below 2**53",
        stacklevel=user_stacklevel(),
    )


def logdir(value: Any) -> Optional[str]:
    """``logdir=`` as a path string (str or os.PathLike)."""
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"logdir= is the run directory, a str or path such as 'runs/exp1'; got {type(value).__name__} {value!r}")
    path = os.fspath(value)
    if not isinstance(path, str) or not path:
        raise ValueError(f"logdir= must be a non-empty directory path, got {value!r}")
    if "://" not in path:  # a local folder: no part of it may be a file
        part = path
        while part and not os.path.exists(part) and os.path.dirname(part) != part:
            part = os.path.dirname(part)
        if part and os.path.exists(part) and not os.path.isdir(part):
            raise ValueError(f"logdir= is the run's folder, but {part!r} is a file: give a folder path such as 'runs/exp1'")
    return path


def destination(logdir_value: Any, writer_value: Any) -> tuple[Optional[str], Any]:
    """``(logdir, writer)``, exactly one of them given."""
    where, writer_ = logdir(logdir_value), writer(writer_value)
    if where is not None and writer_ is not None:
        raise ValueError("give either logdir= or writer=, not both")
    if where is None and writer_ is None:
        raise ValueError("give logdir='runs/<name>' or writer=SummaryWriter(...) so Xray knows where to write")
    return where, writer_


def wait_seconds(value: Any, name: str = "timeout") -> float:
    """A number of seconds to wait, 0 or more (``flush(timeout=...)``, ``close(timeout=...)``)."""
    if not is_number(value) or not value >= 0:
        raise ValueError(f"{name}= is how many seconds to wait for a remote run's uploads, a number >= 0; got {value!r}")
    return float(value)


def flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}= must be True or False, got {type(value).__name__} {value!r}")
    return value


def budget_bytes(value: Any) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__") or operator.index(value) <= 0:
        raise ValueError(f"budget_bytes must be a positive number of bytes (a whole number), got {value!r}")
    return operator.index(value)


def loss_fn(value: Any) -> Optional[Callable]:
    if value is not None and not callable(value):
        raise TypeError(f"loss_fn= is called as loss_fn(output, y) on the probe batch; got {type(value).__name__} {value!r}")
    return value


def writer(value: Any) -> Any:
    """``writer=``: a ``torch.utils.tensorboard.SummaryWriter``."""
    if value is not None and not (hasattr(value, "_get_file_writer") and hasattr(value, "log_dir")):
        hint = f"; to write into the folder {value!r}, pass logdir={value!r}" if isinstance(value, (str, os.PathLike)) else ""
        raise TypeError(f"writer= expects a torch.utils.tensorboard.SummaryWriter, got {type(value).__name__}{hint}")
    return value


def optimizer(value: Any) -> Optional[torch.optim.Optimizer]:
    """``optimizer=``: the torch optimizer whose steps count as Xray's steps."""
    if value is not None and not isinstance(value, torch.optim.Optimizer):
        raise TypeError(
            f"optimizer= expects the torch.optim.Optimizer that trains the model (e.g. torch.optim.SGD(model.parameters(), "
            f"lr=0.1)), got {type(value).__name__} {value!r}"
        )
    return value


def selector(value: Any) -> Optional[Selector]:
    """``selector=``: an instance of a :class:`~xray_tb.Selector` subclass."""
    if value is None or isinstance(value, Selector):
        return value
    hint = " (a class: add the parentheses)" if isinstance(value, type) and issubclass(value, Selector) else ""
    raise TypeError(
        f"selector= expects a xray_tb.Selector instance such as RandomFilters(), FirstN() or KeepAll(), "
        f"got {type(value).__name__} {value!r}{hint}"
    )


def model_and_modules(value: Any) -> tuple[nn.Module, dict[str, nn.Module]]:
    """The module Xray looks into, and its ``dict(named_modules())`` (one walk, which Xray's trace, first
    plan and training health share). The module is ``value``, an ``nn.Module`` whose parameters and
    buffers hold values (not on the meta device), with its wrappers taken off: a ``torch.compile``d
    module's original module and a ``DistributedDataParallel``'s module (in either order), so layer
    names are the model's own. Tracing and probes then run eagerly and without DDP's collectives; the
    training loop's compiled or DDP forward still runs the hooked modules."""
    if not isinstance(value, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(value).__name__}")
    value = wrappers(value)[-1]
    modules = dict(value.named_modules())
    if not any(t is not None and t.is_meta for m in modules.values() for t in (*m._parameters.values(), *m._buffers.values())):
        return value, modules  # the modules' own tensors (named_parameters() and named_buffers() walk twice, with names)
    meta = next(name for name, t in (*value.named_parameters(), *value.named_buffers()) if t.is_meta)
    raise ValueError(
        f"the model's {meta!r} is on the 'meta' device and holds no values; materialise the model first "
        "(e.g. model.to_empty(device='cpu') and load its weights) and then attach Xray"
    )


def wrappers(value: nn.Module) -> list[nn.Module]:
    """``value`` and the module inside each of its wrappers (``torch.compile``, ``DistributedDataParallel``,
    in either order), outermost first: the last is the model :func:`model_and_modules` looks into."""
    chain = [value]
    while (inner := _uncompiled(distributed.unwrap(chain[-1]))) is not chain[-1]:
        chain.append(inner)
    return chain


def _uncompiled(value: nn.Module) -> nn.Module:
    """The original module of a ``torch.compile``d one (found without importing torch._dynamo: a
    compiled module exists only once it is imported), else ``value``."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    compiled = getattr(eval_frame, "OptimizedModule", None)
    return value._orig_mod if compiled is not None and isinstance(value, compiled) else value


def storage_dtype(dtype: Union[str, torch.dtype]) -> type:
    """The numpy type ``dtype=`` stores values as."""
    name = str(dtype).replace("torch.", "")
    if name not in _STORAGE_DTYPES:
        raise ValueError(f"dtype= stores values as 'float32' or 'float16', got {dtype!r}")
    return _STORAGE_DTYPES[name]


def probe_batch(probe: Any, model: nn.Module) -> Optional[tuple[tuple, Any]]:
    """``(inputs, target)`` of a probe given as ``x`` or ``(x, y)``; refused on a sharded (FSDP) model,
    where the probe's forward on the writing rank alone would wait in FSDP's collectives."""
    if probe is None:
        return None
    if sharding.any_sharded(model.parameters()):
        raise ValueError("probe= runs a forward on the writing rank only, and a sharded (FSDP) model's forward is a "
                         "collective of every rank: record the training batch instead (leave probe= out)")
    if isinstance(probe, (tuple, list)) and len(probe) == 2:
        inputs, target = probe
    else:
        inputs, target = probe, None
    return (tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)), target


def probe_runs(model: nn.Module, probe: Optional[tuple[tuple, Any]], loss_fn: Optional[Callable]) -> None:
    """Run the probe batch once as a capture will (eval mode), without gradients and leaving no trace on the
    model, so that a batch the model or ``loss_fn`` cannot take is refused at ``Xray()``, not at every capture."""
    if probe is None:
        return
    inputs, target = probe
    with preserved(model), torch.no_grad():
        model.eval()
        try:
            output = model(*inputs)
        except Exception as error:
            raise ValueError(
                f"probe= does not run through the model: model(probe) failed with inputs of shape {describe_inputs(inputs, {})}: "
                f"{type(error).__name__}: {error}. Give probe= a batch x the model accepts (as example_input=), or (x, y) "
                "with loss_fn="
            ) from error
        if loss_fn is None:
            return
        try:
            loss_fn(output, target) if target is not None else loss_fn(output)
        except Exception as error:
            call = "loss_fn(output, y)" if target is not None else "loss_fn(output)"
            raise ValueError(
                f"loss_fn= fails on the probe batch: {call} raised {type(error).__name__}: {error}. Give probe=(x, y) with the "
                "targets loss_fn takes, and loss_fn= the criterion the model trains with"
            ) from error


def model_free(options: dict) -> None:
    """Check, as ``Xray()`` does, those of its keyword ``options`` that need no model: a framework's callback
    refuses a bad one when it is made, not when training has started."""
    from xray_tb.health.options import as_options  # the health package imports the recorder, which imports this module

    checks: dict[str, Callable[[Any], Any]] = {
        "logdir": logdir, "writer": writer, "selector": selector, "health": as_options, "dtype": storage_dtype,
        "budget_bytes": budget_bytes, "loss_fn": loss_fn, "collective_timeout": distributed.timeout_seconds,
        "layer_scalars": lambda value: flag(value, "layer_scalars"),
        "ranks": lambda value: distributed.writing_rank(None, value),
        "input_size": lambda value: value is None or _sample_shape(value),
    }
    for name, check in checks.items():
        if name in options:
            check(options[name])


def example_inputs(model: nn.Module, example_input: Any, input_size: Optional[Sequence[int]]) -> tuple[tuple, dict]:
    """Positional and keyword inputs for tracing."""
    if (example_input is None) == (input_size is None):
        raise ValueError("give exactly one of example_input= (a batch the model accepts) or input_size= (one sample's shape)")
    if input_size is not None:
        shape = _sample_shape(input_size)
        reference = next((p for p in model.parameters() if p.is_floating_point()), None)
        batch = torch.randn(2, *shape, generator=torch.Generator().manual_seed(0))  # leaves the global RNG alone
        return (batch.to(reference.device, reference.dtype) if reference is not None else batch,), {}
    if isinstance(example_input, dict):
        return (), dict(example_input)
    if isinstance(example_input, tuple):
        return example_input, {}
    return (example_input,), {}


def _sample_shape(input_size: Any) -> tuple[int, ...]:
    message = f"input_size is one sample's shape without the batch, in whole positive numbers, e.g. (1, 28, 28); got {input_size!r}"
    if isinstance(input_size, (str, bytes)) or not hasattr(input_size, "__iter__"):
        raise ValueError(message)
    try:
        shape = tuple(whole_number(size, "input_size") for size in input_size)
    except TypeError:
        raise ValueError(message) from None
    if any(size <= 0 for size in shape):
        raise ValueError(message)
    return shape


def describe_inputs(args: tuple, kwargs: dict) -> str:
    """The shapes of the tracing inputs, for an error message: ``(2, 1, 8, 8)``, ``x=(2, 3)``."""

    def shape(value: Any) -> str:
        if isinstance(value, torch.Tensor):
            return str(tuple(value.shape))
        if isinstance(value, (tuple, list)):
            return "[" + ", ".join(shape(item) for item in value) + "]"
        return type(value).__name__

    return ", ".join([shape(arg) for arg in args] + [f"{key}={shape(value)}" for key, value in kwargs.items()]) or "no inputs"


def trace_model(model: nn.Module, args: tuple, kwargs: dict, modules: Optional[dict[str, nn.Module]] = None) -> dict:
    """The traced architecture; a forward that fails says so, with the shapes it was given. ``modules``:
    ``dict(model.named_modules())`` when the caller has it (one walk of a big model for all of ``Xray()``)."""
    try:
        sharded = sharding.sharded_fsdp_modules(model)  # FSDP leaves the root's parameters unsharded after a forward
        return trace(model, args, kwargs, after_forward=lambda: sharding.reshard(sharded), modules=modules)
    except Exception as error:
        raise ValueError(
            f"tracing the model failed with the example input of shape {describe_inputs(args, kwargs)}: "
            f"{type(error).__name__}: {error}. Give example_input= a batch the model accepts (model(example_input) must "
            "run), or input_size= one sample's shape"
        ) from error
