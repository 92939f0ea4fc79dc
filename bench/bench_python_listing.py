"""The first requests after new data on TensorBoard's Python loader (``--load_fast=false``): the
plugin's own listing of a run against TensorBoard's provider listing, side by side in one process.

    python bench/bench_python_listing.py                    # 10,000 captures of a 10-layer MLP
    python bench/bench_python_listing.py --captures 2000

It writes a run through the real recorder (health at its defaults, a capture every step), loads it
into TensorBoard's ``EventMultiplexer`` as the Python loader does, then, for each listing, builds a
fresh plugin (nothing cached) and times its first ``/runs``, ``/layers`` and ``/health?stat=grad_l2``
and a warm ``/layers`` (medians over --repeats fresh plugins). TensorBoard's provider listing looks
at every point's tensor (``MultiplexerDataProvider.list_blob_sequences``); the plugin's reads the
multiplexer's events (``tb_plugin.series.SeriesReader``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from werkzeug.test import EnvironBuilder

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tb_plugin import metadata, series, xray_plugin  # noqa: E402
from xray_tb import Xray  # noqa: E402


def write_run(logdir: Path, captures: int, layers: int) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[module for _ in range(layers) for module in (torch.nn.Linear(8, 8), torch.nn.ReLU())])
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(4, 8)
    with Xray(model, x, logdir=str(logdir / "run"), every=1) as xray:
        for step in range(captures):
            optimizer.zero_grad()
            model(x).square().mean().backward()
            xray.take_graphs(step)
            optimizer.step()


def provider_listing(original):
    """``SeriesReader.list`` through TensorBoard's provider listing, as the plugin listed before."""

    def listing(self, ctx, experiment_id, run=None):
        saved, self._multiplexer = self._multiplexer, None
        try:
            return original(self, ctx, experiment_id, run)
        finally:
            self._multiplexer = saved

    return listing


def timed(app, route: str, query: str) -> float:
    environ = EnvironBuilder(path=route, query_string=query).get_environ()
    start = time.perf_counter()
    status = []
    b"".join(app(environ, lambda s, headers, exc_info=None: status.append(s)))
    elapsed = time.perf_counter() - start
    assert status[0].startswith("200"), (route, status)
    return elapsed


def measure(multiplexer, logdir: Path, repeats: int) -> dict[str, float]:
    times: dict[str, list[float]] = {"/runs": [], "/layers": [], "/layers warm": [], "/health": []}
    for _ in range(repeats):
        provider = data_provider.MultiplexerDataProvider(multiplexer, str(logdir))
        apps = xray_plugin.XrayPlugin(base_plugin.TBContext(data_provider=provider, logdir=str(logdir), multiplexer=multiplexer)).get_plugin_apps()
        times["/runs"].append(timed(apps["/runs"], "/runs", ""))
        times["/layers"].append(timed(apps["/layers"], "/layers", "run=run"))
        times["/layers warm"].append(timed(apps["/layers"], "/layers", "run=run"))
        times["/health"].append(timed(apps["/health"], "/health", "run=run&stat=grad_l2"))
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--captures", type=int, default=10_000)
    parser.add_argument("--layers", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as folder:
        logdir = Path(folder)
        start = time.perf_counter()
        write_run(logdir, args.captures, args.layers)
        print(f"wrote {args.captures:,} captures of {args.layers} Linear+ReLU layers in {time.perf_counter() - start:.1f} s")
        start = time.perf_counter()
        multiplexer = plugin_event_multiplexer.EventMultiplexer(tensor_size_guidance={metadata.PLUGIN_NAME: 0})
        multiplexer.AddRunsFromDirectory(str(logdir))
        multiplexer.Reload()
        tags = len(multiplexer.GetAccumulator("run").AllSummaryMetadata())
        print(f"loaded by the Python loader's multiplexer in {time.perf_counter() - start:.1f} s ({tags} tags)")
        plugins = measure(multiplexer, logdir, args.repeats)
        original = series.SeriesReader.list
        series.SeriesReader.list = provider_listing(original)
        try:
            tensorboards = measure(multiplexer, logdir, args.repeats)
        finally:
            series.SeriesReader.list = original
    print(f"\nfirst requests of a fresh plugin, median of {args.repeats} (ms)")
    print(f"{'request':14} {'plugin listing':>15} {'provider listing':>17} {'ratio':>6}")
    for name in plugins:
        print(f"{name:14} {plugins[name] * 1e3:>15.1f} {tensorboards[name] * 1e3:>17.1f} {plugins[name] / tensorboards[name]:>6.2f}")


if __name__ == "__main__":
    main()
