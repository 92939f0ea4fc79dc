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
from tests.e2e.runs import (
    REPO,
    CHROMIUM,
    CHROMIUM_ARGS,
    RUN,
    TRAIN_STEPS,
    TRAIN_TIMEOUT_S,
    NONFINITE,
    WIDE,
    SMALL,
    REWRITE,
    child_env,
    record_small,
    record_wide,
    event_files,
)
from tests.tensorboard_server import free_port, get_json, stop, tensorboard

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
        command, cwd=REPO, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        record_small(logdir / NONFINITE, seed=0, nonfinite=True)
        record_wide(logdir / WIDE)
        record_small(logdir / SMALL, seed=1)
        record_small(logdir / REWRITE, seed=2)
        health_runs.record_all(logdir)  # health_off, health_dead, health_nan, health_spike (about 3 s)
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
