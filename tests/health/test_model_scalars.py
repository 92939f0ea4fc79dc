"""The Scalars tab's view of training health: a few model-level scalars by default, the per-layer ones
(``xray_health/``, ``xray_health_epoch/``, ``xray_stats/``) only with ``layer_scalars=True``."""

from __future__ import annotations

import math

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn
from torch.nn import functional as F

from tb_plugin import health_metadata
from xray_tb import Xray, open_run
from xray_tb.health import HealthOptions

from tests.health.helpers import batches, scalars
from tests import models


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32, bias=False), nn.ReLU(), nn.Linear(32, 4, bias=False))


def _train(logdir, steps: int = 8, **kwargs) -> tuple[dict[int, float], list]:
    """Train; ``{step: torch's global gradient norm}`` and the findings."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    norms = {}
    with Xray(model, input_size=(16,), logdir=str(logdir), every=4, health=HealthOptions(every=1), **kwargs) as xray:
        for step, (x, y) in enumerate(batches(steps)):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            norms[step] = float(torch.nn.utils.clip_grad_norm_(model.parameters(), math.inf))
            xray.take_graphs()
            optimizer.step()
        xray.end_epoch()
        findings = xray.findings()
    return norms, findings


def _tags(logdir) -> list[str]:
    return EventAccumulator(str(logdir)).Reload().Tags()["scalars"]


def test_a_default_run_writes_model_scalars_and_no_per_layer_scalars(tmp_path):
    norms, findings = _train(tmp_path)
    accumulator = EventAccumulator(str(tmp_path)).Reload()
    tags = accumulator.Tags()["scalars"]
    assert not [tag for tag in tags if tag.startswith(("xray_stats/", "xray_health/", "xray_health_epoch/"))]
    assert {health_metadata.GRAD_NORM_TAG, health_metadata.UPDATE_RATIO_MAX_TAG, health_metadata.DEAD_FRACTION_MAX_TAG} <= set(tags)
    grad_norm = {event.step: event.value for event in accumulator.Scalars(health_metadata.GRAD_NORM_TAG)}
    assert sorted(grad_norm) == sorted(norms)
    for step, expected in norms.items():
        assert grad_norm[step] == pytest.approx(expected, rel=1e-5)
    written = scalars(tmp_path)  # the plugin data holds every per-layer value
    ratio = {event.step: event.value for event in accumulator.Scalars(health_metadata.UPDATE_RATIO_MAX_TAG)}
    for step, value in ratio.items():
        assert value == pytest.approx(max(written[(layer, "update_ratio")][step] for layer in ("0", "2")
                                          if step in written[(layer, "update_ratio")]), rel=1e-6)
    dead = {event.step: event.value for event in accumulator.Scalars(health_metadata.DEAD_FRACTION_MAX_TAG)}
    assert sorted(dead) == [0, 4] and dead[4] == pytest.approx(written[("0", "dead_fraction")][4])
    if findings:
        assert accumulator.Scalars(health_metadata.FINDINGS_COUNT_TAG)[-1].value == len(findings)
    assert open_run(tmp_path).to_pandas()["mean"].notna().all()  # frame statistics read from plugin data


def test_layer_scalars_brings_every_per_layer_scalar_back(tmp_path):
    _train(tmp_path, layer_scalars=True)
    tags = _tags(tmp_path)
    assert "xray_health/0/grad_l2" in tags and "xray_health_epoch/0/grad_l2/mean" in tags
    assert any(tag.startswith("xray_stats/0/") for tag in tags) and health_metadata.GRAD_NORM_TAG in tags


def test_layer_scalars_must_be_a_bool(tmp_path):
    with pytest.raises(TypeError, match="layer_scalars= must be True or False, got str 'yes'"):
        Xray(_model(), input_size=(16,), logdir=str(tmp_path), layer_scalars="yes")




def test_a_tied_weight_counts_once_in_the_global_gradient_norm(tmp_path):
    torch.manual_seed(0)
    model = models.TiedLanguageModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    norms = {}
    weights = [model.emb.weight, model.block.weight]  # each weight once: the head's is the embedding's
    with Xray(model, torch.randint(0, 20, (4, 6)), logdir=str(tmp_path), health=HealthOptions(every=1)) as xray:
        for step in range(5):
            optimizer.zero_grad()
            tokens = torch.randint(0, 20, (4, 6))
            F.cross_entropy(model(tokens).reshape(-1, 20), tokens.roll(1, dims=1).reshape(-1)).backward()
            norms[step] = float(torch.linalg.vector_norm(torch.stack([w.grad.norm() for w in weights])))
            xray.take_graphs()
            optimizer.step()
    accumulator = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    accumulator.Reload()
    grad_norm = {event.step: event.value for event in accumulator.Scalars(health_metadata.GRAD_NORM_TAG)}
    assert grad_norm == pytest.approx(norms, rel=1e-5)
