"""Xray's event file in an object store (``s3://bucket/prefix/run``), uploaded off the training thread.

(A little over our ~300-line rule: the segment queue, its spool and the uploader thread share one
lock and one ordering invariant, and are easier to check in one place.)

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
"""

from __future__ import annotations

import collections
import dataclasses
import os
import tempfile
import threading
import time
import warnings
from typing import Optional

from tensorboard.compat.proto import event_pb2

from xray_tb.io import storage
from xray_tb.io.checksums import use_fast_crc32c
from xray_tb.io.event_file import FILE_SUFFIX, encode_record, file_stem, version_event

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


def spool_root() -> str:
    """Where segments waiting for upload are spilled: ``$XRAY_TB_SPOOL``, else ``<tempdir>/xray-spool``."""
    return os.environ.get("XRAY_TB_SPOOL") or os.path.join(tempfile.gettempdir(), "xray-spool")


class UploadWarning(UserWarning):
    """Uploads to a remote run directory started failing, or work again."""


class UploadIncompleteError(storage.RemoteStorageError):
    """Segments were still waiting for upload when a wait ran out; they are kept in :attr:`spool`."""

    def __init__(self, message: str, waiting: int, spool: str):
        super().__init__(message)
        self.waiting = waiting
        self.spool = spool


@dataclasses.dataclass
class _Segment:
    index: int
    size: int
    data: Optional[bytes]  # None once spilled
    spooled: Optional[str] = None
    attempts: int = 0


