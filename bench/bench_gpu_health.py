"""Training health's cost on a GPU, side by side in one run, as ratios (issue 16's bars).

    python bench/bench_gpu_health.py --model conv16 [--depth 16] [--batch 64]          # bar <= 1.05
    python bench/bench_gpu_health.py --model resnet50 [--batch 64] [--image 224]       # bar <= 1.03
    python bench/bench_gpu_health.py --model gpt2 [--batch 8] [--seq 1024]             # bar <= 1.03
    common options: [--rounds 10] [--steps 200] [--amp] [--device cuda]

Smoke runs on a CPU (no synchronisation; only checks that everything runs):

    python bench/bench_gpu_health.py --device cpu --model resnet50 --batch 2 --image 64 --steps 2 --rounds 1
    python bench/bench_gpu_health.py --device cpu --model gpt2 --batch 1 --seq 32 --layers 2 --steps 2 --rounds 1

The models (bench/gpu_models.py, torch.nn only): conv16, ``depth`` conv-BN-ReLU blocks on CIFAR-sized
inputs, SGD; resnet50, a standard ResNet-50 on 224x224 inputs, 1000 classes, SGD; gpt2, a GPT-2-small
decoder (12 layers, d_model 768, tied head, vocabulary 50257) trained on next-token cross-entropy
over random token ids, AdamW. ``--amp`` runs forward and loss under bf16 autocast.

Each variant is one Xray on its own model instance, set up once and warmed up; round after
round, in a new order each round, each runs a window of steps with Xray switched off (hooks
disarmed, nothing called, training health's global optimizer hooks set aside: bench/optimizer_hooks.py)
and one switched on, with its own global optimizer hooks only. Wall time with the GPU synchronised at the window's
ends. Printed: ms per step, the median over rounds of on / off, and where the automatic pace settled
(the health monitor's ``_pacer.every``: 1 = every iteration measured), then health-every1's ratio
against the model's bar and whether the automatic pace measures every iteration; on a GPU, last, the
device memory each variant's Xray held (given back when it is dropped), against the parameter bytes.

  idle          Xray(every=...) with no step due and health off
  every         captures of the drafted plan every 100 steps, health off
  health        health on (defaults), no capture due
  every-health  captures every 100 steps with health on (defaults)
  health-every1 health with every iteration measured (HealthOptions(every=1))
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from xray_tb import HealthOptions, Xray  # noqa: E402
from xray_tb.schedules import at  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_models import MODELS, Workload, workload  # noqa: E402
from optimizer_hooks import OwnHooks  # noqa: E402

VARIANTS = {
    "idle": (at([]), False),
    "every": (100, False),
    "health": (at([]), True),
    "every-health": (100, True),
    "health-every1": (at([]), HealthOptions(every=1)),
}


#: Distinct random batches a window cycles through (a window of steps reuses them).
POOL = 8


class Loop:
    def __init__(self, variant: str, work: Workload, logdir: str, device: torch.device, amp: bool):
        self.own_hooks = OwnHooks()  # this loop's global optimizer hooks, installed for its instrumented windows only
        with self.own_hooks.owning():
            self._set_up(variant, work, logdir, device, amp)

    def _set_up(self, variant: str, work: Workload, logdir: str, device: torch.device, amp: bool) -> None:
        torch.manual_seed(0)
        self.model = work.make_model().to(device)
        self.loss = work.loss
        self.optimizer = work.make_optimizer(self.model.parameters())
        self.device, self.amp = device, amp
        schedule, health = VARIANTS[variant]
        self.xray = Xray(self.model, **work.xray_input(device), logdir=logdir, every=schedule, health=health)

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def window(self, data, instrumented: bool) -> float:
        xray = self.xray
        # switched off: hooks disarmed (armed again after) and health's global optimizer hooks set aside
        # (else health runs its iteration from the step); on: this loop's own only, no other variant's
        with self.own_hooks.owning(active=instrumented), contextlib.nullcontext() if instrumented else xray.recording.paused():
            self.synchronize()
            start = time.perf_counter()
            for x, y in data:
                self.optimizer.zero_grad()
                with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp):
                    loss = self.loss(self.model(x), y)
                loss.backward()
                if instrumented:
                    xray.take_graphs()
                self.optimizer.step()
            self.synchronize()
            elapsed = (time.perf_counter() - start) / len(data)
        return elapsed


def pace(loop: Loop) -> str:
    """Where the health monitor's pace settled: ``1 in n`` iterations measured (``-`` without health)."""
    health = loop.xray._health.monitor
    if health is None:
        return "-"
    return f"1 in {health._pacer.every}" + (" (auto)" if health._pacer.auto else " (fixed)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=MODELS, default="conv16")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=200, help="steps per window")
    parser.add_argument("--batch", type=int, default=None, help="default: 64 (conv16, resnet50), 8 (gpt2)")
    parser.add_argument("--depth", type=int, default=16, help="conv16: conv-BN-ReLU blocks")
    parser.add_argument("--image", type=int, default=None, help="conv16, resnet50: image side (default 32, 224)")
    parser.add_argument("--seq", type=int, default=1024, help="gpt2: sequence length")
    parser.add_argument("--layers", type=int, default=12, help="gpt2: transformer blocks (fewer for smoke runs)")
    parser.add_argument("--untied", action="store_true",
                        help="gpt2: an output head of its own (default: tied to the token embedding)")
    parser.add_argument("--amp", action="store_true", help="forward and loss under bf16 autocast")
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu for a smoke run")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_gpu_health.py needs a CUDA GPU (or --device cpu for a smoke run)")
    work = workload(args.model, batch=args.batch, image=args.image, depth=args.depth, seq=args.seq,
                    layers=args.layers, tied=not args.untied)
    generator = torch.Generator(device=device).manual_seed(0)
    pool = [work.make_batch(generator) for _ in range(min(POOL, args.steps))]
    data = [pool[i % len(pool)] for i in range(args.steps)]
    with tempfile.TemporaryDirectory() as tmp:
        loops = {variant: Loop(variant, work, f"{tmp}/{variant}", device, args.amp) for variant in VARIANTS}
        for loop in loops.values():  # warm-up: cuDNN autotuning, the pace's warm-up, first captures
            loop.window(data, True)
            loop.window(data, False)
        on = {variant: [] for variant in loops}
        ratios = {variant: [] for variant in loops}
        order = random.Random(0)
        for _ in range(args.rounds):
            for variant in order.sample(list(loops), len(loops)):
                off = loops[variant].window(data, False)
                value = loops[variant].window(data, True)
                on[variant].append(value)
                ratios[variant].append(value / off)
        if device.type == "cuda":
            name = torch.cuda.get_device_name(device)
        else:
            name = f"{device.type.upper()} ({torch.get_num_threads()} threads)"
        precision = "bf16 autocast" if args.amp else "fp32"
        print(f"{name}: {work.description}, batch {work.batch}, {precision}, "
              f"{args.rounds} rounds of {args.steps} steps")
        print(f"{'variant':<14} {'ms/step':>8} {'vs own':>7}  pace")
        for variant, loop in loops.items():
            milliseconds, ratio = statistics.median(on[variant]) * 1e3, statistics.median(ratios[variant])
            print(f"{variant:<14} {milliseconds:8.3f} {ratio:7.3f}  {pace(loop)}")
        print("pace settled at: " + ", ".join(f"{variant} {pace(loop)}" for variant, loop in loops.items()
                                              if loop.xray._health.monitor is not None))
        every1 = statistics.median(ratios["health-every1"])
        verdict = "meets" if every1 <= work.bar else "misses"
        print(f"health-every1 vs own: {every1:.3f} (bar <= 1.05 for conv16, <= 1.03 for resnet50/gpt2; "
              f"{args.model}: {verdict} <= {work.bar:.2f})")
        automatic = [loop.xray._health.monitor._pacer for loop in loops.values()
                     if loop.xray._health.monitor is not None and loop.xray._health.monitor._pacer.auto]
        measures_all = all(pacer.every == 1 for pacer in automatic)
        print(f"auto pace measures every iteration: {'yes' if measures_all else 'no'} "
              f"({', '.join(f'1 in {pacer.every}' for pacer in automatic)})")
        report_held(loops, device)


def report_held(loops: dict[str, Loop], device: torch.device) -> None:
    """Close each variant's Xray; on a GPU, print the device memory it held between captures (what
    dropping it gives back), against the model's parameter bytes (issue 20's <= 1% goal)."""
    for variant, loop in loops.items():
        before = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
        with loop.own_hooks.owning():
            loop.xray.close()
        loop.xray = None
        gc.collect()
        if device.type == "cuda":
            held = before - torch.cuda.memory_allocated(device)
            params = sum(p.numel() * p.element_size() for p in loop.model.parameters())
            print(f"{variant}: held on the device {held / 2**20:.1f} MiB, {held / params:.2%} of the parameter bytes")


if __name__ == "__main__":
    main()
