"""The frame routes (/frame_bin, /ranges, /gif of tb_plugin.frame_routes) and the per-reload run index, on real event files
written by the recorder, served by real TensorBoard on both loaders (and in-process for the index)."""

from __future__ import annotations

import gzip
import io
import json
import sys
import urllib.request

import numpy as np
import pytest
import torch
from tensorboard import context, errors, program
from tensorboard.backend import application
from tensorboard.backend.event_processing import data_ingester
from tensorboard.plugins.core import core_plugin
from torch import nn
from werkzeug import test as wtest
from werkzeug import wrappers

from tb_plugin import frame_transport, metadata, run_index, series, xray_plugin
from tests.helpers.training import train_on_6x6
from tests.plugin import http_client
from tests.tensorboard_server import tensorboard
from xray_tb import Xray, open_run

STEPS = [0, 5, 10, 15, 20, 25]


def record(run_dir, *, dtype="float32", steps=STEPS, seed=0):
    """A conv (4 filters) -> ReLU -> Flatten -> Linear model, conv0's weight/output/grad and the
    linear layer's weight recorded at ``steps``; returns the still-open Xray (closed by the caller)
    and ``train(steps)``, which trains on and captures more steps."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    plan = {"0": {"weight": True, "output": True, "grad": True}, "3": {"weight": True}}
    xray = Xray(model, input_size=(1, 6, 6), logdir=str(run_dir), plan=plan, dtype=dtype)
    g = torch.Generator().manual_seed(seed)

    def train(upto):
        train_on_6x6(model, optimizer, g, range(upto[0], upto[-1] + 1), lambda step: xray.take_graphs(step) if step in upto else None)

    train(steps)
    return xray, train


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("frame_routes")
    record(root / "f32")[0].close()
    record(root / "f16", dtype="float16", seed=1)[0].close()
    return root


@pytest.fixture(scope="module", params=["rust", "python"])
def url(request, logdir, tmp_path_factory):
    extra = ["--load_fast=false"] if request.param == "python" else []
    with tensorboard(sys.executable, logdir, cwd=tmp_path_factory.mktemp("tb"), extra=extra) as base:
        yield base


def binary_frame(url, **params):
    status, body, content_type = http_client.request(url, "/frame_bin", **params)
    assert status == 200, body[:300]
    assert content_type == "application/octet-stream"
    return frame_transport.parse_body(body)


@pytest.mark.slow
@pytest.mark.parametrize("run,encoding", [("f32", "f32"), ("f16", "f16")])
def test_binary_frames_hold_exactly_the_values_of_the_json_route(url, run, encoding):
    for layer, kind in (("0", "weight"), ("0", "output"), ("0", "grad"), ("3", "weight")):
        for step in (0, 15, 25):
            description, panels = binary_frame(url, run=run, layer=layer, kind=kind, step=step)
            status, expected = http_client.get(url, "/frame", run=run, layer=layer, kind=kind, step=step)
            assert status == 200, expected
            assert description["encoding"] == encoding
            for key in ("run", "layer", "kind", "step", "wall_time", "meta", "min", "max", "signed", "nonfinite"):
                assert description[key] == expected[key], key
            assert [(p["index"], p["rows"], p["cols"]) for p in description["panels"]] == [
                (p["index"], p["rows"], p["cols"]) for p in expected["panels"]
            ]
            for got, want in zip(panels, http_client.panels(expected), strict=True):
                np.testing.assert_array_equal(got.astype(np.float32), want)


@pytest.mark.slow
def test_binary_frame_is_smaller_than_the_json_frame(url):
    _, body, _ = http_client.request(url, "/frame_bin", run="f32", layer="3", kind="weight", step=25)
    _, json_body, _ = http_client.request(url, "/frame", run="f32", layer="3", kind="weight", step=25)
    description, panels = frame_transport.parse_body(body)
    assert len(body) - sum(p.nbytes for p in panels) < 1024  # the header; then 4 bytes a value, no base64
    assert len(body) < 0.85 * len(json_body), (len(body), len(json_body))


@pytest.mark.slow
@pytest.mark.parametrize(
    "path,params,code,words",
    [
        ("/frame_bin", {"run": "f32", "layer": "0", "kind": "weight"}, 400, "step"),
        ("/frame_bin", {"run": "f32", "layer": "0", "kind": "nope", "step": "0"}, 400, "kind"),
        ("/frame_bin", {"run": "f32", "layer": "0", "kind": "weight", "step": "1e3"}, 400, "integer"),
        ("/frame_bin", {"run": "f32", "layer": "9", "kind": "weight", "step": "0"}, 404, "recorded layers: 0, 3"),
        ("/frame_bin", {"run": "f32", "layer": "3", "kind": "grad", "step": "0"}, 404, "no 'grad' frames"),
        ("/frame_bin", {"run": "f32", "layer": "0", "kind": "weight", "step": "7"}, 404, "recorded steps: 0, 5, 10"),
        ("/frame_bin", {"run": "nope", "layer": "0", "kind": "weight", "step": "0"}, 404, "nope"),
        ("/ranges", {"run": "f32"}, 400, "layer"),
        ("/ranges", {"run": "f32", "layer": "7"}, 404, "recorded layers"),
        ("/gif", {"run": "f32", "layer": "0", "kind": "weight", "fps": "0"}, 400, "fps"),
        ("/gif", {"run": "f32", "layer": "0", "kind": "weight", "max_frames": "x"}, 400, "max_frames"),
        ("/gif", {"run": "f32", "layer": "0", "kind": "bias"}, 404, "no 'bias' frames"),
    ],
)
def test_bad_requests_answer_json_errors(url, path, params, code, words):
    status, body = http_client.get(url, path, **params)
    assert status == code and body["code"] == code, body
    assert words in body["error"], body["error"]


@pytest.mark.slow
def test_ranges_cover_every_step_of_each_kind(url, logdir):
    status, body = http_client.get(url, "/ranges", run="f32", layer="0")
    assert status == 200, body
    recorded = open_run(logdir / "f32")
    assert set(body["ranges"]) == {"weight", "output", "grad"}
    for kind, found in body["ranges"].items():
        values = [recorded.load("0", kind, step)[0] for step in STEPS]
        assert found["min"] <= min(float(v.min()) for v in values) + 1e-6
        assert found["max"] >= max(float(v.max()) for v in values) - 1e-6


@pytest.mark.slow
def test_gif_has_one_frame_per_recorded_step(url):
    from PIL import Image

    status, body, content_type = http_client.request(url, "/gif", run="f32", layer="0", kind="weight", fps="5")
    assert status == 200 and content_type == "image/gif", body[:300]
    image = Image.open(io.BytesIO(body))
    assert image.n_frames == len(STEPS)
    status, body, _ = http_client.request(url, "/gif", run="f32", layer="0", kind="weight", max_frames="3")
    assert Image.open(io.BytesIO(body)).n_frames == 3
    with urllib.request.urlopen(f"{url}{http_client.PREFIX}/gif?run=f32&layer=0&kind=weight", timeout=30) as response:
        assert response.headers["X-Content-Type-Options"] == "nosniff"  # as every other route (TensorBoard's check)


def python_loader(logdir):
    """TensorBoard's flags and a started Python-loader ingester on ``logdir``, reloaded by hand."""
    tb = program.TensorBoard(plugins=[core_plugin.CorePluginLoader(), xray_plugin.XrayLoader()])
    tb.configure(argv=["tensorboard", "--logdir", str(logdir), "--reload_interval=0", "--reload_task=blocking", "--load_fast=false"])
    ingester = data_ingester.LocalDataIngester(tb.flags)
    ingester.start()
    return tb.flags, ingester


