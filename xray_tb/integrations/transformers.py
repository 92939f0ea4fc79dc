"""Xray for Hugging Face's ``transformers.Trainer`` (``pip install 'xray-tb[transformers]'``)::

    from xray_tb.integrations.transformers import XrayCallback

    trainer = Trainer(model=model, args=TrainingArguments(..., report_to=["tensorboard"]),
                      train_dataset=dataset, callbacks=[XrayCallback(every=100)])
    trainer.train()

On every process, the callback attaches an :class:`~xray_tb.Xray` to the model at its first training
forward (under DDP the main process writes, and every process takes part in training health: Xray's
``ranks="zero"``, see :mod:`xray_tb.distributed`) and traces it with that forward's inputs (the batch dict: ``input_ids``,
``attention_mask``, ``labels``, ...), unless it was given ``example_input=``. It writes into the run
folder of the Trainer's TensorBoard integration (the ``TensorBoardCallback``'s ``logging_dir``), so the
Trainer's scalars and the Xray tab are one run; without that integration, into
``$TENSORBOARD_LOGGING_DIR`` or ``<output_dir>/xray``. It captures in ``on_pre_optimizer_step``: after
backward and gradient clipping, before the optimizer step, once per optimizer step (gradient
accumulation included); steps are ``state.global_step``. The Xray is closed at ``on_train_end``
(the Trainer has no exception hook: after an exception it is closed when garbage-collected or when
Python exits).
"""

from __future__ import annotations

import inspect
import os
from typing import Any, Optional

from transformers import TrainerCallback
from transformers.integrations import TensorBoardCallback
from transformers.trainer_callback import CallbackHandler

from xray_tb.io import storage
from xray_tb.integrations._session import XraySession
from xray_tb.capture.schedules import ScheduleLike
from xray_tb.xray import Xray


class XrayCallback(TrainerCallback):
    """Record the model's layers every ``every`` optimizer steps of a ``transformers.Trainer``.

    Args:
        every: the schedule, in optimizer steps: an int n or a callable ``step -> bool``.
        plan: what to record (default: the drafted plan, see :meth:`Xray.draft_plan`).
        **xray_options: any other :class:`~xray_tb.Xray` option (``selector=``, ``health=``,
            ``logdir=`` or ``writer=`` to write elsewhere, ``example_input=`` to trace with).
    """

    def __init__(self, every: ScheduleLike = 100, plan: Any = None, **xray_options: Any):
        self._session = XraySession(every, plan, xray_options, "XrayCallback")

    @property
    def xray(self) -> Optional[Xray]:
        """The Xray of the current (or last) training; None before its first training forward. Every
        process has one: under DDP the main one writes and all take part in training health
        (Xray's ``ranks="zero"``, see :mod:`xray_tb.distributed`)."""
        return self._session.xray

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if model is None:
            return
        tensorboard = _tensorboard_callback(inspect.currentframe())
        self._session.start(model, logdir=lambda: run_folder(args, tensorboard))

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self._session.step(state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        self._session.close()


def run_folder(args, tensorboard: Optional[TensorBoardCallback] = None) -> str:
    """Where the Trainer's TensorBoard integration writes: its ``logging_dir`` (set when training
    begins), else ``$TENSORBOARD_LOGGING_DIR``, ``args.logging_dir`` (Transformers 4), or
    ``<output_dir>/xray``."""
    if tensorboard is not None and tensorboard.logging_dir:
        return tensorboard.logging_dir
    folder = os.environ.get("TENSORBOARD_LOGGING_DIR") or getattr(args, "logging_dir", None)
    if folder:
        return os.path.expanduser(folder)
    return storage.join(args.output_dir or ".", "xray")


def _tensorboard_callback(frame) -> Optional[TensorBoardCallback]:
    """The Trainer's ``TensorBoardCallback``, found on the ``CallbackHandler`` that is calling us
    (a callback is handed the arguments and the model, not the Trainer or its other callbacks)."""
    while frame is not None:
        handler = frame.f_locals.get("self")
        if isinstance(handler, CallbackHandler):
            return next((callback for callback in handler.callbacks if isinstance(callback, TensorBoardCallback)), None)
        frame = frame.f_back
    return None
