"""Thousands of random requests to every route, on both loaders: no 5xx, strict JSON, no server path.

The Rust loader runs as a real ``tensorboard`` subprocess reached over HTTP; the Python loader runs
in process (TensorBoard's own WSGI app, see ``test_routes.serve``). Requests mix real values (so
that many reach a frame) with odd, huge, unicode and percent-encoded ones, missing and repeated
parameters, other methods, and traversal attempts on ``/static/*``. The seed is fixed.
"""

from __future__ import annotations

import collections
import concurrent.futures
import http.client
import os
import random
import sys
import urllib.parse
from pathlib import Path

import pytest
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.plugins import base_plugin

from tb_plugin import metadata, xray_plugin
from tests.plugin import http_client, test_names
from tests.helpers.plugin_app import record, serve
from tests.tensorboard_server import tensorboard

SEED = 8
RUN_A_PLAN = {"0": ("weight", "output", "activation", "grad"), "3": ("weight", "output")}  # what test_routes.record records
REQUESTS_PER_LOADER = 2000
#: The parameters of the routes this test knows; any other route gets a random draw of all of them.
ROUTE_PARAMS = {
    "/runs": (),
    "/layers": ("run",),
    "/architecture": ("run",),
    "/plan": ("run",),
    "/frame": ("run", "layer", "kind", "step"),
}
ROUTE_PARAMS_OF_OTHER_TABS = {
    "/frame_bin": ("run", "layer", "kind", "step"),
    "/ranges": ("run", "layer"),
    "/gif": ("run", "layer", "kind", "fps", "max_frames"),
    "/health": ("run", "stat", "columns"),
    "/findings": ("run",),
    "/health_layer": ("run", "layer", "columns"),
    "/health_vector": ("run", "stat", "layer", "step"),
    "/prune": ("run",),
}
ALL_PARAMS = ("run", "layer", "kind", "step", "fps", "max_frames", "stat", "limit", "columns")
METHODS = ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD")
TRAVERSALS = [
    "../xray_plugin.py", "..%2fxray_plugin.py", "%2e%2e/%2e%2e/README.md", "%2e%2e%2f%2e%2e%2fpyproject.toml", "....//....//etc/passwd",
    "/etc/passwd", "%2fetc%2fpasswd", "//etc/passwd", "..\\..\\README.md", "..%5c..%5cREADME.md", "index.js%00.css",
    "%00", ".", "..", "./index.js", "index.js/", "index.js/..", "a/../../tb_plugin/params.py", "%252e%252e/README.md",
    "~/.bashrc", "%c0%ae%c0%ae/README.md", "..%c0%afREADME.md", "static/../../../README.md", "index.js?x=../../a",
]


def _random_text(rng: random.Random) -> str:
    pools = [
        "abcxyz019_-.", ' "\\\'\t\n\r\x00\x01\x1b\x7f%&=?#;/+', "üéß€中文😀\u2028\u200b\ufeff", "[]{}()<>|`^~$*!@,:",
    ]
    pool = "".join(rng.sample(pools, rng.randint(1, len(pools))))
    length = rng.choice([0, 1, 2, 5, 20, 100, rng.randint(200, 4000)])
    return "".join(rng.choice(pool) for _ in range(length))


def _random_step(rng: random.Random) -> str:
    return rng.choice([
        str(rng.randint(-5, 60)), str(2**63), str(-(2**63) - 1), str(2**63 - 1), "9" * rng.randint(19, 400), "1e3", "0x10",
        " 7", "7 ", "+7", "--1", "١٢", "7.0", "", "NaN", "-0", str(rng.randint(0, 50) * 10),
    ])


def plugin_routes(logdir: Path) -> list[str]:
    """Every route the plugin registers (so that a route added later is fuzzed too)."""
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    provider = data_provider.MultiplexerDataProvider(multiplexer, str(logdir))
    context = base_plugin.TBContext(data_provider=provider, logdir=str(logdir), multiplexer=multiplexer)
    return sorted(xray_plugin.XrayPlugin(context).get_plugin_apps())


