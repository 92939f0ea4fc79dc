"""One-shot architecture tracer: a dataflow graph of module calls and functional ops.

(Longer than our ~300-line rule on purpose: about 140 lines are the schema of the architecture record
below, kept next to the code that writes it; the code itself is one recorder class and its mode.)

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
  materialised class, ``Linear`` for ``LazyLinear``, and parameters), for modules with a
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
modified, so later consumers link to it, not to the node before it.

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

from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from xray_tb import sharding
from xray_tb.module_hooks import ModuleHooks
from xray_tb.trace.flatten import tensors_in
from xray_tb.trace.op_names import op_kwargs, op_name, release_stubs
from xray_tb.trace.state import preserved, without_cyclic_gc

ATOMIC_TYPES: tuple[type[nn.Module], ...] = (nn.MultiheadAttention, nn.RNNBase)
"""Modules with children that are traced as one leaf node."""


# Frame kinds on the module stack.
_ROOT, _CONTAINER, _LEAF, _INNER = "root", "container", "leaf", "inner"


@without_cyclic_gc
def trace(model: nn.Module, args: tuple, kwargs: dict | None = None, after_forward: Callable[[], None] | None = None,
          modules: dict[str, nn.Module] | None = None) -> dict:
    """Trace one forward ``model(*args, **kwargs)`` into the architecture schema (module doc).
    ``after_forward`` runs after the forward, before the model's state is restored (FSDP reshards there);
    ``modules`` is ``dict(model.named_modules())`` when the caller has walked the model already."""
    recorder = _Recorder(model, modules)
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


# ----------------------------------------------------------------------------- helpers

_no_torch_function = torch._C.DisableTorchFunction  # no torch-function mode or subclass handling inside


def _shape(tensor: torch.Tensor) -> list[int]:
    """Shape of ``tensor`` as a list of ints (a ``torch.Size`` holds ints in eager mode)."""
    return list(tensor.shape)


def _is_leaf(module: nn.Module) -> bool:
    """True when ``module`` is traced as one node: no children but its parametrizations
    (``torch.nn.utils.parametrize``: a ``weight`` computed from others), or an atomic type."""
    if isinstance(module, ATOMIC_TYPES):
        return True
    children = module._modules
    return not children or (len(children) == 1 and "parametrizations" in children)


def _version(tensor: torch.Tensor) -> int | None:
    """The tensor's version counter (shared with its views); None where it has none (inference tensors)."""
    try:
        return tensor._version
    except RuntimeError:
        return None


def _first_grad_fn(tensors: list[torch.Tensor]) -> Any:
    """The ``grad_fn`` of the first tensor that has one, else None."""
    return next((t.grad_fn for t in tensors if t.grad_fn is not None), None)


# ----------------------------------------------------------------------------- recorder


