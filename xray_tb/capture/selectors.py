"""Choosing which filters or rows of a big tensor are stored.

A selector sees the tensor to store (for batch kinds of rank 3 and more, one sample of the batch),
whose first axis holds the candidate filters (conv) or rows (linear, sequences), and returns the
indices to keep along that axis. Subclass :class:`Selector` and implement :meth:`Selector.select`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
import zlib
from typing import Optional, Sequence

import torch

from xray_tb.numeric import whole

#: Default number of filters kept from a tensor of rank 3 or more (conv weights and feature maps).
DEFAULT_MAX_FILTERS = 16
#: Default number of rows kept from a tensor of rank 2 (linear weights, a batch of features).
DEFAULT_MAX_ROWS = 64


@dataclasses.dataclass(frozen=True)
class SelectionInfo:
    """What the tensor being selected from is."""

    layer: str
    kind: str
    layer_type: str


@dataclasses.dataclass(frozen=True)
class Selection:
    """Indices kept along the first axis of the tensor given to the selector, in display order."""

    indices: tuple[int, ...]


class Selector:
    """Base class of selectors: ``select(tensor, info) -> Selection``."""

    def select(self, tensor: torch.Tensor, info: SelectionInfo) -> Selection:
        raise NotImplementedError

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


@functools.lru_cache(maxsize=64)
def _every_index(size: int) -> tuple[int, ...]:
    """``(0, ..., size - 1)``, one tuple per size for every layer kept whole (thousands of 64-wide layers
    held a tuple each between captures)."""
    return tuple(range(size))


def _count(owner: str, name: str, value, least: int = 1) -> int:
    """``value`` if it is a whole number >= ``least``; else a ValueError naming ``owner(name=...)``."""
    if whole(value) is None or value < least:
        raise ValueError(f"{owner}({name}=...) takes a whole number >= {least}, got {value!r}")
    return int(value)


#: Layers whose outputs are ``[batch, channels, length]``: a sample's ``[channels, length]`` is filters, as
#: the weight's first axis is, not rows.
_CHANNELS_BY_LENGTH = frozenset({"Conv1d", "ConvTranspose1d", "LazyConv1d", "LazyConvTranspose1d"})
_BATCH_KINDS = frozenset({"output", "activation", "grad"})


def _limit(tensor: torch.Tensor, max_filters: int, max_rows: int, info: Optional[SelectionInfo] = None) -> int:
    """How many entries of the first axis may be kept: filters (rank >= 3, or a 1-d convolution's sample
    of channels by length), rows (rank 2), or all of a vector, which is a single row."""
    if tensor.dim() <= 1:
        return tensor.numel()
    if tensor.dim() == 2 and info is not None and info.kind in _BATCH_KINDS and info.layer_type in _CHANNELS_BY_LENGTH:
        return max_filters
    return max_filters if tensor.dim() >= 3 else max_rows


class KeepAll(Selector):
    """Keep every filter or row; with ``max_elements``, only tensors of at most that many elements,
    leaving bigger ones to ``otherwise`` (default :class:`RandomFilters`)."""

    def __init__(self, max_elements: Optional[int] = None, otherwise: Optional[Selector] = None):
        if otherwise is not None and not isinstance(otherwise, Selector):
            raise TypeError(f"KeepAll(otherwise=...) takes a Selector such as RandomFilters(), got {type(otherwise).__name__}")
        self.max_elements = None if max_elements is None else _count("KeepAll", "max_elements", max_elements)
        self.otherwise = otherwise if otherwise is not None or max_elements is None else RandomFilters()

    def select(self, tensor, info):
        if self.max_elements is not None and tensor.numel() > self.max_elements:
            return self.otherwise.select(tensor, info)
        return Selection(tuple(range(tensor.shape[0]) if tensor.dim() else ()))


class FirstN(Selector):
    """Keep the first filters or rows."""

    def __init__(self, max_filters: int = DEFAULT_MAX_FILTERS, max_rows: int = DEFAULT_MAX_ROWS):
        self.max_filters = _count(type(self).__name__, "max_filters", max_filters)
        self.max_rows = _count(type(self).__name__, "max_rows", max_rows)

    def select(self, tensor, info):
        if tensor.dim() == 0:
            return Selection(())
        return Selection(tuple(range(min(tensor.shape[0], _limit(tensor, self.max_filters, self.max_rows, info)))))


class RandomFilters(Selector):
    """Random filters or rows, the same ones at every capture (the default).

    The random generator is seeded from the layer name and ``seed``, so a layer's output, activation,
    gradient and weight show the same filters when their first axes have the same size, at every
    capture and in every run. Tensors whose first axis fits the limit are kept whole, in order.
    """

    def __init__(self, max_filters: int = DEFAULT_MAX_FILTERS, max_rows: int = DEFAULT_MAX_ROWS, seed: int = 0):
        self.max_filters = _count(type(self).__name__, "max_filters", max_filters)
        self.max_rows = _count(type(self).__name__, "max_rows", max_rows)
        self.seed = _count("RandomFilters", "seed", seed, least=0)
        self._chosen: dict[tuple[str, int, int], Selection] = {}

    def select(self, tensor, info):
        if tensor.dim() == 0:
            return Selection(())
        key = (info.layer, tensor.shape[0], _limit(tensor, self.max_filters, self.max_rows, info))
        if key not in self._chosen:
            self._chosen[key] = self._draw(*key)
        return self._chosen[key]

    def _draw(self, layer: str, size: int, limit: int) -> Selection:
        if size <= limit:
            return Selection(_every_index(size))
        generator = torch.Generator().manual_seed(zlib.crc32(layer.encode("utf-8")) + self.seed)
        return Selection(tuple(sorted(torch.randperm(size, generator=generator)[:limit].tolist())))


class ScoresNeeded(Exception):
    """A :class:`ScoredRows` was given a sharded tensor's stand-in (``meta``) before every rank's scores
    were gathered: the sharded capture gathers them and asks again (:mod:`xray_tb.capture.sharded`)."""

    def __init__(self, selector: "ScoredRows", key: tuple[str, int, int]):
        super().__init__(f"{type(selector).__name__} needs the scores of {key[0]!r}'s rows, which are sharded")
        self.selector, self.key = selector, key


class ScoredRows(Selector):
    """The filters or rows of highest :meth:`score`, chosen once per layer and first-axis size at its
    first capture and then kept, so frames stay comparable over time. Subclass it and implement
    :meth:`score` to choose by another per-row criterion.

    A row's score depends on that row's values only, so a sharded (FSDP) tensor is selected from its
    shards: each rank scores the rows it holds, one collective of Xray's gathers the scores, and every
    rank makes the choice it would make on the whole tensor."""

    def __init__(self, max_filters: int = DEFAULT_MAX_FILTERS, max_rows: int = DEFAULT_MAX_ROWS):
        self.max_filters = _count(type(self).__name__, "max_filters", max_filters)
        self.max_rows = _count(type(self).__name__, "max_rows", max_rows)
        self._chosen: dict[tuple[str, int, int], Selection] = {}
        self._agreed: dict[tuple[str, int, int], Selection] = {}  # chosen from every rank's scores: the same on every rank

    def score(self, rows: torch.Tensor) -> torch.Tensor:
        """One score per row of ``rows`` (float32, ``rows x values``), from that row's values alone."""
        raise NotImplementedError

    def select(self, tensor, info):
        if tensor.dim() == 0 or tensor.shape[0] == 0:
            return Selection(())
        # by how many may be kept too: a bias (a vector, kept whole) never takes its weight's filters
        limit = _limit(tensor, self.max_filters, self.max_rows, info)
        key = (info.layer, tensor.shape[0], limit)
        if tensor.is_meta:  # a sharded tensor's stand-in: only a choice made from every rank's scores will do
            if key not in self._agreed:
                raise ScoresNeeded(self, key)
            return self._agreed[key]
        if key not in self._chosen:
            self._chosen[key] = self._choose(self.row_scores(tensor), tensor, limit)
        return self._chosen[key]

    def _choose(self, scores: torch.Tensor, tensor: torch.Tensor, limit: int) -> Selection:
        """:meth:`choose`, given ``limit`` only where the tensor's rank alone would allow another count (a
        subclass's own ``choose(scores, tensor)`` keeps working)."""
        if limit == _limit(tensor, self.max_filters, self.max_rows):
            return self.choose(scores, tensor)
        return self.choose(scores, tensor, limit)

    def row_scores(self, tensor: torch.Tensor) -> torch.Tensor:
        """:meth:`score` of each entry of ``tensor``'s first axis, checked."""
        rows = tensor.detach().float().reshape(tensor.shape[0], -1)
        scores = self.score(rows)
        if not isinstance(scores, torch.Tensor) or tuple(scores.shape) != (rows.shape[0],):
            got = tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__
            raise ValueError(f"{type(self).__name__}.score must return one score per row, shape ({rows.shape[0]},), got {got}")
        return scores

    def choose(self, scores: torch.Tensor, tensor: torch.Tensor, limit: Optional[int] = None) -> Selection:
        """The rows of highest score (a NaN score is the lowest), in index order; at most ``limit`` (by
        default as many as ``tensor``'s rank allows)."""
        scores = scores.float()
        scores = torch.where(torch.isnan(scores), torch.full_like(scores, -math.inf), scores)
        limit = _limit(tensor, self.max_filters, self.max_rows) if limit is None else limit
        top = torch.topk(scores, min(limit, scores.numel())).indices
        return Selection(tuple(sorted(int(i) for i in top)))

    def agree(self, key: tuple[str, int, int], scores: torch.Tensor, stand_in: torch.Tensor) -> None:
        """Choose for a sharded tensor from every rank's ``scores`` (called on every rank alike)."""
        self._agreed[key] = selection = self._choose(scores, stand_in, key[2])
        self._chosen.setdefault(key, selection)  # the other kinds of the layer follow, as in one process


