"""Where ``Xray()``'s construction time goes, part by part, on bench_big_models.py's models (CPU).

    python bench/construction_phases.py [--models rg1k,rg5k] [--repeats 3]

For each model: one plain forward + ``sum().backward()`` (the minimum of ``--repeats`` after a
warm-up), then ``--repeats`` constructions at the defaults with a wall clock around each part the
facade calls: the trace, ``Recording()`` (the architecture's JSON, its compressed copy and the graph
index), the capture's plan preparation, training health's construction (its scope, buffers and
hooks) and the plan's installation (hooks armed, plan written). The construction with the smallest
total is printed, each part in milliseconds and as a ratio to the forward and backward, the unit of
issue 20's "Xray() <= 2x" goal. The clocks wrap the parts in this process only; nothing is changed
for a user.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_big_models  # noqa: E402
from xray_tb import xray as facade  # noqa: E402
from xray_tb.trace.tracer import trace  # noqa: E402

#: (owner, attribute, label): the parts timed, in the order the constructor calls them.
PARTS = (
    (facade.arguments, "trace_model", "trace"),
    (facade.Recording, "__init__", "Recording()"),
    (facade.Capturer, "prepare", "plan preparation"),
    (facade.TrainingHealth, "__init__", "training health"),
    (facade.Xray, "_install", "plan installation"),
    (facade.Xray, "__init__", "Xray() in all"),
)


def _timed(seconds: dict, owner, attribute: str, label: str) -> None:
    inner = getattr(owner, attribute)

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            seconds[label] += time.perf_counter() - start

    setattr(owner, attribute, timed)


def phases(name: str, repeats: int) -> tuple[float, dict[str, float]]:
    """(forward and backward seconds, the fastest construction's seconds per part) for one model."""
    torch.set_flush_denormal(True)  # as bench_big_models.py: subnormal gradients would slow the backward 60x
    model, x = bench_big_models._model(name)
    model.train()
    bench_big_models._forward_backward(model, x)
    passes = [bench_big_models._seconds(lambda: bench_big_models._forward_backward(model, x)) for _ in range(repeats)]
    trace(model, (x,))  # the tracer's one-time costs
    seconds: dict[str, float] = collections.defaultdict(float)
    for owner, attribute, label in PARTS:
        _timed(seconds, owner, attribute, label)
    runs = []
    with tempfile.TemporaryDirectory() as logdir:
        for attempt in range(repeats + 1):  # the first is a warm-up
            seconds.clear()
            facade.Xray(model, x, logdir=f"{logdir}/{attempt}").close()
            if attempt:
                runs.append(dict(seconds))
    return min(passes), min(runs, key=lambda run: run["Xray() in all"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="rg1k,rg5k", help=f"comma-separated, of {', '.join(bench_big_models.MODELS)}")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    unknown = [m for m in args.models.split(",") if m not in bench_big_models.MODELS]
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(bench_big_models.MODELS)}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU; the fastest of {args.repeats} constructions")
    for name in args.models.split(","):
        fwd_bwd, parts = phases(name, args.repeats)
        print(f"\n{name}: forward and backward {fwd_bwd * 1e3:.1f} ms")
        for _, _, label in PARTS:
            value = parts.get(label, 0.0)
            print(f"  {label:<18} {value * 1e3:8.1f} ms  {value / fwd_bwd:5.2f}x")
        rest = parts["Xray() in all"] - sum(parts.get(label, 0.0) for _, _, label in PARTS[:-1])
        print(f"  {'the rest':<18} {rest * 1e3:8.1f} ms  {rest / fwd_bwd:5.2f}x")


if __name__ == "__main__":
    main()
