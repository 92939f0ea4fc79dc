"""Time ``xray_tb.trace.tracer.trace`` on a ResNet-50-sized model against a plain forward+backward.

Run from the repository root: ``python bench/bench_trace.py [--repeats N]``.

Same model, same input (batch 1, 3x224x224, train mode), same process. A first
forward+backward pays torch's one-time costs (timed and printed), then the first trace pays
the tracer's own (signature tables). Then N traces, N plain forward+backward passes and N
plain forwards are timed in alternation, so that load from other processes hits all alike;
min and median of each are printed, and the ratios of the minima (the least noisy estimate).
The plain forward runs in train mode too (it updates BatchNorm running stats; harmless here).
The bar: every trace, the first one included, under 5 s on a 2-core CPU (exit status 1
otherwise).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.models import ResNet50
from xray_tb.trace.tracer import trace

BAR_SECONDS = 5.0


def _seconds(fn: Callable[[], object]) -> float:
    """Wall-clock seconds of one call of ``fn``."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _forward_backward(model: torch.nn.Module, x: torch.Tensor) -> None:
    """One plain training-style pass: forward, scalar loss, backward; grads cleared after."""
    model(x).sum().backward()
    model.zero_grad(set_to_none=True)


def main() -> int:
    """Run the benchmark; exit status 1 when any trace misses the bar."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each (default 5)")
    repeats = parser.parse_args().repeats

    torch.manual_seed(0)
    model = ResNet50().train()
    x = ResNet50.example_input()
    warm_up = _seconds(lambda: _forward_backward(model, x))  # torch's one-time costs in this process
    first = _seconds(lambda: trace(model, (x,)))  # the tracer's one-time costs (signature tables)
    traces, passes, forwards = [], [], []
    for _ in range(repeats):
        traces.append(_seconds(lambda: trace(model, (x,))))
        passes.append(_seconds(lambda: _forward_backward(model, x)))
        forwards.append(_seconds(lambda: model(x)))
    architecture = trace(model, (x,))

    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch 1x3x224x224, "
        f"{sum(p.numel() for p in model.parameters()):,} params"
    )
    print(
        f"graph: {len(architecture['nodes'])} nodes, {len(architecture['edges'])} edges, "
        f"{len(architecture['autograd']['by_autograd'])} autograd nodes attributed"
    )
    print(f"torch warm-up (first forward+backward of the process): {warm_up:.3f} s")
    print(f"trace, first call:  {first:.3f} s")
    print(f"trace ({repeats} runs):     min {min(traces):.3f} s, median {statistics.median(traces):.3f} s")
    print(f"forward+backward:   min {min(passes):.3f} s, median {statistics.median(passes):.3f} s")
    print(f"forward alone:      min {min(forwards):.3f} s, median {statistics.median(forwards):.3f} s")
    print(f"ratio trace / forward+backward (minima): {min(traces) / min(passes):.2f}x")
    print(f"ratio trace / forward alone (minima):    {min(traces) / min(forwards):.2f}x")
    passed = max(first, *traces) < BAR_SECONDS
    print(f"bar (trace < {BAR_SECONDS:.0f} s): {'PASS' if passed else 'FAIL'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