def _size(count: int) -> str:
    return f"{count / 2**20:.1f} MiB" if count >= 2**20 else f"{count / 2**10:.1f} KiB"


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
        self._closed = False
        self._next_index = 0
        self._queue: collections.deque[_Segment] = collections.deque()  # waiting for upload, in order
        self._memory = 0  # bytes of the queued segments held in memory
        self._cond = threading.Condition()
        self._thread: Optional[threading.Thread] = None
        self._put = None
        self._outage_since: Optional[float] = None
        self._wake = False
        #: The objects uploaded so far, in order.
        self.paths: list[str] = []

    @property
    def path(self) -> str:
        """The first segment's first attempt."""
        return self._segment_path(0, 0)

    @property
    def waiting(self) -> int:
        """How many segments wait for upload."""
        with self._cond:
            return len(self._queue)

    def add_event(self, event: event_pb2.Event) -> None:
        """Buffer one event; it is uploaded after the next :meth:`flush`."""
        if self._closed:
            raise OSError(f"event file {self.path} is closed")
        self._pending.append(encode_record(event))

    def flush(self, timeout: Optional[float] = None) -> None:
        """Freeze the buffered records into a segment and queue it for upload; with ``timeout``, also
        :meth:`wait` for every queued segment. The first segment is uploaded at once, and raises
        :class:`~xray_tb.io.storage.RemoteStorageError` when it cannot be."""
        if not self._closed and self._pending:
            segment = self._freeze()
            if not self.paths and self._thread is None:
                self._upload_first(segment)
            else:
                self._enqueue(segment)
        if timeout is not None:
            self.wait(timeout)

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Queue what is buffered, stop accepting records, and :meth:`wait` up to ``timeout`` seconds.
        Calling it again waits again."""
        if not self._closed:
            self.flush()
            with self._cond:
                self._closed = True
                self._cond.notify_all()
        self.wait(timeout)

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for every queued segment to be uploaded (retrying at once
        a segment waiting for its next attempt). Raises :class:`UploadIncompleteError` if some are
        left; they are then spilled to :attr:`spool`, and the uploader goes on trying."""
        deadline = time.monotonic() + max(float(timeout), 0.0)
        with self._cond:
            self._wake = True
            self._cond.notify_all()
            while self._queue and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)
            if not self._queue:
                return
            for segment in self._queue:
                self._spill(segment)
            waiting, size = len(self._queue), sum(segment.size for segment in self._queue)
        raise UploadIncompleteError(
            f"{waiting} segments of Xray's event file ({_size(size)}, one per capture, plan or health write) were not "
            f"uploaded to {self.logdir} within {timeout:g} s; they are kept in {self.spool} and still being retried. "
            "Call xray.flush(timeout=...) (or xray.close() again) once the store answers; if this process ends "
            f"first, copy the files of {self.spool} into {self.logdir}/",
            waiting,
            self.spool,
        )

    # Segments -------------------------------------------------------------------------------------

    def _segment_path(self, index: int, attempt: int) -> str:
        return storage.join(self.logdir, f"{self._stem}.{index:06d}.{attempt:03d}{FILE_SUFFIX}")

    def _freeze(self) -> _Segment:
        data = b"".join([encode_record(version_event()), *self._pending])
        self._pending = []
        segment = _Segment(self._next_index, len(data), data)
        self._next_index += 1
        return segment

    def _spill(self, segment: _Segment) -> None:
        """Move a queued segment's bytes to the spool folder (a local write). Called with the lock."""
        if segment.data is None:
            return
        os.makedirs(self.spool, exist_ok=True)
        path = os.path.join(self.spool, f"{self._stem}.{segment.index:06d}{FILE_SUFFIX}")
        with open(path + ".part", "wb") as file:
            file.write(segment.data)
        os.replace(path + ".part", path)
        segment.spooled, segment.data = path, None
        self._memory -= segment.size

    def _enqueue(self, segment: _Segment) -> None:
        with self._cond:
            self._queue.append(segment)
            self._memory += segment.size
            for older in self._queue:  # the oldest first, the newest kept in memory if it fits alone
                if self._memory <= MEMORY_BYTES or older is segment:
                    break
                self._spill(older)
            if self._thread is None:
                self._thread = threading.Thread(target=self._upload_all, name=f"xray-upload-{self._stem}", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    # Uploads --------------------------------------------------------------------------------------

    def _attempt(self, segment: _Segment, data: bytes) -> str:
        """One upload attempt of ``segment`` under a name never used before; its object path."""
        path = self._segment_path(segment.index, segment.attempts)
        segment.attempts += 1
        with storage.remote_errors(f"upload {len(data)} bytes of Xray's event file to", path):
            if self._put is None:
                self._put = storage.object_writer(path, connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT)
            self._put(path, data)
        return path

    def _upload_first(self, segment: _Segment) -> None:
        backoff = BACKOFF_FIRST
        for attempt in range(FIRST_ATTEMPTS):
            try:
                self.paths.append(self._attempt(segment, segment.data))
                return
            except storage.RemoteStorageError as error:
                if attempt + 1 == FIRST_ATTEMPTS or _refused(error):
                    raise  # the run directory cannot be written at all
            time.sleep(backoff)
            backoff = min(2 * backoff, BACKOFF_CAP)

    def _upload_all(self) -> None:
        """The uploader thread: the queue's head segment until it is uploaded, then the next; ends
        when the file is closed and nothing waits."""
        backoff = BACKOFF_FIRST
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    self._thread = None
                    return
                segment = self._queue[0]
                data, spooled = segment.data, segment.spooled
            started = time.monotonic()
            try:
                if data is None:
                    with open(spooled, "rb") as file:
                        data = file.read()
                path = self._attempt(segment, data)
            except Exception as error:  # noqa: BLE001 - the thread must go on: every failure is retried
                with self._cond:
                    if self._outage_since is None:
                        self._outage_since = started
                        self._notify(f"uploads to {self.logdir} are failing: {error}. {self._where()}; they are retried "
                                     f"in the background (every {BACKOFF_CAP:g} s at most) and training goes on")
                    self._wake = False
                    self._cond.wait_for(lambda: self._wake, timeout=backoff)
                backoff = min(2 * backoff, BACKOFF_CAP)
                continue
            with self._cond:
                self._queue.popleft()
                if segment.spooled is not None:  # spilled maybe while it was being uploaded
                    _remove(segment.spooled, self.spool)
                if segment.data is not None:
                    self._memory -= segment.size
                self.paths.append(path)
                if self._outage_since is not None:
                    self._notify(f"uploads to {self.logdir} work again after {time.monotonic() - self._outage_since:.1f} s "
                                 f"of failures; {self._where()}" + (", being uploaded now" if self._queue else ""))
                    self._outage_since = None
                backoff = BACKOFF_FIRST
                self._cond.notify_all()

    def _where(self) -> str:
        """How many segments wait, and where they are kept. Called with the lock."""
        if not self._queue:
            return "no segment is waiting"
        spooled = sum(segment.data is None for segment in self._queue)
        size = sum(segment.size for segment in self._queue)
        return (f"{len(self._queue)} segments ({_size(size)}, one per capture, plan or health write) are waiting, "
                f"{len(self._queue) - spooled} in memory and {spooled} in {self.spool} (spilled beyond {_size(MEMORY_BYTES)})")

    @staticmethod
    def _notify(message: str) -> None:
        """One warning, shown whatever was shown before (a fresh registry), from any thread."""
        try:
            warnings.warn_explicit(message, UploadWarning, __file__, 0, module=__name__, registry=None)
        except Exception:  # noqa: BLE001 - warnings turned into errors must not stop the uploader
            pass


def _refused(error: BaseException) -> bool:
    """Whether the store answered with a client error (4xx: a missing bucket, denied access), which
    a retry does not change."""
    cause = error.__cause__
    status = getattr(cause, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode") if cause is not None else None
    return isinstance(status, int) and 400 <= status < 500


def _remove(path: str, folder: str) -> None:
    try:
        os.remove(path)
        os.rmdir(folder)  # once empty
    except OSError:
        pass
