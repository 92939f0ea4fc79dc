"""The runs of the browser tests' logdir, recorded by the real recorder, and their names and steps
(shared by ``conftest.py``'s fixtures and the test files)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
RUN = "digits"
TRAIN_STEPS = 40  # digits.py captures every 10 steps by default: 0, 10, 20, 30
TRAIN_TIMEOUT_S = 120
CAPTURE_STEPS = (0, 10, 20, 30)  # the steps digits.py captures, for the small runs too

# Small runs recorded by the real recorder next to ``digits`` (all sort after it: digits stays the default run).
NONFINITE = "nonfinite"  # conv1's weight holds NaN, +Inf and -Inf
WIDE = "wide"  # an LM-head-like output [WIDE_ROWS, WIDE_COLS] with one spiking column
SMALL = "small"  # a second run with a conv1, at the same steps as digits
REWRITE = "rewrite"  # rewritten by a test under the same name, with the same steps
WIDE_ROWS, WIDE_COLS, WIDE_SPIKE_COL, WIDE_SPIKE = 16, 50257, 30000, 3.0


def child_env() -> dict:
    """The child environment: the repository importable, no GPU needed, quiet TensorBoard."""
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    return env


def small_net(seed: int):
    """conv1 (4 filters of 3x3) -> ReLU -> Flatten -> fc, on 1x6x6 inputs."""
    import torch
    from torch import nn

    class SmallNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
            self.fc = nn.Linear(4 * 6 * 6, 3)

        def forward(self, x):
            return self.fc(torch.flatten(torch.relu(self.conv1(x)), 1))

    torch.manual_seed(seed)
    return SmallNet()


def record_small(run_dir: Path, *, seed: int, steps=CAPTURE_STEPS, nonfinite: bool = False) -> str:
    """Trains ``small_net(seed)`` with Xray recording conv1's weight, output and grad at ``steps``;
    with ``nonfinite``, conv1's weight is given a NaN, a +Inf and a -Inf first (and only the weight is
    recorded, at the first step). Returns the run_id of the recording."""
    import torch

    from tests.helpers.training import train_on_6x6
    from xray_tb import Xray

    model = small_net(seed)
    plan = {"conv1": {"weight": True, "output": True, "grad": True}}
    if nonfinite:
        with torch.no_grad():
            model.conv1.weight[0, 0, 0, :3] = torch.tensor([float("nan"), float("inf"), float("-inf")])
        plan, steps = {"conv1": {"weight": True}}, steps[:1]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(seed)
    with Xray(model, input_size=(1, 6, 6), logdir=str(run_dir), plan=plan) as xray:
        train_on_6x6(model, optimizer, g, range(steps[-1] + 1), lambda step: xray.take_graphs(step) if step in steps else None)
        return xray.run_id


def record_wide(run_dir: Path) -> None:
    """One capture of the output [WIDE_ROWS, WIDE_COLS] of ``nn.Linear(8, WIDE_COLS)``, kept whole, in
    which column WIDE_SPIKE_COL is WIDE_SPIKE in every row and everything else lies within ±0.64."""
    import torch
    from torch import nn

    import xray_tb

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, WIDE_COLS))
    with torch.no_grad():
        model[0].weight.mul_(0.2)  # |w|, |b| <= 0.2 / sqrt(8) and x in [0, 1): |output| < 0.64
        model[0].bias.mul_(0.2)
        model[0].weight[WIDE_SPIKE_COL] = 0.0
        model[0].bias[WIDE_SPIKE_COL] = WIDE_SPIKE
    x = torch.rand(WIDE_ROWS, 8, generator=torch.Generator().manual_seed(0))
    with xray_tb.Xray(model, x, logdir=str(run_dir), plan={"0": {"output": True}}, selector=xray_tb.KeepAll()) as xray:
        model(x)  # with grad enabled: Xray's hooks record outputs of the forward passes autograd sees
        xray.take_graphs(0)


def event_files(run_dir: Path) -> list[Path]:
    return sorted(run_dir.glob("events.out.tfevents.*"))
