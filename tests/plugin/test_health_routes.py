"""The /health and /findings routes over real recorded runs, on both of TensorBoard's loaders."""

from __future__ import annotations

import base64
import sys

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from xray_tb import Xray, open_run
from xray_tb.health import HealthOptions

from tests.health.helpers import batches, relu_mlp, scalars
from tests.helpers.plugin_app import get, serve
from tests.tensorboard_server import get_json, tensorboard

STEPS = 30


def record(logdir):
    model = relu_mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with Xray(model, input_size=(16,), logdir=str(logdir), every=10, health=HealthOptions(every=1)) as xray:
        for step, (x, y) in enumerate(batches(STEPS)):
            if step == 20:
                with torch.no_grad():
                    model[2].weight[0, 0] = float("nan")
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            xray.take_graphs()
            optimizer.step()


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("health_logdir")
    record(root / "run_a")
    return root


def matrix(body) -> np.ndarray:
    return np.frombuffer(base64.b64decode(body["values"]), dtype="<f4").reshape(body["shape"])


def test_health_serves_every_step_as_a_layers_by_steps_matrix(logdir):
    client = serve(logdir)
    code, body = get(client, "/health", run="run_a", stat="grad_l2")
    assert code == 200 and body["layers"] == ["0", "2", "4"] and body["steps"] == list(range(STEPS))
    values = matrix(body)
    written = scalars(logdir / "run_a")
    for row, layer in enumerate(body["layers"]):
        expected = [written[(layer, "grad_l2")][step] for step in range(STEPS)]
        np.testing.assert_array_equal(values[row], np.asarray(expected, dtype=np.float32))
    layers, steps, series = open_run(logdir / "run_a").health("grad_l2")
    np.testing.assert_array_equal(values, series)
    code, body = get(client, "/health", run="run_a", stat="dead_fraction")
    assert code == 200 and body["steps"] == [0, 10, 20] and body["layers"] == ["0", "2"]


def test_findings_route_returns_what_open_run_reads(logdir):
    client = serve(logdir)
    code, body = get(client, "/findings", run="run_a")
    assert code == 200 and body["run"] == "run_a" and body["health"] is True
    expected = [f.to_dict() for f in open_run(logdir / "run_a").findings()]
    nonfinite = [f for f in body["findings"] if f["rule"] == "nonfinite"]
    assert nonfinite == [dict(next(e for e in expected if e["rule"] == "nonfinite"), value="NaN")]
    assert nonfinite[0]["layer"] == "2" and nonfinite[0]["step"] == 20


@pytest.mark.parametrize(
    "path, params, code, words",
    [
        ("/health", {"run": "run_a"}, 400, "missing required parameter 'stat'"),
        ("/health", {"stat": "grad_l2"}, 400, "missing required parameter 'run'"),
        ("/health", {"run": "run_a", "stat": "grad l2/x"}, 400, "'stat' must be a statistic name"),
        ("/health", {"run": "run_a", "stat": "grad_l3"}, 404, "no health statistic 'grad_l3'; did you mean 'grad_l1', 'grad_l2', 'grad_var'? recorded: channel_var, dead_fraction"),
        ("/health", {"run": "run_a", "stat": "zzz"}, 404, "no health statistic 'zzz'; recorded: channel_var, dead_fraction"),
        ("/health", {"run": "nope", "stat": "grad_l2"}, 404, "no Xray data for run 'nope'"),
        ("/findings", {}, 400, "missing required parameter 'run'"),
        ("/findings", {"run": "nope"}, 404, "no Xray data for run 'nope'"),
    ],
)
def test_bad_parameters_are_named(logdir, path, params, code, words):
    status, body = get(serve(logdir), path, **params)
    assert status == code and body["code"] == code and words in body["error"]


def test_a_run_without_health_says_so(tmp_path):
    model = relu_mlp()
    with Xray(model, input_size=(16,), logdir=str(tmp_path / "run"), health=False) as xray:
        model(torch.randn(2, 16)).sum().backward()
        xray.take_graphs()
    client = serve(tmp_path)
    assert get(client, "/findings", run="run") == (200, {"run": "run", "health": False, "findings": []})
    assert get(client, "/prune", run="run") == (200, {"run": "run", "health": False, "step": None, "entries": []})
    status, body = get(client, "/health", run="run", stat="grad_l2")
    assert status == 404 and "health=False" in body["error"]


@pytest.mark.slow
@pytest.mark.parametrize("loader", ["rust", "python"])
def test_both_loaders_serve_health_and_findings(tmp_path, loader):
    record(tmp_path / "logs" / "run")
    extra = ["--load_fast=false"] if loader == "python" else []
    with tensorboard(sys.executable, tmp_path / "logs", cwd=tmp_path, extra=extra) as url:
        health = get_json(f"{url}/data/plugin/xray/health?run=run&stat=grad_l1")
        findings = get_json(f"{url}/data/plugin/xray/findings?run=run")
        scalar_tags = get_json(f"{url}/data/plugin/scalars/tags")["run"]
    assert health["steps"] == list(range(STEPS)) and health["layers"] == ["0", "2", "4"]
    np.testing.assert_array_equal(matrix(health), open_run(tmp_path / "logs" / "run").health("grad_l1")[2])
    assert ("nonfinite", "2", 20) in [(f["rule"], f["layer"], f["step"]) for f in findings["findings"]]
    assert "xray/grad_norm" in scalar_tags  # in the Scalars tab, next to the loss
    assert not [tag for tag in scalar_tags if tag.startswith(("xray_health", "xray_stats/"))]  # layer_scalars=False


