"""The bias routes over runs written by the real recorder, on TensorBoard's two loaders."""

from __future__ import annotations

import base64
import json
import sys
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest
import torch
from tensorboard import program
from tensorboard.backend import application
from tensorboard.backend.event_processing import data_ingester
from tensorboard.plugins.core import core_plugin
from werkzeug import test as wtest
from werkzeug import wrappers

from tb_plugin import xray_plugin
from tests.tensorboard_server import tensorboard
from xray_tb import Xray, bias
from xray_tb.bias.planted import LABELS, REGIONS, TinyCNN, batches, planted_images

PREFIX = "/data/plugin/xray"
EVALUATION = "shape vs patch"


def record(run_dir, seed: int, again_without_examples: bool = False) -> dict[int, bias.BiasReport]:
    """An untrained TinyCNN evaluated at steps 0 and 5; step 5 written twice (the second write wins);
    ``again_without_examples``: step 9 too, with examples, then again without (its examples are gone)."""
    data = planted_images(48, 0.5, seed=seed)
    torch.manual_seed(seed)
    model = TinyCNN()
    kept = {}
    with Xray(model, input_size=(3, 32, 32), logdir=str(run_dir), plan=["features.0"]) as xray:
        model(data[0][:4]).sum().backward()
        xray.take_graphs(0)
        options = dict(target=0, protected=1, masks=list(REGIONS), names=LABELS)
        kept[0] = xray.attention_iou(batches(*data, size=16), step=0, **options)
        xray.attention_iou(batches(*data, size=16), step=5, max_batches=1, examples=2, **options)
        kept[5] = xray.attention_iou(batches(*data, size=16), step=5, examples=3, **options)
        if again_without_examples:
            xray.attention_iou(batches(*data, size=16), step=9, examples=2, **options)
            kept[9] = xray.attention_iou(batches(*data, size=16), step=9, max_batches=1, examples=0, **options)
    return kept


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("bias_logdir")
    reports = {"biased": record(root / "biased", 0, again_without_examples=True), "fair": record(root / "fair", 1)}
    model = TinyCNN()
    with Xray(model, input_size=(3, 32, 32), logdir=str(root / "plain"), plan=["features.0"]) as xray:  # no evaluation
        model(torch.rand(2, 3, 32, 32)).sum().backward()
        xray.take_graphs(0)
    return root, reports


def in_process(logdir):
    """TensorBoard's Python loader and WSGI app, in this process."""
    loaders = [core_plugin.CorePluginLoader(), xray_plugin.XrayLoader()]
    board = program.TensorBoard(plugins=loaders)
    board.configure(
        argv=[
            "tensorboard",
            "--logdir",
            str(logdir),
            "--reload_interval=0",
            "--reload_task=blocking",
            "--load_fast=false",
        ]
    )
    ingester = data_ingester.LocalDataIngester(board.flags)
    ingester.start()
    app = application.TensorBoardWSGIApp(
        board.flags, loaders, ingester.data_provider, deprecated_multiplexer=ingester.deprecated_multiplexer
    )
    client = wtest.Client(app, wrappers.Response)

    def get(path, method="GET", **params):
        response = client.open(PREFIX + path, method=method, query_string=params)
        return response.status_code, strict_json(response.get_data())

    return get


def over_http(url):
    def get(path, method="GET", **params):
        target = f"{url}{PREFIX}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(urllib.request.Request(target, method=method), timeout=30) as response:
                return response.status, strict_json(response.read())
        except urllib.error.HTTPError as error:
            return error.code, strict_json(error.read())

    return get


def strict_json(body: bytes):
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(body, parse_constant=refuse)


