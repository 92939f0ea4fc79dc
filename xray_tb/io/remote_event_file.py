"""Xray's event file in an object store (``s3://bucket/prefix/run``), written through TensorBoard's
file layer (see :mod:`xray_tb.io.storage`).

An object store cannot append: TensorBoard's own S3 writer keeps the whole file in a temporary file
and uploads all of it again at every flush, so a long run uploads quadratically many bytes. Xray
instead keeps the records added since the last flush in memory and uploads them, at each
:meth:`RemoteEventFile.flush`, as a new object of their own, a *segment*:

    <run>/events.out.tfevents.<time>.<host>.<pid>.<n>.000000.xray    architecture, plan, first capture
    <run>/events.out.tfevents.<time>.<host>.<pid>.<n>.000001.xray    the next capture
    ...

Every segment is a whole event file (it starts with the file-version event) that is never written
again, and the names sort in write order, which is all TensorBoard's loaders and
:func:`xray_tb.open_run` need: they read a run's event files in name order. Xray flushes after each
capture, after a plan change, when its training-health block is written, and at close; so each
capture costs one PUT of its own bytes, on the training thread, and is visible to TensorBoard once
``take_graphs()`` returns. Nothing is uploaded between flushes.

A failed upload keeps the records in memory and warns; the next flush uploads them with the new
ones. The first upload (made while ``Xray(...)`` starts) and the one at close raise instead: a wrong
bucket or missing credentials show at once, and records are never dropped silently.
"""

from __future__ import annotations

import warnings

from tensorboard.compat.proto import event_pb2

from xray_tb.io import storage
from xray_tb.io.checksums import use_fast_crc32c
from xray_tb.io.event_file import FILE_SUFFIX, encode_record, file_stem, version_event


class RemoteEventFile:
    """Xray's event file in a remote run directory: records buffered in memory, each flush uploaded
    as a new segment object.

    Args:
        logdir: the remote run directory, e.g. ``"s3://bucket/prefix/run"``.
    """

    def __init__(self, logdir: str):
        use_fast_crc32c()
        self.logdir = logdir
        self._stem = file_stem()
        self._pending: list[bytes] = []
        self._closed = False
        self._warned = False
        #: The segments uploaded so far, in order.
        self.paths: list[str] = []

    @property
    def path(self) -> str:
        """The first segment (uploaded at the first flush)."""
        return self._segment_path(0)

    def add_event(self, event: event_pb2.Event) -> None:
        """Buffer one event; it is uploaded by the next :meth:`flush`."""
        if self._closed:
            raise OSError(f"event file {self.path} is closed")
        self._pending.append(encode_record(event))

    def flush(self) -> None:
        """Upload the buffered records as a new segment (nothing when none are buffered)."""
        if self._closed or not self._pending:
            return
        try:
            self._upload()
        except OSError as error:
            if not self.paths:
                raise  # the first upload: the run directory cannot be written at all
            if not self._warned:
                self._warned = True
                warnings.warn(f"{error}; the records are kept and uploaded with the next capture", stacklevel=3)

    def close(self) -> None:
        """Upload what is buffered and close; idempotent. Raises OSError when that upload fails."""
        if not self._closed:
            if self._pending:
                self._upload()
            self._closed = True

    def _segment_path(self, index: int) -> str:
        return storage.join(self.logdir, f"{self._stem}.{index:06d}{FILE_SUFFIX}")

    def _upload(self) -> None:
        path = self._segment_path(len(self.paths))
        data = b"".join([encode_record(version_event()), *self._pending])
        with storage.remote_errors(f"upload {len(data)} bytes of Xray's event file to", path):
            with storage.gfile().GFile(path, "wb") as file:
                file.write(data)
        self.paths.append(path)
        self._pending = []
