"""Fixtures for the browser end-to-end tests: a logdir written by ``examples/digits.py``, a real
``tensorboard`` subprocess serving it, and the system's headless Chromium driven by Playwright.

Chromium must be the system one at /usr/bin/chromium (``make browser`` installs it); these fixtures
never download a browser, and fail (not skip) when it is missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tensorboard_server import tensorboard

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


def _env() -> dict:
    """The child environment: the repository importable, no GPU needed, quiet TensorBoard."""
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    return env


@pytest.fixture(scope="session")
def xray_logdir(tmp_path_factory) -> Path:
    """A TensorBoard logdir with one run, ``digits``, trained and recorded by examples/digits.py."""
    example = REPO / "examples" / "digits.py"
    if not example.is_file():
        pytest.fail(f"{example} is missing: the e2e test trains the digits example to get Xray data")
    logdir = tmp_path_factory.mktemp("xray_logdir")
    command = [sys.executable, str(example), "--steps", str(TRAIN_STEPS), "--logdir", str(logdir / RUN)]
    try:
        done = subprocess.run(
            command, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=TRAIN_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(command)} did not finish in {TRAIN_TIMEOUT_S} s")
    if done.returncode != 0:
        pytest.fail(
            f"{' '.join(command)} exited with {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        )
    if not list((logdir / RUN).glob("events.out.tfevents.*")):
        pytest.fail(f"examples/digits.py wrote no event file under {logdir / RUN}")
    return logdir


@pytest.fixture(scope="session")
def tensorboard_url(xray_logdir, tmp_path_factory) -> str:
    """Base URL of a real ``tensorboard`` serving ``xray_logdir``, once it lists "xray" as enabled."""
    with tensorboard(sys.executable, xray_logdir, cwd=tmp_path_factory.mktemp("tensorboard"), extra=["--reload_interval", "2"]) as url:
        yield url


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