def test_run_index_is_built_once_per_reload_and_sees_new_steps(tmp_path):
    xray, train = record(tmp_path / "live", steps=[0, 5])
    try:
        _, ingester = python_loader(tmp_path)
        provider, multiplexer = ingester.data_provider, ingester.deprecated_multiplexer
        index = run_index.RunIndex(provider, series.SeriesReader(provider, multiplexer))
        ctx = context.RequestContext()
        assert index.frame(ctx, "", "live", "0", "weight", 0).step == 0
        assert index.frame(ctx, "", "live", "0", "weight", 5).step == 5
        assert index.builds == 1  # one index for both requests
        with pytest.raises(errors.NotFoundError, match="recorded steps: 0, 5"):
            index.frame(ctx, "", "live", "0", "weight", 10)
        train([6, 10])
        multiplexer.Reload()
        written = index.frame(ctx, "", "live", "0", "weight", 10)
        assert index.builds == 2 and written.step == 10
        header = metadata.FrameHeader.from_json(written.blobs[0])
        np.testing.assert_array_equal(metadata.decode_array(written.blobs[1]), open_run(tmp_path / "live").load("0", "weight", 10)[0])
        assert header.step == 10
    finally:
        xray.close()


def test_layers_is_encoded_once_per_listing_and_answers_with_or_without_gzip(tmp_path):
    xray, train = record(tmp_path / "live", steps=[0, 5])
    try:
        flags, ingester = python_loader(tmp_path)
        app = application.TensorBoardWSGIApp(flags, [core_plugin.CorePluginLoader(), xray_plugin.XrayLoader()], ingester.data_provider,
                                             deprecated_multiplexer=ingester.deprecated_multiplexer)
        client = wtest.Client(app, wrappers.Response)

        def layers(encoding: str):
            response = client.get("/data/plugin/xray/layers", query_string={"run": "live"}, headers={"Accept-Encoding": encoding})
            assert response.status_code == 200 and response.mimetype == "application/json"
            data = response.get_data()
            if response.headers.get("Content-Encoding") == "gzip":
                data = gzip.decompress(data)
            return response.headers.get("Content-Encoding"), json.loads(data)

        zipped, body = layers("gzip")
        plain, same = layers("identity")
        assert (zipped, plain) == ("gzip", None) and body == same and body["steps"] == [0, 5]
        train([6, 10])
        ingester.deprecated_multiplexer.Reload()
        assert layers("gzip")[1]["steps"] == [0, 5, 6, 10]  # a new listing: encoded again
    finally:
        xray.close()