class TopVariance(ScoredRows):
    """The filters or rows of highest variance, chosen once per layer at its first capture and then
    kept, so frames stay comparable over time."""

    def score(self, rows: torch.Tensor) -> torch.Tensor:
        return rows.var(dim=1, unbiased=False)


def check_selection(selection: object, selector: Selector, size: int) -> Sequence[int]:
    """The indices of ``selection``, or a ValueError naming the selector when it is malformed (or
    empty where the first axis is not: a frame of no values)."""
    name = type(selector).__name__
    if not isinstance(selection, Selection):
        raise ValueError(f"{name}.select must return a Selection, got {type(selection).__name__}")
    if size and not selection.indices:
        raise ValueError(f"{name}.select returned no index of the first axis of size {size}; a frame needs one at "
                         f"least (Selection(tuple(range({size}))) keeps them all; leave the kind out of the plan to record none)")
    if set(map(type, selection.indices)) <= {int}:  # the common case, checked without a Python loop
        if selection.indices and (min(selection.indices) < 0 or max(selection.indices) >= size):
            bad = [i for i in selection.indices if not 0 <= i < size]
            raise ValueError(f"{name}.select returned indices {bad[:5]} outside the first axis of size {size}")
        return selection.indices
    indices = []
    for index in selection.indices:
        if isinstance(index, bool) or not hasattr(index, "__index__"):
            raise ValueError(f"{name}.select returned {index!r} among its indices; indices are whole numbers")
        indices.append(operator.index(index))
    bad = [i for i in indices if not 0 <= i < size]
    if bad:
        raise ValueError(f"{name}.select returned indices {bad[:5]} outside the first axis of size {size}")
    return indices
