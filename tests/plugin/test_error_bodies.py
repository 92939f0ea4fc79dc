"""Error bodies: static names the file system rejects are 404s, and no body names a server path."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from tensorboard import errors
from werkzeug import test as wtest
from werkzeug import wrappers

from tb_plugin import responses
from tests.helpers.plugin_app import PREFIX, serve

REPOSITORY = str(Path(__file__).resolve().parents[2])


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    return serve(tmp_path_factory.mktemp("empty"))


@pytest.mark.parametrize(
    "name",
    ["x" * 300, "x" * 5000, "a/" * 2100 + "index.js", ("y" * 250 + "/") * 20 + "index.js", "index.js%00", "%2e%2e/" * 40 + "etc"],
)
def test_static_names_the_file_system_rejects_are_404(client, name, caplog):
    with caplog.at_level(logging.INFO):
        response = client.get(f"{PREFIX}/static/{name}")
    body = response.get_data(as_text=True)
    assert response.status_code == 404 and response.mimetype == "application/json"
    assert json.loads(body)["error"].startswith("Not found: no static file ")
    assert len(body) < 400 and REPOSITORY not in body and REPOSITORY not in caplog.text


def test_an_empty_static_name_is_a_json_404(client):
    for path in ("/static/", "/static"):
        response = client.get(PREFIX + path)
        assert response.status_code == 404 and json.loads(response.get_data())["code"] == 404


def test_an_unknown_route_is_a_json_404_naming_close_routes(client):
    response = client.get(PREFIX + "/framez?run=a")
    body = json.loads(response.get_data())
    assert response.status_code == 404 and body["code"] == 404
    assert body["error"].startswith("Not found: the xray plugin has no route '/framez'; did you mean '/frame',")
    assert "/health" in body["error"] and "/*" not in body["error"]
    assert client.get(PREFIX + "/runs").status_code == 200  # the exact routes still come first


class Failing:
    """Routes through :func:`responses.json_route` that fail with a server path in the exception."""

    def __init__(self, path: str):
        self.path = path

    @responses.json_route
    def frame_route(self, request):
        raise FileNotFoundError(2, "No such file or directory", self.path)

    @responses.json_route
    def layers_route(self, request):
        raise errors.NotFoundError(f"cannot open {self.path}")


def test_a_500_names_the_route_and_the_exception_type_never_a_path(tmp_path, caplog):
    logdir = tmp_path / "logs"
    responses.hide_server_paths(logdir, Path(REPOSITORY) / "frontend")
    failing = Failing(str(logdir / "run" / "events.out.tfevents.1"))
    with caplog.at_level(logging.ERROR):
        response = wtest.Client(failing.frame_route, wrappers.Response).get("/frame")
    assert response.status_code == 500
    assert json.loads(response.get_data()) == {
        "error": "internal error: FileNotFoundError in route /frame; the TensorBoard log has the details",
        "code": 500,
    }
    assert "xray route /frame failed" in caplog.text and "events.out.tfevents.1" in caplog.text  # the log has it all


def test_any_error_message_has_server_folders_replaced(tmp_path):
    logdir = tmp_path / "logs"
    responses.hide_server_paths(logdir, Path(REPOSITORY) / "frontend")
    response = wtest.Client(Failing(str(logdir / "run")).layers_route, wrappers.Response).get("/layers")
    assert response.status_code == 404
    assert json.loads(response.get_data())["error"] == "Not found: cannot open <logdir>/run"
    assert responses.public_message(f"{REPOSITORY}/tb_plugin/x.py and {REPOSITORY}x") == f"<server>/tb_plugin/x.py and {REPOSITORY}x"


def test_an_unknown_run_names_the_runs_under_it_else_its_close_matches():
    from tb_plugin.routes_common import unknown_run

    runs = ["ddp/rank0", "ddp/rank1", "mlp", "cnn"]
    assert str(unknown_run("ddp", runs)).endswith("no Xray data for run 'ddp'; the runs under it: ddp/rank0, ddp/rank1")
    assert str(unknown_run("mpl", runs)).endswith("no Xray data for run 'mpl'; close matches: 'mlp'")
    assert str(unknown_run("x" * 5000, runs)).endswith(f"run {'x' * 80!r}; runs with Xray data: ddp/rank0, ddp/rank1, mlp, cnn")
    assert str(unknown_run("any", [])).endswith("no run holds Xray data yet")
