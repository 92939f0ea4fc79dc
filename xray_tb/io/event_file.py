"""A synchronous TensorBoard event file, for Xray's own run directory.

TensorBoard's ``EventFileWriter`` hands every record to a writer thread that re-opens the file for
each record and wakes up every few seconds even when idle. Xray writes one record per capture, rarely,
so it writes it at once on the calling thread instead: no thread, the file held open, and each capture
on disk as soon as :meth:`EventFile.flush` returns. The bytes are TensorBoard's record format, so any
TensorBoard reader (Python or Rust) reads the file:

    uint64 length | uint32 masked CRC32C of length | data | uint32 masked CRC32C of data

A remote run directory (``s3://...``) gets a :class:`~xray_tb.io.remote_event_file.RemoteEventFile`
instead (see there).
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import time

from tensorboard.compat.proto import event_pb2
from tensorboard.summary.writer import record_writer

from xray_tb.io import storage
from xray_tb.io.checksums import use_fast_crc32c

#: Appended to the file name, so an Xray file never collides with a SummaryWriter's in the same directory.
FILE_SUFFIX = ".xray"
_FILE_VERSION = "brain.Event:2"
_counter = itertools.count()


class EventFile:
    """An event file opened in ``logdir``; :meth:`add_event` writes a record straight to the file
    (one system call, no buffer), so readers see it at once."""

    def __init__(self, logdir: str):
        use_fast_crc32c()
        os.makedirs(logdir, exist_ok=True)
        self.path = os.path.join(logdir, file_stem() + FILE_SUFFIX)
        self._file = open(self.path, "wb", buffering=0)
        self.add_event(event_pb2.Event(wall_time=time.time(), file_version=_FILE_VERSION))

    def add_event(self, event: event_pb2.Event) -> None:
        """Append one event as a record (the same bytes as :func:`encode_record`, inlined)."""
        if self._file.closed:
            raise OSError(f"event file {self.path} is closed")
        data = event.SerializeToString()
        header = struct.pack("<Q", len(data))
        crc = record_writer.masked_crc32c  # looked up at call time: the fast one once installed
        record = memoryview(b"".join((header, struct.pack("<I", crc(header)), data, struct.pack("<I", crc(data)))))
        while record:
            record = record[self._file.write(record):]

    def flush(self) -> None:
        """Nothing to do: every record is written when it is added (kept for the writer interface)."""

    def close(self) -> None:
        """Flush and close; idempotent."""
        if not self._file.closed:
            self._file.close()


def file_stem() -> str:
    """A new event file name without :data:`FILE_SUFFIX`, ``events.out.tfevents.<time>.<host>.<pid>.<n>``:
    it starts with the creation time, so files sort in the order they were started."""
    return f"{storage.EVENT_FILE_PREFIX}{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_counter):06d}"


def version_event() -> event_pb2.Event:
    """The event every TensorBoard event file starts with."""
    return event_pb2.Event(wall_time=time.time(), file_version=_FILE_VERSION)


def encode_record(event: event_pb2.Event) -> bytes:
    """One event in TensorBoard's record format."""
    data = event.SerializeToString()
    header = struct.pack("<Q", len(data))
    crc = record_writer.masked_crc32c  # looked up at call time: the fast one once installed
    return b"".join((header, struct.pack("<I", crc(header)), data, struct.pack("<I", crc(data))))
