"""Long runs served by a real TensorBoard: how fast the Xray routes answer, on both loaders.

    python bench/bench_long_run.py [--captures 1000,10000] [--loaders rust,python] [--logdir /tmp/xray_long]

Each run is written by the real recorder (``Xray`` and ``take_graphs``): 20 ``Linear`` + ``ReLU``
layers, each recording its weight and its activation at every capture, with training health at its
defaults. The 1,000-capture run has ``Linear(64, 64)`` layers and a batch of 32 (about half a megabyte
per capture, the setting of issue 20); the 10,000-capture run has the same layers at ``Linear(16, 16)``
and a batch of 8 (fewer bytes per frame). A run is written once and kept under ``--logdir``.

For each run and loader it starts ``tensorboard`` on 127.0.0.1 (a free port, stopped by its PID) and
measures over HTTP:

* all steps visible: from the start of TensorBoard until ``/layers`` lists every captured step;
* ``/layers``, ``/frame``, ``/health?stat=grad_l2``, ``/ranges`` (the colour range over the timeline),
  ``/health_vector`` (a layer's dead units at a step, asked at each timeline step), ``/findings`` and ``/prune``:
  median of repeated requests (the first one warms the caches and is reported apart);
* ``/frame_bin``: median and max over ``--frames`` distinct (layer, kind, step) frames, none asked twice;
* TensorBoard's resident memory: the sum over its process tree (the data server included);
* event bytes per capture: the run's event files over the number of captures.

It first prints whether Linux acknowledges loopback segments at once (``quickack`` on the route to
127.0.0.1): the fast loader's calls wait about 40 ms each for a delayed acknowledgement unless it
does (docs/performance.md, "Long runs"), so the fast loader's figures depend on it.

The data-provider calls each route makes are counted by ``tests/plugin/test_reads_per_request.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.tensorboard_server import LOADERS, tensorboard  # noqa: E402

LAYERS = 20
#: captures -> (width of each Linear, batch): the issue's 1,000-capture run, and a 10,000-capture one with smaller frames
SHAPES = {1000: (64, 32), 10000: (16, 8)}
KINDS = ("weight", "activation")


def record(run_dir: Path, captures: int) -> None:
    """Trains the 20-layer chain and captures every step, through the real recorder."""
    import torch
    from torch import nn

    from xray_tb import Xray

    width, batch = SHAPES.get(captures, SHAPES[1000])
    torch.manual_seed(0)
    blocks = []
    for _ in range(LAYERS):
        blocks += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*blocks)
    plan = {str(2 * i): {"weight": True, "activation": True} for i in range(LAYERS)}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with Xray(model, input_size=(width,), logdir=str(run_dir), plan=plan) as xray:
        for step in range(captures):
            optimizer.zero_grad()
            model(torch.randn(batch, width)).pow(2).mean().backward()
            xray.take_graphs(step)
            optimizer.step()


def fetch(url: str, timeout: float = 300) -> tuple[float, bytes]:
    """(ms, body) of one GET."""
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body = response.read()
    return (time.perf_counter() - start) * 1000, body


def warm_median(url: str, repeats: int) -> tuple[float, float]:
    """(first request's ms, median ms of the ``repeats`` after it)."""
    first, _ = fetch(url)
    return first, statistics.median(fetch(url)[0] for _ in range(repeats))


def tree_rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` and every descendant, MiB (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo += children.get(current, [])
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def measure(logdir: Path, run: str, captures: int, loader: str, args) -> dict:
    started = time.perf_counter()
    with tensorboard(sys.executable, logdir, cwd=logdir, extra=[*LOADERS[loader], "--reload_interval=5"], timeout=600) as url:
        base = f"{url}/data/plugin/xray"
        layers_url = f"{base}/layers?run={run}"
        while True:  # all steps visible
            try:
                body = json.loads(fetch(layers_url)[1])
                if len(body["steps"]) >= captures:
                    break
            except OSError:  # a 404 while the run is not loaded yet
                pass
            if time.perf_counter() - started > args.visible_timeout:
                raise TimeoutError(f"{run}: not every step visible after {args.visible_timeout} s")
            time.sleep(0.2)
        visible = time.perf_counter() - started
        time.sleep(args.settle)  # let the loader's reload pass end before timing
        layer_names = [entry["name"] for entry in body["layers"]]
        result = {"visible_s": visible}
        result["layers_first"], result["layers"] = warm_median(layers_url, args.repeats)
        rng = random.Random(0)
        picks = rng.sample([(layer, kind, step) for layer in layer_names for kind in KINDS for step in range(captures)], args.frames)
        times = [fetch(f"{base}/frame_bin?run={run}&layer={layer}&kind={kind}&step={step}")[0] for layer, kind, step in picks]
        result["frame_bin_median"], result["frame_bin_max"] = statistics.median(times), max(times)
        _, result["frame"] = warm_median(f"{base}/frame?run={run}&layer={layer_names[0]}&kind=weight&step={captures // 2}", args.repeats)
        result["health_first"], result["health"] = warm_median(f"{base}/health?run={run}&stat=grad_l2", args.repeats)
        result["ranges_first"], result["ranges"] = warm_median(f"{base}/ranges?run={run}&layer={layer_names[0]}", args.repeats)
        # What the layer view asks at each timeline step, and what every view asks when it opens.
        vector = f"{base}/health_vector?run={run}&layer={layer_names[0]}&stat=dead&step={captures // 2}"
        result["vector_first"], result["vector"] = warm_median(vector, args.repeats)
        result["findings_first"], result["findings"] = warm_median(f"{base}/findings?run={run}", args.repeats)
        result["prune_first"], result["prune"] = warm_median(f"{base}/prune?run={run}", args.repeats)
        result["rss_mib"] = tree_rss_mib(tensorboard_pid(url))
        return result


def tensorboard_pid(url: str) -> int:
    """The PID of the TensorBoard listening at ``url`` (the process whose command line names its port)."""
    port = url.rsplit(":", 1)[1]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                command = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"tensorboard.main" in command and port.encode() in command:
                return int(entry)
    raise RuntimeError(f"no TensorBoard process on port {port}")


def run_bytes(run_dir: Path) -> int:
    return sum(path.stat().st_size for path in run_dir.rglob("*") if path.is_file())


def loopback_quickack() -> str:
    """``on`` or ``off``: whether the route to 127.0.0.1 acknowledges at once (``quickack 1``), or why unknown."""
    try:
        routes = subprocess.run(["ip", "route", "show", "table", "local"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError) as error:
        return f"unknown ({type(error).__name__})"
    line = next((line for line in routes.splitlines() if line.split()[:2] == ["local", "127.0.0.1"]), None)
    if line is None:
        return "unknown (no local route to 127.0.0.1 listed)"
    return "on" if "quickack 1" in line else "off"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--captures", default="1000,10000", help="comma-separated capture counts, one run each")
    parser.add_argument("--loaders", default="rust,python", help="comma-separated: rust (--load_fast=true), python (--load_fast=false)")
    parser.add_argument("--logdir", type=Path, default=None, help="where the runs are written and kept (default: a new /tmp folder)")
    parser.add_argument("--frames", type=int, default=100, help="distinct frames asked from /frame_bin")
    parser.add_argument("--repeats", type=int, default=10, help="requests per warm median")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds between all steps visible and the timings")
    parser.add_argument("--visible_timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    logdir = args.logdir or Path(tempfile.mkdtemp(prefix="xray_long_"))
    # TensorBoard runs in the logdir: this checkout's plugin must shadow an installed one.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    print(f"loopback quickack: {loopback_quickack()} (off is Linux's default: delayed acknowledgements)", flush=True)
    rows = []
    for captures in (int(part) for part in args.captures.split(",")):
        run = f"long{captures}"
        # One run per logdir: each TensorBoard loads only the run it measures.
        run_dir = logdir / run / run
        if not run_dir.exists():
            start = time.perf_counter()
            record(run_dir, captures)
            print(f"recorded {run}: {captures} captures in {time.perf_counter() - start:.0f} s", flush=True)
        size = run_bytes(run_dir)
        for loader in args.loaders.split(","):
            result = measure(logdir / run, run, captures, loader, args)
            rows.append((captures, size, loader, result))
            print(f"{run} {loader}: {json.dumps({k: round(v, 1) for k, v in result.items()})}", flush=True)
    print()
    print("| captures | run size | bytes/capture | loader | all steps visible | /layers | /frame_bin median / max | /frame | /health?stat=grad_l2 | /ranges | resident memory |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for captures, size, loader, r in rows:
        flag = "--load_fast=true" if loader == "rust" else "--load_fast=false"
        print(
            f"| {captures:,} | {size / 1e6:,.0f} MB | {size // captures:,} | `{flag}` | {r['visible_s']:.1f} s | {r['layers']:.0f} ms "
            f"(first {r['layers_first']:.0f}) | {r['frame_bin_median']:.0f} / {r['frame_bin_max']:.0f} ms | {r['frame']:.0f} ms "
            f"| {r['health']:.0f} ms (first {r['health_first']:.0f}) | {r['ranges']:.0f} ms (first {r['ranges_first']:.0f}) "
            f"| {r['rss_mib']:,.0f} MiB |"
        )
    print()
    print("| captures | loader | /health_vector | /findings | /prune |")
    print("|---|---|---|---|---|")
    for captures, _, loader, r in rows:
        flag = "--load_fast=true" if loader == "rust" else "--load_fast=false"
        print(f"| {captures:,} | `{flag}` | " + " | ".join(f"{r[key]:.0f} ms (first {r[key + '_first']:.0f})" for key in ("vector", "findings", "prune")) + " |")


if __name__ == "__main__":
    main()
