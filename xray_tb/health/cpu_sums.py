"""The non-finite sentinel's check on a CPU, every iteration at memory speed: each gradient's sum, and
each weight's but those known unchanged since they were found finite, added up into one number. A NaN
or an infinity anywhere makes it non-finite; only then does the sentinel look value by value
(:mod:`xray_tb.health.sentinel`), so a finite tensor whose sum overflows is never flagged. A large
weight that nothing but an optimizer step changed since it was found finite, stepped with gradients
found finite, is not read again (:mod:`xray_tb.health.weight_versions`): in a plain loop mostly the
gradients are read."""

from __future__ import annotations

import math
from typing import Optional

import torch

from xray_tb.health import cpu_batches
from xray_tb.health.stats.base import stored_values
from xray_tb.health.weight_versions import WeightVersions


class CpuSums:
    """One finite-or-not answer per iteration for the weights and gradients on a CPU.

    ``follow_versions``: skip the large weights that only an optimizer step changed since they were
    found finite, stepped with gradients found finite (:mod:`xray_tb.health.weight_versions`); off for
    sharded weights, whose local shards are each read at every check.
    """

    def __init__(self, follow_versions: bool = True):
        #: Which weights need no reading; None: read them all.
        self.versions: Optional[WeightVersions] = WeightVersions() if follow_versions else None
        self._plans = cpu_batches.PlanMemo()  # the batches of the summed tensors, kept while their weights are the same

    def finite(self, weights: list[torch.Tensor], grads: list[Optional[torch.Tensor]], recheck: bool = False) -> bool:
        """Whether every gradient and every weight that may have changed is finite, as far as their sums
        tell (an overflowing sum says no: the caller then checks value by value). ``recheck``: the same
        iteration checked again (before its optimizer step): a large weight's gradient found finite at the
        last check and unchanged since is not read again."""
        summed, owners = [], []  # each summed tensor's owner: its weight, of its shape (the batches' plan is kept for them)
        same = self.versions.same_grads(weights, grads) if recheck and self.versions is not None else frozenset()
        for position, (weight, grad) in enumerate(zip(weights, grads)):
            if grad is None or position in same:
                continue
            if grad.layout == torch.strided:
                summed.append(grad)
                owners.append(weight)
            elif (values := stored_values(grad)) is not None:  # sparse (nn.Embedding(sparse=True)): what it stores
                summed.append(values)
                owners.append(values)
        clean = self.versions.clean(weights) if self.versions is not None else frozenset()
        dirty = [t for i, t in enumerate(weights) if i not in clean]
        summed += dirty
        owners += dirty
        # one sum per large tensor, one per batch of small ones (a float16 sum would overflow: float32)
        if not math.isfinite(cpu_batches.total(summed, owners, self._plans)):
            return False
        if self.versions is not None:
            self.versions.checked(weights, grads)
        return True

    def remove(self) -> None:
        """Remove the optimizer hooks that keep the weights' clean marks (idempotent)."""
        if self.versions is not None:
            self.versions.remove()
            self.versions = None
