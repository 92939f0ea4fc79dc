"""Xray under ``torch.distributed`` (DistributedDataParallel, FSDP): which rank writes, and the one collective
of a health step.

* ``Xray(ddp_model, ...)`` looks into ``ddp_model.module`` (:func:`unwrap`): layer names are the inner
  model's, and tracing and probes run the inner module, so no DDP collective or bucket hook is touched.
* Under an initialised process group of more than one process, ``ranks="zero"`` (the default) lets rank 0
  write and gives the other ranks a :class:`NullSink` (no event file); ``ranks="all"`` writes one run
  per rank, ``<logdir>/rank<k>`` (:func:`writing_rank`).
* Gradient and weight statistics need no collective: Xray measures after backward, when DDP's all-reduce
  has made the gradients (and so the weights) equal on every rank. The non-finite sentinel, which checks
  them, therefore agrees across ranks too.
* Activation statistics (dead units, saturation, channel variance) and the non-finite checks of outputs
  and activations combine every rank's batch with one ``all_gather`` per health step
  (:meth:`Group.gather`; two at the first health step, which agrees on the vector's size): every rank packs its part into one flat float64 vector, and each rank
  combines the gathered rows itself (a maximum for dead units, sums for saturation, Chan's formula for
  channel variances, a maximum of the non-finite flags), so maxima and sums need no second collective.
* Xray's collectives run in a gloo process group of its own, which ``Xray()`` sets up with every rank
  (:class:`Group`): they never pair with DDP's or FSDP's, and one that waits past Xray's timeout ends
  in gloo itself, so the rank that raised can exit.
* Health steps follow the activation schedule (``HealthOptions(activations=)``, else Xray's ``every=``),
  a function of the step: every rank reaches the same health steps when every rank calls
  ``take_graphs()`` (or steps its optimizer) the same number of times. The gathered vector starts with a
  head (the step, the length, the kind of gather and a fingerprint of the measured layers); ranks whose
  heads differ raise :class:`DistributedMismatch` on every rank, and a rank left waiting
  alone (another one stopped calling) raises it after ``collective_timeout`` seconds. Under DDP nothing
  else Xray does issues a collective: not the pacing of the per-iteration statistics (decided per rank,
  from its own timing, and harmless since they need no collective), not a flush, not ``close()``.
* DDP's ``Join`` (uneven inputs) shadows DDP's collectives on a rank that ran out of inputs, not Xray's:
  under ``Join([ddp])`` the others would wait alone at their next health step. The first gather made
  under it warns (:meth:`Group.gather`), pointing to ``throw_on_early_termination=True``.
* Under FSDP (sharded parameters, :mod:`xray_tb.sharding`) captures, measured iterations and ``close()``
  gather too, each kind of gather agreeing on its own size (:mod:`xray_tb.capture.sharded`,
  :mod:`xray_tb.health.shards`). Once a collective failed, :attr:`Group.failed` says so and ``close()``
  issues none.
"""

from __future__ import annotations

import datetime
import functools
import warnings
import weakref
import zlib
from typing import Optional, Union

import torch
from torch import nn

from xray_tb import sharding
from xray_tb.user_frame import user_stacklevel

#: How long an Xray collective may wait for the other ranks, by default.
DEFAULT_TIMEOUT_SECONDS = 300.0

RANKS = ("zero", "all")


class DistributedMismatch(RuntimeError):
    """The ranks disagree about Xray's collectives (a rank called ``take_graphs()`` a different number of
    times, or stopped): raised instead of waiting forever; training health never swallows it."""


def unwrap(model: nn.Module) -> nn.Module:
    """The module Xray looks into: ``model.module`` of a ``DistributedDataParallel``, else ``model``."""
    try:
        from torch.nn.parallel import DistributedDataParallel
    except ImportError:  # pragma: no cover - torch built without distributed
        return model
    return model.module if isinstance(model, DistributedDataParallel) else model


