"""A real ``tensorboard`` subprocess on 127.0.0.1 and a free port, stopped by its own PID."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Callable, Iterator, Sequence


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get_json(url: str, timeout: float = 10.0):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


@contextlib.contextmanager
def loopback_server(
    command: Sequence[str], ready: Callable[[str], bool], *, name: str, log_dir: Path, timeout: float, hint: str = ""
) -> Iterator[str]:
    """Run ``command`` (with ``{port}`` standing for a free loopback port) in a session of its own,
    yield ``http://127.0.0.1:<port>`` once ``ready(url)`` is true, and stop it by its PID."""
    port = free_port()
    log = open(log_dir / f"{name}-{port}.log", "wb")
    process = subprocess.Popen(
        [part.replace("{port}", str(port)) for part in command],
        cwd=log_dir,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}: {Path(log.name).read_text()[-2000:]}")
            with contextlib.suppress(OSError, ValueError):
                if ready(url):
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} was not ready in {timeout:.0f} s. {hint}\n{Path(log.name).read_text()[-2000:]}")
            time.sleep(0.3)
        yield url
    finally:
        stop(process)
        log.close()


def tensorboard(
    python: str, logdir: Path, *, cwd: Path, extra: Sequence[str] = (), timeout: float = 60.0, main: Sequence[str] = ("-m", "tensorboard.main")
):
    """Run ``python -m tensorboard.main --logdir logdir`` and yield its base URL once the Xray tab is enabled.

    ``main`` replaces ``-m tensorboard.main``: a script that prepares the interpreter, then runs it."""
    return loopback_server(
        [python, *main, "--logdir", str(logdir), "--host", "127.0.0.1", "--port", "{port}", *extra],
        lambda url: bool(get_json(f"{url}/data/plugins_listing", timeout=2).get("xray", {}).get("enabled")),
        name="tensorboard",
        log_dir=cwd,
        timeout=timeout,
        hint="It finds the Xray plugin through the installed entry point: run with the interpreter of an environment "
        "where xray-tb is installed (make install).",
    )


#: TensorBoard's two loaders, by the flags that choose them.
LOADERS = {"rust": [], "python": ["--load_fast=false"]}


def stop(process: subprocess.Popen) -> None:
    """Terminate the server (and the data server it spawned) by PID; kill if it lingers."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
