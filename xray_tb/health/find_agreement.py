"""The ranks' agreement on the first non-finite iteration: each rank's own find as one row, and the
earliest over the ranks, with the flags of every rank that saw it then.

The rows ride gathers that run anyway: under FSDP, the measured iterations' and the one at close
(:mod:`~xray_tb.health.shards`); under DDP and FSDP, the health steps' (:mod:`~xray_tb.health.activation_step`).
So a NaN that one rank alone sees (a value written into that rank's copy of a weight, which no
gradient shows) is reported by every rank, and written once, by rank 0; and where the ranks saw
different kinds at the same step (rank 1 its weight, rank 0 the gradients it made), all name the same.
Each row also says whether that rank's batch held the NaN or Inf (its input flags:
:mod:`~xray_tb.health.input_watch`), so every rank names where rank 1's batch brought it in.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from xray_tb.health import cpu_batches
from xray_tb.health.sentinel import NonFiniteSentinel
from xray_tb.health.stats.base import stored_all
from xray_tb.distributed import Group


def local_row(sentinel: NonFiniteSentinel) -> torch.Tensor:
    """This rank's first non-finite iteration: its step (-1: none), flags (weights then gradients), and
    whether its batch held the NaN or Inf. Reads a find kept on the device (one sync)."""
    found = sentinel.local_find()
    if found is None:  # a find waiting for its optimizer step: a weight in it stands (one rank's copy of it, under DDP)
        found = sentinel.held_forward_find()
    flags = found[1] if found is not None else [False] * sentinel.flag_count
    batch = found is not None and found[0] in sentinel.input_finds
    return torch.tensor([-1.0 if found is None else float(found[0]), *map(float, flags), float(batch)], dtype=torch.float64)


def agree(sentinel: NonFiniteSentinel, rows: torch.Tensor) -> None:
    """File the earliest step of the ranks' :func:`local_row` rows (``ranks x values``, on the host) as
    agreed, with the flags of every rank that saw it then, and whether the batch of any of them held
    it; nothing when no rank found one. The first agreement stands."""
    steps = rows[:, 0]
    if bool((steps >= 0).any()):
        first = float(steps[steps >= 0].min())
        *flags, batch = (rows[steps == first, 1:] > 0).any(dim=0).tolist()
        sentinel.agree(int(first), flags)
        if batch:
            sentinel.input_finds.setdefault(int(first), ((), [True]))


def replays(group: Optional[Group], sentinel: NonFiniteSentinel, step: int, grads: list, found: bool, searched: bool) -> bool:
    """Whether iteration ``step``'s forwards run again to find where a NaN entered (``found``: the sentinel
    found one at ``step``; ``searched``: its search had not ended before). Under DDP that runs a
    collective, so every rank decides alike, from its all-reduced gradients (the same on every rank),
    until the ranks agreed on a first non-finite value: a rank whose own search ended (its copy of a
    weight held a NaN the others' did not) reads its gradients for it."""
    if group is None:
        return found
    if sentinel.agreed is not None:
        return False
    if searched:
        return found and sentinel.flags_gradients(step)
    present = [grad for grad in stored_all(grads) if grad is not None]
    return bool(present) and not math.isfinite(cpu_batches.total(present))
