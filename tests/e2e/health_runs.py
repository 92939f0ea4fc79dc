"""Small runs with training health, recorded by the real recorder for the browser tests of the health
tab (``test_health_tab.py``): a planted NaN weight, planted dead units and a one-iteration gradient
spike. Their names sort after "digits", so digits stays the default run.
"""

from __future__ import annotations

from pathlib import Path

HEALTH_DEAD = "health_dead"  # layer "hidden": DEAD_UNITS of its HIDDEN units never fire
HEALTH_NAN = "health_nan"  # first/second/third; NAN_STEP plants a NaN in second.weight
HEALTH_SPIKE = "health_spike"  # SPIKE_ITERATIONS iterations, every one measured; the loss × 1e4 at SPIKE_STEP
HEALTH_OFF = "health_off"  # chain() recorded with health=False: nothing was checked

NAN_STEP, NAN_LAST_STEP = 37, 45
HIDDEN, DEAD_UNITS, DEAD_STEPS = 16, 8, 40
SPIKE_ITERATIONS, SPIKE_STEP, SPIKE_FACTOR = 3000, 1234, 1e4


def chain():
    """first (8 -> 8) -> ReLU -> second (8 -> 8) -> ReLU -> third (8 -> 2)."""
    import torch
    from torch import nn

    class Chain(nn.Module):
        def __init__(self):
            super().__init__()
            self.first = nn.Linear(8, 8)
            self.second = nn.Linear(8, 8)
            self.third = nn.Linear(8, 2)

        def forward(self, x):
            return self.third(torch.relu(self.second(torch.relu(self.first(x)))))

    return Chain()


def record_nan(run_dir: Path) -> None:
    """Trains the chain to NAN_LAST_STEP with defaults (every=10, optimizer steps are the steps, so
    frames at 0, 10, 20, 30, 40); a NaN is written into second.weight before the forward pass of step
    NAN_STEP."""
    import torch
    from torch.nn import functional as F

    from xray_tb import Xray

    torch.manual_seed(0)
    model = chain()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 8, generator=g)
    with Xray(model, x, logdir=str(run_dir), every=10, optimizer=opt) as xray:
        for step in range(NAN_LAST_STEP + 1):
            if step == NAN_STEP:
                with torch.no_grad():
                    model.second.weight[1, 2] = float("nan")
            xb, yb = torch.randn(16, 8, generator=g), torch.randint(0, 2, (16,), generator=g)
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            xray.take_graphs()  # captures at the due steps (0, 10, 20, 30, 40)
            opt.step()


def record_dead(run_dir: Path) -> None:
    """An MLP in -> hidden (HIDDEN units, the first DEAD_UNITS with weight 0 and bias -100: dead) -> ReLU
    -> out, trained DEAD_STEPS steps with activations measured every 4."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    from xray_tb import Xray
    from xray_tb.health import HealthOptions

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(8, 8)
            self.hidden = nn.Linear(8, HIDDEN)
            self.out = nn.Linear(HIDDEN, 3)

        def forward(self, x):
            return self.out(torch.relu(self.hidden(torch.relu(self.inp(x)))))

    torch.manual_seed(1)
    model = Mlp()
    with torch.no_grad():
        model.hidden.weight[:DEAD_UNITS] = 0.0
        model.hidden.bias[:DEAD_UNITS] = -100.0
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    with Xray(model, input_size=(8,), logdir=str(run_dir), every=4, health=HealthOptions(every=1)) as xray:
        for _ in range(DEAD_STEPS):
            xb, yb = torch.randn(16, 8, generator=g), torch.randint(0, 3, (16,), generator=g)
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            xray.take_graphs()
            opt.step()


def record_spike(run_dir: Path) -> None:
    """A tiny model trained SPIKE_ITERATIONS iterations, health measured on every one, captures rare;
    the loss of iteration SPIKE_STEP is multiplied by SPIKE_FACTOR (one spiking gradient, not applied:
    the learning rate is 0 at that iteration)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    from xray_tb import Xray
    from xray_tb.health import HealthOptions

    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(2)
    data = [(torch.randn(8, 4, generator=g), torch.randint(0, 2, (8,), generator=g)) for _ in range(16)]
    with Xray(model, input_size=(4,), logdir=str(run_dir), every=1000, health=HealthOptions(every=1)) as xray:
        for step in range(SPIKE_ITERATIONS):
            xb, yb = data[step % len(data)]
            opt.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            (loss * SPIKE_FACTOR if step == SPIKE_STEP else loss).backward()
            xray.take_graphs()
            if step != SPIKE_STEP:
                opt.step()


def record_off(run_dir: Path) -> None:
    """chain() trained 10 iterations with health=False, captured at 0 and 5."""
    import torch
    from torch.nn import functional as F

    from xray_tb import Xray

    model = chain()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Xray(model, input_size=(8,), logdir=str(run_dir), every=5, health=False) as xray:
        for _ in range(10):
            opt.zero_grad()
            F.cross_entropy(model(torch.randn(4, 8)), torch.randint(0, 2, (4,))).backward()
            xray.take_graphs()
            opt.step()


def record_all(logdir: Path) -> None:
    record_off(logdir / HEALTH_OFF)
    record_nan(logdir / HEALTH_NAN)
    record_dead(logdir / HEALTH_DEAD)
    record_spike(logdir / HEALTH_SPIKE)


if __name__ == "__main__":  # python -m tests.e2e.health_runs <logdir>: record them and print the findings
    import sys
    import time

    from xray_tb import open_run

    out = Path(sys.argv[1])
    for name, record in ((HEALTH_NAN, record_nan), (HEALTH_DEAD, record_dead), (HEALTH_SPIKE, record_spike)):
        t = time.perf_counter()
        record(out / name)
        print(name, f"{time.perf_counter() - t:.1f}s", [(f.rule, f.layer, f.step) for f in open_run(out / name).findings()])
