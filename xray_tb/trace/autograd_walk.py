"""Which node each autograd node belongs to: the breadth-first walk of the backward graph that ends a
trace (``autograd.by_autograd`` in the schema of :mod:`xray_tb.trace.tracer`)."""

from __future__ import annotations

from collections import deque
from typing import Any

import torch
from torch import nn


def walk_autograd(grad_owner: dict, producer: dict[int, str], alive: list[torch.Tensor], inputs: list[torch.Tensor],
                  outputs: list[tuple[torch.Tensor, str]], leaf_owner: dict[int, str]) -> list[dict]:
    """Breadth-first walk from the outputs' ``grad_fn``s, attributing each to a node: its owner in
    ``grad_owner`` (``grad_fn -> node id``, completed here from the ``grad_fn`` of each tensor in
    ``alive``, set after its op returned, as ``autograd.Function.apply`` does), a leaf tensor's
    ``AccumulateGrad`` to ``leaf_owner``'s node, else the node it was reached from."""
    for tensor in alive:  # grad_fns set after the op returned (autograd.Function.apply)
        fn = tensor.grad_fn
        if fn is not None:
            grad_owner.setdefault(fn, producer[id(tensor)])
    # A node is taken once, from its first entry in the queue (first in, first out: marking it when it
    # is queued keeps the order and the owners of marking it when it is taken, with a shorter queue).
    seen: set[Any] = {None, *(t.grad_fn for t in inputs)}  # the inputs' own graphs are not walked
    queue: deque = deque()
    for tensor, node_id in outputs:
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


def leaf_owners(nodes: list[dict], modules: dict[str, nn.Module], input_ids: dict[int, str]) -> dict[int, str]:
    """id(leaf tensor) -> node owning its AccumulateGrad: the param's module, or the input."""
    called = {node["module"] for node in nodes if node["kind"] == "module"}
    owners = dict(input_ids)
    seen: set[int] = set()  # a parameter shared by modules belongs to the first, as in named_parameters()
    for path, module in modules.items():  # each module's own parameters: named_parameters() order
        params = [p for p in module._parameters.values() if p is not None and id(p) not in seen]
        if not params:
            continue
        seen.update(id(p) for p in params)
        while path not in called and path:
            path = path.rsplit(".", 1)[0] if "." in path else ""
        if path in called:
            owners.update((id(p), f"module:{path}:0") for p in params)
    return owners
