"""Local run folders and remote ones (``s3://bucket/prefix/run``) behind a few calls.

A path with a URL scheme (``s3://``, ``gs://``, ...) goes through TensorBoard's own file layer,
``tensorboard.compat.tf.io.gfile``: TensorFlow's gfile when TensorFlow is installed, else
TensorBoard's stub, whose S3 support uses boto3 and takes its endpoint from ``S3_ENDPOINT`` (read
when the stub is first imported) and its credentials from boto3's usual places (``AWS_*``
variables, ``~/.aws``). That is the layer ``tensorboard --logdir s3://...`` reads with, so Xray
adds no storage layer of its own. Any other path is local and handled with ``os``, as before.
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import Callable, Iterator

EVENT_FILE_PREFIX = "events.out.tfevents."
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")


def is_remote(path: str) -> bool:
    """Whether ``path`` names a remote location (it starts with a URL scheme such as ``s3://``)."""
    return _SCHEME.match(path) is not None


def gfile():
    """TensorBoard's file layer (``tf.io.gfile``), imported on first use."""
    from tensorboard.compat import tf

    return tf.io.gfile


class RemoteStorageError(OSError):
    """A failure of the remote store, with the path, what was attempted and what to check."""


@contextlib.contextmanager
def remote_errors(what: str, path: str) -> Iterator[None]:
    """Turn any failure of the remote file layer (boto3's errors share no base class; its timeouts
    are OSErrors) into a :class:`RemoteStorageError` that names the path and what to check."""
    try:
        yield
    except RemoteStorageError:
        raise
    except Exception as error:
        raise RemoteStorageError(
            f"could not {what} {path} through TensorBoard's file layer: {type(error).__name__}: {error}. Check "
            "that the bucket exists, and for S3 that the AWS credentials and S3_ENDPOINT (for a server other than "
            "AWS) are set"
        ) from error


def object_writer(path: str, *, connect_timeout: float, read_timeout: float) -> Callable[[str, bytes], None]:
    """``write(path, data)`` for whole objects under the remote ``path``, one attempt per call.

    With TensorBoard's stub file layer (no TensorFlow), an ``s3://`` path is written with boto3
    directly: the same endpoint (``S3_ENDPOINT``, as read by the registered S3 filesystem) and
    credentials, but short timeouts and no retries of botocore's own (the caller retries). Any other
    remote path is written through ``tf.io.gfile`` (its own timeouts)."""
    layer = gfile()
    filesystem = layer.get_filesystem(path) if path.startswith("s3://") and hasattr(layer, "get_filesystem") else None
    if filesystem is not None and hasattr(filesystem, "bucket_and_path"):  # the stub's S3FileSystem (boto3)
        import boto3
        from botocore.config import Config

        config = Config(connect_timeout=connect_timeout, read_timeout=read_timeout, retries={"total_max_attempts": 1})
        endpoint = getattr(filesystem, "_s3_endpoint", os.environ.get("S3_ENDPOINT"))
        client = boto3.client("s3", endpoint_url=endpoint, config=config)

        def put(target: str, data: bytes) -> None:
            bucket, key = filesystem.bucket_and_path(target)
            client.put_object(Body=data, Bucket=bucket, Key=key)

        return put

    def write(target: str, data: bytes) -> None:
        with layer.GFile(target, "wb") as file:
            file.write(data)

    return write


def join(directory: str, name: str) -> str:
    """``directory/name``; a remote directory is joined with one ``/``."""
    if is_remote(directory):
        return f"{directory.rstrip('/')}/{name}"
    return os.path.join(directory, name)


def isdir(path: str) -> bool:
    """Whether ``path`` is a folder (remote: whether any object lies under ``path/``)."""
    if is_remote(path):
        with remote_errors("list", path):
            return bool(gfile().isdir(path))
    return os.path.isdir(path)


def event_files(directory: str) -> list[str]:
    """The event files directly in ``directory``, in name order (their names start with the time
    they were created, so this is also the order they were written in)."""
    if is_remote(directory):
        # One listing: the stub's S3 glob takes a trailing '*' and lists every key under the prefix.
        prefix = join(directory, EVENT_FILE_PREFIX)
        with remote_errors("list", directory):
            found = [path for path in gfile().glob(prefix + "*") if path.startswith(prefix)]
        return sorted(path for path in found if "/" not in path[len(prefix):])
    return [
        os.path.join(directory, name)
        for name in sorted(os.listdir(directory))
        if name.startswith(EVENT_FILE_PREFIX) and os.path.isfile(os.path.join(directory, name))
    ]


def run_folders_below(directory: str) -> list[str]:
    """The folders below ``directory`` (relative paths, sorted) that hold an event file."""
    if is_remote(directory):
        base = directory.rstrip("/") + "/"
        with remote_errors("list", directory):
            walked = [(folder, files) for folder, _, files in gfile().walk(directory)]
        return sorted(
            folder[len(base):].strip("/")
            for folder, files in walked
            if folder.rstrip("/") != directory.rstrip("/") and any(name.startswith(EVENT_FILE_PREFIX) for name in files)
        )
    return sorted(
        os.path.relpath(folder, directory)
        for folder, _, files in os.walk(directory)
        if folder != directory and any(
            name.startswith(EVENT_FILE_PREFIX) and os.path.isfile(os.path.join(folder, name)) for name in files
        )
    )
