"""Fixtures for the browser end-to-end tests: a logdir written by ``examples/digits.py`` plus a few small
runs recorded here by the real recorder (non-finite weights, a very wide output, runs to switch to and
to rewrite, and the training-health runs of ``health_runs.py``), a real ``tensorboard`` subprocess
serving it, and the system's headless Chromium driven by Playwright.

Chromium must be the system one at /usr/bin/chromium (``make browser`` installs it); these fixtures
never download a browser, and fail (not skip) when it is missing.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e import health_runs
from tests.tensorboard_server import free_port, get_json, stop, tensorboard

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


def _env() -> dict:
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
    from torch.nn import functional as F

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
        for step in range(steps[-1] + 1):
            x, y = torch.randn(8, 1, 6, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            if step in steps:
                xray.take_graphs(step)
            optimizer.step()
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


@pytest.fixture(scope="session")
def xray_logdir(tmp_path_factory) -> Path:
    """A TensorBoard logdir with the run ``digits``, trained and recorded by examples/digits.py, and the
    small runs recorded here (recorded while digits trains)."""
    example = REPO / "examples" / "digits.py"
    if not example.is_file():
        pytest.fail(f"{example} is missing: the e2e test trains the digits example to get Xray data")
    logdir = tmp_path_factory.mktemp("xray_logdir")
    command = [sys.executable, str(example), "--steps", str(TRAIN_STEPS), "--logdir", str(logdir / RUN)]
    process = subprocess.Popen(
        command, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        record_small(logdir / NONFINITE, seed=0, nonfinite=True)
        record_wide(logdir / WIDE)
        record_small(logdir / SMALL, seed=1)
        record_small(logdir / REWRITE, seed=2)
        health_runs.record_all(logdir)  # health_dead, health_nan, health_spike (about 3 s)
        try:
            stdout, stderr = process.communicate(timeout=TRAIN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{' '.join(command)} did not finish in {TRAIN_TIMEOUT_S} s")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    if process.returncode != 0:
        pytest.fail(f"{' '.join(command)} exited with {process.returncode}:\n{stdout[-2000:]}\n{stderr[-3000:]}")
    if not event_files(logdir / RUN):
        pytest.fail(f"examples/digits.py wrote no event file under {logdir / RUN}")
    return logdir


@pytest.fixture(scope="session")
def tensorboard_url(xray_logdir, tmp_path_factory) -> str:
    """Base URL of a real ``tensorboard`` serving ``xray_logdir``, once it lists "xray" as enabled."""
    with tensorboard(sys.executable, xray_logdir, cwd=tmp_path_factory.mktemp("tensorboard"), extra=["--reload_interval", "2"]) as url:
        yield url


@pytest.fixture(scope="session")
def empty_tensorboard_url(tmp_path_factory) -> str:
    """Base URL of a real ``tensorboard`` over an empty logdir: the Xray tab is listed but not enabled,
    as when TensorBoard is started before the training wrote anything."""
    logdir = tmp_path_factory.mktemp("empty_logdir")
    cwd = tmp_path_factory.mktemp("empty_tensorboard")
    port = free_port()

    def log_tail() -> str:
        return (cwd / "tensorboard.log").read_text()[-2000:]

    with open(cwd / "tensorboard.log", "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir),
             "--host", "127.0.0.1", "--port", str(port)],
            cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                if process.poll() is not None:
                    pytest.fail(f"tensorboard exited with {process.returncode}: {log_tail()}")
                with contextlib.suppress(OSError, ValueError):
                    if "xray" in get_json(f"{url}/data/plugins_listing", timeout=2):
                        break
                if time.monotonic() > deadline:
                    pytest.fail(f"tensorboard did not list the Xray plugin in 60 s: {log_tail()}")
                time.sleep(0.2)
            yield url
        finally:
            stop(process)


@pytest.fixture(scope="session")
def chromium_browser():
    """The system Chromium, headless, launched by Playwright (never a downloaded browser)."""
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        pytest.fail(
            f"{CHROMIUM} is missing: the browser tests need the system Chromium "
            f"(`make browser`, or `apt-get install -y chromium` as root). Playwright's own download is not used."
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as error:  # pragma: no cover - depends on the environment
        pytest.fail(f"the browser tests need the python package 'playwright' ({error}); pip install -e '.[test]'")
    playwright = sync_playwright().start()
    try:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
    except Exception:
        playwright.stop()
        raise
    yield browser
    browser.close()
    playwright.stop()


@pytest.fixture
def page(chromium_browser):
    """A fresh page (own context) that records uncaught errors in ``page.xray_errors``."""
    context = chromium_browser.new_context(viewport={"width": 1400, "height": 1000})
    new_page = context.new_page()
    new_page.set_default_timeout(20_000)
    errors: list[str] = []
    new_page.on("pageerror", lambda error: errors.append(f"uncaught: {error}"))
    new_page.on(
        "console",
        lambda message: errors.append(f"console.{message.type}: {message.text}") if message.type == "error" else None,
    )
    new_page.xray_errors = errors
    yield new_page
    context.close()
