"""Finding the origin of the first non-finite value in a block of statistics.

At the first step where anything is non-finite, the origin is the earliest layer in dataflow order
whose weight or bias (as the forward used them) or forward value (output or activation, seen at health steps) is
non-finite; when only gradients are, it is the latest layer in dataflow order with a non-finite
gradient: where backward starts. A layer's activation comes where the module that makes it runs (a
convolution's ReLU after its BatchNorm): a NaN weight of the BatchNorm comes before it.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from xray_tb.health.findings import NonFinite

#: Forward kinds in the order they are named when one layer has several.
_FORWARD_KINDS = ("weight", "bias", "output", "activation")


class FlagRows:
    """Per-step sets of layers flagged non-finite, by kind: ``{step: {kind: set(layers)}}``."""

    def __init__(self):
        self.by_step: dict[int, dict[str, set[str]]] = {}

    def add(self, steps: np.ndarray, layers: list[str], flags: np.ndarray, kind: str) -> None:
        """``flags``: steps × layers booleans."""
        for row, column in zip(*np.nonzero(flags)):
            self.by_step.setdefault(int(steps[row]), {}).setdefault(kind, set()).add(layers[column])

    def add_block(self, block, families: list, checked: frozenset = frozenset()) -> None:
        """The non-finite values of a block of per-iteration statistics (None: no block), but at the
        ``checked`` steps: there the sentinel's flags are the exact check of the weights and gradients as
        the forward and backward left them, and a row may be measured after an optimizer of other layers
        stepped first (a head's, which spreads a NaN to the layers before it)."""
        if block is None:
            return
        skipped = np.isin(block.steps, list(checked)) if checked else None
        for index, family in enumerate(families):
            for column, kind in family.nonfinite_kinds.items():
                values, absent = block.columns[(index, column)], block.absent[(index, column)]
                flagged = ~np.isfinite(values) & ~absent
                if skipped is not None:
                    flagged[skipped] = False
                self.add(block.steps, family.layers, flagged, kind)

    def add_checks(self, block, index: int, layers: list[str]) -> None:
        """The output and activation checks of a block of health steps, family ``index`` of its row."""
        if block is None:
            return
        for column, kind in (("output_nonfinite", "output"), ("activation_nonfinite", "activation")):
            values, absent = block.columns[(index, column)], block.absent[(index, column)]
            self.add(block.steps, layers, (values > 0) & ~absent, kind)


def first_nonfinite(rows: FlagRows, order: list[str], activation_modules: Optional[dict[str, str]] = None) -> Optional[NonFinite]:
    """The origin at the earliest flagged step, or None when nothing was flagged. ``activation_modules``:
    the module whose output each layer's activation is (where it comes in dataflow order), if not the layer."""
    if not rows.by_step:
        return None
    step = min(rows.by_step)
    kinds = rows.by_step[step]
    rank = {name: index for index, name in enumerate(order)}
    made_by = activation_modules or {}
    forward = [(rank.get(made_by.get(layer, layer) if kind == "activation" else layer, len(rank)), kind, layer)
               for kind in _FORWARD_KINDS for layer in kinds.get(kind, ())]
    if forward:
        _, kind, layer = min(forward, key=lambda item: (item[0], _FORWARD_KINDS.index(item[1])))
        return NonFinite(step, layer, kind)
    grads = kinds.get("weight_grad", set())
    layer = max(grads | kinds.get("bias_grad", set()), key=lambda name: rank.get(name, -1))
    return NonFinite(step, layer, "weight_grad" if layer in grads else "bias_grad")
