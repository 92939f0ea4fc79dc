"""The plan: which kinds are recorded for which layers. Drafted from the graph, edited by the user.

A plan is ``{layer: {kind: bool}}`` with layer names from ``model.named_modules()`` and kinds from
:data:`KINDS`; an entry may also name its own ``"selector"`` (a :class:`~xray_tb.Selector`). ``"layer"`` is accepted as another word for ``"output"``. A list of layer names means
"these layers, with what the draft would record for them" (their output when the draft records
nothing for their type).
"""

from __future__ import annotations

from typing import Iterable, Mapping, Union

import numpy as np
from torch import nn

from xray_tb import sharding
from xray_tb.parametrized import has_parameter
from tb_plugin.metadata import KINDS, PARAMETER_KINDS
from xray_tb.trace import graph
from xray_tb.capture.selectors import Selector
from tb_plugin.close_matches import close_matches

ALIASES = {"layer": "output"}
PlanLike = Union[Mapping[str, Mapping[str, bool]], Iterable[str]]


_NOTHING = dict.fromkeys(KINDS, False)
#: The kinds that read each parameter of a layer: ``{"weight": [...], "bias": [...]}``.
_PARAMETER_READERS = {
    parameter: [kind for kind, (name, _) in PARAMETER_KINDS.items() if name == parameter] for parameter in ("weight", "bias")
}


def _entry(**on: bool) -> dict[str, bool]:
    entry = dict(_NOTHING)
    for kind, value in on.items():
        entry[kind] = bool(value)
    return entry


def draft_plan(index: graph.Graph) -> dict[str, dict[str, bool]]:
    """An entry for every module called in the forward: conv layers record output and activation,
    linear layers their activation, everything else nothing (seed 000). A model where that records
    nothing (linear layers with no activation after them: a logistic regression) records the output of
    its conv and linear layers instead."""
    plan = {}
    for name, node in index.layers.items():
        has_activation = index.activation_source(name) is not None
        if node["type"] in graph.CONV_TYPES:
            plan[name] = _entry(output=True, activation=has_activation)
        elif node["type"] in graph.LINEAR_TYPES:
            plan[name] = _entry(activation=has_activation)
        else:
            plan[name] = _entry()
    if not any(any(entry.values()) for entry in plan.values()):
        for name, node in index.layers.items():
            if node["type"] in graph.CONV_TYPES or node["type"] in graph.LINEAR_TYPES:
                plan[name] = _entry(output=True)
    return plan


def normalize_plan(
    plan: PlanLike, index: graph.Graph, model: nn.Module, modules: Mapping[str, nn.Module] | None = None
) -> dict[str, dict[str, bool]]:
    """A validated full plan (every kind present, aliases resolved) for the layers ``plan`` names;
    ``modules`` is ``dict(model.named_modules())`` when the caller has it already.

    Raises:
        ValueError: a layer that does not exist or is never called in the forward (naming close
            matches), an unknown kind (listing the valid ones), or a kind the layer cannot give.
        TypeError: ``plan`` is neither a mapping nor a list of names.
    """
    if isinstance(plan, str) or not isinstance(plan, (Mapping, list, tuple, set, frozenset)):
        raise TypeError(f"a plan is a dict {{layer: {{kind: bool}}}} or a list of layer names, got {type(plan).__name__}")
    called = index.layers  # the layers a plan may name
    draft = None if isinstance(plan, Mapping) else draft_plan(index)
    modules = dict(model.named_modules()) if modules is None else modules
    result: dict[str, dict[str, bool]] = {}
    for layer in plan:
        _check_layer(layer, called, modules)
        if draft is None:
            entry = _parse_entry(layer, plan[layer])
        else:
            entry = dict(draft[layer]) if any(draft[layer].values()) else _entry(output=True)
        if any(entry.values()):  # an entry that records nothing has nothing to check (most of a big model's)
            _check_kinds(layer, entry, index, modules[layer])
        result[layer] = entry
    return _shared_entries(result)