def ddp_of(modules: list[nn.Module]) -> Optional[nn.Module]:
    """The ``DistributedDataParallel`` among ``modules`` (a model and its wrappers), else None."""
    try:
        from torch.nn.parallel import DistributedDataParallel
    except ImportError:  # pragma: no cover - torch built without distributed
        return None
    return next((module for module in modules if isinstance(module, DistributedDataParallel)), None)


JOIN_WARNING = (
    "the DDP model runs under Join([ddp]) without throw_on_early_termination=True: Join shadows DDP's "
    "collectives on a rank that ran out of inputs, but not Xray's health collectives, so the other ranks "
    "stop at their next health step after collective_timeout= with DistributedMismatch. Use "
    "Join([ddp], throw_on_early_termination=True) (every rank then stops at the next forward, and "
    "xray.close() works), or give every rank the same number of batches (DistributedSampler(drop_last=True))"
)


def timeout_seconds(value: Union[float, int, datetime.timedelta]) -> datetime.timedelta:
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"collective_timeout= must be a positive number of seconds, got {value!r}")
    return datetime.timedelta(seconds=float(value))


class Group:
    """Xray's own process group over every rank: this rank, the world size and the one collective.

    A gloo group of its own (``new_group``, made by every rank in ``Xray()``), with Xray's timeout: its
    collectives never pair with DDP's or FSDP's on the default group, and one that waits past the timeout
    fails in gloo itself, so a rank that raised :class:`DistributedMismatch` can exit (an unmatched
    collective on the default group would keep it alive until that group's own timeout, 30 minutes by
    default), and its peers' next collective then fails instead of waiting. Values travel through host
    memory: small vectors at health steps, and under FSDP the rows a capture keeps. The group lives as
    long as the process (destroying it while a peer may still be reading its last collective could cut
    that short). ``ddp``: the model's ``DistributedDataParallel`` wrapper, if any, watched for ``Join``."""

    def __init__(self, timeout: datetime.timedelta, ddp: Optional[nn.Module] = None):
        import torch.distributed as dist

        self.rank = dist.get_rank()
        self.size = dist.get_world_size()
        self.timeout = timeout
        self.failed = False  # a collective failed or the ranks disagreed: the ranks are out of step for good
        self._sizes: dict[str, int] = {}  # the length of the values every rank sends, per kind of gather
        self.device = torch.device("cpu")
        self._ddp = None if ddp is None else weakref.ref(ddp)  # until Join([ddp]) is warned about
        try:
            self._group = dist.new_group(backend="gloo", timeout=timeout)
        except RuntimeError as error:  # a rank that creates no Xray (or much later): the others give up here
            self.failed = True
            raise self._mismatch("construction", 0, error) from error

    @classmethod
    def current(cls, timeout: datetime.timedelta, ddp: Optional[nn.Module] = None) -> Optional["Group"]:
        """The initialised default group of more than one process, else None."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return None
        return cls(timeout, ddp)

    def gather(self, step: int, parts: torch.Tensor, what: str = "health", fingerprint: int = 0) -> torch.Tensor:
        """Every rank's ``parts`` (1-D), one row per rank, on ``parts``'s device.

        One ``all_gather`` of a vector of a size every rank agrees on: a head (the step, this rank's
        length, a code of ``what`` and ``fingerprint``, a 32-bit checksum of what ``parts`` holds) and
        ``parts`` padded (or cut) to that size, so ranks with different lengths never send buffers of
        different sizes (gloo aborts on those). When every rank's length outgrew the size (the first
        health step, a statistic added), every rank sees it and gathers once more at the new size.
        Each kind of gather (``what``: health, iteration, capture, ...) agrees on its own size.
        Raises :class:`DistributedMismatch` when the heads differ (gathers of different kinds, steps,
        lengths or fingerprints), or when the others do not come within the timeout."""
        self._warn_about_join()
        length = parts.numel()
        head = torch.tensor([float(step), float(length), float(_code(what)), float(fingerprint)],
                            dtype=torch.float64, device=parts.device)
        while True:
            size = self._sizes.get(what, 0)
            payload = parts.to(torch.float64)[:size]
            if length < size:
                payload = torch.cat([payload, payload.new_zeros(size - length)])
            gathered = self._all_gather(torch.cat([head, payload]), step, what).to(parts.device)
            heads = [tuple(map(int, row)) for row in gathered[:, :HEAD].tolist()]
            if any(other != heads[self.rank] for other in heads):
                self.failed = True
                raise DistributedMismatch(_disagreement(what, heads))
            if length <= size:
                return gathered[:, HEAD:HEAD + length]
            self._sizes[what] = length

    def _warn_about_join(self) -> None:
        """Warn once when the DDP model runs under ``Join`` with ``throw_on_early_termination=False``
        (its private ``_join_config``, read with care)."""
        config = getattr(self._ddp and self._ddp(), "_join_config", None)
        if getattr(config, "enable", False) is True and getattr(config, "throw_on_early_termination", True) is False:
            self._ddp = None
            warnings.warn(JOIN_WARNING, stacklevel=user_stacklevel())

    def _all_gather(self, flat: torch.Tensor, step: int, what: str) -> torch.Tensor:
        import torch.distributed as dist

        flat = flat.to(self.device)
        rows = [torch.empty_like(flat) for _ in range(self.size)]
        try:
            dist.all_gather(rows, flat, group=self._group, async_op=True).wait(timeout=self.timeout)
        except RuntimeError as error:
            self.failed = True
            raise self._mismatch(what, step, error) from error
        return torch.stack(rows)

    def _mismatch(self, what: str, step: int, error: Exception) -> "DistributedMismatch":
        hint = _HINTS.get(what, "Every rank must call take_graphs() (or step its optimizer) the same number of times, "
                                "on models of the same layers; a rank that ran out of inputs stops calling it (uneven "
                                "data, e.g. under DDP's Join([ddp]): use Join([ddp], throw_on_early_termination=True))")
        return DistributedMismatch(
            f"rank {self.rank}: Xray's {what} collective at step {step} failed or waited more than "
            f"{self.timeout.total_seconds():g} s for the other ranks ({error}). {hint}"
        )


#: The values that start every gathered row: step, length, kind of gather, fingerprint.
HEAD = 4

#: The kinds of gather, by the code their heads carry (a CRC32: exact in float64).
KINDS = ("construction", "health", "iteration", "capture", "scores", "close", "origin")


def _code(what: str) -> int:
    return zlib.crc32(what.encode())


@functools.lru_cache(maxsize=16)  # the same layers and lengths at most health steps
def fingerprint(*items) -> int:
    """A 32-bit checksum of ``items`` (tuples of names and lengths: their ``repr``), for :meth:`Group.gather`."""
    return zlib.crc32(repr(items).encode())


def _disagreement(what: str, heads: list[tuple[int, ...]]) -> str:
    """Why the ranks' heads (step, length, kind, fingerprint) differ, naming each rank's."""
    names = {_code(kind): kind for kind in KINDS}
    where = ", ".join(f"rank {k} at step {s} ({n} values, {names.get(c, c)} gather, fingerprint {f:08x})"
                      for k, (s, n, c, f) in enumerate(heads))
    if len({head[2] for head in heads}) > 1:
        return (f"the ranks' Xray collectives are out of step (gathers of different kinds met): {where}. Every rank "
                "must make the same take_graphs() calls (and optimizer steps), captures and close()")
    if len({head[0] for head in heads}) > 1:
        return (f"the ranks are at different {what} steps: {where}. Every rank must call take_graphs() (or step its "
                "optimizer) the same number of times, with the same step numbers, on the same model")
    return (f"the ranks measured different layers (or parts of different sizes) at a {what} gather: {where}. Every "
            "rank must run the same layers of the same model (no branch taken on some ranks only)")


def combine_activations(group: Group, step: int, families: list, values: list, checks: dict[str, list],
                        nan: torch.Tensor, rows: Optional[dict[str, torch.Tensor]] = None) -> list[Optional[dict]]:
    """A health step's activation statistics over every rank's batch, with one :meth:`Group.gather`.

    ``families`` are the monitor's activation families: each one's :meth:`share` of ``values`` is packed,
    with the non-finite ``checks`` (``{column: [flag or None per layer]}``, made global in place: a value
    non-finite on any rank is non-finite); the columns of each family that shares are computed from
    every rank's part, and None is returned for the others (computed per rank by the monitor). The
    gather's fingerprint covers the measured layers' names and each part's length: ranks that measured
    different layers raise :class:`DistributedMismatch`, even when their parts have the same sizes.
    ``rows`` (``{name: 1-d tensor}``) travel too, each replaced in place by every rank's (``ranks x n``, on the host).
    """
    device = nan.device
    rows = {} if rows is None else rows
    extra = [row.to(device, torch.float64) for row in rows.values()]
    parts = [family.share(values) for family in families]
    flags = [flag for column in checks.values() for flag in column]
    encoded = torch.tensor([-1.0 if flag is None else float(flag) for flag in flags], dtype=torch.float64, device=device)
    measured = tuple(value.layer.name for value in values if value.activation is not None)
    lengths = (*(-1 if part is None else part.numel() for part in parts), *(row.numel() for row in extra))
    gathered = group.gather(step, torch.cat([*(part.to(device) for part in parts if part is not None), encoded, *extra]),
                            fingerprint=fingerprint(measured, lengths, len(flags)))
    results, start = [], 0
    for family, part in zip(families, parts):
        if part is None:
            results.append(None)
            continue
        results.append(family.compute_shared(gathered[:, start:start + part.numel()], nan))
        start += part.numel()
    combined = gathered[:, start:start + len(flags)].amax(dim=0).float()
    start += len(flags)
    for name, row in zip(list(rows), extra):
        rows[name], start = gathered[:, start:start + row.numel()].cpu(), start + row.numel()
    for column, column_flags in checks.items():
        checks[column] = [None if flag < 0 else flag for flag in combined[:len(column_flags)]]
        combined = combined[len(column_flags):]
    return results


def writing_rank(group: Optional[Group], ranks: str) -> tuple[bool, Optional[str]]:
    """Whether this process writes, and the sub-folder of its run (``rank<k>`` with ``ranks="all"``)."""
    if ranks not in RANKS:
        raise ValueError(f"ranks= is 'zero' (rank 0 writes) or 'all' (one run per rank), got {ranks!r}")
    if group is None:
        return True, None
    if ranks == "all":
        return True, f"rank{group.rank}"
    return group.rank == 0, None


class NullSink:
    """The sink of a rank that writes nothing: every write is dropped, no file is opened."""

    def __init__(self, logdir: Optional[str]):
        self.logdir = logdir

    def add(self, summary, step: int, wall_time: Optional[float] = None) -> None:
        pass

    def add_event(self, event) -> None:
        pass

    def flush(self, timeout: Optional[float] = None) -> None:
        pass

    def close(self, timeout: Optional[float] = None) -> None:
        pass


_HINTS = {
    "close": "Every rank must call xray.close()",
    "construction": "Every rank must create its Xray at the same point: Xray() sets up Xray's own process group with "
                    "every rank (and under FSDP, tracing the model runs FSDP's all-gathers on every rank)",
}


def meet_before_tracing(group: Optional[Group], model: nn.Module) -> None:
    """Under FSDP, ``Xray()``'s tracing forward runs FSDP's own all-gathers, which wait as long as the
    process group's timeout, not Xray's. Every rank first meets here, in one small gather with Xray's
    timeout, so a rank that creates no Xray makes the others raise :class:`DistributedMismatch` instead
    of waiting in FSDP. Nothing happens without sharded parameters (DDP's tracing runs no collective)."""
    if group is not None and sharding.any_sharded(model.parameters()):
        group.gather(0, torch.zeros(1), what="construction")
