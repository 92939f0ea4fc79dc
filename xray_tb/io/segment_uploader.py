"""Uploading a remote event file's segments in the background: one after another, in order, every
attempt under a name never used before, failed ones retried with backoff, outages told by a
:class:`UploadWarning` (the design is in :mod:`xray_tb.io.remote_event_file`)."""

from __future__ import annotations

import threading
import time
import warnings
from typing import Callable, Optional, Protocol

from xray_tb.io import storage
from xray_tb.io.segment_queue import Segment, SegmentQueue, size_text


class UploadWarning(UserWarning):
    """Uploads to a remote run directory started failing, or work again."""


class UploadIncompleteError(storage.RemoteStorageError):
    """Segments were still waiting for upload when a wait ran out; they are kept in :attr:`spool`."""

    def __init__(self, message: str, waiting: int, spool: str):
        super().__init__(message)
        self.waiting = waiting
        self.spool = spool


class UploadSettings(Protocol):
    """The settings of the uploads: the module constants of :mod:`xray_tb.io.remote_event_file`."""

    MEMORY_BYTES: int
    CONNECT_TIMEOUT: float
    READ_TIMEOUT: float
    BACKOFF_FIRST: float
    BACKOFF_CAP: float
    FIRST_ATTEMPTS: int


class SegmentUploader:
    """The segments of one remote event file that wait for upload, and the thread that uploads them.
    One lock (a condition) guards the queue and the thread's state.

    Args:
        logdir: the remote run directory.
        stem: the event file's name stem.
        spool: the folder segments waiting for upload are spilled to.
        segment_path: ``segment_path(index, attempt)``, the object path of one attempt at a segment.
        settings: read at each use, so that a change to them takes effect at once.
    """

    def __init__(
        self, logdir: str, stem: str, spool: str, segment_path: Callable[[int, int], str], settings: UploadSettings
    ):
        self.logdir = logdir
        self._stem = stem
        self._segment_path = segment_path
        self._settings = settings
        self._queue = SegmentQueue(spool, stem)  # waiting for upload, in order
        self._cond = threading.Condition()
        self._closed = False
        self._thread: Optional[threading.Thread] = None
        self._put = None
        self._outage_since: Optional[float] = None
        self._wake = False
        #: The objects uploaded so far, in order.
        self.paths: list[str] = []

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called: no segment comes any more."""
        return self._closed

    @property
    def waiting(self) -> int:
        """How many segments wait for upload."""
        with self._cond:
            return len(self._queue)

    def add(self, segment: Segment) -> None:
        """Upload ``segment`` after every earlier one: the first at once, on the calling thread (raising
        :class:`~xray_tb.io.storage.RemoteStorageError` when it cannot be), the others in the background."""
        if not self.paths and self._thread is None:
            self._upload_first(segment)
        else:
            self._enqueue(segment)

    def close(self) -> None:
        """No segment comes any more: the thread ends once the queue is empty."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the queue to empty; else spill it, and raise."""
        deadline = time.monotonic() + max(float(timeout), 0.0)
        with self._cond:
            self._wake = True
            self._cond.notify_all()
            while self._queue and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)
            if not self._queue:
                return
            self._queue.spill_all()
            waiting, size, spool = len(self._queue), self._queue.size, self._queue.spool
        raise UploadIncompleteError(
            f"{waiting} segments of Xray's event file ({size_text(size)}, one per capture, plan or health write) were not "
            f"uploaded to {self.logdir} within {timeout:g} s; they are kept in {spool} and still being retried. "
            "Call xray.flush(timeout=...) (or xray.close() again) once the store answers; if this process ends "
            f"first, copy the files of {spool} into {self.logdir}/",
            waiting,
            spool,
        )

    def _enqueue(self, segment: Segment) -> None:
        with self._cond:
            self._queue.append(segment, self._settings.MEMORY_BYTES)
            if self._thread is None:
                self._thread = threading.Thread(target=self._upload_all, name=f"xray-upload-{self._stem}", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _attempt(self, segment: Segment, data: bytes) -> str:
        """One upload attempt of ``segment`` under a name never used before; its object path."""
        path = self._segment_path(segment.index, segment.attempts)
        segment.attempts += 1
        with storage.remote_errors(f"upload {len(data)} bytes of Xray's event file to", path):
            if self._put is None:
                settings = self._settings
                self._put = storage.object_writer(
                    path, connect_timeout=settings.CONNECT_TIMEOUT, read_timeout=settings.READ_TIMEOUT
                )
            self._put(path, data)
        return path

    def _upload_first(self, segment: Segment) -> None:
        settings = self._settings
        backoff = settings.BACKOFF_FIRST
        for attempt in range(settings.FIRST_ATTEMPTS):
            try:
                self.paths.append(self._attempt(segment, segment.data))
                return
            except storage.RemoteStorageError as error:
                if attempt + 1 == settings.FIRST_ATTEMPTS or _refused(error):
                    raise  # the run directory cannot be written at all
            time.sleep(backoff)
            backoff = min(2 * backoff, settings.BACKOFF_CAP)

    def _upload_all(self) -> None:
        """The uploader thread: the queue's head segment until it is uploaded, then the next; ends
        when the file is closed and nothing waits."""
        settings = self._settings
        backoff = settings.BACKOFF_FIRST
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    self._thread = None
                    return
                segment = self._queue.head
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
                        self._notify(f"uploads to {self.logdir} are failing: {error}. {self._where()}; they are "
                                     f"retried in the background (every {settings.BACKOFF_CAP:g} s at most) and "
                                     "training goes on")
                    self._wake = False
                    self._cond.wait_for(lambda: self._wake, timeout=backoff)
                backoff = min(2 * backoff, settings.BACKOFF_CAP)
                continue
            with self._cond:
                self._queue.pop_uploaded()
                self.paths.append(path)
                if self._outage_since is not None:
                    failing = time.monotonic() - self._outage_since
                    self._notify(f"uploads to {self.logdir} work again after {failing:.1f} s of failures; "
                                 f"{self._where()}" + (", being uploaded now" if self._queue else ""))
                    self._outage_since = None
                backoff = settings.BACKOFF_FIRST
                self._cond.notify_all()

    def _where(self) -> str:
        """How many segments wait, and where they are kept. Called with the lock."""
        return self._queue.describe(self._settings.MEMORY_BYTES)

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
