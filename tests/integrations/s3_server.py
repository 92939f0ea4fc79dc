"""A real S3-compatible server (moto in server mode) on 127.0.0.1, and TensorBoard's file layer pointed at it."""

from __future__ import annotations

import contextlib
import os
import sys
import urllib.request
from pathlib import Path
from typing import Iterator

from tests.tensorboard_server import loopback_server

#: What boto3 (inside TensorBoard's S3 layer, here and in a TensorBoard subprocess) needs to reach the server.
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def moto_server(log_dir: Path, timeout: float = 30.0):
    """Run ``python -m moto.server`` on a free loopback port; yield its URL once it answers."""

    def answers(url: str) -> bool:
        with urllib.request.urlopen(f"{url}/moto-api/", timeout=2):
            return True

    return loopback_server(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "{port}"], answers, name="moto", log_dir=log_dir, timeout=timeout
    )


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
