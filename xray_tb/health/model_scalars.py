"""What the monitor writes for the whole model at each flush: the model-level scalars (the Scalars tab's
view of training health, tags in :mod:`tb_plugin.health_metadata`) and the prune plan when it changed."""

from __future__ import annotations

import hashlib
import json
from typing import Optional

import numpy as np
from tensorboard.compat.proto import event_pb2

from tb_plugin import health_metadata
from xray_tb.health import pruning, writing
from xray_tb.health.buffer import Block


def model_scalar_events(iterations: Optional[Block], series: dict, activations: Optional[Block], activation_series: dict,
                        sharing: frozenset = frozenset()) -> list[event_pb2.Event]:
    """One event per step with ``xray/grad_norm`` and ``xray/update_ratio_max`` (measured iterations)
    and ``xray/dead_fraction_max`` (health steps), each where some layer has a value. ``sharing``: the
    layers whose weights an earlier layer holds too (tied weights), left out of the global norm so that
    a shared gradient counts once."""
    columns = []  # (tag, steps, walls, values, present)
    if iterations is not None:
        grad = series.get("grad_l2")
        if grad is not None:
            counted = np.asarray([layer not in sharing for layer in grad.layers], dtype=bool)
            squares = np.where(grad.absent | ~counted, 0.0, np.square(grad.values, dtype=np.float64)).sum(axis=1)
            columns.append((health_metadata.GRAD_NORM_TAG, iterations, np.sqrt(squares), ~grad.absent.all(axis=1)))
        ratio = series.get("update_ratio")
        if ratio is not None:
            columns.append((health_metadata.UPDATE_RATIO_MAX_TAG, iterations, _worst(ratio), ~ratio.absent.all(axis=1)))
    dead = activation_series.get("dead_fraction") if activations is not None else None
    if dead is not None:
        columns.append((health_metadata.DEAD_FRACTION_MAX_TAG, activations, _worst(dead), ~dead.absent.all(axis=1)))
    if not columns:
        return []
    steps = np.unique(np.concatenate([block.steps for _, block, _, _ in columns]))
    walls = np.zeros(len(steps))
    values = np.zeros((len(steps), len(columns)))
    absent = np.ones((len(steps), len(columns)), dtype=bool)
    for index, (_, block, column, present) in enumerate(columns):
        rows = np.searchsorted(steps, block.steps)
        walls[rows] = block.walls
        values[rows, index] = column
        absent[rows, index] = ~present
    return writing.plain_scalar_events(steps, walls, [tag for tag, *_ in columns], values, absent)


def _worst(entry: writing.Series) -> np.ndarray:
    """Each step's largest present value (NaN when any present value is NaN)."""
    values = np.where(entry.absent, -np.inf, entry.values)
    nan = (np.isnan(entry.values) & ~entry.absent).any(axis=1)
    return np.where(nan, np.nan, values.max(axis=1, initial=-np.inf))


def findings_count_event(step: int, wall: float, count: int) -> event_pb2.Event:
    event = event_pb2.Event(step=int(step), wall_time=wall)
    event.summary.value.add(tag=health_metadata.FINDINGS_COUNT_TAG, simple_value=float(count))
    return event


class PrunePlan:
    """The prune plan as of the latest dead-unit vectors, written when it changed."""

    def __init__(self):
        self._written: Optional[bytes] = None  # the digest of the plan written last (the plan itself is 50 KB on 1,000 layers)

    def event(self, layers: dict, dead_vectors: Optional[dict[str, np.ndarray]], step: int, wall: float) -> Optional[event_pb2.Event]:
        """The plan's event when ``dead_vectors`` (``{layer: 1.0/0.0 vector}``, None: no health step
        since the last write) make a plan other than the one written last."""
        if dead_vectors is None:
            return None
        dead = {layer: [int(u) for u in np.flatnonzero(vector > 0.5)] for layer, vector in dead_vectors.items()}
        entries = [{"layer": e.layer, "units": e.units, "parameters": e.parameters, "reason": e.reason}
                   for e in pruning.plan(layers, {layer: units for layer, units in dead.items() if units})]
        digest = hashlib.sha1(json.dumps(entries).encode("utf-8")).digest()
        if digest == self._written:
            return None
        self._written = digest
        return event_pb2.Event(step=int(step), wall_time=wall, summary=health_metadata.prune_summary(entries))
