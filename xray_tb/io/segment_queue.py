"""The segments of a remote event file that wait for upload, in order: in memory, the oldest spilled
to a local spool folder beyond a memory limit.

Segments waiting for upload are kept in memory up to
:data:`~xray_tb.io.remote_event_file.MEMORY_BYTES`; beyond that the oldest are spilled to the spool
folder (``$XRAY_TB_SPOOL`` or ``<tempdir>/xray-spool``, then ``/<file stem>/``), read back from there
when their turn comes and deleted once uploaded. Nothing is dropped. A spooled segment file is a
complete event file: copied into the run folder under its own name it sorts in its place.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import tempfile
from typing import Optional

from xray_tb.io.event_file import FILE_SUFFIX


def spool_root() -> str:
    """Where segments waiting for upload are spilled: ``$XRAY_TB_SPOOL``, else ``<tempdir>/xray-spool``."""
    return os.environ.get("XRAY_TB_SPOOL") or os.path.join(tempfile.gettempdir(), "xray-spool")


@dataclasses.dataclass
class Segment:
    """The records of one flush as a whole event file of its own, whose bytes never change."""

    index: int
    size: int
    data: Optional[bytes]  # None once spilled
    spooled: Optional[str] = None
    attempts: int = 0


def size_text(count: int) -> str:
    """A byte count in KiB or MiB."""
    return f"{count / 2**20:.1f} MiB" if count >= 2**20 else f"{count / 2**10:.1f} KiB"


class SegmentQueue:
    """The segments waiting for upload, the oldest first. It has no lock of its own: the
    :class:`~xray_tb.io.segment_uploader.SegmentUploader` that owns it calls it with its lock held.

    Args:
        spool: the folder segments are spilled to (created when the first one is).
        stem: the event file's name stem, which names the spilled files.
    """

    def __init__(self, spool: str, stem: str):
        self.spool = spool
        self._stem = stem
        self._segments: collections.deque[Segment] = collections.deque()
        self._memory = 0  # bytes of the queued segments held in memory

    def __len__(self) -> int:
        return len(self._segments)

    @property
    def head(self) -> Segment:
        """The oldest segment, the next to upload."""
        return self._segments[0]

    @property
    def size(self) -> int:
        """Bytes of all the queued segments, in memory or spilled."""
        return sum(segment.size for segment in self._segments)

    def append(self, segment: Segment, memory_bytes: int) -> None:
        """Queue ``segment``, spilling the oldest while the queue holds more than ``memory_bytes`` in memory."""
        self._segments.append(segment)
        self._memory += segment.size
        for older in self._segments:  # the oldest first, the newest kept in memory if it fits alone
            if self._memory <= memory_bytes or older is segment:
                break
            self.spill(older)

    def spill(self, segment: Segment) -> None:
        """Move a queued segment's bytes to the spool folder (a local write)."""
        if segment.data is None:
            return
        os.makedirs(self.spool, exist_ok=True)
        path = os.path.join(self.spool, f"{self._stem}.{segment.index:06d}{FILE_SUFFIX}")
        with open(path + ".part", "wb") as file:
            file.write(segment.data)
        os.replace(path + ".part", path)
        segment.spooled, segment.data = path, None
        self._memory -= segment.size

    def spill_all(self) -> None:
        """Spill every queued segment still in memory."""
        for segment in self._segments:
            self.spill(segment)

    def pop_uploaded(self) -> None:
        """Drop the head segment, uploaded: its spooled file too."""
        segment = self._segments.popleft()
        if segment.spooled is not None:  # spilled maybe while it was being uploaded
            _remove(segment.spooled, self.spool)
        if segment.data is not None:
            self._memory -= segment.size

    def describe(self, memory_bytes: int) -> str:
        """How many segments wait, and where they are kept."""
        if not self._segments:
            return "no segment is waiting"
        waiting = len(self._segments)
        spooled = sum(segment.data is None for segment in self._segments)
        return (f"{waiting} segments ({size_text(self.size)}, one per capture, plan or health write) are waiting, "
                f"{waiting - spooled} in memory and {spooled} in {self.spool} (spilled beyond {size_text(memory_bytes)})")


def _remove(path: str, folder: str) -> None:
    try:
        os.remove(path)
        os.rmdir(folder)  # once empty
    except OSError:
        pass
