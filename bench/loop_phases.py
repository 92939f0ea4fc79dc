"""Where a training step's time goes, phase by phase, with and without Xray, side by side in one run.

    python bench/loop_phases.py                         # mlp-wide, 6 rounds of 200 steps, wall time
    python bench/loop_phases.py --models lenet,mlp-wide --rounds 6 --steps 200
    python bench/loop_phases.py --models resnet50 --rounds 3 --steps 20 --every 5   # captures of a big CNN

The models and data are bench_overhead.py's, and ``resnet50``: bench_tab.py's ResNet-50 on random
3x224x224 images, batch 4 (minutes per round on a small CPU: few steps). Three instances of each model train in alternating
windows (the order reversed every other round): the plain loop, Xray with ``health=False`` and Xray at
its defaults, each capturing every --every steps. Every phase of every step is timed with
``time.perf_counter`` (wall time, what the training waits for): ``zero_grad``, forward, backward,
``take_graphs()`` and the optimizer step. The first round is a warm-up. The script prints each
phase's mean in milliseconds and the total, and the share of the plain loop's total that
``take_graphs()`` takes: the part of Xray's cost that does not depend on which instance of the model
runs faster (forward and backward move by several percent between instances on a small VM).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_overhead  # noqa: E402
from optimizer_hooks import OwnHooks  # noqa: E402
from bench_tab import resnet50  # noqa: E402
from xray_tb import Xray  # noqa: E402

PHASES = ("zero_grad", "forward", "backward", "take_graphs", "step")


def images(count: int, batch_size: int, shape: tuple, pool: int = 4) -> list:
    """Random images of ``shape`` and labels (fixed seed), ``pool`` distinct batches cycled."""
    generator = torch.Generator().manual_seed(0)
    data = [(torch.randn(batch_size, *shape, generator=generator), torch.randint(0, 10, (batch_size,), generator=generator))
            for _ in range(min(pool, count))]
    return [data[i % len(data)] for i in range(count)]


# bench_overhead's models, and a big CNN whose captures reduce large maps
MODELS = {**bench_overhead.MODELS,
          "resnet50": ("ResNet-50 3x224x224, batch 4", resnet50, (3, 224, 224), lambda count: images(count, 4, (3, 224, 224)))}
VARIANTS = ("plain", "health-off", "defaults")


def loops(make_model, example: torch.Tensor, every: int, logdir: str) -> dict:
    """Per variant: model, optimizer, Xray (None for plain) and the global optimizer hooks its Xray
    registered, installed for its own windows only (bench/optimizer_hooks.py)."""
    out = {}
    for variant in VARIANTS:
        torch.manual_seed(0)
        model = make_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        xray, own = None, OwnHooks()
        if variant != "plain":
            options = {"health": False} if variant == "health-off" else {}
            with own.owning():
                xray = Xray(model, example, logdir=f"{logdir}/{variant}", every=every, **options)
        out[variant] = (model, optimizer, xray, own)
    return out


def window(model, optimizer, xray, own, data, times: dict) -> None:
    clock = time.perf_counter
    gc.collect()
    with own.owning():
        _steps(model, optimizer, xray, data, times, clock)


def _steps(model, optimizer, xray, data, times: dict, clock) -> None:
    for x, y in data:
        t0 = clock()
        optimizer.zero_grad()
        t1 = clock()
        loss = F.cross_entropy(model(x), y)
        t2 = clock()
        loss.backward()
        t3 = clock()
        if xray is not None:
            xray.take_graphs()
        t4 = clock()
        optimizer.step()
        t5 = clock()
        for phase, seconds in zip(PHASES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            times[phase].append(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mlp-wide", help=f"comma-separated: {', '.join(MODELS)}")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    unknown = [m for m in args.models.split(",") if m not in MODELS]
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads, every={args.every}, "
          f"{args.rounds} rounds of {args.steps} steps (the first a warm-up), wall time, mean ms per step")
    for key in args.models.split(","):
        title, make_model, _, make_batches = MODELS[key]
        data = make_batches(args.steps)
        with tempfile.TemporaryDirectory() as logdir:
            built = loops(make_model, data[0][0], args.every, logdir)
            times = {variant: {phase: [] for phase in PHASES} for variant in VARIANTS}
            for round_index in range(args.rounds):
                order = VARIANTS if round_index % 2 == 0 else VARIANTS[::-1]
                for variant in order:
                    target = times[variant] if round_index else {phase: [] for phase in PHASES}
                    window(*built[variant], data, target)
            for _, _, xray, own in built.values():
                if xray is not None:
                    with own.owning():
                        xray.close()
        print(f"\n{key}: {title}")
        print(f"{'variant':<11}" + "".join(f" {phase:>11}" for phase in PHASES) + f" {'total':>8}")
        totals = {}
        for variant in VARIANTS:
            means = {phase: statistics.mean(values) * 1e3 for phase, values in times[variant].items()}
            totals[variant] = sum(means.values())
            print(f"{variant:<11}" + "".join(f" {means[phase]:11.3f}" for phase in PHASES) + f" {totals[variant]:8.3f}")
        for variant in VARIANTS[1:]:
            take = statistics.mean(times[variant]["take_graphs"]) * 1e3
            print(f"{variant}: take_graphs() {take:.3f} ms a step = {take / totals['plain']:.1%} of the plain step; "
                  f"total {totals[variant] / totals['plain']:.3f}x the plain loop")


if __name__ == "__main__":
    main()
