"""Xray on big models, on CPU: tracing and construction against one forward+backward (issue 20, part 4).

    python bench/bench_big_models.py [--models seq1k,seq5k,seq15k,resnet50,gpt2] [--repeats 3]

Models: ``nn.Sequential`` of Linear(8, 8) + ReLU pairs with 1k, 5k and 15k modules (batch 4x8:
the layers cost almost nothing, so Xray's per-module overhead shows), the ResNet-50-shaped model of
bench/bench_tab.py (batch 1x3x224x224) and a GPT-2-small-sized transformer (tests/transformer.py:
d = 768, 12 blocks, 12 heads, vocabulary 50,257, 128 tokens). Each model runs in its own process,
so that its peak memory is its own. For each, side by side:

* fwd+bwd: one plain forward + ``sum().backward()`` (min of ``--repeats`` after a warm-up);
* trace: ``xray_tb.trace.tracer.trace`` (min of ``--repeats``), and its ratio to fwd+bwd;
* Xray(): construction with the defaults (trace, drafted plan, health), once, and its ratio;
* plan: the drafted plan's layers with something to record, and its kinds (count per kind);
* capture: one ``take_graphs()`` after a training step at the defaults (16 MiB budget): time,
  bytes written, frames, frames skipped for the budget;
* peak extra memory: the process's peak RSS after construction and the capture, less its peak
  before (``ru_maxrss``; model, input and a plain forward+backward already done).

Goals (issue 20): trace <= 2x fwd+bwd, Xray() <= 2x fwd+bwd; each is printed as holds / misses.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = ("seq1k", "seq5k", "seq15k", "resnet50", "gpt2")
GOAL_RATIO = 2.0


def _model(name: str) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    if name.startswith("seq"):
        modules = int(name[3:-1]) * 1000
        layers: list[nn.Module] = []
        for _ in range(modules // 2):
            layers += [nn.Linear(8, 8), nn.ReLU()]
        return nn.Sequential(*layers), torch.randn(4, 8)
    if name == "resnet50":
        sys.path.insert(0, str(ROOT / "bench"))
        from bench_tab import resnet50

        return resnet50(), torch.randn(1, 3, 224, 224)
    if name == "gpt2":
        from tests.transformer import GPT

        return GPT(blocks=12, heads=12, width=768, context=128, vocab=50257), torch.randint(0, 50257, (1, 128))
    raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")


def _forward_backward(model: nn.Module, x: torch.Tensor) -> None:
    model(x).float().sum().backward()
    model.zero_grad(set_to_none=True)


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


def measure(name: str, repeats: int) -> dict:
    """All the figures of one model, in this process."""
    from xray_tb import Xray
    from xray_tb.trace.tracer import trace

    model, x = _model(name)
    model.train()
    _forward_backward(model, x)  # torch's one-time costs
    passes = [_seconds(lambda: _forward_backward(model, x)) for _ in range(repeats)]
    trace(model, (x,))  # the tracer's one-time costs (signature tables)
    traces = [_seconds(lambda: trace(model, (x,))) for _ in range(repeats)]
    before = _peak_rss_bytes()
    with tempfile.TemporaryDirectory() as logdir:
        start = time.perf_counter()
        xray = Xray(model, x, logdir=logdir)
        construct = time.perf_counter() - start
        plan = xray.plan
        kinds = collections.Counter(kind for entry in plan.values() for kind, on in entry.items() if on)
        layers = sum(1 for entry in plan.values() if any(entry.values()))
        _forward_backward(model, x)
        capture = _seconds(xray.take_graphs)
        report = xray.last_report
        xray.close()
    return {
        "model": name,
        "modules": sum(1 for _ in model.modules()) - 1,
        "params": sum(p.numel() for p in model.parameters()),
        "fwd_bwd": min(passes),
        "trace": min(traces),
        "construct": construct,
        "plan_layers": layers,
        "plan_kinds": dict(sorted(kinds.items())),
        "capture": capture,
        "capture_bytes": report.bytes,
        "frames": report.frames,
        "skipped": len(report.skipped),
        "peak_extra": _peak_rss_bytes() - before,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of fwd+bwd and of trace (default 3)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child process: one model, JSON out
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.repeats)))
        return 0
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU")
    header = f"{'model':9} {'modules':>7} {'fwd+bwd':>8} {'trace':>14} {'Xray()':>14} {'plan':>6} {'capture':>8} {'bytes':>9} {'frames':>6} {'peak +MiB':>9}"
    print(header)
    results, holds = [], True
    for name in args.models.split(","):
        out = subprocess.run(
            [sys.executable, __file__, "--one", name, "--repeats", str(args.repeats)],
            env=env, check=True, capture_output=True, text=True,
        ).stdout
        r = json.loads(out.strip().splitlines()[-1])
        results.append(r)
        t, c = r["trace"] / r["fwd_bwd"], r["construct"] / r["fwd_bwd"]
        print(
            f"{name:9} {r['modules']:>7} {r['fwd_bwd']:>7.3f}s {r['trace']:>6.3f}s {t:>5.1f}x {r['construct']:>6.3f}s {c:>5.1f}x "
            f"{r['plan_layers']:>6} {r['capture']:>7.3f}s {r['capture_bytes']:>9,} {r['frames']:>6} {r['peak_extra'] / 2**20:>9.1f}"
        )
    print()
    for r in results:
        t_ok = r["trace"] <= GOAL_RATIO * r["fwd_bwd"]
        c_ok = r["construct"] <= GOAL_RATIO * r["fwd_bwd"]
        holds &= t_ok and c_ok
        print(
            f"{r['model']:9} plan kinds {r['plan_kinds']}, skipped for the budget {r['skipped']}; "
            f"trace <= 2x fwd+bwd: {'holds' if t_ok else 'misses'}; Xray() <= 2x fwd+bwd: {'holds' if c_ok else 'misses'}"
        )
    return 0 if holds else 1


if __name__ == "__main__":
    sys.exit(main())
