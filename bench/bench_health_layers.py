"""Cost of one measured training-health iteration against the number of layers.

    python bench/bench_health_layers.py                        # N = 10, 100, 1000 on cuda if available
    python bench/bench_health_layers.py --device cpu --rounds 3 --steps 20
    python bench/bench_health_layers.py --layers 10,100,1000 --batch 64 --rounds 10 --steps 100

For each N, the model is a chain of N Linear(32, 32) layers with a ReLU between consecutive ones.
Two copies of it (same initial weights) train side by side in one process, each under its own Xray
with no capture due (``every=xray_tb.schedules.at([])``):

  on    health=HealthOptions(every=1): every take_graphs() call is a measured health iteration
  off   health=False

Each step is zero_grad, forward, MSE loss, backward, xray.take_graphs(), optimizer.step() (SGD).
It also prints the operations one measured iteration dispatches on the device path (a GPU's),
counted on the meta device for each N: a fixed number means a fixed number of kernel launches; and
the host's Python calls of one measured iteration on that path (Python and C functions called from
Python, counted with ``sys.setprofile`` on CPU tensors sent down the device path), the Python an
accelerator's host runs per iteration.
After a warm-up, round after round, each copy runs a window of --steps steps, the two alternating
(which one goes first alternates too). On CUDA the window ends with torch.cuda.synchronize() and
the clock is wall time; on CPU it is process CPU time (the event writer's thread included). Per N the
script prints the median ms/step of each, the difference per measured iteration in µs and that
difference per layer, and at the end whether the cost per measured iteration grows less than
linearly with the number of layers (its ratio between the largest and the smallest N against the
ratio of the layer counts).
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
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import xray_tb  # noqa: E402
from xray_tb import HealthOptions, Xray  # noqa: E402
from xray_tb.schedules import at  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from optimizer_hooks import OwnHooks  # noqa: E402

WIDTH = 32


def chain(layers: int) -> nn.Module:
    modules: list[nn.Module] = []
    for index in range(layers):
        if index:
            modules.append(nn.ReLU())
        modules.append(nn.Linear(WIDTH, WIDTH))
    return nn.Sequential(*modules)


class Loop:
    """One copy of the model with its optimizer and Xray, timed over windows of steps."""

    def __init__(self, layers: int, health, device: torch.device, logdir: str):
        torch.manual_seed(0)
        self.model = chain(layers).to(device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        self.own_hooks = OwnHooks()  # its Xray's global optimizer hooks, installed for its own windows only
        with self.own_hooks.owning():
            self.xray = Xray(self.model, input_size=(WIDTH,), logdir=logdir, every=at([]), health=health)
        self.device = device

    def window(self, data) -> float:
        """Seconds per step over ``data``."""
        cuda = self.device.type == "cuda"
        clock = time.perf_counter if cuda else time.process_time
        gc.collect()
        with self.own_hooks.owning():
            if cuda:
                torch.cuda.synchronize(self.device)
            start = clock()
            for x, y in data:
                self.optimizer.zero_grad()
                loss = F.mse_loss(self.model(x), y)
                loss.backward()
                self.xray.take_graphs()
                self.optimizer.step()
            if cuda:
                torch.cuda.synchronize(self.device)
            return (clock() - start) / len(data)

    def close(self) -> None:
        with self.own_hooks.owning():
            self.xray.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", default="10,100,1000", help="comma-separated numbers of Linear layers")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100, help="steps per window")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=20, help="steps of each copy before timing")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    counts = [int(n) for n in args.layers.split(",")]
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    clock = "wall time" if device.type == "cuda" else "process CPU time"
    print(f"xray_tb from {Path(xray_tb.__file__).parent}, torch {torch.__version__}, {where}; {clock}")
    print(f"batch {args.batch}, {args.rounds} rounds of {args.steps}-step windows, median over rounds")
    print(f"{'layers':>6} {'off ms/step':>11} {'on ms/step':>10} {'µs/measured it':>15} {'µs/layer':>9}")
    generator = torch.Generator().manual_seed(0)
    data = [(torch.randn(args.batch, WIDTH, generator=generator).to(device), torch.randn(args.batch, WIDTH, generator=generator).to(device))
            for _ in range(8)]
    steps = [data[i % len(data)] for i in range(args.steps)]
    warm = [data[i % len(data)] for i in range(args.warmup)]
    cost = {}
    for layers in counts:
        with tempfile.TemporaryDirectory() as tmp:
            loops = {"off": Loop(layers, False, device, f"{tmp}/off"), "on": Loop(layers, HealthOptions(every=1), device, f"{tmp}/on")}
            for loop in loops.values():
                loop.window(warm)
            times: dict[str, list[float]] = {"off": [], "on": []}
            differences = []
            for round_ in range(args.rounds):
                order = ("off", "on") if round_ % 2 == 0 else ("on", "off")
                seconds = {name: loops[name].window(steps) for name in order}
                for name, value in seconds.items():
                    times[name].append(value)
                differences.append(seconds["on"] - seconds["off"])
            for loop in loops.values():
                loop.close()
        off, on = statistics.median(times["off"]), statistics.median(times["on"])
        cost[layers] = statistics.median(differences)
        print(f"{layers:6d} {off * 1e3:11.3f} {on * 1e3:10.3f} {cost[layers] * 1e6:15.1f} {cost[layers] * 1e6 / layers:9.2f}")
    report_dispatched_ops(counts)
    report_device_path_python(counts, args.batch)
    if len(counts) > 1:
        low, high = min(counts), max(counts)
        if cost[low] > 0:
            growth = cost[high] / cost[low]
            verdict = "less than linearly" if growth < high / low else "linearly or faster"
            print(f"cost per measured iteration, {high} vs {low} layers: {growth:.1f}x for {high / low:.0f}x the layers: grows {verdict}")
        else:
            print(f"cost per measured iteration at {low} layers is not above noise ({cost[low] * 1e6:.1f} µs): no growth ratio")


def report_dispatched_ops(counts: list[int]) -> None:
    """What a measured iteration asks an accelerator to run, by layer count: the device path's dispatched
    ops, counted on the meta device (no accelerator needed; the CPU path above reduces per tensor)."""
    from tests.health.dispatched_ops import dispatched_ops

    totals = {layers: sum(dispatched_ops(layers, (WIDTH, WIDTH)).values()) / 2 for layers in counts}
    print("device path, ops dispatched per measured iteration (meta device): "
          + ", ".join(f"{layers} layers {total:.0f}" for layers, total in totals.items())
          + (": flat" if len(set(totals.values())) == 1 else ": grows with the layers"))


def report_device_path_python(counts: list[int], batch: int, iterations: int = 20) -> None:
    """The host's Python on the device path: the Python function calls one measured iteration makes (its
    ``take_graphs()`` call), by layer count, counted with ``sys.setprofile`` on CPU tensors sent down the
    device path (:func:`xray_tb.devices.device_path_on_cpu`): the same Python an accelerator's host runs."""
    from xray_tb.devices import device_path_on_cpu

    calls = {}
    for layers in counts:
        with tempfile.TemporaryDirectory() as tmp, device_path_on_cpu():
            loop = Loop(layers, HealthOptions(every=1), torch.device("cpu"), tmp)
            x, y = torch.randn(batch, WIDTH), torch.randn(batch, WIDTH)
            counted = [0]

            def count(frame, event, arg) -> None:
                if event in ("call", "c_call"):
                    counted[0] += 1

            with loop.own_hooks.owning():  # its global optimizer hooks in place, as in a user's loop
                for index in range(10 + iterations):
                    loop.optimizer.zero_grad()
                    F.mse_loss(loop.model(x), y).backward()
                    if index >= 10:
                        sys.setprofile(count)
                    loop.xray.take_graphs()
                    sys.setprofile(None)
                    loop.optimizer.step()
            loop.close()
        calls[layers] = counted[0] / iterations
    print("device path, host Python calls per measured iteration (CPU tensors on the device path): "
          + ", ".join(f"{layers} layers {total:.0f}" for layers, total in calls.items())
          + (f": {(calls[max(counts)] - calls[min(counts)]) / (max(counts) - min(counts)):.1f} more per layer" if len(counts) > 1 else ""))


if __name__ == "__main__":
    main()
