"""Xray's event file in an object store (``s3://bucket/prefix/run``), uploaded off the training thread.

An object store cannot append: TensorBoard's own S3 writer keeps the whole file in a temporary file
and uploads all of it again at every flush, so a long run uploads quadratically many bytes. Xray
instead keeps the records added since the last flush in memory and, at each
:meth:`RemoteEventFile.flush`, freezes them into a *segment*: a whole event file of its own (it
starts with the file-version event) whose bytes never change. A background thread uploads the
segments one after another, in order, each as a new object:

    <run>/events.out.tfevents.<time>.<host>.<pid>.<n>.<segment>.<attempt>.xray

**Every object name is written at most once.** A failed attempt is retried under the next attempt
number, so a PUT counted failed that reaches the store late can never replace anything: at worst a
segment lands twice under two names, with the same bytes. Names sort in write order (segment, then
attempt), which is how TensorBoard's loaders and :func:`xray_tb.open_run` read a run; a segment read
twice repeats the same steps with the same values, and the last write of a step wins, so it reads
once. A segment is uploaded only after every earlier one is.

**The training thread never waits on the network.** A flush costs the encoding of its records (and,
when the queue is full, a local file write). Attempts use short timeouts (:data:`CONNECT_TIMEOUT`,
:data:`READ_TIMEOUT`) and are retried with exponential backoff (from :data:`BACKOFF_FIRST` up to
:data:`BACKOFF_CAP` seconds) until they succeed. Segments waiting for upload are kept in memory up to
:data:`MEMORY_BYTES`; beyond that the oldest are spilled to the spool folder
(``$XRAY_TB_SPOOL`` or ``<tempdir>/xray-spool``, then ``/<file stem>/``), read back from there when
their turn comes and deleted once uploaded. Nothing is dropped.

**Outages.** One :class:`UploadWarning` when uploads start failing and one when they work again, each
saying how many segments wait and where. The first upload (made while ``Xray(...)`` starts) raises
instead, after :data:`FIRST_ATTEMPTS` attempts: a wrong bucket or missing credentials show at once.
:meth:`RemoteEventFile.close` waits at most its ``timeout``; what is still waiting then is spilled to
the spool folder and an :class:`UploadIncompleteError` says how many segments and where. The uploader
goes on trying in the background; :meth:`RemoteEventFile.wait` (``Xray.flush(timeout=...)`` or
``Xray.close()`` again) waits for it to finish. A spooled segment file is a complete event file: copied
into the run folder under its own name it sorts in its place.

The segments wait in a :class:`~xray_tb.io.segment_queue.SegmentQueue`, uploaded by a
:class:`~xray_tb.io.segment_uploader.SegmentUploader` whose one lock guards the queue and the thread.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

from tensorboard.compat.proto import event_pb2

from xray_tb.io import storage
from xray_tb.io.checksums import use_fast_crc32c
from xray_tb.io.event_file import FILE_SUFFIX, encode_record, file_stem, version_event
from xray_tb.io.segment_queue import Segment, spool_root
from xray_tb.io.segment_uploader import SegmentUploader
from xray_tb.io.segment_uploader import UploadIncompleteError, UploadWarning  # noqa: F401 - re-exported

#: Bytes of segments waiting for upload kept in memory; older ones are spilled to the spool folder.
MEMORY_BYTES = 64 * 2**20
#: Seconds to wait for a connection, and for an answer, in one upload attempt.
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 10.0
#: Seconds between failed attempts: doubling from the first, up to the cap.
BACKOFF_FIRST = 0.5
BACKOFF_CAP = 30.0
#: Attempts at the first upload (while ``Xray(...)`` starts) before it raises.
FIRST_ATTEMPTS = 3
#: Seconds ``close()`` waits for the uploads by default.
CLOSE_TIMEOUT = 30.0


class RemoteEventFile:
    """Xray's event file in a remote run directory: records buffered in memory, each flush frozen into
    a segment that a background thread uploads as a new object.

    Args:
        logdir: the remote run directory, e.g. ``"s3://bucket/prefix/run"``.
    """

    def __init__(self, logdir: str):
        use_fast_crc32c()
        self.logdir = logdir
        self._stem = file_stem()
        #: Where segments waiting for upload are spilled (created when the first one is).
        self.spool = os.path.join(spool_root(), self._stem)
        self._pending: list[bytes] = []
        self._next_index = 0
        # the settings are this module's constants, read at each use: a change to them takes effect at once
        settings = sys.modules[__name__]
        self._uploader = SegmentUploader(logdir, self._stem, self.spool, self._segment_path, settings)
        #: The objects uploaded so far, in order.
        self.paths: list[str] = self._uploader.paths

    @property
    def path(self) -> str:
        """The first segment's first attempt."""
        return self._segment_path(0, 0)

    @property
    def waiting(self) -> int:
        """How many segments wait for upload."""
        return self._uploader.waiting

    def add_event(self, event: event_pb2.Event) -> None:
        """Buffer one event; it is uploaded after the next :meth:`flush`."""
        if self._uploader.closed:
            raise OSError(f"event file {self.path} is closed")
        self._pending.append(encode_record(event))

    def flush(self, timeout: Optional[float] = None) -> None:
        """Freeze the buffered records into a segment and queue it for upload; with ``timeout``, also
        :meth:`wait` for every queued segment. The first segment is uploaded at once, and raises
        :class:`~xray_tb.io.storage.RemoteStorageError` when it cannot be."""
        if not self._uploader.closed and self._pending:
            self._uploader.add(self._freeze())
        if timeout is not None:
            self.wait(timeout)

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Queue what is buffered, stop accepting records, and :meth:`wait` up to ``timeout`` seconds.
        Calling it again waits again."""
        if not self._uploader.closed:
            self.flush()
            self._uploader.close()
        self.wait(timeout)

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for every queued segment to be uploaded (retrying at once
        a segment waiting for its next attempt). Raises :class:`UploadIncompleteError` if some are
        left; they are then spilled to :attr:`spool`, and the uploader goes on trying."""
        self._uploader.wait(timeout)

    def _segment_path(self, index: int, attempt: int) -> str:
        return storage.join(self.logdir, f"{self._stem}.{index:06d}.{attempt:03d}{FILE_SUFFIX}")

    def _freeze(self) -> Segment:
        data = b"".join([encode_record(version_event()), *self._pending])
        self._pending = []
        segment = Segment(self._next_index, len(data), data)
        self._next_index += 1
        return segment
