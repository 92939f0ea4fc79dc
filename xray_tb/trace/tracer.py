"""One-shot architecture tracer: a dataflow graph of module calls and functional ops.

The schema of the architecture record is below; :mod:`xray_tb.trace.recorder` builds it from the
hooks and the function mode here, and :mod:`xray_tb.trace.autograd_walk` attributes the backward graph.

``trace(model, args, kwargs)`` runs ONE forward pass of ``model`` under a
``torch.overrides.TorchFunctionMode`` (which sees ``F.relu``, ``torch.cat``, ``+``, ``view``,
``x.flatten``, indexing, ...) while forward pre/post hooks on every submodule keep the current
module stack. It returns a JSON-serialisable dict and leaves the model exactly as it found it.

Schema
------
``nodes``: list, in execution order, of dicts with

- ``id``: unique str. ``"input:<k>"`` (k-th distinct tensor among ``args`` then ``kwargs``
  values), ``"module:<name>:<call>"`` (``name`` from ``named_modules()``, ``""`` for a root
  that is itself a leaf), ``"function:<op>:<k>"`` (k-th ``op`` node of this trace, counted per
  op) and ``"output:<k>"`` (k-th tensor of the flattened model output; dict values in
  insertion order, tuples and lists in order).
- ``kind``: ``"input"``, ``"module"``, ``"function"`` or ``"output"``.
- ``in_shapes`` / ``out_shapes``: lists of shapes (lists of ints) of the tensors among the
  inputs / outputs, flattened through tuples, lists and dicts; non-tensor items are omitted.
  An input node has ``in_shapes == []`` and its tensor's shape in ``out_shapes``; an output
  node has its tensor's shape in ``in_shapes`` and ``out_shapes == []``.
- ``parent``: ``named_modules()`` path of the innermost enclosing container (a group), ``""``
  at top level.
- Module-call nodes add ``module`` (its name), ``type`` (class name), ``call`` (0, 1, ...: the
  n-th call of that module in this forward), ``params`` (parameter count of the module,
  recursively; type and count are taken when the call returns, so a lazy module has its
  materialised class, ``Linear`` for ``LazyLinear``, and parameters; ``params_shared``, only
  where non-zero: how many of them a module called before holds too, tied weights), for modules with a
  boolean ``inplace`` attribute, ``inplace``, and
  ``mutated_after: true`` (absent otherwise) when one of the call's output tensors was written
  in place after the call returned, before the forward ended: by an in-place op or module on it
  or on any view of it (``y.t().mul_(0)``, ``y.view(-1)[0:3] = 7``, ``y[:, 0].zero_()``), inside
  a later module call too. Seen through the version counter a tensor shares with its views
  (``tensor._version``), so a write that only a different train/eval mode makes, or one after
  the forward (in the loss), is not seen.
- Function nodes add ``op`` (short name, see below) and ``kwargs``: the op's arguments that are
  JSON scalars (bool, int, finite float, str; a ``torch.dtype`` as its str; non-finite floats
  as ``"inf"``, ``"-inf"``, ``"nan"``) or flat lists of them, by parameter name, defaults
  included (``F.gelu(x)`` gives ``{"approximate": "none"}``, ``F.softmax(x, dim=1)`` gives
  ``{"dim": 1}``, ``x.view(2, -1)`` gives ``{"shape": [2, -1]}``). Tensors, ``None``, other
  objects (slices, so ``x[:, -1]`` has ``{}``) and names starting with ``_`` are left out.
  Names come from torch's override signatures (``torch.overrides.get_testing_overrides``),
  else ``inspect``; extra positional arguments are packed into the last positional parameter
  (right for ``view``/``permute``/``reshape`` varargs, best effort elsewhere).

``op`` names: the function or method name with dunders removed (``Tensor.__getitem__`` ->
``"getitem"``, ``__matmul__`` -> ``"matmul"``, ``__truediv__`` -> ``"div"``; reflected
commutative operators map to the plain name, other reflected ones keep an ``r``:
``"rsub"``, ``"rdiv"``). In-place variants map to the plain name with
``kwargs["inplace"] = True``: ``relu_`` -> ``"relu"``, ``x += y`` -> ``"add"``,
``x[i] = v`` -> ``"setitem"``. The tensor properties ``T``, ``mT``, ``H``, ``mH``, ``real``
and ``imag`` are ops too.

``edges``: list of ``{"src": id, "dst": id}``, one per distinct (producer, consumer) pair,
following tensors: ``a + b`` has two incoming edges (one if ``a is b``), an op on the model
input has an edge from its ``input`` node, each ``output`` node has an edge from the producer
of its tensor (none if the model returns a tensor that no traced node produced). An in-place
op or module (``relu_``, ``nn.ReLU(inplace=True)``) becomes the producer of the tensor it
modified, so later consumers link to it, not to the node before it. A call that returns its
input untouched (``nn.Identity``, ``Dropout`` in eval mode, ``x.contiguous()`` of a contiguous
``x``) returns a view of it in the tracing forward, so it produces a tensor of its own and the
input's other consumers keep their edge from where it came.

``groups``: list, in order of first entry, of ``{"module", "type", "parent"}`` for every
container entered during the forward. Containers are groups, never nodes; the root model is
neither.

``autograd``:

- ``by_node``: ``{node_id: grad_fn class name}`` for each module and function node whose first
  output tensor had a ``grad_fn`` when the node was created (``"ConvolutionBackward0"``).
- ``by_autograd``: ``[{"name": grad_fn class name, "node": node_id}, ...]`` for every autograd
  node reachable from the outputs' ``grad_fn``s (what ``sum(outputs).backward()`` would visit,
  minus that sum), in breadth-first order. Each is attributed to the node that created it:
  everything an op creates inside a module call belongs to that module call (``AddmmBackward0``
  and ``TBackward0`` of a ``Linear``); an autograd node that no traced op put on its output
  (the internal ``TBackward0`` of a functional ``F.linear``, a parameter-only op such as
  ``w * 2``) inherits the node of the autograd node it was reached from. ``AccumulateGrad``
  nodes are INCLUDED and attributed to the first call (``call == 0``) of the nearest
  module-call node owning the parameter (the module itself or, for the children of an atomic
  module such as ``MultiheadAttention.out_proj``, its atomic ancestor); the ``AccumulateGrad``
  of an input that requires grad belongs to that ``input`` node; otherwise it inherits as
  above. The walk stops at the ``grad_fn`` of an input tensor (history older than the trace).

What becomes a node
-------------------
- Leaves are modules without children (a parametrized module's ``parametrizations`` aside: a
  ``Linear`` under ``torch.nn.utils.parametrizations.orthogonal`` is a leaf) plus the atomic types
  ``nn.MultiheadAttention`` and ``nn.RNNBase`` (``LSTM``, ``GRU``, ``RNN``). A leaf call is one module node per call; nothing
  inside it becomes a node. Any other module with children (``nn.Sequential``,
  ``nn.TransformerEncoderLayer``, custom blocks) is a container: a group whose submodule
  calls and functional ops are nodes with ``parent`` set to it.
- A function node is a torch function or tensor method called outside every leaf whose
  inputs include a tensor produced by a traced node (or a model input) and whose output holds
  a tensor. So ops on constants or parameters only (``self.weight * 2``), metadata queries
  (``size()``, ``dim()``, ``shape``, ``item()``) and the tensor's other properties are not
  nodes. ``requires_grad_``, ``retain_grad``, ``detach_``, ``share_memory_`` and
  ``pin_memory`` are never nodes.
- Our pre-hook runs before, and our post-hook after, a module's other forward hooks, so ops
  in those hooks (statistics of activations, say) belong to the call: inside a leaf they are
  not nodes. Global module hooks (``nn.modules.module.register_module_forward_pre_hook``) run
  outside the call; disarm them while tracing.
- While a leaf call runs, the recording mode is off (taken off the torch-function mode stack when
  it is the innermost mode, put back as the call returns or the forward raises): its ops are no
  nodes, so they run without a Python call each. The autograd nodes they create are reached from
  the call's outputs and inherit its node, and an in-place write to one of its inputs (its new
  ``grad_fn``) is owned by the call, as it was when every op of the call was seen.

Side effects: none on the model, within what :func:`xray_tb.trace.state.preserved` restores, also
when the forward raises. The forward runs in the model's current train/eval mode, with grad enabled
(the model's own ``torch.no_grad()`` sections still apply: their nodes are recorded but have no
``grad_fn``). No ``backward`` is run, so every ``.grad`` is untouched. Restored: every module's
attributes, shallowly (a counter, a replaced cache, a hook's saved output ``self.last = x``: each
attribute points again to the object it had, one the forward created is deleted, so the model
holds none of the trace's tensors), its parameters, buffers and submodules (one registered in
``forward`` is removed again; identities as before), buffer values (BatchNorm running stats and
``num_batches_tracked`` in train mode), every ``training`` flag, the CPU and CUDA RNG states; all
hooks are removed. Not restored: state outside the modules (globals, closures), changes inside an
object that stays in place (an item appended to a list attribute) and parameters written in
place by a tensor op (warned). Lazy modules (``nn.LazyLinear``) stay materialised, with their
new class and initial values, as their first forward would leave them.

Limits: tensors are followed by object identity, so an in-place write through a view (or a
shared storage) does not rewire edges of the viewed tensor (it does set ``mutated_after`` on the
module call that produced it); a submodule run by calling its
``forward`` directly (not ``__call__``) is invisible as a module, its ops show up in the caller;
TorchScript modules, ``torch.compile``d modules and ops in C++ extensions that bypass
``__torch_function__`` are not traced; a custom ``torch.autograd.Function`` is not an op of its
own: the ops of its ``forward`` are the nodes, and its backward node (``MyFnBackward``) is
attributed to the node that produced its output tensor. The trace holds every produced tensor
and one copy of the buffers (not the parameters) until it returns, and none after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Optional

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from xray_tb.module_hooks import ModuleHooks
from xray_tb.trace.flatten import tensors_in
from xray_tb.trace.op_names import release_stubs
from xray_tb.trace.recorder import LEAF, TraceRecorder, version_of, view_of_itself
from xray_tb.trace.state import preserved, without_cyclic_gc

_no_torch_function = torch._C.DisableTorchFunction  # no torch-function mode or subclass handling inside


@without_cyclic_gc
def trace(model: nn.Module, args: tuple, kwargs: dict | None = None, after_forward: Callable[[], None] | None = None,
          modules: dict[str, nn.Module] | None = None) -> dict:
    """Trace one forward ``model(*args, **kwargs)`` into the architecture schema (module doc).
    ``after_forward`` runs after the forward, before the model's state is restored (FSDP reshards there);
    ``modules`` is ``dict(model.named_modules())`` when the caller has walked the model already."""
    recorder = TraceRecorder(model, modules)
    try:
        modules = list(recorder.modules.values())  # one walk of the model for the snapshot and the hooks
        with preserved(model, modules), _hooks(modules, recorder), torch.enable_grad():
            recorder.add_inputs(tensors_in((args, kwargs or {})))
            try:
                with _RecordingMode(recorder) as recorder.mode:
                    try:
                        output = model(*args, **(kwargs or {}))
                    finally:
                        recorder.resume_all()  # a leaf that raised left the mode paused
                        recorder.mode = None  # no cycle between the mode and the recorder (which holds the tensors)
            finally:
                if after_forward is not None:
                    after_forward()
            recorder.mark_outputs_written_later()
            recorder.add_outputs(tensors_in(output))
            return recorder.architecture()
    finally:
        release_stubs()


class _RecordingMode(TorchFunctionMode):
    """Function mode feeding every torch call of the forward to a :class:`~xray_tb.trace.recorder.TraceRecorder`."""

    def __init__(self, recorder: TraceRecorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        recorder = self.recorder
        if recorder.busy:
            return result
        if recorder.inside_leaf():
            recorder.own_grad_fns(tensors_in(result), recorder.leaf_node_id())
        else:
            if args and result is args[0] and type(result) is torch.Tensor:  # x.contiguous() of a contiguous x
                result = recorder.passed_through(func, result)
            recorder.add_function(func, args, kwargs, result)
        return result


def _alias_if_passed_through(output: Any, inputs) -> Optional[torch.Tensor]:
    """A leaf call that returned one of its inputs untouched (``nn.Identity``, ``Dropout`` in eval mode):
    a view of it, for the tracing forward only, so the call produces a tensor of its own and the
    input's other consumers keep their edge from where it came (an in-place module, which wrote it,
    takes it over instead: its version moved). None for any other output."""
    if type(output) is not torch.Tensor:
        return None
    for tensor, _, version in inputs:
        if tensor is output:
            return view_of_itself(output) if version is not None and version_of(output) == version else None
    return None


@contextmanager
def _hooks(modules: list[nn.Module], recorder: TraceRecorder) -> Iterator[None]:
    """Forward pre/post hooks on every module (the model's, from ``named_modules()``) feeding ``recorder``; removed on exit.

    The pre-hook runs first and the post-hook last, so ops run by the module's other hooks
    count as part of the call (inside a leaf: no nodes).
    """

    # Torch functions are off while they run: each tensor attribute they read (shape, grad_fn,
    # _version) would otherwise be one more call of the recording mode, about six per module.
    def pre_hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
        recorder.busy = True
        try:
            with _no_torch_function():
                # most calls: one tensor, no keyword arguments
                inputs = [args[0]] if not kwargs and len(args) == 1 and type(args[0]) is torch.Tensor else tensors_in((args, kwargs))
                recorder.enter_module(module, inputs)
        finally:
            recorder.busy = False
        if recorder.stack[-1][0] == LEAF:
            recorder.pause_mode(inputs)

    def post_hook(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
        inputs = recorder.resume_mode() if recorder.stack[-1][0] == LEAF else ()
        recorder.busy = True
        try:
            with _no_torch_function():
                alias = _alias_if_passed_through(output, inputs)
                recorder.exit_module(tensors_in(output if alias is None else alias), inputs)
        finally:
            recorder.busy = False
        return alias  # None: the output as it is

    hooks = ModuleHooks()  # thousands of modules: one key for all, no handle each
    try:
        hooks.pre(modules, pre_hook, with_kwargs=True, prepend=True)
        hooks.post(modules, post_hook, with_kwargs=True)
        yield
    finally:
        hooks.remove()


