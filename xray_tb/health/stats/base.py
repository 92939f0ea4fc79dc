"""What a statistic family is: a small class with its layers, its schedule, its device columns and
how they become the published statistics.

Adding a statistic is one new class (registered in :mod:`xray_tb.health.stats`):

* an :class:`IterationStatistic` runs on every health iteration, on the weights and gradients as the
  iteration's backward left them;
* an :class:`ActivationStatistic` runs at health steps, on the activations the forward produced.

``compute`` returns, for each of its ``columns``, one 0-d tensor per layer of the family (None where the
layer has nothing to measure), or one 1-D tensor with a value per layer, left on the tensors' device
(no host sync). The monitor stacks them into one row per step and brings rows to the
host in blocks, where ``finalize`` turns the columns (steps × layers, float64) into the statistics that
are written (``{stat: steps × layers}``).
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Optional

import numpy as np
import torch

from xray_tb.capture.shared_reductions import SharedReductions
from xray_tb.health.scope import ActivationLayer


@dataclasses.dataclass
class IterationView:
    """The weights and their gradients at one iteration, one entry per weight: most layers have one, a
    layer with several (an LSTM) has one entry for each, combined per layer by the column's
    ``shard_ops`` (:mod:`xray_tb.health.pieces`)."""

    weights: list[torch.Tensor]
    grads: list[Optional[torch.Tensor]]
    nan: torch.Tensor  # a 0-d NaN on the weights' device
    index: int  # how many health iterations came before this one


@dataclasses.dataclass
class ActivationValue:
    """One activation layer at a health step: its activation and its output (None when not seen), and
    the step's :class:`~xray_tb.capture.shared_reductions.SharedReductions`: a reduction taken through
    it (a unit's maximum, a channel's sums) is computed once per tensor and step, for every family and
    for the frames' statistics."""

    layer: ActivationLayer
    activation: Optional[torch.Tensor]
    output: Optional[torch.Tensor]
    reductions: Optional[SharedReductions] = None


class Statistic:
    """Shared by both kinds: ``layers`` (names, dataflow order), ``columns`` and ``finalize``."""

    columns: tuple[str, ...] = ()
    #: Columns checked for non-finite values by the monitor, with the kind they stand for.
    nonfinite_kinds: dict[str, str] = {}

    def __init__(self, layers: list[str]):
        self.layers = layers

    def finalize(self, columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The statistics to write from this family's columns (steps × layers each)."""
        return dict(columns)


class IterationStatistic(Statistic):
    #: How each column of one layer combines over the shards of a sharded (FSDP) parameter, computed on
    #: each rank's shard: ``"sum"``, ``"l2"`` (root of the sum of squares) or ``"max"`` (see
    #: :mod:`xray_tb.health.shards`); a column left out keeps each rank's value, of its own shard.
    shard_ops: dict[str, str] = {}

    def compute(self, view: IterationView) -> dict[str, list[torch.Tensor]]:
        raise NotImplementedError


class ActivationStatistic(Statistic):
    def compute(self, values: list[ActivationValue], nan: torch.Tensor) -> dict[str, list[torch.Tensor]]:
        raise NotImplementedError

    def vectors(self) -> dict[str, list[torch.Tensor]]:
        """Per-unit vectors of the last :meth:`compute` to store whole, ``{stat: [one per layer]}``, asked for
        once per health step (a family may hand them over and keep none until its next :meth:`compute`)."""
        return {}

    # Under torch.distributed (see :mod:`xray_tb.distributed`), a family that combines every rank's batch
    # gives its part of a health step as one 1-D tensor (:meth:`share`), and computes its columns from
    # every rank's part (:meth:`compute_shared`, one row per rank). A family whose ``share`` returns None
    # (custom statistics) is computed on each rank's own batch with :meth:`compute`.

    def share(self, values: list[ActivationValue]) -> Optional[torch.Tensor]:
        """This rank's part of a health step's statistics (1-D), or None to compute them per rank."""
        return None

    def compute_shared(self, gathered: torch.Tensor, nan: torch.Tensor) -> dict[str, list[torch.Tensor]]:
        """The columns from every rank's :meth:`share` (``ranks × length``, float64)."""
        raise NotImplementedError


_LAYOUT = operator.attrgetter("layout")


def present(tensors: list[Optional[torch.Tensor]]) -> tuple[list[int], list[torch.Tensor]]:
    """The indices of the entries that hold values (gradients may be None), and those values: a dense
    tensor itself, a sparse one's (``nn.Embedding(sparse=True)``) as :func:`stored_values` gives them."""
    stored = stored_all(tensors)
    indices = [i for i, t in enumerate(stored) if t is not None]
    return indices, [stored[i] for i in indices]


def stored_all(tensors: list[Optional[torch.Tensor]]) -> list[Optional[torch.Tensor]]:
    """:func:`stored_values` of each entry (None stays None): the list as it is, without a call per
    tensor, when every entry is dense (the common case)."""
    if all(layout is torch.strided for layout in set(map(_LAYOUT, [t for t in tensors if t is not None]))):
        return list(tensors)
    return [None if t is None else stored_values(t) for t in tensors]


def stored_values(tensor: torch.Tensor) -> Optional[torch.Tensor]:
    """The values a sparse COO tensor stores, each index once (coalesced: duplicates added, as the dense
    tensor holds them; the size of what is stored, not of the tensor): sums, norms and extremes over
    them are those of the whole tensor, whose other values are zeros. The tensor itself when dense;
    None for another layout."""
    if tensor.layout == torch.strided:
        return tensor
    if tensor.layout == torch.sparse_coo:
        return tensor.coalesce().values()
    return None


def scatter(values, indices: list[int], size: int):
    """``size`` entries: ``values`` (a list, or a vector) at ``indices``, None (absent) elsewhere; ``values``
    itself when every entry has one."""
    if len(indices) == size:
        return values
    out: list[Optional[torch.Tensor]] = [None] * size
    for i, value in zip(indices, values.unbind() if torch.is_tensor(values) else values):
        out[i] = value
    return out


def row_of(families: list[Statistic], results: list[dict]) -> list:
    """One step's values in layout order (family by family, column by column) from each family's
    ``compute``: a column's list is spread out, a column's vector kept whole (:class:`~xray_tb.health.buffer.RowBuffer`
    takes both)."""
    row: list = []
    for family, result in zip(families, results):
        for column in family.columns:
            values = result[column]
            if torch.is_tensor(values):
                row.append(values)
            else:
                row.extend(values)
    return row


def entries(row: list) -> list[Optional[torch.Tensor]]:
    """``row`` (of :func:`row_of`) with one 0-d value or None per entry: its vectors spread out."""
    if not any(value is not None and value.dim() for value in row):
        return row
    return [entry for value in row for entry in (value.unbind() if value is not None and value.dim() else (value,))]
