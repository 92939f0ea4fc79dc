"""Shared helpers for the training-health tests: small models, training loops, and reading the event
files back with TensorBoard's own reader."""

from __future__ import annotations

import glob
import os

import numpy as np
import torch
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.util import tensor_util
from torch import nn

from tb_plugin import health_metadata
from xray_tb.health import reading


def scalars(logdir) -> dict[tuple[str, str], dict[int, float]]:
    """``{(layer, stat): {step: value}}`` of every present value of every health series (plugin data)."""
    stats = {stat for tag in values_by_tag(logdir, health_metadata.SERIES_PREFIX) if (stat := health_metadata.parse_series_tag(tag))}
    found: dict = {}
    for stat in stats:
        layers, steps, values, present = reading.series(str(logdir), stat)
        for row, layer in enumerate(layers):
            cells = np.flatnonzero(present[row])
            if cells.size:
                found[(layer, stat)] = {int(steps[c]): float(values[row, c]) for c in cells}
    return found


def layer_scalars(logdir) -> dict[tuple[str, str], dict[int, float]]:
    """``{(layer, stat): {step: value}}`` of every ``xray_health/`` scalar (``layer_scalars=True``)."""
    found: dict = {}
    for path in sorted(glob.glob(os.path.join(str(logdir), "events.out.tfevents.*"))):
        for event in EventFileLoader(path).Load():
            for value in event.summary.value:
                parsed = health_metadata.parse_scalar_tag(value.tag)
                if parsed is not None:
                    found.setdefault(parsed, {})[event.step] = float(tensor_util.make_ndarray(value.tensor))
    return found


def values_by_tag(logdir, prefix: str) -> dict[str, list[tuple[int, object]]]:
    """``{tag: [(step, summary value)]}`` of every value whose tag starts with ``prefix``."""
    found: dict = {}
    for path in sorted(glob.glob(os.path.join(str(logdir), "events.out.tfevents.*"))):
        for event in EventFileLoader(path).Load():
            for value in event.summary.value:
                if value.tag.startswith(prefix):
                    found.setdefault(value.tag, []).append((event.step, value))
    return found


def relu_mlp(seed: int = 0, sizes=(16, 32, 16, 4)) -> nn.Sequential:
    torch.manual_seed(seed)
    layers: list = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def batches(count: int, inputs: int = 16, classes: int = 4, batch: int = 32, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, inputs, generator=generator), torch.randint(0, classes, (batch,), generator=generator)) for _ in range(count)]


def gradient_stats(grad: torch.Tensor) -> dict[str, float]:
    """The built-in gradient statistics, computed independently with numpy in float64."""
    g = grad.detach().double().numpy().reshape(-1)
    return {
        "grad_mean": float(g.mean()),
        "grad_absmax": float(np.abs(g).max()),
        "grad_var": float(g.var(ddof=1)),
        "grad_l1": float(np.abs(g).sum()),
        "grad_l2": float(np.sqrt((g * g).sum())),
    }


def weighted(model: nn.Module) -> dict[str, nn.Module]:
    return {name: module for name, module in model.named_modules() if isinstance(module._parameters.get("weight"), nn.Parameter)}


def scaler_steps(scaler: torch.amp.GradScaler, *optimizers: torch.optim.Optimizer) -> bool:
    """``scaler.step()`` each optimizer in order, then ``scaler.update()``; whether the scaler backed off
    (it skipped a step for an overflow)."""
    scale = scaler.get_scale()
    for optimizer in optimizers:
        scaler.step(optimizer)
    scaler.update()
    return scaler.get_scale() < scale
