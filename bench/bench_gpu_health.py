"""Training health's cost on a GPU, side by side in one run, as ratios (needs CUDA).

    python bench/bench_gpu_health.py [--rounds 10] [--steps 200] [--depth 16] [--batch 64]

A plain convolutional network of ``depth`` conv-BN-ReLU blocks (CIFAR-sized inputs) trains on one
GPU. Each variant is one Xray on its own model instance, set up once and warmed up; round after
round, in a new order each round, each runs a window of steps with Xray switched off (hooks
disarmed, nothing called) and one switched on. Wall time with the GPU synchronised at the window's
ends. Printed: ms per step, the median over rounds of on / off, and where the automatic pace settled.

  idle          Xray(every=...) with no step due and health off
  every         captures of the drafted plan every 100 steps, health off
  health        health on (defaults), no capture due
  every-health  captures every 100 steps with health on (defaults)
  health-every1 health with every iteration measured (HealthOptions(every=1))
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from xray_tb import HealthOptions, Xray  # noqa: E402
from xray_tb.schedules import at  # noqa: E402

VARIANTS = {
    "idle": (at([]), False),
    "every": (100, False),
    "health": (at([]), True),
    "every-health": (100, True),
    "health-every1": (at([]), HealthOptions(every=1)),
}


def network(depth: int) -> nn.Module:
    layers: list[nn.Module] = [nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU()]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


class Loop:
    def __init__(self, variant: str, depth: int, logdir: str, device: torch.device):
        torch.manual_seed(0)
        self.model = network(depth).to(device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        schedule, health = VARIANTS[variant]
        self.xray = Xray(self.model, input_size=(3, 32, 32), logdir=logdir, every=schedule, health=health)

    def window(self, data, instrumented: bool) -> float:
        xray = self.xray
        if not instrumented:
            xray._resources.recorder.disarm()  # a bench-only switch, restored below
            if xray._health is not None:
                xray._health._recorder.disarm()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for x, y in data:
            self.optimizer.zero_grad()
            F.cross_entropy(self.model(x), y).backward()
            if instrumented:
                xray.take_graphs()
            self.optimizer.step()
        torch.cuda.synchronize()
        elapsed = (time.perf_counter() - start) / len(data)
        if not instrumented:
            xray._arm_for(xray._next_step)
            if xray._health is not None:
                xray._health.arm_for(xray._next_step)
        return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=200, help="steps per window")
    parser.add_argument("--depth", type=int, default=16, help="conv-BN-ReLU blocks")
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_gpu_health.py needs a CUDA GPU")
    device = torch.device("cuda")
    generator = torch.Generator(device=device).manual_seed(0)
    data = [(torch.randn(args.batch, 3, 32, 32, device=device, generator=generator),
             torch.randint(0, 10, (args.batch,), device=device, generator=generator)) for _ in range(args.steps)]
    with tempfile.TemporaryDirectory() as tmp:
        loops = {variant: Loop(variant, args.depth, f"{tmp}/{variant}", device) for variant in VARIANTS}
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
        print(f"{torch.cuda.get_device_name()}: {args.depth} conv blocks, batch {args.batch}, {args.rounds} rounds of {args.steps} steps")
        print(f"{'variant':<14} {'ms/step':>8} {'vs own':>7}  pace")
        for variant, loop in loops.items():
            health = loop.xray._health
            pace = f"1 in {health._pacer.every}" if health is not None else "-"
            print(f"{variant:<14} {statistics.median(on[variant]) * 1e3:8.3f} {statistics.median(ratios[variant]):7.3f}  {pace}")
            loop.xray.close()


if __name__ == "__main__":
    main()