class RequestMaker:
    """Random requests (method, path with query) for the plugin under ``http_client.PREFIX``."""

    def __init__(self, rng: random.Random, real: dict, routes: list[str]):
        self.rng, self.real = rng, real
        self.routes = [route for route in routes if not route.startswith("/static")]
        assert set(ROUTE_PARAMS) <= set(self.routes) and {"/static", "/static/*"} <= set(routes)

    def make(self) -> tuple[str, str, str]:
        """``(method, route, path_and_query)``; ``route`` is the route the request is aimed at."""
        rng = self.rng
        method = rng.choice(METHODS) if rng.random() < 0.08 else "GET"
        if rng.random() < 0.12:
            return method, "/static/*", self._static_path()
        route = rng.choice(list(ROUTE_PARAMS) if rng.random() < 0.7 else self.routes)
        path = route + ("/" if rng.random() < 0.03 else "")
        if rng.random() < 0.07:
            query = rng.choice(["%", "%zz", "%FF%FE%00", "&&&==", "run", "run=%", "run=%ZZ&layer", ";;;", "a" * 5000, "run=" + "%25" * 900])
        else:
            query = urllib.parse.urlencode(self._params(route), doseq=True)
        return method, route, http_client.PREFIX + urllib.parse.quote(path) + ("?" + query if query else "")

    def _params(self, route: str) -> list[tuple[str, str]]:
        rng, params = self.rng, []
        recorded = dict(zip(("run", "layer", "kind", "step"), rng.choice(self.real["recorded"])))
        names = {**ROUTE_PARAMS_OF_OTHER_TABS, **ROUTE_PARAMS}.get(route)
        if names is None:
            names = rng.sample(ALL_PARAMS, rng.randint(0, len(ALL_PARAMS)))
        faithful = rng.random() < 0.3  # every parameter as recorded: the request reaches a frame
        for name in names:
            roll = 0.5 if faithful else rng.random()
            if roll < 0.05:
                continue  # missing
            if roll < 0.55:
                params.append((name, recorded.get(name) or rng.choice(self.real.get(name) or ["0"])))  # as recorded
            elif roll < 0.75 and name in self.real:
                params.append((name, rng.choice(self.real[name])))
            else:
                params.append((name, _random_step(rng) if name == "step" else _random_text(rng)))
            if rng.random() < 0.03:
                params.append((name, _random_text(rng)))  # repeated
        if rng.random() < 0.1:
            params.append((_random_text(rng) or "x", _random_text(rng)))
        rng.shuffle(params)
        return params

    def _static_path(self) -> str:
        rng = self.rng
        name = rng.choice([
            rng.choice(TRAVERSALS), "x" * rng.choice([255, 256, 300, 5000]), "a/" * rng.randint(1, 400) + "index.js",
            "index.js", "style.css", urllib.parse.quote(_random_text(rng)), "%s/%s" % ("y" * 300, "z" * 300),
        ])
        return f"{http_client.PREFIX}/static/{name}"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    record(root / "run_a", captures=6)
    test_names.record_odd_names(root / test_names.WORKING_RUN)
    test_names.record_odd_names(root / 'say "hi"')  # unreadable by the fast loader: a 400 that says why
    return root