class _Recorder:
    """Builds nodes, edges, groups and the autograd attribution during one forward."""

    def __init__(self, model: nn.Module, modules: dict[str, nn.Module] | None = None) -> None:
        self.model = model
        self.modules = dict(model.named_modules()) if modules is None else modules
        self.names = {id(m): name for name, m in self.modules.items()}
        self.busy = False  # True while our own hook code runs: the mode then records nothing
        self.stack: list[tuple[str, str, dict | None]] = []  # (kind, module name, leaf node)
        self.nodes: list[dict] = []
        self.edges: list[dict] = []
        self.groups: dict[str, dict] = {}
        self.by_node: dict[str, str] = {}
        self._producer: dict[int, str] = {}  # id(tensor) -> node id
        self._alive: list[torch.Tensor] = []  # keeps ids in _producer valid
        self._grad_owner: dict[Any, str] = {}  # grad_fn -> node id
        self._input_ids: dict[int, str] = {}  # id(input tensor) -> input node id
        self._inputs: list[torch.Tensor] = []
        self._outputs: list[tuple[torch.Tensor, str]] = []
        self._calls: dict[str, int] = {}
        self._op_counts: dict[str, int] = {}
        self._params: dict[int, int] = {}
        # (leaf call node, [(output tensor, its version counter when the call returned)])
        self._returned: list[tuple[dict, list[tuple[torch.Tensor, int | None]]]] = []
        self.mode: TorchFunctionMode | None = None  # the recording mode, paused inside leaf calls
        # Per running leaf call: (whether it paused the mode, [(input tensor, its grad_fn at the call)]).
        self._paused: list[tuple[bool, list[tuple[torch.Tensor, Any]]]] = []

    # -- the mode inside leaf calls

    def pause_mode(self, inputs: list[torch.Tensor]) -> None:
        """Take the recording mode off while a leaf call runs: nothing inside it becomes a node, and the
        autograd nodes it creates are reached from its outputs' (see the module doc), so its ops run
        without a Python call each. Only our own mode is taken off, when it is the innermost."""
        depth = torch._C._len_torch_function_stack()
        paused = depth > 0 and torch._C._get_function_stack_at(depth - 1) is self.mode
        if paused:
            torch._C._pop_torch_function_stack()
        self._paused.append((paused, [(t, t.grad_fn) for t in inputs]))

    def resume_mode(self) -> list[tuple[torch.Tensor, Any]]:
        """Put the mode back as the leaf call returns; its inputs with their ``grad_fn`` at the call."""
        paused, inputs = self._paused.pop()
        if paused:
            torch._C._push_on_torch_function_stack(self.mode)
        return inputs

    def resume_all(self) -> None:
        while self._paused:
            self.resume_mode()

    # -- tensors and edges

    def _produce(self, tensors: list[torch.Tensor], node_id: str) -> None:
        """Make ``node_id`` the producer of ``tensors`` and own their ``grad_fn``s."""
        for tensor in tensors:
            self._producer[id(tensor)] = node_id
            self._alive.append(tensor)
        self.own_grad_fns(tensors, node_id)

    def own_grad_fns(self, tensors: list[torch.Tensor], node_id: str) -> None:
        """Attribute the ``grad_fn`` of each tensor to ``node_id`` unless already owned."""
        for tensor in tensors:
            if tensor.grad_fn is not None:
                self._grad_owner.setdefault(tensor.grad_fn, node_id)

    def sources(self, tensors: list[torch.Tensor]) -> list[str]:
        """Distinct producer node ids of ``tensors``, in order."""
        found = (self._producer.get(id(t)) for t in tensors)
        return list(dict.fromkeys(src for src in found if src is not None))

    def _add_node(self, node: dict, sources: list[str]) -> dict:
        """Append ``node`` and its incoming edges from the distinct ``sources``."""
        self.nodes.append(node)
        self.edges.extend({"src": src, "dst": node["id"]} for src in sources)
        return node

    def _parent(self) -> str:
        """Name of the innermost container (or root) on the stack; "" when empty."""
        return self.stack[-1][1] if self.stack else ""

    def inside_leaf(self) -> bool:
        """True while a leaf module call is running."""
        return bool(self.stack) and self.stack[-1][0] in (_LEAF, _INNER)

    def leaf_node_id(self) -> str:
        """Node id of the running leaf call (the innermost leaf frame)."""
        return next(node["id"] for kind, _, node in reversed(self.stack) if kind == _LEAF)

    # -- inputs and outputs

    def add_inputs(self, tensors: list[torch.Tensor]) -> None:
        """One input node per distinct input tensor."""
        for tensor in tensors:
            if id(tensor) in self._input_ids:
                continue
            node_id = f"input:{len(self._input_ids)}"
            self._input_ids[id(tensor)] = node_id
            node = {"id": node_id, "kind": "input", "in_shapes": [], "out_shapes": [_shape(tensor)], "parent": ""}
            self._add_node(node, [])
            self._producer[id(tensor)] = node_id
            self._inputs.append(tensor)

    def add_outputs(self, tensors: list[torch.Tensor]) -> None:
        """One output node per output tensor, linked to its producer."""
        for k, tensor in enumerate(tensors):
            node_id = f"output:{k}"
            node = {"id": node_id, "kind": "output", "in_shapes": [_shape(tensor)], "out_shapes": [], "parent": ""}
            self._add_node(node, self.sources([tensor]))
            self._outputs.append((tensor, node_id))

    # -- module calls

    def enter_module(self, module: nn.Module, inputs: list[torch.Tensor]) -> None:
        """Push a frame for a module call; a leaf call becomes a node."""
        name = self.names[id(module)]
        if self.inside_leaf():
            self.stack.append((_INNER, name, None))
        elif not _is_leaf(module):
            kind = _ROOT if module is self.model else _CONTAINER
            if kind == _CONTAINER and name not in self.groups:
                self.groups[name] = {"module": name, "type": sharding.type_name(module), "parent": self._parent()}
            self.stack.append((kind, "" if kind == _ROOT else name, None))
        else:
            self.stack.append((_LEAF, name, self._add_module_node(module, name, inputs)))

    def _add_module_node(self, module: nn.Module, name: str, inputs: list[torch.Tensor]) -> dict:
        """Append and return the node of a leaf module call."""
        call = self._calls.get(name, 0)
        self._calls[name] = call + 1
        node = {
            "id": f"module:{name}:{call}",
            "kind": "module",
            "in_shapes": [_shape(t) for t in inputs],
            "out_shapes": [],
            "parent": self._parent(),
            "module": name,
            "type": sharding.type_name(module),
            "call": call,
            "params": 0,  # counted when the call returns: a lazy module materialises in the call
        }
        inplace = vars(module).get("inplace", getattr(type(module), "inplace", None))  # no Module.__getattr__ miss
        if isinstance(inplace, bool):
            node["inplace"] = inplace
        return self._add_node(node, self.sources(inputs))

    def _param_count(self, module: nn.Module) -> int:
        """Parameter count of ``module``, recursively, each parameter once (cached)."""
        count = self._params.get(id(module))
        if count is None:
            # A module without children (most leaves) needs no walk of its submodules.
            params = dict.fromkeys(module._parameters.values()) if not module._modules else module.parameters()
            count = self._params[id(module)] = sum(p.numel() for p in params if p is not None)
        return count

    def exit_module(self, outputs: list[torch.Tensor], inputs: list[tuple[torch.Tensor, Any]] = ()) -> None:
        """Pop a frame; a leaf call's node gets its outputs, and the ``grad_fn`` of each of its ``inputs``
        (tensor, ``grad_fn`` at the call) that it wrote in place."""
        kind, _, node = self.stack.pop()
        if kind == _LEAF:
            for tensor, grad_fn in inputs:
                if tensor.grad_fn is not grad_fn:  # x.add_(1) inside the call: its autograd node is the call's
                    self.own_grad_fns([tensor], node["id"])
            node["out_shapes"] = [_shape(t) for t in outputs]
            module = self.modules[node["module"]]
            node["type"] = sharding.type_name(module)  # a lazy module's class changes when it materialises
            node["params"] = self._param_count(module)
            self._finish(node["id"], outputs)
            self._returned.append((node, [(t, _version(t)) for t in outputs]))

    def mark_outputs_written_later(self) -> None:
        """Flag ``mutated_after`` on each leaf call whose output was written in place after it returned.

        The version counter is shared by a tensor and its views, so writes through ``y.t()``,
        ``y.view(...)[...]`` or ``y.unsqueeze(0)``, inside later module calls too, all count.
        """
        for node, returned in self._returned:
            if any(version is not None and _version(t) != version for t, version in returned):
                node["mutated_after"] = True

    def _finish(self, node_id: str, outputs: list[torch.Tensor]) -> None:
        """Record ``node_id`` as producer of ``outputs`` and its ``by_node`` grad_fn name."""
        grad_fn = _first_grad_fn(outputs)
        if grad_fn is not None:
            self.by_node[node_id] = type(grad_fn).__name__
        self._produce(outputs, node_id)

    # -- function ops

    def add_function(self, func: Callable, args: tuple, kwargs: dict, result: Any) -> None:
        """Record an op called outside every leaf, if it is a node (see module doc)."""
        op, inplace = op_name(func)
        if op is None:
            return
        inputs = tensors_in((args, kwargs))
        outputs = inputs[:1] if op == "setitem" else tensors_in(result)
        sources = self.sources(inputs)
        if not outputs or not sources:
            return
        count = self._op_counts.get(op, 0)
        self._op_counts[op] = count + 1
        node_id = f"function:{op}:{count}"
        node = {
            "id": node_id,
            "kind": "function",
            "in_shapes": [_shape(t) for t in inputs],
            "out_shapes": [_shape(t) for t in outputs],
            "parent": self._parent(),
            "op": op,
            "kwargs": op_kwargs(func, args, kwargs, inplace),
        }
        self._add_node(node, sources)
        self._finish(node_id, outputs)

    # -- result

    def architecture(self) -> dict:
        """The schema dict (module doc)."""
        return {
            "nodes": self.nodes,
            "edges": self.edges,
            "groups": list(self.groups.values()),
            "autograd": {"by_node": self.by_node, "by_autograd": self._walk_autograd()},
        }

    def _walk_autograd(self) -> list[dict]:
        """Breadth-first walk from the outputs' ``grad_fn``s, attributing each to a node."""
        grad_owner, producer = self._grad_owner, self._producer
        for tensor in self._alive:  # grad_fns set after the op returned (autograd.Function.apply)
            fn = tensor.grad_fn
            if fn is not None:
                grad_owner.setdefault(fn, producer[id(tensor)])
        leaf_owner = self._leaf_owners()
        # A node is taken once, from its first entry in the queue (first in, first out: marking it when it
        # is queued keeps the order and the owners of marking it when it is taken, with a shorter queue).
        seen: set[Any] = {None, *(t.grad_fn for t in self._inputs)}  # the inputs' own graphs are not walked
        queue: deque = deque()
        for tensor, node_id in self._outputs:
            fn = tensor.grad_fn
            if fn not in seen:
                seen.add(fn)
                queue.append((fn, node_id))
        names: dict[type, str] = {}
        walked = []
        while queue:
            fn, inherited = queue.popleft()
            kind = type(fn)
            name = names.get(kind) or names.setdefault(kind, kind.__name__)
            owner = grad_owner.get(fn)
            if owner is None and name == "AccumulateGrad":  # a leaf tensor's: its module's, or the input's
                owner = leaf_owner.get(id(fn.variable))
            owner = owner or inherited
            walked.append({"name": name, "node": owner})
            for next_fn, _ in fn.next_functions:
                if next_fn not in seen:
                    seen.add(next_fn)
                    queue.append((next_fn, owner))
        return walked

    def _leaf_owners(self) -> dict[int, str]:
        """id(leaf tensor) -> node owning its AccumulateGrad: the param's module, or the input."""
        called = {node["module"] for node in self.nodes if node["kind"] == "module"}
        owners = dict(self._input_ids)
        seen: set[int] = set()  # a parameter shared by modules belongs to the first, as in named_parameters()
        for path, module in self.modules.items():  # each module's own parameters: named_parameters() order
            params = [p for p in module._parameters.values() if p is not None and id(p) not in seen]
            if not params:
                continue
            seen.update(id(p) for p in params)
            while path not in called and path:
                path = path.rsplit(".", 1)[0] if "." in path else ""
            if path in called:
                owners.update((id(p), f"module:{path}:0") for p in params)
        return owners


class _RecordingMode(TorchFunctionMode):
    """Function mode feeding every torch call of the forward to a ``_Recorder``."""

    def __init__(self, recorder: _Recorder) -> None:
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
            recorder.add_function(func, args, kwargs, result)
        return result


@contextmanager
def _hooks(modules: list[nn.Module], recorder: _Recorder) -> Iterator[None]:
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
        if recorder.stack[-1][0] == _LEAF:
            recorder.pause_mode(inputs)

    def post_hook(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        inputs = recorder.resume_mode() if recorder.stack[-1][0] == _LEAF else ()
        recorder.busy = True
        try:
            with _no_torch_function():
                recorder.exit_module(tensors_in(output), inputs)
        finally:
            recorder.busy = False

    hooks = ModuleHooks()  # thousands of modules: one key for all, no handle each
    try:
        hooks.pre(modules, pre_hook, with_kwargs=True, prepend=True)
        hooks.post(modules, post_hook, with_kwargs=True)
        yield
    finally:
        hooks.remove()


