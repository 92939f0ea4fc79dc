"""A real S3-compatible server (moto in server mode) on 127.0.0.1, and TensorBoard's file layer pointed at it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

from tests.tensorboard_server import free_port, stop

#: What boto3 (inside TensorBoard's S3 layer, here and in a TensorBoard subprocess) needs to reach the server.
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@contextlib.contextmanager
def moto_server(log_dir: Path, timeout: float = 30.0) -> Iterator[str]:
    """Run ``python -m moto.server`` on a free loopback port; yield its URL once it answers."""
    port = free_port()
    log = open(log_dir / f"moto-{port}.log", "wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"moto server exited with {process.returncode}: {Path(log.name).read_text()[-2000:]}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{url}/moto-api/", timeout=2):
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"moto server did not answer in {timeout:.0f} s: {Path(log.name).read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        stop(process)
        log.close()


@contextlib.contextmanager
def s3_environment(endpoint: str) -> Iterator[None]:
    """Set ``S3_ENDPOINT`` and test credentials in this process's environment (inherited by the
    TensorBoard subprocesses it starts), and register a fresh S3 filesystem with TensorBoard's file
    layer: its S3 support reads ``S3_ENDPOINT`` once, when the filesystem is created at import."""
    from tensorboard.compat.tensorflow_stub.io import gfile

    saved_env = {name: os.environ.get(name) for name in (*CREDENTIALS, "S3_ENDPOINT")}
    os.environ.update(CREDENTIALS, S3_ENDPOINT=endpoint)
    gfile.register_filesystem("s3", gfile.S3FileSystem())
    try:
        yield
    finally:
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        gfile.register_filesystem("s3", gfile.S3FileSystem())  # as it was: reading the restored S3_ENDPOINT
