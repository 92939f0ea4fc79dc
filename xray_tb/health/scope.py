"""Which layers training health covers, in dataflow order, independent of the plan.

* Weighted layers: every module with a ``weight`` of its own (a pruned or parametrized weight is
  followed to the parameter that trains), for gradient and weight statistics.
* Activation layers: every layer whose activation the traced graph finds, for activation statistics.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
from torch import nn

from xray_tb import sharding
from xray_tb.trace.activations import traced_arguments
from xray_tb.trace.graph import CONV_TYPES, LINEAR_TYPES, ActivationSource, Graph, Tap

#: Layer types whose units are the last dimension of their output (the others: dimension 1).
_LAST_DIM_UNITS = LINEAR_TYPES | {"LayerNorm"}
#: Layers whose weight (and bias) holds one row per unit along dimension 0: what prune() can mask.
PRUNABLE_TYPES = CONV_TYPES - {"ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"} | LINEAR_TYPES - {"Bilinear"} | {
    "BatchNorm1d", "BatchNorm2d", "BatchNorm3d"}
#: How the tracer writes non-finite numbers into the architecture's JSON.
#: Activations mapping every value <= 0 to exactly 0: masking a dead unit leaves outputs unchanged.
_ZERO_CLAMPING = {"ReLU", "ReLU6", "relu", "relu6"}


def weight_parameter(module: nn.Module) -> Optional[nn.Parameter]:
    """The parameter that trains as the module's own ``weight``, or None."""
    for name in ("weight_orig", "weight"):  # weight_orig: torch.nn.utils.prune
        param = module._parameters.get(name)
        if isinstance(param, nn.Parameter):
            return param
    parametrizations = getattr(module, "parametrizations", None)
    if parametrizations is not None and "weight" in parametrizations:
        return parametrizations["weight"].original
    return None


@dataclasses.dataclass
class WeightedLayer:
    name: str
    module: nn.Module
    param: nn.Parameter


@dataclasses.dataclass
class ActivationLayer:
    """A layer with an activation: where to find it, what kind it is, and along which dimension units lie."""

    name: str
    module: nn.Module
    source: ActivationSource
    activation: str  # module class name ("Tanh") or functional op name ("tanh")
    params: dict  # the activation's settings that matter for saturation (dim, min_val, max_val)
    last_dim_units: bool
    prunable: Optional[str]  # None when prune() can mask its dead units, else why not

    @property
    def zero_clamped(self) -> bool:
        """Whether the activation maps every value <= 0 to 0 (ReLU, ReLU6): a unit that stays there is dead."""
        return self.activation in _ZERO_CLAMPING

    def unit_dim(self, tensor: torch.Tensor) -> int:
        return tensor.dim() - 1 if self.last_dim_units else min(1, tensor.dim() - 1)


class Scope:
    """The layers health covers: :attr:`weighted` and :attr:`activations`, each in dataflow order."""

    def __init__(self, model: nn.Module, graph: Graph, modules: Optional[dict[str, nn.Module]] = None):
        """``modules`` is ``dict(model.named_modules())`` when the caller has it already (Xray's capture)."""
        self.modules = dict(model.named_modules()) if modules is None else modules
        called = list(graph.layers)
        #: Every layer name, in dataflow order (first calls), then modules the forward never calls.
        self.order = called + [name for name in self.modules if name and name not in graph.layers]
        self.weighted: list[WeightedLayer] = []
        self.refresh_weights()
        self.activations = [
            self._activation_layer(name, source, graph)
            for name in called
            if (source := graph.activation_source(name)) is not None
        ]
        #: The outputs of the activation layers (first calls), checked for non-finite values with
        #: their activations: no hooks on a model without activations.
        self.output_taps = {layer.name: Tap(layer.name, graph.layers[layer.name]["call"]) for layer in self.activations}

    def refresh_weights(self) -> None:
        """Find the weight parameters again (after pruning replaced ``weight`` by ``weight_orig``)."""
        self.weighted = [
            WeightedLayer(name, self.modules[name], param)
            for name in self.order
            if (param := weight_parameter(self.modules[name])) is not None
        ]

    def _activation_layer(self, name: str, source: ActivationSource, graph: Graph) -> ActivationLayer:
        module = self.modules[name]
        if source.op is not None:
            activation, params = source.op, traced_arguments(source.kwargs)
        else:
            act_module = self.modules[source.tap.module]
            activation = type(act_module).__name__
            params = {key: getattr(act_module, key) for key in ("dim", "min_val", "max_val") if hasattr(act_module, key)}
        layer_type = sharding.type_name(module)
        return ActivationLayer(
            name=name,
            module=module,
            source=source,
            activation=activation,
            params=params,
            last_dim_units=layer_type in _LAST_DIM_UNITS,
            prunable=_why_not_prunable(name, module, source, activation, graph),
        )


def _why_not_prunable(name: str, module: nn.Module, source: ActivationSource, activation: str, graph: Graph) -> Optional[str]:
    layer_type = sharding.type_name(module)
    if sharding.any_sharded(module._parameters.values()):  # its own, as parameters(recurse=False)
        return "its weights are sharded (FSDP): torch.nn.utils.prune masks plain parameters only"
    if layer_type not in PRUNABLE_TYPES:
        return f"{layer_type} weights are not masked by unit"
    if activation not in _ZERO_CLAMPING:
        return f"its activation {activation} does not map every value <= 0 to 0, so masking would change outputs"
    # The graph's index of successors: scanning every edge per layer was quadratic in the model's size.
    targets = graph.successors(graph.layers[name]["id"])
    direct = len(targets) == 1 and (
        (source.op is None and targets[0].get("module") == source.tap.module)
        or (source.op is not None and targets[0].get("op") == source.op)
    )
    if not direct:
        return "its output does not feed only its activation (a normalisation in between, or other consumers)"
    return None
