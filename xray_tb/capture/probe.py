"""Probe captures: run a fixed batch through the model without leaving a trace on it."""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import nn

from xray_tb.capture.hooks import TapRecorder
from xray_tb.trace.state import preserved


def run_probe(
    model: nn.Module, recorder: TapRecorder, inputs: tuple, target: Any, loss_fn: Optional[Callable], want_grads: bool
) -> None:
    """Forward the probe ``inputs`` in eval mode with ``recorder`` armed; with ``want_grads``, backward
    ``loss_fn(output, target)`` through ``torch.autograd.grad`` so no ``.grad`` is touched.

    The model is left as it was (see :func:`xray_tb.trace.state.preserved`): attributes, registries,
    buffer values, train/eval modes and RNG state.
    """
    was_armed = recorder.armed
    recorder.arm()
    try:
        with preserved(model), torch.enable_grad():
            model.eval()
            output = model(*inputs)
            if want_grads:
                loss = loss_fn(output, target) if target is not None else loss_fn(output)
                # Gradients with respect to the parameters reach every layer, so the recorder's
                # output-gradient hooks fire; autograd.grad returns them instead of filling .grad.
                params = [p for p in model.parameters() if p.requires_grad]
                if params:
                    torch.autograd.grad(loss, params, allow_unused=True)
    finally:
        if not was_armed:
            recorder.disarm()