def check_routes(get, reports):
    status, body = get("/bias/evaluations", run="biased")
    assert status == 200
    assert body == {"run": "biased", "evaluations": [{"name": EVALUATION, "steps": [0, 5, 9], "example_steps": [0, 5]}]}
    status, body = get("/bias/examples", run="biased", evaluation=EVALUATION, step=9)  # written again without examples
    assert status == 404 and "written again at step 9 without examples" in body["error"], body
    assert reports["biased"][9].examples is None
    assert get("/bias/evaluations", run="plain") == (200, {"run": "plain", "evaluations": []})

    for run in ("biased", "fair"):
        status, result = get("/bias/result", run=run, evaluation=EVALUATION, step=5)
        assert status == 200 and result["step"] == 5 and result["images"] == 48  # the second write of step 5
        expected = reports[run][5]
        assert result["layer"] == expected.layer and result["target"]["name"] == "shape"
        for stored, score in zip(result["scores"], expected.scores):
            assert stored["label"] == score.label
            for name, stats in score.subgroups.items():
                assert stored["subgroups"][name]["mean"] == pytest.approx(stats.mean, abs=1e-12)
                assert stored["subgroups"][name]["chance"] == pytest.approx(stats.chance, abs=1e-12)
                assert stored["subgroups"][name]["count"] == stats.count

    status, series = get("/bias/series", run="fair", evaluation=EVALUATION)
    assert status == 200 and series["steps"] == [0, 5]
    assert [score["label"] for score in series["scores"]] == ["mask: patch", "mask: shape", "heatmap"]
    heatmap = series["scores"][2]["subgroups"]["all"]
    assert heatmap["mean"] == pytest.approx(
        [reports["fair"][s].score("heatmap").subgroups["all"].mean for s in (0, 5)], abs=1e-12
    )
    assert heatmap["count"] == [48, 48]

    status, examples = get("/bias/examples", run="biased", evaluation=EVALUATION, step=5)
    assert status == 200 and examples["map_names"] == ["shape", "patch"] and len(examples["examples"]) == 3
    stored = reports["biased"][5].examples
    for i, example in enumerate(examples["examples"]):
        assert (example["rows"], example["cols"], example["subgroup"]) == (32, 32, stored.subgroups[i])
        image = np.frombuffer(base64.b64decode(example["image"]), np.uint8).reshape(32, 32, 3)
        assert np.array_equal(image, stored.images[i])
        for m, data in enumerate(example["maps"]):
            values = np.frombuffer(base64.b64decode(data), "<f4").reshape(32, 32)
            assert np.allclose(values, stored.maps[i, m], atol=1e-3)


def check_errors(get):
    status, body = get("/bias/result", evaluation=EVALUATION, step=0)
    assert status == 400 and "run" in body["error"]
    status, body = get("/bias/result", run="biased", evaluation=EVALUATION, step="five")
    assert status == 400 and "'step' must be an integer" in body["error"]
    status, body = get("/bias/examples", run="biased", evaluation=EVALUATION)
    assert status == 400 and "step" in body["error"]
    status, body = get("/bias/series", run="biased")
    assert status == 400 and "evaluation" in body["error"]
    status, body = get("/bias/result", run="biased", evaluation="shape vs hat", step=0)
    assert status == 404 and "evaluations: shape vs patch" in body["error"]
    status, body = get("/bias/result", run="biased", evaluation=EVALUATION, step=3)
    assert status == 404 and "steps: 0, 5" in body["error"]
    status, body = get("/bias/series", run="plain", evaluation=EVALUATION)
    assert status == 404 and "xray.attention_iou" in body["error"]
    status, body = get("/bias/evaluations", run="nowhere")
    assert status == 404 and body["code"] == 404
    assert get("/bias/evaluations", method="POST", run="biased")[0] == 405
    status, body = get("/bias/result", run="biased", evaluation=EVALUATION, step=str(2**70))
    assert status == 400


def test_routes_on_the_python_loader_in_process(logdir):
    root, reports = logdir
    get = in_process(root)
    check_routes(get, reports)
    check_errors(get)


@pytest.mark.slow
@pytest.mark.parametrize("loader", ["fast", "python"])
def test_routes_on_a_real_tensorboard(logdir, loader, tmp_path):
    root, reports = logdir
    extra = ["--load_fast=false"] if loader == "python" else ["--load_fast=true"]
    with tensorboard(sys.executable, root, cwd=tmp_path, extra=extra) as url:
        check_routes(over_http(url), reports)
        check_errors(over_http(url))
