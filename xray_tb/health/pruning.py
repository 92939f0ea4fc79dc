"""Pruning dead units: mask their weight rows (linear) or filters (conv), and their bias, in the layer
that produces them, with ``torch.nn.utils.prune.custom_from_mask``.

A dead unit's activation is at or below 0 on everything seen, and the layers pruned are those whose
output feeds only a ReLU or ReLU6 directly: zeroing the unit's weight row and bias makes its
pre-activation exactly 0, which the activation maps to the 0 it gave anyway. So the model's outputs are
unchanged on the data seen (with a threshold above 0 they may change; that is the point of raising it).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
from torch.nn.utils import prune as torch_prune

from xray_tb.parametrized import parameter

from xray_tb.health.scope import ActivationLayer


@dataclasses.dataclass(frozen=True)
class PruneEntry:
    """One layer of a :meth:`~xray_tb.Xray.prune` report: the dead ``units``, the ``parameters``
    masked (weight and bias entries, 0 when the layer cannot be pruned), whether the masks were
    ``applied``, and why not when the layer cannot be pruned (``reason``)."""

    layer: str
    units: list[int]
    parameters: int
    applied: bool = False
    reason: Optional[str] = None


#: Why a layer whose every unit is dead is not pruned.
EVERY_UNIT_DEAD = "every unit is dead: pruning would cut the network here; fix the training instead (learning rate, initialisation)"


def plan(layers: dict[str, ActivationLayer], dead: dict[str, list[int]]) -> list[PruneEntry]:
    """What pruning ``dead`` units would mask, layer by layer, in dataflow order."""
    entries = []
    for name, units in dead.items():
        layer = layers[name]
        if layer.prunable is not None:
            entries.append(PruneEntry(name, units, 0, reason=layer.prunable))
            continue
        # From the shapes only: a DTensor op (``weight[0]`` of an FSDP weight) would issue a collective that
        # the other ranks do not (the plan is written by rank 0, when its monitor flushes).
        weight, bias = _tensors(layer.module)
        if len(units) >= weight.shape[0]:
            entries.append(PruneEntry(name, units, 0, reason=EVERY_UNIT_DEAD))
            continue
        per_unit = weight.shape[1:].numel() + (1 if bias is not None else 0)
        entries.append(PruneEntry(name, units, per_unit * len(units)))
    return entries


def apply(layers: dict[str, ActivationLayer], entries: list[PruneEntry], remove: bool) -> list[PruneEntry]:
    """Mask every prunable entry's units (and make it permanent with ``remove``); the applied report."""
    done = []
    for entry in entries:
        if entry.reason is not None:
            done.append(entry)
            continue
        module = layers[entry.layer].module
        weight, bias = _tensors(module)
        index = torch.tensor(entry.units, dtype=torch.long, device=weight.device)
        mask = torch.ones_like(weight)
        mask[index] = 0
        torch_prune.custom_from_mask(module, "weight", mask)
        if bias is not None:
            bias_mask = torch.ones_like(bias)
            bias_mask[index] = 0
            torch_prune.custom_from_mask(module, "bias", bias_mask)
        if remove:
            torch_prune.remove(module, "weight")
            if bias is not None:
                torch_prune.remove(module, "bias")
        done.append(dataclasses.replace(entry, applied=True))
    return done


def _tensors(module) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The module's weight and bias as its forward uses them (masked ones included)."""
    bias = parameter(module, "bias")
    return parameter(module, "weight").detach(), (bias.detach() if bias is not None else None)
