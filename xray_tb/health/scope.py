"""Which layers training health covers, in dataflow order, independent of the plan.

* Weighted layers: every module with weights of its own (``weight``; an LSTM's ``weight_ih_l0`` and
  ``weight_hh_l0``; a pruned or parametrized weight followed to the parameters that train), for the
  non-finite check and the gradient and weight statistics.
* Activation layers: every layer whose activation the traced graph finds, for activation statistics.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Optional

import torch
from torch import nn
from torch.nn.utils.parametrize import ParametrizationList

from xray_tb import sharding
from xray_tb.trace.activations import traced_arguments
from xray_tb.trace.graph import CONV_TYPES, LINEAR_TYPES, ActivationSource, Graph, Tap
from xray_tb.user_frame import user_stacklevel

#: Layer types whose units are the last dimension of their output (the others: dimension 1).
_LAST_DIM_UNITS = LINEAR_TYPES | {"LayerNorm"}
#: Layers whose weight (and bias) holds one row per unit along dimension 0: what prune() can mask.
PRUNABLE_TYPES = CONV_TYPES - {"ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"} | LINEAR_TYPES - {"Bilinear"} | {
    "BatchNorm1d", "BatchNorm2d", "BatchNorm3d"}
#: How the tracer writes non-finite numbers into the architecture's JSON.
#: Activations mapping every value <= 0 to exactly 0: masking a dead unit leaves outputs unchanged.
_ZERO_CLAMPING = {"ReLU", "ReLU6", "relu", "relu6"}


def weight_parameters(module: nn.Module) -> list[nn.Parameter]:
    """The parameters that train as the module's own weights, in registration order: every parameter
    of its own that is not a bias (``weight``; ``weight_ih_l0`` and ``weight_hh_l0`` of an LSTM or GRU;
    ``in_proj_weight`` of ``nn.MultiheadAttention``; a custom module's ``w`` used through ``F.linear``),
    followed to the parameters that train where a weight is computed from them: ``weight_orig``
    (``torch.nn.utils.prune``), every original of a parametrization (``original0`` and ``original1`` of
    ``parametrizations.weight_norm``) and ``weight_g`` and ``weight_v`` of the legacy
    ``torch.nn.utils.weight_norm``. Biases (``bias``, ``bias_*``, ``*_bias``) are not weights."""
    found = _own(module, lambda name: not is_bias_name(name))
    parametrizations = module._modules.get("parametrizations")
    if parametrizations is not None:
        for name, parametrization in parametrizations.named_children():
            if not is_bias_name(name):
                found.extend(p for p in parametrization._parameters.values() if isinstance(p, nn.Parameter))
    return found


def bias_parameters(module: nn.Module) -> list[nn.Parameter]:
    """The module's own biases (``bias``, an LSTM's ``bias_ih_l0``, MHA's ``in_proj_bias``), for the
    non-finite sentinel to name a NaN bias in its own layer."""
    return _own(module, is_bias_name)


def _own(module: nn.Module, keep) -> list[nn.Parameter]:
    parameters = module._parameters
    if not parameters:  # most modules of a big model (activations, containers)
        return []
    return [param for name, param in parameters.items() if isinstance(param, nn.Parameter) and keep(name.removesuffix("_orig"))]


def is_bias_name(name: str) -> bool:
    """Whether a parameter's name is a bias's (``bias``, ``bias_*``, ``*_bias``)."""
    return name == "bias" or name.startswith("bias_") or name.endswith("_bias")


@dataclasses.dataclass
class WeightedLayer:
    """A layer with weights: ``params``, one or several (an LSTM's), reduced together by every statistic."""

    name: str
    module: nn.Module
    params: list[nn.Parameter]

    @property
    def param(self) -> nn.Parameter:
        """The first weight (the only one of most layers)."""
        return self.params[0]

    @property
    def size(self) -> int:
        """How many values its weights hold together."""
        return sum(param.numel() for param in self.params)


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
        #: Every layer name, in dataflow order (first calls); a module the forward never calls itself
        #: (``nn.MultiheadAttention``'s ``out_proj``, whose weight its parent uses) right after its
        #: nearest called ancestor, the others at the end.
        self.order = _dataflow_order(called, self.modules)
        self.weighted: list[WeightedLayer] = []
        self.refresh_weights()
        self.warn_if_no_weights(model)
        calls = graph.calls_per_forward()
        self.activations = [
            self._activation_layer(name, source, graph, calls)
            for name in called
            if (source := graph.activation_source(name)) is not None
        ]
        #: The outputs of the activation layers (first calls), checked for non-finite values with
        #: their activations: no hooks on a model without activations.
        self.output_taps = {layer.name: Tap(layer.name, graph.layers[layer.name]["call"]) for layer in self.activations}
        #: The module whose output each activation layer's activation is (a convolution's ReLU, after its BatchNorm).
        self.activation_modules = {layer.name: layer.source.tap.module for layer in self.activations}

    def refresh_weights(self) -> None:
        """Find the weight parameters again (after pruning replaced ``weight`` by ``weight_orig``)."""
        modules = self.modules
        # most modules of a big model hold no parameter of their own (activations, containers): passed over at once
        # a parametrization's originals (weight_norm's magnitude and direction) are the parametrized layer's weights
        owning = [(name, module) for name in self.order
                  if ((module := modules[name])._parameters or "parametrizations" in module._modules)
                  and not isinstance(module, ParametrizationList)]
        self.weighted = [WeightedLayer(name, module, params) for name, module in owning if (params := weight_parameters(module))]
        #: ``(layer, bias)`` of every layer's biases, in dataflow order.
        self.biases = [(name, bias) for name, module in owning for bias in bias_parameters(module)]
        #: The weighted layers whose every weight an earlier layer holds too (a language model's head tied
        #: to its embedding): a global gradient norm counts their weights once.
        self.sharing = frozenset(_sharing(self.weighted))

    def warn_if_no_weights(self, model: nn.Module) -> None:
        """Say so when the model has parameters but no layer holds one (all held by the model itself)."""
        if not self.weighted and any(True for _ in model.parameters()):
            warnings.warn("training health watches no weights: no submodule of the model holds a parameter of its own, so "
                          "gradients and weights are not checked for NaN/Inf (activations still are); parameters the model "
                          "itself holds are not covered: hold them in submodules", stacklevel=user_stacklevel())

    def replaced(self) -> bool:
        """Whether a layer's weights are other parameter objects now than when last found
        (``load_state_dict(..., assign=True)``, a parameter set anew)."""
        return any(
            len(found := weight_parameters(layer.module)) != len(layer.params) or any(a is not b for a, b in zip(found, layer.params))
            for layer in self.weighted
        )

    def _activation_layer(self, name: str, source: ActivationSource, graph: Graph, calls: dict[str, int]) -> ActivationLayer:
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
            prunable=_why_not_prunable(name, module, source, activation, graph, calls),
        )


def _sharing(weighted: list[WeightedLayer]):
    seen: set[int] = set()
    for layer in weighted:
        ids = {id(param) for param in layer.params}
        if ids <= seen:
            yield layer.name
        seen |= ids


def _dataflow_order(called: list[str], modules: dict[str, nn.Module]) -> list[str]:
    known = set(called)
    after: dict[str, list[str]] = {}
    rest: list[str] = []
    for name in modules:
        if not name or name in known:
            continue
        ancestor = name
        while "." in ancestor and ancestor not in known:
            ancestor = ancestor.rsplit(".", 1)[0]
        (after.setdefault(ancestor, []) if ancestor in known else rest).append(name)
    order: list[str] = []
    for name in called:
        order.append(name)
        order.extend(after.get(name, ()))
    return order + rest


def _why_not_prunable(name: str, module: nn.Module, source: ActivationSource, activation: str, graph: Graph,
                      calls: dict[str, int]) -> Optional[str]:
    layer_type = sharding.type_name(module)
    repeated = max(calls.get(name, 1), calls.get(source.tap.module, 1))
    if repeated > 1:  # its dead units are judged on the first call's activation only
        return (f"it runs {repeated} times in each forward and its dead units are judged on its first call only, "
                "so masking could change the other calls' outputs")
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
