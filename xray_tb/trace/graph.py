"""Questions asked of a traced architecture (the dict built by :mod:`xray_tb.trace.tracer`)."""

from __future__ import annotations

import dataclasses
from typing import Optional

from xray_tb.trace.activations import ACTIVATION_MODULES, FUNCTIONAL_ACTIVATIONS

#: Modules that an activation is looked for through: conv → BatchNorm → ReLU gives the conv the ReLU.
PASS_THROUGH_MODULES = frozenset(
    "BatchNorm1d BatchNorm2d BatchNorm3d SyncBatchNorm LayerNorm GroupNorm InstanceNorm1d InstanceNorm2d "
    "InstanceNorm3d LocalResponseNorm Dropout Dropout1d Dropout2d Dropout3d AlphaDropout".split()
)
CONV_TYPES = frozenset("Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d".split())
LINEAR_TYPES = frozenset("Linear Bilinear LazyLinear".split())
#: The fields of a node that the questions below read; the index keeps only these (shapes, parents
#: and parameter counts stay in the architecture document), so a big model's index stays small.
_INDEXED_FIELDS = ("id", "kind", "module", "call", "type", "op", "kwargs", "inplace", "mutated_after")


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


class Graph:
    """An index over a traced architecture, built once: layers, successors, activations."""

    def __init__(self, architecture: dict):
        nodes = [{key: node[key] for key in _INDEXED_FIELDS if key in node} for node in architecture["nodes"]]
        by_id = {node["id"]: node for node in nodes}
        order = {node["id"]: index for index, node in enumerate(nodes)}
        self._successors: dict[str, list[dict]] = {node["id"]: [] for node in nodes}
        for edge in architecture["edges"]:
            self._successors[edge["src"]].append(by_id[edge["dst"]])
        for following in self._successors.values():
            following.sort(key=lambda node: order[node["id"]])
        self._calls = {(n["module"], n["call"]): n for n in nodes if n["kind"] == "module"}
        #: The ids of the input nodes, ``input:<k>`` for the k-th distinct tensor of the forward's arguments.
        self.inputs: list[str] = [node["id"] for node in nodes if node["kind"] == "input"]
        #: The first call node of every module called in the forward (the root excluded), in order.
        self.layers: dict[str, dict] = {}
        for node in nodes:
            if node["kind"] == "module" and node["module"] and node["module"] not in self.layers:
                self.layers[node["module"]] = node
        self._activations = {layer: self._find_activation(node) for layer, node in self.layers.items()}

    def successors(self, node_id: str) -> list[dict]:
        """The nodes that consume ``node_id``'s outputs, one per edge, in trace order."""
        return self._successors[node_id]

    def activation_source(self, layer: str) -> Optional[ActivationSource]:
        """The activation that directly follows ``layer`` (its first call) in the dataflow, if any.

        Normalisation and dropout modules in between are passed through, so in conv → BatchNorm →
        ReLU the ReLU is the activation of both the conv and the BatchNorm.
        """
        return self._activations.get(layer)

    def _find_activation(self, current: Optional[dict]) -> Optional[ActivationSource]:
        while current is not None:
            following = self._successors[current["id"]]
            activation = next((node for node in following if _is_activation(node)), None)
            if activation is not None:
                if activation["kind"] == "module":
                    return ActivationSource(Tap(activation["module"], activation["call"]))
                kwargs = tuple(sorted(activation.get("kwargs", {}).items()))
                return ActivationSource(Tap(current["module"], current["call"]), activation["op"], kwargs)
            single = following[0] if len(following) == 1 else None
            current = single if single and single["kind"] == "module" and single.get("type") in PASS_THROUGH_MODULES else None
        return None

    def layers_reached(self, node_id: str) -> set[str]:
        """The layers whose call first takes in what ``node_id`` produced: the module calls reached from it
        through function nodes only (a module call's own outputs are not followed further)."""
        found: set[str] = set()
        queue, seen = [node_id], {node_id}
        while queue:
            for node in self._successors[queue.pop()]:
                if node["id"] in seen:
                    continue
                seen.add(node["id"])
                if node["kind"] == "module" and node.get("module"):
                    found.add(node["module"])
                elif node["kind"] == "function":
                    queue.append(node["id"])
        return found

    def calls_per_forward(self) -> dict[str, int]:
        """How many times the traced forward called each module (the root excluded)."""
        counts: dict[str, int] = {}
        for module, call in self._calls:
            if module:
                counts[module] = max(counts.get(module, 0), call + 1)
        return counts

    def overwritten_in_place(self, tap: Tap) -> bool:
        """Whether something after ``tap`` modifies its output in place, so a capture must copy it:
        an in-place op or module that consumes it directly, or any write the trace saw through its
        version counter (a view of it written in place, a later module call writing into it)."""
        node = self._calls.get((tap.module, tap.call))
        if node is None:
            return False
        return bool(node.get("mutated_after")) or any(_is_inplace(n) for n in self._successors[node["id"]])


def _is_activation(node: dict) -> bool:
    if node["kind"] == "module":
        return node.get("type") in ACTIVATION_MODULES
    return node["kind"] == "function" and node.get("op") in FUNCTIONAL_ACTIVATIONS


def _is_inplace(node: dict) -> bool:
    flag = node.get("inplace") if node["kind"] == "module" else node.get("kwargs", {}).get("inplace")
    return bool(flag)
