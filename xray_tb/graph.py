"""Questions asked of a traced architecture (the dict built by :mod:`xray_tb.tracer`)."""

from __future__ import annotations

import dataclasses
from typing import Optional

ACTIVATION_MODULES = frozenset(
    "ReLU ReLU6 LeakyReLU PReLU RReLU ELU SELU CELU GELU SiLU Mish Sigmoid LogSigmoid Tanh Hardtanh "
    "Hardswish Hardsigmoid Softplus Softsign Softmax LogSoftmax Threshold".split()
)
ACTIVATION_OPS = frozenset(
    "relu relu6 leaky_relu prelu rrelu elu selu celu gelu silu mish sigmoid logsigmoid tanh hardtanh "
    "hardswish hardsigmoid softplus softsign softmax log_softmax threshold".split()
)
#: Modules that an activation is looked for through: conv → BatchNorm → ReLU gives the conv the ReLU.
PASS_THROUGH_MODULES = frozenset(
    "BatchNorm1d BatchNorm2d BatchNorm3d SyncBatchNorm LayerNorm GroupNorm InstanceNorm1d InstanceNorm2d "
    "InstanceNorm3d LocalResponseNorm Dropout Dropout1d Dropout2d Dropout3d AlphaDropout".split()
)
CONV_TYPES = frozenset("Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d".split())
LINEAR_TYPES = frozenset("Linear Bilinear LazyLinear".split())


@dataclasses.dataclass(frozen=True)
class Tap:
    """The output of one call of one module in a forward pass."""

    module: str
    call: int = 0


@dataclasses.dataclass(frozen=True)
class ActivationSource:
    """How to get a layer's activation: the output of ``tap``, passed through ``op`` when it is set."""

    tap: Tap
    op: Optional[str] = None
    kwargs: tuple[tuple[str, object], ...] = ()
    description: str = ""


def layer_nodes(architecture: dict) -> dict[str, dict]:
    """The first call node of every module in the graph, in execution order."""
    layers: dict[str, dict] = {}
    for node in architecture["nodes"]:
        if node["kind"] == "module" and node["module"] not in layers:
            layers[node["module"]] = node
    return layers


def _successors(architecture: dict) -> dict[str, list[dict]]:
    by_id = {node["id"]: node for node in architecture["nodes"]}
    order = {node["id"]: i for i, node in enumerate(architecture["nodes"])}
    successors: dict[str, list[dict]] = {node_id: [] for node_id in by_id}
    for edge in architecture["edges"]:
        successors[edge["src"]].append(by_id[edge["dst"]])
    for nodes in successors.values():
        nodes.sort(key=lambda node: order[node["id"]])
    return successors


def _op_name(node: dict) -> str:
    return node.get("op", "").rstrip("_")


def _is_activation(node: dict) -> bool:
    if node["kind"] == "module":
        return node.get("type") in ACTIVATION_MODULES
    return node["kind"] == "function" and _op_name(node) in ACTIVATION_OPS


def _is_inplace(node: dict) -> bool:
    if node["kind"] == "module":
        return bool(node.get("inplace"))
    return bool(node.get("kwargs", {}).get("inplace")) or node.get("op", "").endswith("_")


def activation_source(architecture: dict, layer: str) -> Optional[ActivationSource]:
    """The activation that directly follows ``layer`` (its first call) in the dataflow, if any.

    Normalisation and dropout modules in between are passed through, so in conv → BatchNorm → ReLU
    the ReLU is the activation of both the conv and the BatchNorm.
    """
    successors = _successors(architecture)
    current = layer_nodes(architecture).get(layer)
    while current is not None:
        following = successors[current["id"]]
        activation = next((node for node in following if _is_activation(node)), None)
        if activation is not None:
            if activation["kind"] == "module":
                return ActivationSource(Tap(activation["module"], activation["call"]), description=f"{activation['module']} ({activation['type']})")
            kwargs = tuple(sorted((k, v) for k, v in activation.get("kwargs", {}).items() if k != "inplace"))
            return ActivationSource(
                Tap(current["module"], current["call"]), _op_name(activation), kwargs, description=f"{_op_name(activation)} (function)"
            )
        if len(following) == 1 and following[0]["kind"] == "module" and following[0].get("type") in PASS_THROUGH_MODULES:
            current = following[0]
        else:
            current = None
    return None


def overwritten_in_place(architecture: dict, tap: Tap) -> bool:
    """Whether an op after ``tap`` modifies its output in place (so a capture must copy it)."""
    node_id = next(
        (n["id"] for n in architecture["nodes"] if n["kind"] == "module" and n["module"] == tap.module and n["call"] == tap.call), None
    )
    return node_id is not None and any(_is_inplace(node) for node in _successors(architecture)[node_id])
