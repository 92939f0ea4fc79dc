"""Reads per request do not grow with the number of captures.

Runs of N and 3N captures are written by the real recorder and served to a real plugin instance by
each of TensorBoard's loaders: the Python loader in process, and the fast loader's data server (its
own binary, on 127.0.0.1, stopped by its PID) through TensorBoard's gRPC data provider. Every call to
the data provider (and, on the Python loader, to the multiplexer behind it) is counted per request.
No timing is asserted here; the figures come from ``bench/bench_long_run.py``.
"""

from __future__ import annotations

import collections
import contextlib
import subprocess
import time

import grpc
import pytest
from tensorboard import context, program
from tensorboard.backend.event_processing import data_ingester
from tensorboard.data import grpc_provider, provider
from tensorboard.plugins import base_plugin
from tensorboard.plugins.core import core_plugin

from tb_plugin import metadata, xray_plugin
from tests.helpers.plugin_app import record

N = 8
PROVIDER_CALLS = ("list_runs", "list_blob_sequences", "read_blob_sequences", "read_blob", "list_scalars", "read_scalars", "list_tensors", "read_tensors")


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("reads")
    record(root / "short", captures=N)
    record(root / "long", captures=3 * N)
    return root


class Counted:
    """Counts calls of some methods of some objects, in place (the objects keep their types)."""

    def __init__(self):
        self.calls: collections.Counter = collections.Counter()

    def wrap(self, target, names) -> None:
        for name in names:
            method = getattr(target, name)

            def counted(*args, _method=method, _name=name, **kwargs):
                self.calls[_name] += 1
                tags = getattr(kwargs.get("run_tag_filter"), "tags", None)
                if _name == "list_blob_sequences" and (tags is None or len(tags) > 1):
                    self.calls["listings of more than one tag"] += 1
                return _method(*args, **kwargs)

            setattr(target, name, counted)

    def during(self, request, blob_reads) -> dict:
        """The counted calls of ``request``, and ``fresh_reads``: blob groups read on a new connection."""
        self.calls.clear()
        before = blob_reads.fresh_reads
        request()
        return {**self.calls, **({"fresh_reads": blob_reads.fresh_reads - before} if blob_reads.fresh_reads > before else {})}


@contextlib.contextmanager
def python_loader(logdir):
    tb = program.TensorBoard(plugins=[core_plugin.CorePluginLoader(), xray_plugin.XrayLoader()])
    tb.configure(argv=["tensorboard", "--logdir", str(logdir), "--reload_interval=0", "--reload_task=blocking", "--load_fast=false"])
    ingester = data_ingester.LocalDataIngester(tb.flags)
    ingester.start()
    yield ingester.data_provider, ingester.deprecated_multiplexer


