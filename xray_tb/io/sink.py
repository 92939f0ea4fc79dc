"""Where Xray's summaries go: a user's SummaryWriter, or an event file of Xray's own."""

from __future__ import annotations

import time
from typing import Optional

from tensorboard.compat.proto import event_pb2, summary_pb2

from xray_tb.io import storage
from xray_tb.io.checksums import warn_if_slow
from xray_tb.io.event_file import EventFile
from xray_tb.io.remote_event_file import CLOSE_TIMEOUT, RemoteEventFile


class EventSink:
    """Writes summaries into a run directory.

    With ``writer`` (a ``torch.utils.tensorboard.SummaryWriter``), Xray's data lands in that writer's
    event file, next to the user's scalars; the writer stays the user's to close (a writer on a
    remote logdir uploads its whole file again at each flush: TensorBoard's S3 layer cannot append).
    Otherwise Xray writes an event file of its own in ``logdir``, closed by :meth:`close`: an
    :class:`~xray_tb.io.event_file.EventFile` in a local folder, or a
    :class:`~xray_tb.io.remote_event_file.RemoteEventFile` in a remote one (``s3://...``).
    """

    def __init__(self, logdir: Optional[str] = None, writer=None):
        warn_if_slow()
        if writer is not None:
            self._file = writer._get_file_writer()  # torch's FileWriter: shares the user's event file
            self._owned = False
            self.logdir = writer.log_dir
        else:
            self._file = RemoteEventFile(logdir) if storage.is_remote(logdir) else EventFile(logdir)
            self._owned = True
            self.logdir = logdir

    def add(self, summary: summary_pb2.Summary, step: int, wall_time: Optional[float] = None) -> None:
        """Append one summary at ``step``."""
        self.add_event(event_pb2.Event(step=int(step), wall_time=time.time() if wall_time is None else wall_time, summary=summary))

    def add_event(self, event: event_pb2.Event) -> None:
        """Append one event (with its step and wall time set)."""
        if self._owned:
            self._file.add_event(event)
        else:
            self._file.add_event(event, step=event.step, walltime=event.wall_time)

    def flush(self, timeout: Optional[float] = None) -> None:
        """Write everything added so far to the file, for TensorBoard to read (Xray's own local file
        has nothing pending; a remote one queues a segment for upload, and with ``timeout`` waits up
        to that many seconds for every queued upload). A user's writer that was already closed is
        left alone (its owner flushed it when closing it)."""
        try:
            if isinstance(self._file, RemoteEventFile):
                self._file.flush(timeout)
            else:
                self._file.flush()
        except OSError:
            if self._owned:
                raise

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Flush; close the event file if Xray opened it (a remote one waits up to ``timeout``
        seconds for its uploads, see :meth:`RemoteEventFile.close`). Calling it again waits again."""
        if not self._owned:
            self.flush()
        elif isinstance(self._file, RemoteEventFile):
            self._file.close(timeout)
        else:
            self._file.close()
