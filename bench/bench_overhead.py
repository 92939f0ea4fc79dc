"""Training-loop overhead of Xray, side by side in one run, as ratios to the plain loop.

    python bench/bench_overhead.py [--steps 600] [--rounds 5]

Variants, each on the digits CNN and an MLP (CPU, batch 32):
  plain          the loop without Xray
  (a) idle       Xray(every=...) attached, take_graphs() called each step, no step due: not capturing
  (a') armed     Xray without a schedule (hooks armed on every forward), never capturing
  (b) every      Xray(every=100) with the drafted plan, take_graphs() each step: captures every 100
  (b+) every-all Xray(every=100) recording weight, weight_grad, output, activation (where one
                 follows) and grad of every conv and linear layer: the tensors (c) summarises, and more
  (b') manual    no schedule, drafted plan, `if step % 100 == 0: xray.take_graphs(step)`
  (c) histograms SummaryWriter.add_histogram of every parameter and its grad every 100 steps
  (d) wandb      wandb.watch(log="all", log_freq=100) offline, when wandb is installed

Variants run interleaved, in a new shuffled order each round, on one intra-op thread, and the median
CPU time per step (process time: every thread of ours, the event writer's included, and nothing of
other tenants of the machine) of each is compared. "ratio" divides medians, "paired" is the median
of each round's ratio to that round's plain run, "min" divides the fastest runs (interference only
ever adds time, so it is the least noisy estimate).
"""

from __future__ import annotations

import argparse
import gc
import random
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
from xray_tb.schedules import at  # noqa: E402

EVERY = 100
# variant: (schedule, record every kind of every conv and linear layer rather than the draft)
XRAY_VARIANTS = {
    "idle": (at([]), True),
    "armed": (None, False),
    "every": (EVERY, False),
    "every-all": (EVERY, True),
    "manual": (None, False),
}


def mlp() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def batches(steps: int):
    data = [b for b in digits_loader(32, seed=0)]
    return [data[i % len(data)] for i in range(steps)]


def full_plan(xray: Xray) -> dict:
    """Every kind of every conv and linear layer (activation where one follows)."""
    plan = xray.draft_plan()
    types = {node["module"]: node["type"] for node in xray.architecture["nodes"] if node["kind"] == "module"}
    for layer, entry in plan.items():
        if types[layer] in ("Conv2d", "Linear"):
            entry.update(weight=True, weight_grad=True, grad=True, output=True)
    return plan


def run(variant: str, make_model, data, logdir: str) -> float:
    torch.manual_seed(0)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    xray = writer = None
    if variant in XRAY_VARIANTS:
        schedule, everything = XRAY_VARIANTS[variant]
        xray = Xray(model, input_size=(1, 8, 8), logdir=logdir, every=schedule)
        if everything:
            xray.set_plan(full_plan(xray))
    if variant == "histograms":
        writer = SummaryWriter(logdir)
    if variant == "wandb":
        import wandb

        wandb.init(mode="offline", dir=logdir)
        wandb.watch(model, log="all", log_freq=EVERY)
    gc.collect()  # setup garbage (the trace's, wandb's) is collected before the clock starts, for all variants
    start = time.process_time()
    for step, (x, y) in enumerate(data):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if variant in ("idle", "every", "every-all"):
            xray.take_graphs()
        elif variant == "manual" and step % EVERY == 0:
            xray.take_graphs(step)
        elif variant == "histograms" and step % EVERY == 0:
            for name, param in model.named_parameters():
                writer.add_histogram(name, param, step)
                writer.add_histogram(name + "/grad", param.grad, step)
        optimizer.step()
    elapsed = time.process_time() - start
    if xray is not None:
        xray.close()
    if writer is not None:
        writer.close()
    if variant == "wandb":
        import wandb

        wandb.finish()
    return elapsed / len(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    variants = ["plain", *XRAY_VARIANTS, "histograms"]
    try:
        import wandb  # noqa: F401

        variants.append("wandb")
    except ImportError:
        print("(d) wandb: not installed, skipped")
    torch.set_num_threads(1)
    order = random.Random(0)
    data = batches(args.steps)
    for model_name, make_model in (("digits CNN", LeNetDigits), ("MLP 64-256-256-10", mlp)):
        times = {variant: [] for variant in variants}
        with tempfile.TemporaryDirectory() as tmp:
            run("plain", make_model, data[:50], tmp)  # warm-up
            for round_index in range(args.rounds):
                for variant in order.sample(variants, len(variants)):
                    times[variant].append(run(variant, make_model, data, f"{tmp}/{variant}{round_index}"))
        plain = statistics.median(times["plain"])
        print(f"\n{model_name}: {args.steps} steps x {args.rounds} rounds, CPU ms/step (median) and ratio to plain")
        print(f"{'variant':<12} {'ms/step':>8} {'ratio':>7} {'paired':>7} {'min':>7}")
        for variant in variants:
            paired = statistics.median(v / p for v, p in zip(times[variant], times["plain"]))
            print(
                f"{variant:<12} {statistics.median(times[variant]) * 1e3:8.3f} {statistics.median(times[variant]) / plain:7.3f}"
                f" {paired:7.3f} {min(times[variant]) / min(times['plain']):7.3f}"
            )

if __name__ == "__main__":
    main()
