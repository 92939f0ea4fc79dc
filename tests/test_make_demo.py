"""`make demo` on a port already in use stops before it wipes or retrains anything (a second `make demo`
while the first one serves would otherwise rewrite the runs under the live server, then fail to bind)."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None or not (REPO / ".venv" / ".installed").exists(),
                    reason="needs make and the installed .venv (make install)")
def test_make_demo_on_a_port_in_use_says_so_and_touches_no_run(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    marker = REPO / "runs" / "digits_lr0.05" / "kept-by-test"
    existed = marker.parent.exists()
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("")
    try:
        done = subprocess.run(["make", "-s", "demo", f"PORT={port}"], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert done.returncode != 0
        assert f"port {port} on 127.0.0.1 is in use" in done.stderr and "make demo PORT=" in done.stderr, done.stderr[-2000:]
        assert marker.exists()  # nothing was wiped
    finally:
        listener.close()
        marker.unlink(missing_ok=True)
        if not existed:
            shutil.rmtree(marker.parent, ignore_errors=True)