@contextlib.contextmanager
def data_server(logdir, tmp_path):
    """TensorBoard's data server (the fast loader) on ``logdir``, and a gRPC data provider on it."""
    import tensorboard_data_server

    port_file = tmp_path / "port"
    command = [tensorboard_data_server.server_binary(), "--logdir", str(logdir), "--host", "127.0.0.1", "--port", "0",
               "--port-file", str(port_file), "--samples-per-plugin", f"{metadata.PLUGIN_NAME}=all", "--reload", "once"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            assert server.poll() is None and time.monotonic() < deadline, "the data server did not start"
            time.sleep(0.05)
        address = f"127.0.0.1:{port_file.read_text().strip()}"
        channel = grpc.insecure_channel(address)
        data_provider = grpc_provider.GrpcDataProvider(address, grpc_provider.make_stub(channel))
        tag = metadata.frame_tag("0", "weight")
        while len(_points(data_provider, "long", tag)) < 3 * N or len(_points(data_provider, "short", tag)) < N:
            assert time.monotonic() < deadline, "the data server did not load the runs"
            time.sleep(0.1)
        yield data_provider, None
        channel.close()
    finally:
        server.terminate()
        server.wait(timeout=10)


def _points(data_provider, run: str, tag: str) -> list:
    filter_ = provider.RunTagFilter(runs=[run], tags=[tag])
    found = data_provider.read_blob_sequences(context.RequestContext(), experiment_id="", plugin_name=metadata.PLUGIN_NAME, downsample=10**6, run_tag_filter=filter_)
    return found.get(run, {}).get(tag, [])


def reads_per_request(data_provider, multiplexer, run: str, captures: int) -> dict[str, dict]:
    """The calls of each route, asked twice (cold, then warm), on a fresh plugin."""
    counted = Counted()
    counted.wrap(data_provider, PROVIDER_CALLS)
    if multiplexer is not None:
        counted.wrap(multiplexer, ["Tensors"])
    plugin = xray_plugin.XrayPlugin(base_plugin.TBContext(data_provider=data_provider, multiplexer=multiplexer, logdir=""))
    apps = plugin.get_plugin_apps()
    frames, health, layer_health = apps["/frame_bin"].__self__, apps["/health"].__self__, apps["/health_vector"].__self__
    ctx, last = context.RequestContext(), (captures - 1) * 10
    requests = {
        "/layers": lambda: plugin.layers_impl(ctx, "", run),
        "/frame_bin": lambda: frames.frame_bin_impl(ctx, "", run=run, layer="0", kind="weight", step=last),
        "/frame_bin other step": lambda: frames.frame_bin_impl(ctx, "", run=run, layer="3", kind="output", step=last - 10),
        "/frame": lambda: frames.frame_impl(ctx, "", run=run, layer="0", kind="activation", step=10),
        "/health": lambda: health.health_impl(ctx, "", run=run, stat="grad_l2"),
        "/ranges": lambda: frames.ranges_impl(ctx, "", run=run, layer="0"),
        "/health_vector": lambda: layer_health.vector_impl(ctx, "", run=run, stat="dead", layer="0", step=last),
        "/findings": lambda: health.findings_impl(ctx, "", run=run),
        "/prune": lambda: layer_health.prune_impl(ctx, "", run=run),
    }
    blob_reads = plugin._series.blob_reads
    return {f"{name} {when}": counted.during(request, blob_reads) for name, request in requests.items() for when in ("cold", "warm")}


@pytest.mark.parametrize("loader", ["python", "fast"])
def test_reads_per_request_do_not_grow_with_captures(logdir, tmp_path, loader):
    serve = python_loader(logdir) if loader == "python" else data_server(logdir, tmp_path)
    with serve as (data_provider, multiplexer):
        short = reads_per_request(data_provider, multiplexer, "short", N)
        long = reads_per_request(data_provider, multiplexer, "long", 3 * N)
    # A cold /layers or /health reads the run's series once (its health blocks grow with training time).
    steady = [name for name in long if name.endswith("warm") or name.startswith("/frame")]
    assert {name: short[name] for name in steady} == {name: long[name] for name in steady}
    # Warm requests list no run: a frame at a known step is read straight away, the others probe a few
    # tags, one per listing on the fast loader (an answer of more tags waits for a delayed acknowledgement).
    for name, calls in long.items():
        if name.endswith("warm"):
            assert calls.get("read_blob_sequences", 0) == 0, (name, calls)
            assert calls.get("list_blob_sequences", 0) <= 3, (name, calls)
            assert "listings of more than one tag" not in calls, (name, calls)
    assert long["/frame_bin warm"].get("list_blob_sequences", 0) == 0
    assert long["/frame_bin other step warm"].get("list_blob_sequences", 0) == 0
    # A frame's blobs: on the fast loader's local data server, one group read on a connection of its own
    # (tb_plugin/blob_connections.py), not two read_blob calls on TensorBoard's channel.
    for name in ("/frame_bin warm", "/frame_bin other step warm", "/frame warm"):
        if loader == "fast":
            assert long[name].get("fresh_reads") == 1 and "read_blob" not in long[name], (name, long[name])
        else:
            assert "fresh_reads" not in long[name], (name, long[name])
