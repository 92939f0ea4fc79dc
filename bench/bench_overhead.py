"""Training-loop overhead of Xray, side by side in one run, as ratios to the plain loop.

    python bench/bench_overhead.py [--steps 600] [--rounds 5]

Variants, each on the digits CNN and an MLP (CPU, batch 32):
  plain          the loop without Xray
  (a) attached   Xray attached (no schedule, hooks armed), never capturing
  (b) every 100  Xray(every=100), take_graphs() called each step, capturing every 100 steps
  (b') manual    no schedule, `if step % 100 == 0: xray.take_graphs(step)` (hooks stay armed)
  (c) histograms SummaryWriter.add_histogram of every parameter and its grad every 100 steps
  (d) wandb      wandb.watch(log="all", log_freq=100) offline, when wandb is installed

Variants run interleaved, round after round, and the median time per step of each is compared, so
a noisy machine slows all of them alike.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.tensorboard import SummaryWriter

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from examples.digits import LeNetDigits, digits_loader  # noqa: E402
from xray_tb import Xray  # noqa: E402

EVERY = 100


def mlp() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def batches(steps: int):
    data = [b for b in digits_loader(32, seed=0)]
    return [data[i % len(data)] for i in range(steps)]


def full_plan(xray: Xray) -> dict:
    plan = xray.draft_plan()
    for layer, node in plan.items():
        if xray.architecture and any(n.get("module") == layer and n.get("type") in ("Conv2d", "Linear") for n in xray.architecture["nodes"]):
            node.update(weight=True, weight_grad=True, grad=True, output=True)
    return plan


def run(variant: str, make_model, data, logdir: str) -> float:
    torch.manual_seed(0)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    xray = writer = None
    if variant in ("attached", "every", "manual"):
        xray = Xray(model, input_size=(1, 8, 8), logdir=logdir, every=EVERY if variant == "every" else None)
        xray.set_plan(full_plan(xray))
    if variant == "histograms":
        writer = SummaryWriter(logdir)
    if variant == "wandb":
        import wandb

        wandb.init(mode="offline", dir=logdir)
        wandb.watch(model, log="all", log_freq=EVERY)
    start = time.perf_counter()
    for step, (x, y) in enumerate(data):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if variant == "every":
            xray.take_graphs()
        elif variant == "manual" and step % EVERY == 0:
            xray.take_graphs(step)
        elif variant == "histograms" and step % EVERY == 0:
            for name, param in model.named_parameters():
                writer.add_histogram(name, param, step)
                writer.add_histogram(name + "/grad", param.grad, step)
        optimizer.step()
    elapsed = time.perf_counter() - start
    if xray is not None:
        xray.close()
    if writer is not None:
        writer.close()
    if variant == "wandb":
        import wandb

        wandb.finish(quiet=True)
    return elapsed / len(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    variants = ["plain", "attached", "every", "manual", "histograms"]
    try:
        import wandb  # noqa: F401

        variants.append("wandb")
    except ImportError:
        print("(d) wandb: not installed, skipped")
    data = batches(args.steps)
    for model_name, make_model in (("digits CNN", LeNetDigits), ("MLP 64-256-256-10", mlp)):
        times = {variant: [] for variant in variants}
        with tempfile.TemporaryDirectory() as tmp:
            run("plain", make_model, data[:50], tmp)  # warm-up
            for round_index in range(args.rounds):
                for variant in variants:
                    times[variant].append(run(variant, make_model, data, f"{tmp}/{variant}{round_index}"))
        plain = statistics.median(times["plain"])
        print(f"\n{model_name}: {args.steps} steps x {args.rounds} rounds, median ms/step and ratio to plain")
        print(f"{'variant':<14} {'ms/step':>8} {'ratio':>7}")
        for variant in variants:
            median = statistics.median(times[variant])
            print(f"{variant:<14} {median * 1e3:8.3f} {median / plain:7.3f}")


if __name__ == "__main__":
    main()
