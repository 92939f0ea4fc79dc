"""What one traced forward records: nodes, edges, groups and the autograd attribution (the schema of
:mod:`xray_tb.trace.tracer`), fed by the tracer's hooks and its function mode."""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from xray_tb import sharding
from xray_tb.trace.autograd_walk import leaf_owners, walk_autograd
from xray_tb.trace.flatten import tensors_in
from xray_tb.trace.op_names import op_kwargs, op_name

ATOMIC_TYPES: tuple[type[nn.Module], ...] = (nn.MultiheadAttention, nn.RNNBase)
"""Modules with children that are traced as one leaf node."""


#: Frame kinds on the module stack.
ROOT, CONTAINER, LEAF, INNER = "root", "container", "leaf", "inner"


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


def _parameters_of(module: nn.Module):
    """The module's parameters, recursively, each once (a leaf, most modules: no walk of submodules)."""
    if not module._modules:
        return [p for p in dict.fromkeys(module._parameters.values()) if p is not None]
    return module.parameters()


def view_of_itself(tensor: torch.Tensor) -> torch.Tensor | None:
    """A view of ``tensor`` as a tensor object of its own, for a call that handed back its input
    untouched (tracing forward only); None where it cannot be viewed (a sparse tensor)."""
    return tensor.view_as(tensor) if tensor.layout == torch.strided else None


def version_of(tensor: torch.Tensor) -> int | None:
    """The tensor's version counter (shared with its views); None where it has none (inference tensors)."""
    try:
        return tensor._version
    except RuntimeError:
        return None


def _first_grad_fn(tensors: list[torch.Tensor]) -> Any:
    """The ``grad_fn`` of the first tensor that has one, else None."""
    return next((t.grad_fn for t in tensors if t.grad_fn is not None), None)


class TraceRecorder:
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
        self._counted: set[int] = set()  # the parameters of the modules called so far (tied ones counted once)
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
        self._paused.append((paused, [(t, t.grad_fn, version_of(t)) for t in inputs]))

    def resume_mode(self) -> list[tuple[torch.Tensor, Any, Optional[int]]]:
        """Put the mode back as the leaf call returns; its inputs with their ``grad_fn`` and version at the call."""
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
        return bool(self.stack) and self.stack[-1][0] in (LEAF, INNER)

    def leaf_node_id(self) -> str:
        """Node id of the running leaf call (the innermost leaf frame)."""
        return next(node["id"] for kind, _, node in reversed(self.stack) if kind == LEAF)

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
            self.stack.append((INNER, name, None))
        elif not _is_leaf(module):
            kind = ROOT if module is self.model else CONTAINER
            if kind == CONTAINER and name not in self.groups:
                self.groups[name] = {"module": name, "type": sharding.type_name(module), "parent": self._parent()}
            self.stack.append((kind, "" if kind == ROOT else name, None))
        else:
            self.stack.append((LEAF, name, self._add_module_node(module, name, inputs)))

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
            count = self._params[id(module)] = sum(p.numel() for p in _parameters_of(module))
        return count

    def _note_shared(self, node: dict, module: nn.Module) -> None:
        """``params_shared`` on a first call whose module holds parameters a module called before holds
        too (tied weights: an embedding and the output layer), so totals count each parameter once."""
        shared = 0
        for param in _parameters_of(module):
            if id(param) in self._counted:
                shared += param.numel()
            else:
                self._counted.add(id(param))
        if shared:
            node["params_shared"] = shared

    def exit_module(self, outputs: list[torch.Tensor], inputs: list[tuple[torch.Tensor, Any, Optional[int]]] = ()) -> None:
        """Pop a frame; a leaf call's node gets its outputs, and the ``grad_fn`` of each of its ``inputs``
        (tensor, ``grad_fn`` and version at the call) that it wrote in place."""
        kind, _, node = self.stack.pop()
        if kind == LEAF:
            for tensor, grad_fn, _ in inputs:
                if tensor.grad_fn is not grad_fn:  # x.add_(1) inside the call: its autograd node is the call's
                    self.own_grad_fns([tensor], node["id"])
            node["out_shapes"] = [_shape(t) for t in outputs]
            module = self.modules[node["module"]]
            node["type"] = sharding.type_name(module)  # a lazy module's class changes when it materialises
            node["params"] = self._param_count(module)
            if node["call"] == 0 and node["params"]:
                self._note_shared(node, module)
            self._finish(node["id"], outputs)
            self._returned.append((node, [(t, version_of(t)) for t in outputs]))

    def mark_outputs_written_later(self) -> None:
        """Flag ``mutated_after`` on each leaf call whose output was written in place after it returned.

        The version counter is shared by a tensor and its views, so writes through ``y.t()``,
        ``y.view(...)[...]`` or ``y.unsqueeze(0)``, inside later module calls too, all count.
        """
        for node, returned in self._returned:
            if any(version is not None and version_of(t) != version for t, version in returned):
                node["mutated_after"] = True

    def _finish(self, node_id: str, outputs: list[torch.Tensor]) -> None:
        """Record ``node_id`` as producer of ``outputs`` and its ``by_node`` grad_fn name."""
        grad_fn = _first_grad_fn(outputs)
        if grad_fn is not None:
            self.by_node[node_id] = type(grad_fn).__name__
        self._produce(outputs, node_id)

    # -- function ops

    def passed_through(self, func: Callable, tensor: torch.Tensor) -> torch.Tensor:
        """An op outside every leaf that returned its own input (``x.contiguous()``, ``x.float()`` of a
        float ``x``): a view of it, for the tracing forward only, so the op's node produces a tensor of
        its own and the input's other consumers keep their edge; an in-place op (``x.add_(y)``, which
        wrote it) stays the producer of its input, and any op that is no node returns it as it is."""
        op, inplace = op_name(func)
        if op is None or inplace or op == "setitem":
            return tensor
        self.busy = True
        try:
            with torch._C.DisableTorchFunction():
                view = view_of_itself(tensor)
        finally:
            self.busy = False
        return tensor if view is None else view

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
            "autograd": {"by_node": self.by_node, "by_autograd": walk_autograd(
                self._grad_owner, self._producer, self._alive, self._inputs, self._outputs,
                leaf_owners(self.nodes, self.modules, self._input_ids))},
        }
