"""What a piece of Python costs right after a training step's backward, against the same piece warm.

    python bench/after_backward.py                      # lenet and mlp-wide, 300 samples each
    python bench/after_backward.py --models lenet --samples 500

``take_graphs()`` runs right after ``loss.backward()``, when the backward has just streamed the model's
activations and gradients through the caches. This script times, side by side in one run, the same
work in two states: warm (after the same work, back to back) and cold (right after a forward and
``backward()`` of bench_overhead.py's models, 2 intra-op threads):

- ``a Python loop``: 50 additions in a Python loop (Xray-independent: the interpreter alone);
- ``a sum per gradient``: one ``Tensor.sum()`` per gradient, what the non-finite check reads on a CPU;
- ``take_graphs(), not due``: Xray with ``health=False``, at a step the schedule skips;
- ``with health``: the same at the defaults (health on): the every-iteration non-finite check of the
  weights and gradients, and training health's bookkeeping (cold only: a second call without a
  backward between has nothing new to check).

It prints each median in microseconds and the cold/warm ratio: how much of Xray's per-step cost in a
training loop is the state the backward leaves, not work that Xray's code could cut.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Optional

import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_overhead  # noqa: E402
from xray_tb import Xray  # noqa: E402


def _python_loop() -> int:
    total = 0
    for k in range(50):
        total += k
    return total


def _medians(name: str, samples: int, logdir: str) -> dict[str, tuple[Optional[float], float]]:
    """Per piece of work: (warm, cold) medians in seconds (warm None where it has no meaning), for
    one of bench_overhead.py's models."""
    _, make_model, _, make_data = bench_overhead.MODELS[name]
    torch.manual_seed(0)
    model = make_model()
    x, y = make_data(1)[0]

    def backward() -> None:
        model.zero_grad(set_to_none=False)
        F.cross_entropy(model(x), y).backward()

    backward()
    gradients = [p.grad for p in model.parameters()]
    out = {
        "a Python loop": _measured(_python_loop, backward, samples),
        "a sum per gradient": _measured(lambda: [g.sum() for g in gradients], backward, samples),
    }
    for label, health in (("take_graphs(), not due", False), ("  with health", True)):
        xray = Xray(model, x, logdir=f"{logdir}/{label.strip()}", every=10**9, health=health)  # never due after step 0
        backward()
        xray.take_graphs(0)
        steps = iter(range(1, 10**9))
        warm, cold = _measured(lambda: xray.take_graphs(next(steps)), backward, samples)
        out[label] = (None if health else warm, cold)  # a second call without a backward checks nothing new
        xray.close()
    return out


def _measured(piece, backward, samples: int) -> tuple[float, float]:
    """(warm, cold) medians: ``piece`` timed right after ``backward()``, then again at once."""
    warm, cold = [], []
    for _ in range(samples):
        backward()
        start = time.perf_counter()
        piece()
        cold.append(time.perf_counter() - start)
        start = time.perf_counter()
        piece()
        warm.append(time.perf_counter() - start)
    return statistics.median(warm), statistics.median(cold)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="lenet,mlp-wide", help=f"comma-separated: {', '.join(bench_overhead.MODELS)}")
    parser.add_argument("--samples", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(2)
    warnings.simplefilter("ignore")  # the never-due schedule's notes are not what is measured
    print(f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads, {args.samples} samples, medians in µs")
    with tempfile.TemporaryDirectory() as logdir:
        for name in args.models.split(","):
            print(f"\n{name}: {bench_overhead.MODELS[name][0]}")
            print(f"{'piece of work':26s} {'warm':>9s} {'after backward':>15s} {'ratio':>7s}")
            for label, (warm, cold) in _medians(name, args.samples, f"{logdir}/{name}").items():
                if warm is None:
                    print(f"{label:26s} {'-':>9s} {cold * 1e6:15.1f} {'-':>7s}")
                else:
                    print(f"{label:26s} {warm * 1e6:9.1f} {cold * 1e6:15.1f} {cold / warm:6.1f}x")


if __name__ == "__main__":
    main()
