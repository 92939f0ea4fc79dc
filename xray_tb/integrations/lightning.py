"""Xray for Lightning's ``Trainer`` (``pip install 'xray-tb[lightning]'``)::

    from xray_tb.integrations.lightning import XrayCallback

    trainer = lightning.Trainer(max_epochs=5, callbacks=[XrayCallback(every=100)])
    trainer.fit(model, datamodule)

The callback attaches an :class:`~xray_tb.Xray` to the ``LightningModule`` when fitting starts, on
every rank; under DDP, global rank 0 writes and every rank takes part in training health (Xray's own
rule, ``ranks="zero"``: see :mod:`xray_tb.distributed`). It writes into the run folder of the trainer's ``TensorBoardLogger``, so
Lightning's scalars and the Xray tab are one run (with no TensorBoard logger:
``<default_root_dir>/xray``). It captures in ``on_before_optimizer_step``: after backward and
Lightning's AMP unscaling, before gradient clipping and the optimizer step. Steps are optimizer steps
(with ``accumulate_grad_batches=4``, one per four batches), numbered from ``trainer.global_step``;
under manual optimization with several optimizers, the first optimizer's steps. The Xray is closed
when fitting ends, or on an exception.
"""

from __future__ import annotations

from typing import Any, Optional

import lightning.pytorch as pl
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import move_data_to_device

from xray_tb.io import storage
from xray_tb.integrations._session import XraySession
from xray_tb.capture.schedules import ScheduleLike
from xray_tb.xray import Xray


class XrayCallback(pl.Callback):
    """Record the ``LightningModule``'s layers every ``every`` optimizer steps.

    Args:
        every: the schedule, in optimizer steps: an int n or a callable ``step -> bool``.
        plan: what to record (default: the drafted plan, see :meth:`Xray.draft_plan`).
        **xray_options: any other :class:`~xray_tb.Xray` option (``selector=``, ``probe=``,
            ``health=``, ``logdir=`` or ``writer=`` to write elsewhere, ``example_input=`` or
            ``input_size=`` to trace with; by default the module's ``example_input_array``, else the
            inputs of its first training forward).
    """

    def __init__(self, every: ScheduleLike = 100, plan: Any = None, **xray_options: Any):
        super().__init__()
        self._session = XraySession(every, plan, xray_options, "XrayCallback")

    @property
    def xray(self) -> Optional[Xray]:
        """The Xray of the current (or last) fit; None before the first training forward."""
        return self._session.xray

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        example = getattr(pl_module, "example_input_array", None)
        if example is not None:
            example = move_data_to_device(example, pl_module.device)
        self._session.start(
            pl_module,
            logdir=lambda: run_folder(trainer),
            example=example,
            training=lambda module: trainer.training,  # the sanity check's validation forwards are not training
        )

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer) -> None:
        if _unwrapped(optimizer) is _unwrapped(trainer.optimizers[0]):
            self._session.step(trainer.global_step)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._session.close()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._session.close()


def run_folder(trainer: pl.Trainer) -> str:
    """The run folder of the trainer's first ``TensorBoardLogger``, else ``<default_root_dir>/xray``."""
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            return logger.log_dir
    return storage.join(trainer.default_root_dir, "xray")


def _unwrapped(optimizer):
    return getattr(optimizer, "optimizer", optimizer)  # a LightningOptimizer wraps the torch optimizer
