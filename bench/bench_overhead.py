"""Training-loop overhead of Xray, side by side in one run, as ratios to the plain loop.

    python bench/bench_overhead.py [--steps 300] [--rounds 30] [--models cnn,mlp] [--variants every,idle]

Variants, each on the digits CNN and an MLP (CPU, batch 32):
  plain          the loop without Xray
  (a) idle       Xray(every=...) attached, take_graphs() called each step, no step due: not capturing
  (a') armed     Xray without a schedule (hooks armed on every forward), never capturing
  (b) every      Xray(every=100) with the drafted plan, take_graphs() each step: captures every 100
  (b*) every-writer  the same, writing through a user's SummaryWriter (writer=) instead of logdir=
  (b+) every-all Xray(every=100) recording weight, weight_grad, output, activation (where one
                 follows) and grad of every conv and linear layer: the tensors (c) summarises, and more
  (b') manual    no schedule, drafted plan, `if step % 100 == 0: xray.take_graphs(step)`
  (h) health     Xray with training health on (the default) and no capture due: per-iteration gradient
                 and weight statistics only
  (h+) every-health  (b) with training health on: the drafted plan every 100 steps, activation
                 statistics and histograms at those captures
  (h-) health-thin  (h) thinned: HealthOptions(every=4), per-iteration statistics on one iteration in 4
  (c) histograms SummaryWriter.add_histogram of every parameter and its grad every 100 steps
  (d) wandb      wandb.watch(log="all", log_freq=100) offline, when wandb is installed

Each variant's loop is set up once and warmed up, as in a long training. Then, round after round
and in a new shuffled order each round, every variant runs three windows of steps on one intra-op
thread: the plain loop's, its own loop with the variant switched off (same model instance and
optimizer, nothing of the variant called, Xray's hooks disarmed), and its own loop switched on.
"vs own" is the median over rounds of on / off: the variant's cost with model-instance effects
(memory placement, caches) cancelled. "vs plain" is on / the plain window before it. Times are
process CPU time: every thread of ours (the event writer's included), nothing of other tenants.
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
from xray_tb.health import HealthOptions  # noqa: E402

EVERY = 100
# variant: (schedule, record every kind of every conv and linear layer rather than the draft, write
# through a user's SummaryWriter rather than logdir=, training health on)
XRAY_VARIANTS = {
    "idle": (at([]), True, False, False),
    "armed": (None, False, False, False),
    "every": (EVERY, False, False, False),
    "every-writer": (EVERY, False, True, False),
    "every-all": (EVERY, True, False, False),
    "manual": (None, False, False, False),
    "health": (at([]), False, False, True),
    "every-health": (EVERY, False, False, True),
    "health-thin": (at([]), False, False, HealthOptions(every=4)),
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


class Loop:
    """One variant's training loop: set up once, then timed over windows of steps, as in a long
    training (one-time costs such as the trace or the first capture are not per-step costs)."""

    def __init__(self, variant: str, make_model, logdir: str):
        torch.manual_seed(0)
        self.variant = variant
        self.model = make_model()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.step = 0
        self.xray = self.writer = None
        if variant in XRAY_VARIANTS:
            schedule, everything, shared, health = XRAY_VARIANTS[variant]
            if shared:
                self.writer = SummaryWriter(logdir)
            where = {"writer": self.writer} if shared else {"logdir": logdir}
            self.xray = Xray(self.model, input_size=(1, 8, 8), every=schedule, health=health, **where)
            if everything:
                self.xray.set_plan(full_plan(self.xray))
        if variant == "histograms":
            self.writer = SummaryWriter(logdir)
        if variant == "wandb":
            import wandb

            wandb.init(mode="offline", dir=logdir)
            wandb.watch(self.model, log="all", log_freq=EVERY)

    def window(self, data, instrumented: bool = True) -> float:
        """CPU seconds per step over ``data``; ``instrumented=False`` trains the same model with the
        same optimizer but calls nothing of the variant's (Xray's hooks disarmed meanwhile), so the
        two can be compared on one model instance (wandb's hooks cannot be lifted: it is always on)."""
        recorder = self.xray._resources.recorder if self.xray is not None and not instrumented else None
        if recorder is not None:
            recorder.disarm()  # private on purpose: a bench-only switch, restored below
            if self.xray._health is not None:
                self.xray._health._recorder.disarm()  # training health's own hooks too
        gc.collect()  # collected before the clock starts, for every variant alike
        start = time.process_time()
        for x, y in data:
            self._step(x, y, instrumented)
        elapsed = (time.process_time() - start) / len(data)
        if recorder is not None:
            self.xray._arm_for(self.xray._next_step)
            if self.xray._health is not None:
                self.xray._health.arm_for(self.xray._next_step)
        return elapsed

    def _step(self, x, y, instrumented: bool) -> None:
        self.optimizer.zero_grad()
        loss = F.cross_entropy(self.model(x), y)
        loss.backward()
        due = self.step % EVERY == 0
        if not instrumented:
            pass
        elif self.variant in ("idle", "every", "every-writer", "every-all", "health", "every-health", "health-thin"):
            self.xray.take_graphs()
        elif self.variant == "manual" and due:
            self.xray.take_graphs(self.step)
        elif self.variant == "histograms" and due:
            for name, param in self.model.named_parameters():
                self.writer.add_histogram(name, param, self.step)
                self.writer.add_histogram(name + "/grad", param.grad, self.step)
        self.optimizer.step()
        self.step += 1

    def close(self) -> None:
        if self.xray is not None:
            self.xray.close()
        if self.writer is not None:
            self.writer.close()
        if self.variant == "wandb":
            import wandb

            wandb.finish()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300, help="steps per window")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--models", default="cnn,mlp", help="comma-separated: cnn, mlp")
    parser.add_argument("--variants", default="all", help="comma-separated variants (default: all)")
    args = parser.parse_args()
    variants = ["plain", *XRAY_VARIANTS, "histograms"]
    try:
        import wandb  # noqa: F401

        variants.append("wandb")
    except ImportError:
        print("(d) wandb: not installed, skipped")
    if args.variants != "all":
        variants = ["plain", *(v for v in variants if v in args.variants.split(","))]
    models = {"cnn": ("digits CNN", LeNetDigits), "mlp": ("MLP 64-256-256-10", mlp)}
    torch.set_num_threads(1)
    order = random.Random(0)
    data = batches(args.steps)
    others = [variant for variant in variants if variant != "plain"]
    for model_name, make_model in (models[key] for key in args.models.split(",")):
        on = {variant: [] for variant in others}
        own_off = {variant: [] for variant in others}
        plain_next_to = {variant: [] for variant in others}
        with tempfile.TemporaryDirectory() as tmp:
            loops = {variant: Loop(variant, make_model, f"{tmp}/{variant}") for variant in variants}
            for loop in loops.values():
                loop.window(data[: 2 * EVERY])  # warm-up, first captures included
            for _ in range(args.rounds):
                for variant in order.sample(others, len(others)):
                    plain_next_to[variant].append(loops["plain"].window(data))
                    own_off[variant].append(loops[variant].window(data, instrumented=False))
                    on[variant].append(loops[variant].window(data))
            for loop in loops.values():
                loop.close()
        plain = statistics.median(t for ts in plain_next_to.values() for t in ts)
        print(f"\n{model_name}: {args.rounds} rounds of {args.steps}-step windows, CPU time per step")
        print(f"{'variant':<12} {'ms/step':>8} {'vs own':>7} {'vs plain':>8}")
        print(f"{'plain':<12} {plain * 1e3:8.3f} {1:7.3f} {1:8.3f}")
        for variant in others:
            own = statistics.median(v / o for v, o in zip(on[variant], own_off[variant]))
            versus_plain = statistics.median(v / p for v, p in zip(on[variant], plain_next_to[variant]))
            own_text = "   --  " if variant == "wandb" else f"{own:7.3f}"
            print(f"{variant:<12} {statistics.median(on[variant]) * 1e3:8.3f} {own_text} {versus_plain:8.3f}")


if __name__ == "__main__":
    main()
