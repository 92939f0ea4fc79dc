"""/health (absent mask, binning), /health_layer, /health_vector and /prune over a real recorded run."""

from __future__ import annotations

import base64

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from xray_tb import Xray, open_run
from xray_tb.health import HealthOptions

from tests.health.helpers import batches, relu_mlp, scalars
from tests.helpers.plugin_app import get, serve

STEPS = 40
RESULT: dict = {}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    root = tmp_path_factory.mktemp("health_layer")
    model = relu_mlp()
    with torch.no_grad():
        model[0].bias[:5] = -100.0  # five dead units in layer 0
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with Xray(model, input_size=(16,), logdir=str(root / "run"), every=10, health=HealthOptions(every=1)) as xray:
        for step, (x, y) in enumerate(batches(STEPS)):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            xray.take_graphs()
            optimizer.step()
            if step in (14, 29):
                xray.end_epoch()
        RESULT.update(dead=xray.dead_units(), prune=xray.prune(dry_run=True))
    RESULT.update(logdir=root / "run", values=scalars(root / "run"))
    return serve(root)


def decode(body, key, dtype):
    return np.frombuffer(base64.b64decode(body[key]), dtype=dtype).reshape(body["shape"])


def test_health_serves_the_present_mask_and_bins_to_columns(client):
    code, body = get(client, "/health", run="run", stat="update_ratio")
    assert code == 200 and not body["binned"] and body["total_steps"] == STEPS and body["last_steps"] == body["steps"]
    present = decode(body, "present", np.uint8).astype(bool)
    layers, steps, values, expected = __import__("xray_tb.health.reading", fromlist=["series"]).series(str(RESULT["logdir"]), "update_ratio")
    np.testing.assert_array_equal(present, expected)
    assert 0 < present.sum() < present.size  # update_ratio is sampled
    code, binned = get(client, "/health", run="run", stat="grad_mean", columns=7)
    assert code == 200 and binned["binned"] and binned["shape"] == [3, 7] and binned["total_steps"] == STEPS
    full = decode(get(client, "/health", run="run", stat="grad_mean")[1], "values", "<f4")
    cells = decode(binned, "values", "<f4")
    for column, (first, last) in enumerate(zip(binned["steps"], binned["last_steps"])):
        chunk = full[:, first: last + 1]
        expected = chunk[np.arange(3), np.abs(chunk).argmax(axis=1)]
        np.testing.assert_array_equal(cells[:, column], expected)


@pytest.mark.parametrize("columns", ["0", "20001", "x", "1.5"])
def test_columns_outside_1_to_20000_is_a_400_naming_it(client, columns):
    code, body = get(client, "/health", run="run", stat="grad_l2", columns=columns)
    assert code == 400 and "'columns'" in body["error"]


def test_health_layer_equals_health_rows_and_the_recorder(client):
    code, body = get(client, "/health_layer", run="run", layer="2")
    assert code == 200 and body["layer"] == "2"
    for stat in ("grad_l2", "update_ratio", "dead_fraction"):
        _, matrix = get(client, "/health", run="run", stat=stat)
        row = decode(matrix, "values", "<f4")[matrix["layers"].index("2")]
        present = decode(matrix, "present", np.uint8)[matrix["layers"].index("2")].astype(bool)
        assert body["stats"][stat]["steps"] == [s for s, p in zip(matrix["steps"], present) if p]
        np.testing.assert_array_equal(np.float32(body["stats"][stat]["values"]), row[present])
        recorded = RESULT["values"][("2", stat)]
        assert body["stats"][stat]["values"] == pytest.approx([recorded[s] for s in body["stats"][stat]["steps"]])
    assert body["epochs"]["grad_l2"]["epochs"] == [0, 1]
    assert len(body["epochs"]["grad_l2"]["mean"]) == len(body["epochs"]["grad_l2"]["var"]) == 2
    code, binned = get(client, "/health_layer", run="run", layer="2", columns=4)
    assert code == 200 and len(binned["stats"]["grad_l2"]["steps"]) == 4
    assert max(binned["stats"]["grad_l2"]["values"]) == pytest.approx(max(body["stats"]["grad_l2"]["values"]))


def test_health_layer_404_lists_close_matches(client):
    code, body = get(client, "/health_layer", run="run", layer="22")
    assert code == 404 and "close matches" in body["error"] and "'2'" in body["error"]
    assert get(client, "/health_layer", run="run")[0] == 400


def test_dead_vector_equals_dead_units_at_the_latest_step(client):
    code, body = get(client, "/health_vector", run="run", stat="dead", layer="0", step=STEPS + 100)
    assert code == 200 and body["step"] == 30
    assert [i for i, v in enumerate(body["values"]) if v == 1.0] == RESULT["dead"]["0"]
    assert set(RESULT["dead"]["0"]) >= {0, 1, 2, 3, 4}
    code, body = get(client, "/health_vector", run="run", stat="channel_var", layer="0", step=15)
    assert code == 200 and body["step"] == 10 and len(body["values"]) == 32
    code, body = get(client, "/health_vector", run="run", stat="dead", layer="0", step=-1)
    assert code == 404 and "0, 10, 20" in body["error"]
    code, body = get(client, "/health_vector", run="run", stat="nope", layer="0", step=1)
    assert code == 404 and "channel_var" in body["error"] and "dead" in body["error"]


def test_prune_equals_the_dry_run(client):
    code, body = get(client, "/prune", run="run")
    expected = [{"layer": e.layer, "units": e.units, "parameters": e.parameters, "reason": e.reason} for e in RESULT["prune"]]
    assert code == 200 and expected and body["health"] is True
    assert body["entries"] == expected
    assert body["step"] in (0, 10, 20, 30)  # the iteration of the flush that last changed the plan
    assert open_run(RESULT["logdir"]).health("grad_l2")[2].shape == (3, STEPS)  # the readback keeps its shape