def test_a_resumed_run_shows_the_findings_of_what_it_shows(tmp_path):
    """Attempt 1 has dead units from the start and a NaN at step 20, then crashes; attempt 2 resumes from
    the step-15 checkpoint into the same run, healthy. The NaN of the steps recorded again is gone; the
    dead units first seen before them stay, held until the resumed steps at most."""
    run = tmp_path / "run"
    model = relu_mlp()
    with torch.no_grad():
        model[0].bias[:8] = -100.0  # 8 of 32 units never fire
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with Xray(model, input_size=(16,), logdir=str(run), every=10, health=HealthOptions(activations=1)) as xray:
        for step, (x, y) in enumerate(batches(23)):
            if step == 20:
                with torch.no_grad():
                    model[2].weight[0, 0] = float("nan")
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            xray.take_graphs(step)
            optimizer.step()
    assert {f.rule for f in open_run(run).findings()} == {"dead_units", "nonfinite"}

    model = relu_mlp(seed=1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(UserWarning, match="already holds Xray captures up to step 20"):
        xray = Xray(model, input_size=(16,), logdir=str(run), every=10)
    with xray:
        for step, (x, y) in zip(range(15, 40), batches(25, seed=1)):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            xray.take_graphs(step)
            optimizer.step()
    found = [(f.rule, f.layer, f.step) for f in open_run(run).findings()]
    assert found == [("dead_units", "0", 7)]  # the window of 8 health steps filled
    assert open_run(run).findings()[0].last_step < 15
    code, body = get(serve(tmp_path), "/findings", run="run")
    assert code == 200 and [(f["rule"], f["layer"], f["step"]) for f in body["findings"]] == found


def test_merged_health_lists_layers_in_the_dataflow_of_the_latest_model():
    """A resumed run whose model gained a layer ("extra", between "conv2" and "fc"): rows in the new
    model's order; a layer only the earlier model had follows the layer before it there."""
    from tb_plugin.health_metadata import merge_blocks

    def block(layers, steps):
        values = np.arange(len(layers) * len(steps), dtype=np.float32).reshape(len(layers), len(steps))
        return layers, np.asarray(steps, dtype=np.int64), values, np.zeros_like(values, dtype=bool)

    earlier = block(["conv1", "conv2", "gone", "fc"], [0, 10])
    later = block(["conv1", "conv2", "extra", "fc"], [10, 20])
    layers, steps, values, present = merge_blocks([earlier, later])
    assert layers == ["conv1", "conv2", "gone", "extra", "fc"] and steps.tolist() == [0, 10, 20]
    assert values[layers.index("fc"), 1] == later[2][3, 0]  # the later block wins step 10
    assert values[layers.index("gone"), 0] == earlier[2][2, 0] and not present[layers.index("extra"), 0]


def record_resumed(run):
    """Attempt 1 runs into NaN at step 30 and dies at 39; attempt 2, resumed from step 21's checkpoint,
    measures other iterations (every 3rd from 21)."""
    def attempt(start, stop, nan_from):
        torch.manual_seed(start)
        model = relu_mlp()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        with Xray(model, input_size=(16,), logdir=str(run), every=10, health=HealthOptions(every=3)) as xray:
            for step, (x, y) in zip(range(start, stop), batches(stop - start)):
                optimizer.zero_grad()
                loss = F.cross_entropy(model(x), y)
                (loss * float("nan") if step >= nan_from else loss).backward()
                xray.take_graphs(step)
                optimizer.step()

    attempt(0, 40, nan_from=30)
    with pytest.warns(UserWarning, match="already holds Xray captures"):
        attempt(21, 40, nan_from=10**9)


def test_a_run_resumed_from_an_older_checkpoint_drops_what_the_abandoned_attempt_measured_after_it(tmp_path):
    record_resumed(tmp_path / "run")
    layers, steps, values = open_run(tmp_path / "run").health("grad_l2")
    assert 21 in steps and 30 not in steps and np.isfinite(values).all()  # attempt 1's NaN from 30 on is gone
    code, body = get(serve(tmp_path), "/health", run="run", stat="grad_l2")
    assert code == 200 and body["steps"] == steps.tolist() and np.isfinite(matrix(body)).all()


@pytest.mark.slow
@pytest.mark.parametrize("loader", ["rust", "python"])
def test_both_loaders_drop_what_an_abandoned_attempt_measured(tmp_path, loader):
    record_resumed(tmp_path / "logs" / "run")
    extra = ["--load_fast=false"] if loader == "python" else []
    with tensorboard(sys.executable, tmp_path / "logs", cwd=tmp_path, extra=extra) as url:
        health = get_json(f"{url}/data/plugin/xray/health?run=run&stat=grad_l2")
    assert health["steps"] == open_run(tmp_path / "logs" / "run").health("grad_l2")[1].tolist()
    assert 30 not in health["steps"] and np.isfinite(matrix(health)).all()