def test_ranges_follow_a_run_that_grows_and_a_step_written_again(tmp_path):
    """/ranges keeps what it read: new captures and a step written again (a resumed run) are read,
    and the range is that of the last write of every step."""
    from tests.helpers.plugin_app import get, serve

    def train(steps, scale):
        model = torch.nn.Sequential(torch.nn.Linear(4, 3))
        with torch.no_grad():
            model[0].weight.fill_(scale)
        with Xray(model, torch.randn(2, 4), logdir=str(tmp_path / "run"), plan={"0": {"weight": True}}, health=False) as xray:
            for step in steps:
                model(torch.randn(2, 4)).sum().backward()
                xray.take_graphs(step)

    def weight_range(client):
        status, body = get(client, "/ranges", run="run", layer="0")
        assert status == 200, body
        return body["ranges"]["weight"]

    train([0, 1], 1.0)
    client = serve(tmp_path)
    assert weight_range(client) == {"min": 1.0, "max": 1.0}
    with pytest.warns(UserWarning, match="already holds Xray captures"):
        train([1, 2], 5.0)  # step 1 written again, step 2 new
    client.reload()
    assert weight_range(client) == {"min": 1.0, "max": 5.0}
    with pytest.warns(UserWarning, match="already holds Xray captures"):
        train([0], 5.0)  # the last step still at 1.0 is written again
    client.reload()
    assert weight_range(client) == {"min": 5.0, "max": 5.0}
