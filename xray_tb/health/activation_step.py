"""One health step's activation statistics: the activations and outputs the monitor's hooks kept, through
every activation family and the forward checks, into one device row (and the per-unit vectors)."""

from __future__ import annotations

from typing import Optional

import torch

from xray_tb.capture.shared_reductions import SharedReductions
from xray_tb.distributed import Group, combine_activations
from xray_tb.health.scope import Scope
from xray_tb.health.stats import ActivationStatistic, ActivationValue, ForwardChecks
from xray_tb.trace.activations import recompute


def measure(scope: Scope, kept: dict, reductions: SharedReductions, families: list[ActivationStatistic], checks: ForwardChecks,
            group: Optional[Group], step: int, nan: torch.Tensor, shared_rows: Optional[dict] = None) -> tuple[list, dict]:
    """``(row, vectors)`` of one health step, from ``kept`` (the hooks' latest values by tap). Under
    torch.distributed, the families that can combine every rank's batch do (one collective), which also
    carries ``shared_rows`` (``{name: 1-d tensor}``, each replaced in place by every rank's, ``ranks x n``)."""
    values = []
    for layer in scope.activations:
        source = kept.get(layer.source.tap)
        activation = None
        if source is not None and source.outputs:
            tensor = next(iter(source.outputs.values()))
            activation = recompute(layer.source.op, dict(layer.source.kwargs), tensor) if layer.source.op else tensor
        values.append(ActivationValue(layer, activation, first_output(kept.get(scope.output_taps[layer.name])), reductions))
    activations = {value.layer.name: value.activation for value in values}
    outputs = [first_output(kept.get(tap)) for tap in scope.output_taps.values()]
    checked = [activations.get(name) for name in scope.output_taps]
    if group is None:  # the families first: the checks take their maxima from the units' ones
        results = [family.compute(values, nan) for family in families]
        found = checks.compute(outputs, checked)
    else:
        found = checks.compute(outputs, checked)
        shared = combine_activations(group, step, families, values, found, nan, shared_rows)
        results = [family.compute(values, nan) if result is None else result for family, result in zip(families, shared)]
    row: list = []
    vectors: dict = {}
    for family, result in zip(families, results):
        for column in family.columns:
            row.extend(result[column])
        vectors.update({stat: (family.layers, tensors) for stat, tensors in family.vectors().items()})
    for column in checks.columns:
        row.extend(found[column])
    return row, vectors


def first_output(value) -> Optional[torch.Tensor]:
    """The first output a hook kept (None when none)."""
    return None if value is None or not value.outputs else next(iter(value.outputs.values()))