def drafted(plan: dict[str, dict[str, bool]]) -> dict[str, dict[str, bool]]:
    """A plan :func:`draft_plan` made, ready as it is (valid by construction: nothing is checked layer by
    layer, 8 ms on 5,000 layers), with equal entries shared as :func:`normalize_plan` shares them."""
    return _shared_entries(plan)


def _shared_entries(plan: dict[str, dict]) -> dict[str, dict]:
    """``plan`` with equal entries as one dict object (a plan of thousands of layers holds a few kinds of
    entry: a dict each was 200 KB held on 1,000 small layers). Entries are not changed once validated;
    :attr:`Xray.plan` hands out copies."""
    shared: dict[tuple, dict] = {}
    return {layer: shared.setdefault(tuple((kind, id(value) if kind == "selector" else value) for kind, value in entry.items()), entry)
            for layer, entry in plan.items()}


def _check_layer(layer: object, called: Mapping, modules: dict) -> None:
    """``layer`` is a key of ``called`` (the layers the forward calls), or a clear error."""
    if not isinstance(layer, str):
        raise ValueError(f"layer names are strings from model.named_modules(), got {layer!r}")
    if layer in called:
        return
    if layer == "":
        if not called:
            raise ValueError("the model is a single layer; wrap it, e.g. Xray(nn.Sequential(model), ...), and plan layer '0'")
        raise ValueError("the root model is not a layer; name one of its submodules")
    if layer in modules:
        children = [name for name in called if name.startswith(layer + ".")]
        if children:
            raise ValueError(f"{layer!r} is a container; plan its layers instead, e.g. {', '.join(children[:5])}")
        raise ValueError(f"layer {layer!r} is never called in the model's forward, so nothing can be recorded for it")
    close = close_matches(layer, called)
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else f"; layers: {', '.join(list(called)[:20])}"
    raise ValueError(f"unknown layer {layer!r}{hint}")


def _parse_entry(layer: str, kinds: object) -> dict:
    if not isinstance(kinds, Mapping):
        raise ValueError(f"plan[{layer!r}] must be a dict {{kind: bool}}, got {kinds!r}")
    if kinds.keys() == _NOTHING.keys() and all(type(on) is bool for on in kinds.values()):
        return dict(kinds)  # already full, as a drafted plan's entries are
    entry: dict = _entry()
    for kind, on in kinds.items():
        if kind == "selector":
            if on is not None and not isinstance(on, Selector):
                raise ValueError(f"plan[{layer!r}]['selector'] must be a xray_tb.Selector, got {type(on).__name__}")
            entry["selector"] = on
            continue
        name = ALIASES.get(kind, kind)
        if name not in KINDS:
            raise ValueError(
                f"unknown kind {kind!r} for layer {layer!r}; valid kinds: {', '.join(KINDS)} "
                "('layer' means 'output'; 'selector' takes a Selector)"
            )
        if not isinstance(on, (bool, np.bool_)):
            raise ValueError(f"plan[{layer!r}][{kind!r}] must be True or False, got {type(on).__name__} {on!r}")
        entry[name] = bool(on)
    return entry


def plan_document(plan: dict) -> dict:
    """The plan as JSON for the event file: selectors by their repr."""
    return {layer: {k: repr(v) if k == "selector" else v for k, v in entry.items()} for layer, entry in plan.items()}


def _check_kinds(layer: str, entry: dict[str, bool], index: graph.Graph, module: nn.Module) -> None:
    for parameter, kinds in _PARAMETER_READERS.items():
        if any(entry[kind] for kind in kinds) and not has_parameter(module, parameter):
            hint = " (it was built with bias=False)" if parameter == "bias" and hasattr(module, "bias") else ""
            raise ValueError(
                f"layer {layer!r} ({sharding.type_name(module)}) has no {parameter}{hint}; turn off {' and '.join(map(repr, kinds))} for it"
            )
    if entry["activation"] and index.activation_source(layer) is None:
        raise ValueError(
            f"no activation directly follows layer {layer!r} in the dataflow; record its 'output' instead"
        )
