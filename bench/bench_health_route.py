"""Time ``/health?columns=800`` and ``/health_layer?columns=800`` on a warm TensorBoard, both loaders,
over a run of 50 layers x ``iterations`` health steps recorded by the real recorder
(:func:`bench.tab_health.record_health`).

    python bench/bench_health_route.py [--iterations 20000] [--logdir /tmp/xray_health_bench]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.tab_health import record_health  # noqa: E402
from tests.tensorboard_server import LOADERS, tensorboard  # noqa: E402


def timed_ms(url: str, repeats: int = 7) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        with urllib.request.urlopen(url, timeout=120) as response:
            response.read()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times[1:])  # the first request warms the cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20000)
    parser.add_argument("--logdir", type=Path, default=None)
    parser.add_argument("--settle", type=float, default=20.0, help="seconds to let TensorBoard finish loading the run first")
    args = parser.parse_args()
    logdir = args.logdir or Path(tempfile.mkdtemp(prefix="xray_health_bench_"))
    run = logdir / "health"
    if not run.exists():
        start = time.perf_counter()
        record_health(run, args.iterations)
        print(f"recorded {args.iterations} iterations in {time.perf_counter() - start:.0f} s")
    for loader, extra in LOADERS.items():
        with tensorboard(sys.executable, logdir, cwd=logdir, extra=[*extra, "--reload_interval=0"], timeout=300) as url:
            base = f"{url}/data/plugin/xray"
            time.sleep(args.settle)  # the Python loader keeps reading the run after the plugin is listed
            first = time.perf_counter()
            urllib.request.urlopen(f"{base}/health?run=health&stat=grad_l2&columns=800", timeout=300).read()
            cold = (time.perf_counter() - first) * 1000
            warm = timed_ms(f"{base}/health?run=health&stat=grad_l2&columns=800")
            layer = timed_ms(f"{base}/health_layer?run=health&layer=20&columns=800")
            print(f"{loader}: /health columns=800 first {cold:.0f} ms, warm {warm:.0f} ms; /health_layer columns=800 warm {layer:.0f} ms")


if __name__ == "__main__":
    main()