def real_values(logdir: Path) -> dict[str, list]:
    """Values of each parameter that exist in ``logdir``, and ``"recorded"``: (run, layer, kind, step) of its frames."""
    steps = [str(step) for step in test_names.STEPS]
    odd_frames = [(test_names.ODD_LAYER, "weight"), (test_names.ODD_LAYER, "output")] + [(n, "output") for n in test_names.HEAD_NAMES]
    recorded = [("run_a", layer, kind, str(step)) for layer, kinds in RUN_A_PLAN.items() for kind in kinds for step in range(0, 60, 10)]
    recorded += [(run, layer, kind, step) for run in (test_names.WORKING_RUN, 'say "hi"') for layer, kind in odd_frames for step in steps]
    return {
        "recorded": recorded,
        "run": ["run_a", test_names.WORKING_RUN, 'say "hi"', "nope"],
        "layer": ["0", "3", test_names.ODD_LAYER, *test_names.HEAD_NAMES, metadata.encode_name(test_names.ODD_LAYER)],
        "kind": list(metadata.KINDS),
        "step": ["0", "1", "2", "10", "20", "50"],
        "fps": ["1", "4", "30", "0", "31"],
        "max_frames": ["1", "2", "0", "501"],  # small: every GIF frame is read and drawn
        "stat": ["grad_l2", "grad_mean", "dead_fraction", "channel_var", "dead"],
        "columns": ["1", "3", "800", "0", "20001"],
    }


def server_paths(logdir: Path) -> list[bytes]:
    paths = {str(logdir), os.path.realpath(logdir), str(Path(__file__).resolve().parents[2]), sys.prefix, str(Path.home())}
    return [path.encode() for path in paths if len(path) > 1]


def problems(method: str, status: int, content_type: str, body: bytes, forbidden: list[bytes]) -> list[str]:
    """What is wrong with one response."""
    found = [f"{status}: {body[:300]!r}"] if status >= 500 else []
    if method == "HEAD" or (status == 200 and content_type != "application/json"):
        return found  # no body, or a frontend file or binary frame
    try:
        parsed = http_client.strict_json(body)
    except ValueError as error:
        return found + [f"not strict JSON ({error}): {body[:300]!r}"]
    if status != 200 and not (isinstance(parsed, dict) and parsed.get("code") == status and isinstance(parsed.get("error"), str)):
        found.append(f"error body without code/error: {status} {body[:300]!r}")
    return found + [f"server path {path!r} in {status} body {body[:300]!r}" for path in forbidden if path in body]


def fuzz(send, logdir: Path, threads: int = 1) -> collections.Counter:
    """Send :data:`REQUESTS_PER_LOADER` random requests through ``send(method, path) -> (status, content type, body)``,
    from ``threads`` threads at once."""
    maker = RequestMaker(random.Random(SEED), real_values(logdir), plugin_routes(logdir))
    requests = [maker.make() for _ in range(REQUESTS_PER_LOADER)]
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        responses = list(pool.map(lambda request: send(request[0], request[2]), requests))
    forbidden, failures, statuses = server_paths(logdir), [], collections.Counter()
    for (method, route, path), (status, content_type, body) in zip(requests, responses):
        statuses[(route, status)] += 1
        failures += [f"{method} {path[:200]}: {problem}" for problem in problems(method, status, content_type, body, forbidden)]
    assert not failures, f"{len(failures)} bad responses, first ones:\n" + "\n".join(failures[:10])
    assert statuses[("/frame", 200)] > 30 and statuses[("/layers", 200)] > 30, statuses  # real values reach real frames
    return statuses


@pytest.mark.slow
def test_fuzz_the_fast_loader(logdir, tmp_path):
    with tensorboard(sys.executable, logdir, cwd=tmp_path) as url:
        host, port = urllib.parse.urlsplit(url).netloc.split(":")

        def send(method: str, path: str) -> tuple[int, str, bytes]:
            connection = http.client.HTTPConnection(host, int(port), timeout=30)
            try:
                connection.request(method, path)
                response = connection.getresponse()
                return response.status, response.headers.get_content_type(), response.read()
            finally:
                connection.close()

        statuses = fuzz(send, logdir, threads=8)  # the data server answers each call in about 40 ms
    assert statuses[("/layers", 400)] > 0  # the run the fast loader cannot read


@pytest.mark.slow
def test_fuzz_the_python_loader(logdir):
    client = serve(logdir)

    def send(method: str, path: str) -> tuple[int, str, bytes]:
        response = client.open(path, method=method)
        return response.status_code, response.mimetype, response.get_data()

    fuzz(send, logdir)
