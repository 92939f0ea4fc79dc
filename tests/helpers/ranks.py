"""Real multi-process runs for the torch.distributed tests: each rank a subprocess of a worker module
(``python -m <worker> CASE RANK PORT LOGDIR``, writing ``LOGDIR/result<rank>.json``), guarded by a
timeout, so a hang fails the test instead of hanging it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_ranks(worker: str, case: str, logdir: Path, timeout: float = 60, failing: tuple[int, ...] = (), world: int = 2) -> list[dict]:
    """Run every rank of ``case`` with the ``worker`` module; each rank's result. All must exit within
    ``timeout`` (a hang fails the test), with status 0 unless listed in ``failing``; a failing rank's
    output is its result."""
    logdir.mkdir(parents=True, exist_ok=True)
    port = str(free_port())
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    ranks = [subprocess.Popen([sys.executable, "-m", worker, case, str(rank), port, str(logdir)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in range(world)]
    try:
        outputs = [rank.communicate(timeout=timeout)[0] for rank in ranks]
    finally:
        for rank in ranks:
            if rank.poll() is None:
                rank.kill()
    for index, (rank, output) in enumerate(zip(ranks, outputs)):
        assert rank.returncode == 0 or index in failing, output
    return [{"output": output} if rank.returncode else json.loads((logdir / f"result{index}.json").read_text())
            for index, (rank, output) in enumerate(zip(ranks, outputs))]


def event_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("events.out.tfevents.*"))


#: The GPU case of a test parametrized over ``"one"`` (one gloo rank on the CPU) and this: one NCCL rank on a GPU.
GPU_CASE = pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")])


def unexpected_warnings(warnings: list[str]) -> list[str]:
    """A rank's warnings, less Xray's one about checksum speed (a GPU machine's own Python may lack the
    'fast' extra: that warning is not what a test of the GPU path checks)."""
    return [warning for warning in warnings if "google-crc32c is not installed" not in warning]
