"""Plugin routes over real event files written by the recorder, read the way TensorBoard reads them."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from tests.helpers.plugin_app import CAPTURES, PREFIX, get, record, serve

@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("logdir")
    record(root / "run_a")
    return root


@pytest.fixture(scope="module")
def client(logdir):
    return serve(logdir)


def test_plugin_is_listed_as_an_iframe_tab(client):
    listing = json.loads(client.get("/data/plugins_listing").get_data())["xray"]
    assert listing["enabled"] and listing["tab_name"] == "Xray"
    assert listing["loading_mechanism"] == {"type": "IFRAME", "module_path": PREFIX + "/static/index.js"}


def test_runs_and_every_captured_step(client):
    assert get(client, "/runs") == (200, {"runs": ["run_a"]})
    code, body = get(client, "/layers", run="run_a")
    assert code == 200
    expected = [step * 10 for step in range(CAPTURES)]
    assert body["steps"] == expected  # all 50 steps, not a reservoir sample
    layers = {layer["name"]: layer for layer in body["layers"]}
    assert [layer["name"] for layer in body["layers"]] == ["0", "3"]
    assert layers["0"]["type"] == "Conv2d" and list(layers["0"]["kinds"]) == ["weight", "output", "activation", "grad"]
    assert all(steps == expected for steps in layers["0"]["kinds"].values())


def test_explicit_sampling_flag_is_respected(logdir):
    code, body = get(serve(logdir, "--samples_per_plugin=xray=5"), "/layers", run="run_a")
    assert code == 200 and len(body["steps"]) == 5 and body["steps"][-1] == (CAPTURES - 1) * 10


def test_architecture_and_plan(client):
    code, architecture = get(client, "/architecture", run="run_a")
    assert code == 200 and [n["module"] for n in architecture["nodes"] if n["kind"] == "module"] == ["0", "1", "2", "3"]
    code, plan = get(client, "/plan", run="run_a")
    assert code == 200 and plan["3"] == {"weight": True, "weight_grad": False, "bias": False, "bias_grad": False, "output": True, "activation": False, "grad": False}


def decode_panels(body):
    return [np.frombuffer(base64.b64decode(p["data"]), "<f4").reshape(p["rows"], p["cols"]) for p in body["panels"]]


def test_frame_serves_the_recorded_values(tmp_path):
    model = record(tmp_path / "run", captures=2)
    code, body = get(serve(tmp_path), "/frame", run="run", layer="0", kind="weight", step=10)
    assert code == 200
    assert body["meta"]["original_shape"] == [4, 1, 3, 3] and body["meta"]["indices"] == [0, 1, 2, 3]
    panels = decode_panels(body)
    assert [p["index"] for p in body["panels"]] == [0, 1, 2, 3]
    # Step 10 is the last capture, taken before the last optimizer step: weights then = now + lr * grad.
    weight_then = model[0].weight.detach() + 0.1 * model[0].weight.grad
    for panel, expected in zip(panels, weight_then):
        np.testing.assert_allclose(panel, expected[0].numpy(), rtol=1e-5, atol=1e-6)
    values = np.concatenate([p.ravel() for p in panels])
    assert body["min"] == pytest.approx(values.min()) and body["max"] == pytest.approx(values.max())
    assert body["signed"] is True and body["nonfinite"] == 0


def test_frame_of_a_linear_output_is_one_panel(client):
    code, body = get(client, "/frame", run="run_a", layer="3", kind="output", step=0)
    assert code == 200 and len(body["panels"]) == 1
    assert (body["panels"][0]["rows"], body["panels"][0]["cols"]) == (8, 3)
    assert body["meta"]["batch_index"] is None and body["panels"][0]["index"] is None


def test_frame_conv_output_has_one_panel_per_filter(client):
    code, body = get(client, "/frame", run="run_a", layer="0", kind="output", step=490)
    assert code == 200 and body["meta"]["batch_index"] == 0 and body["meta"]["dim"] == 1
    assert [(p["rows"], p["cols"]) for p in body["panels"]] == [(6, 6)] * 4


@pytest.mark.parametrize(
    "path, params, code, message",
    [
        ("/layers", {}, 400, "missing required parameter 'run'"),
        ("/layers", {"run": "nope"}, 404, "no Xray data for run 'nope'"),
        ("/architecture", {"run": "nope"}, 404, "no Xray data for run 'nope'"),
        ("/frame", {"run": "run_a", "layer": "0", "kind": "output"}, 400, "missing required parameter 'step'"),
        ("/frame", {"run": "run_a", "layer": "0", "kind": "output", "step": "ten"}, 400, "'step' must be an integer, got 'ten'"),
        ("/frame", {"run": "run_a", "layer": "0", "kind": "output", "step": "1_0"}, 400, "'step' must be an integer, got '1_0'"),
        ("/frame", {"run": "run_a", "layer": "0", "kind": "output", "step": " 10"}, 400, "'step' must be an integer"),
        ("/frame", {"run": "run_a", "layer": "0", "kind": "outputs", "step": "0"}, 400, "'kind' must be one of weight, weight_grad"),
        ("/frame", {"run": "run_a", "layer": "9", "kind": "output", "step": "0"}, 404, "no layer '9'; recorded layers: 0, 3"),
        ("/frame_bin", {"run": "run_a", "layer": "3.", "kind": "output", "step": "0"}, 404, "no layer '3.'; close matches: '3'"),
        ("/frame", {"run": "run_a", "layer": "0", "kind": "output", "step": "9" * 25}, 400, "'step' must be an integer from -2**63 to 2**63 - 1"),
        ("/frame", {"run": "run_a", "layer": "3", "kind": "grad", "step": "0"}, 404, "layer '3' of run 'run_a' has no 'grad' frames; recorded kinds: "),
        ("/frame", {"run": "run_a", "layer": "0", "kind": "output", "step": "5"}, 404, "not recorded at step 5; nearest recorded steps: 0, 10, 20 (50 steps from 0 to 490)"),
        ("/frame", {"run": "runa", "layer": "0", "kind": "output", "step": "0"}, 404, "no Xray data for run 'runa'; close matches: 'run_a'"),
        ("/frame", {"run": "nope", "layer": "0", "kind": "output", "step": "0"}, 404, "no Xray data for run 'nope'"),
    ],
)
def test_bad_requests_answer_json_errors(client, path, params, code, message):
    status, body = get(client, path, **params)
    assert status == code and body["code"] == code and message in body["error"]


def test_only_get_is_allowed(client):
    response = client.post(PREFIX + "/runs")
    assert response.status_code == 405 and "use GET" in json.loads(response.get_data())["error"]


def test_static_files_and_traversal(client):
    response = client.get(PREFIX + "/static/index.js")
    assert response.status_code == 200 and response.mimetype == "text/javascript"
    assert b"export" in response.get_data() and b"render" in response.get_data()
    for hostile in ["../xray_plugin.py", "..%2fxray_plugin.py", "%2e%2e/metadata.py", "/etc/passwd", "static/../../README.md", "nope.js"]:
        assert client.get(PREFIX + "/static/" + hostile).status_code == 404, hostile


def test_a_damaged_record_answers_a_json_422(tmp_path):
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    from tb_plugin import metadata

    header = metadata.FrameHeader("r", "fc", "weight", 0, 0.0, [2], "float32", 0, [0, 1], None, "KeepAll()")
    value = metadata.frame_value(header, np.zeros(2, np.float32))
    value.tensor.string_val[1] = b"not an npy array"
    writer = EventFileWriter(str(tmp_path / "broken"))
    writer.add_event(event_pb2.Event(step=0, wall_time=1.0, summary=summary_pb2.Summary(value=[value])))
    writer.close()
    status, body = get(serve(tmp_path), "/frame", run="broken", layer="fc", kind="weight", step=0)
    assert status == 422 and body["code"] == 422
    assert body["error"].startswith("the stored values of 'fc' 'weight' at step 0 are damaged (checksum mismatch)")
