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
from typing import Iterator, Sequence


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get_json(url: str, timeout: float = 10.0):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


@contextlib.contextmanager
def tensorboard(python: str, logdir: Path, *, cwd: Path, extra: Sequence[str] = (), timeout: float = 60.0) -> Iterator[str]:
    """Run ``python -m tensorboard.main --logdir logdir`` and yield its base URL once the Xray tab is enabled."""
    port = free_port()
    log = open(cwd / f"tensorboard-{port}.log", "wb")
    process = subprocess.Popen(
        [python, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1", "--port", str(port), *extra],
        cwd=cwd,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"tensorboard exited with {process.returncode}: {Path(log.name).read_text()[-2000:]}")
            with contextlib.suppress(OSError, ValueError):
                if get_json(f"{url}/data/plugins_listing", timeout=2).get("xray", {}).get("enabled"):
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"tensorboard did not enable the Xray tab in {timeout:.0f} s. It finds the plugin through the installed "
                    f"entry point: run with the interpreter of an environment where xray-tb is installed (make install).\n"
                    f"{Path(log.name).read_text()[-2000:]}"
                )
            time.sleep(0.3)
        yield url
    finally:
        stop(process)
        log.close()


def stop(process: subprocess.Popen) -> None:
    """Terminate the server (and the data server it spawned) by PID; kill if it lingers."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
