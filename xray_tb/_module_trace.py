"""Interim module-level tracer (replaced by xray_tb.tracer)."""

from __future__ import annotations

import torch
from torch import nn



def _tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (tuple, list)) else ()
    return [t for item in items for t in _tensors(item)]


def trace(model: nn.Module, args: tuple, kwargs: dict | None = None) -> dict:
    names = {module: name for name, module in model.named_modules()}
    nodes, edges, producer, calls, handles = [], [], {}, {}, []
    for i, tensor in enumerate(_tensors((args, kwargs or {}))):
        nodes.append({"id": f"input:{i}", "kind": "input", "in_shapes": [], "out_shapes": [list(tensor.shape)], "parent": ""})
        producer[id(tensor)] = f"input:{i}"

    def hook(module, inputs, output):
        name = names[module]
        call = calls.get(name, 0)
        calls[name] = call + 1
        node_id = f"module:{name}:{call}"
        for tensor in _tensors(inputs):
            if id(tensor) in producer:
                edges.append({"src": producer[id(tensor)], "dst": node_id})
        outs = _tensors(output)
        node = {
            "id": node_id, "kind": "module", "in_shapes": [list(t.shape) for t in _tensors(inputs)],
            "out_shapes": [list(t.shape) for t in outs], "parent": name.rpartition(".")[0], "module": name,
            "type": type(module).__name__, "call": call, "params": sum(p.numel() for p in module.parameters()),
        }
        if hasattr(module, "inplace"):
            node["inplace"] = bool(module.inplace)
        nodes.append(node)
        for tensor in outs:
            producer[id(tensor)] = node_id

    for module in model.modules():
        if module is not model and not list(module.children()):
            handles.append(module.register_forward_hook(hook))
    buffers = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    try:
        with torch.no_grad():
            output = model(*args, **(kwargs or {}))
    finally:
        for handle in handles:
            handle.remove()
        torch.set_rng_state(rng)
        with torch.no_grad():
            for key, value in model.state_dict().items():
                value.copy_(buffers[key])
    for i, tensor in enumerate(_tensors(output)):
        nodes.append({"id": f"output:{i}", "kind": "output", "in_shapes": [list(tensor.shape)], "out_shapes": [], "parent": ""})
        if id(tensor) in producer:
            edges.append({"src": producer[id(tensor)], "dst": f"output:{i}"})
    return {"nodes": nodes, "edges": edges, "groups": [], "autograd": {"by_node": {}, "by_autograd": []}}
