"""Reading TensorBoard's record format incrementally, skipping damaged records.

An event file is a sequence of records::

    uint64 length | uint32 masked CRC32C of length | data | uint32 masked CRC32C of data

:class:`RecordReader` keeps its byte offset between calls, so each :meth:`RecordReader.read` returns
only what was appended since. A damaged record (a flipped checksum, payload or length byte, a zeroed
stretch, a length larger than the file) is skipped: the reader looks for the next position where
both checksums of a whole record verify, reads on from there, and warns once with the file and the
byte offset. An incomplete record at the end of the file is not damage (its writer may still be
writing it); it is read by a later call, once complete. No read is larger than the file holds.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import struct
import warnings
from typing import BinaryIO, Iterator, Optional

import numpy as np
from tensorboard.summary.writer import record_writer

from xray_tb.io import storage
from xray_tb.io.checksums import use_fast_crc32c

_HEADER = 12  # uint64 length + uint32 checksum of the length
_FOOTER = 4  # uint32 checksum of the data
_SCAN_CHUNK = 1 << 20  # positions examined at once when looking for the next valid record
_FETCH_CHUNK = 16 << 20  # bytes asked for at once from a remote file


class DamagedEventFileWarning(UserWarning):
    """An event file held a damaged record or an unreadable event; it was skipped and reading went on."""


@dataclasses.dataclass(frozen=True)
class Record:
    """One verified record: where it starts in the file and its data (a serialized ``Event``)."""

    offset: int
    data: bytes


class RecordReader:
    """The records of one event file, read incrementally and verified.

    Args:
        path: the event file.
        warn: warn (:class:`DamagedEventFileWarning`) about each damaged stretch skipped.
    """

    def __init__(self, path: str | os.PathLike, *, warn: bool = True):
        self.path = os.fspath(path)
        self._warn = warn
        self._offset = 0
        self._remote = _RemoteBytes(self.path) if storage.is_remote(self.path) else None
        #: ``(start, resume)`` byte offsets of every damaged stretch skipped so far.
        self.skipped: list[tuple[int, int]] = []

    @property
    def offset(self) -> int:
        """Where the next record is expected: everything before it has been read or skipped."""
        return self._offset

    def read(self) -> Iterator[Record]:
        """The records written since the last call, in file order.

        A record that ends past the end of the file is left for a later call, unless a valid record
        follows it (then it was damaged, and is skipped). A missing file reads as empty. A remote
        file (``s3://...``) is fetched through TensorBoard's file layer, from where the last call
        stopped.
        """
        use_fast_crc32c()
        if self._remote is not None:
            size = self._remote.fetch(self._offset)
            if size is not None:
                yield from self._records(self._remote, size)
            return
        try:
            file = open(self.path, "rb")
        except FileNotFoundError:
            return
        with file:
            yield from self._records(file, os.fstat(file.fileno()).st_size)

    def _records(self, file: BinaryIO, size: int) -> Iterator[Record]:
        while size - self._offset >= _HEADER:
            at = self._offset
            verdict, found = _examine(file, at, size)
            if verdict is _Verdict.VALID:
                self._offset = at + _HEADER + len(found) + _FOOTER
                yield Record(at, found)
                continue
            if verdict is _Verdict.CUT_SHORT:
                return  # the file shrank while being read
            resume = _next_valid_record(file, at + 1, size)
            if resume is None:
                if verdict is not _Verdict.BAD_DATA:
                    return  # perhaps a record still being written: wait for the rest
                resume = at + _HEADER + found + _FOOTER  # the verified length says where it ends
            self._skip(at, resume, verdict.value.format(length=found))

    def _skip(self, start: int, resume: int, reason: str) -> None:
        self.skipped.append((start, resume))
        self._offset = resume
        if self._warn:
            warnings.warn(
                f"event file {self.path}: damaged record at byte {start} ({reason}); "
                f"skipped {resume - start} bytes and read on from byte {resume}",
                DamagedEventFileWarning,
                stacklevel=3,
            )


class _RemoteBytes:
    """A remote event file's bytes from the reader's offset on, fetched as the file grows and read
    through ``seek``/``read`` at absolute offsets, like a local file.

    One ``GFile`` stays open between fetches: TensorBoard's file layer continues each read where the
    last one ended (a ranged GET on S3), so every byte is downloaded once.
    """

    def __init__(self, path: str):
        self._path = path
        self._gfile = None
        self._base = 0  # the file offset of _data[0]
        self._data = bytearray()
        self._position = 0

    def fetch(self, keep_from: int) -> Optional[int]:
        """Drop what lies before ``keep_from``, download what was appended; the file's size, or None
        while it does not exist."""
        del self._data[: max(keep_from - self._base, 0)]
        self._base = max(keep_from, self._base)
        with storage.remote_errors("read", self._path):
            if self._gfile is None:
                gfile = storage.gfile()
                if not gfile.exists(self._path):
                    return None
                self._gfile = gfile.GFile(self._path, "rb")
            while True:
                chunk = self._gfile.read(_FETCH_CHUNK)
                self._data += chunk
                if len(chunk) < _FETCH_CHUNK:  # the end of the file as it is now
                    break
        return self._base + len(self._data)

    def seek(self, position: int) -> None:
        self._position = position

    def read(self, size: int) -> bytes:
        start = self._position - self._base
        chunk = bytes(self._data[start : start + size])
        self._position += len(chunk)
        return chunk


class _Verdict(enum.Enum):
    """What a record is; the value of a damaged one says why, for the warning."""

    VALID = "valid"
    BAD_HEADER = "its length fails its checksum"
    OVERRUNS = "it claims {length} bytes, more than the file holds"
    BAD_DATA = "its data fails its checksum"
    CUT_SHORT = "the file ended before its size said"


def _examine(file: BinaryIO, at: int, size: int) -> tuple[_Verdict, object]:
    """The verdict on the record at byte ``at`` of a file of ``size`` bytes (at least a header's
    worth remain), with its data when valid and its length when the length's checksum holds."""
    crc = record_writer.masked_crc32c  # looked up at call time: the fast one once installed
    file.seek(at)
    header = file.read(_HEADER)
    if len(header) != _HEADER:
        return _Verdict.CUT_SHORT, None
    length, stored = struct.unpack("<QI", header)
    if crc(header[:8]) != stored:
        return _Verdict.BAD_HEADER, None
    if length > size - at - _HEADER - _FOOTER:
        return _Verdict.OVERRUNS, length  # checked before reading: never allocate more than the file holds
    data = file.read(length)
    footer = file.read(_FOOTER)
    if len(data) != length or len(footer) != _FOOTER:
        return _Verdict.CUT_SHORT, length
    if crc(data) != struct.unpack("<I", footer)[0]:
        return _Verdict.BAD_DATA, length
    return _Verdict.VALID, data


def _next_valid_record(file: BinaryIO, start: int, size: int) -> Optional[int]:
    """The first offset at or after ``start`` where a whole record verifies; None if there is none."""
    position = start
    while size - position >= _HEADER + _FOOTER:
        file.seek(position)
        window = file.read(_SCAN_CHUNK + _HEADER - 1)
        for hit in _header_hits(window, size - position):
            if _examine(file, position + int(hit), size)[0] is _Verdict.VALID:
                return position + int(hit)
        position += _SCAN_CHUNK
    return None


def _header_hits(window: bytes, remaining: int) -> np.ndarray:
    """Offsets in ``window`` (which starts ``remaining`` bytes before the end of the file) where a
    record header verifies and its length fits in the file: the masked CRC32C of the 8 length bytes,
    computed for every position at once, equals the 4 bytes that follow."""
    count = len(window) - _HEADER + 1
    if count <= 0:
        return np.empty(0, np.int64)
    raw = np.frombuffer(window, np.uint8)
    plausible = np.ones(count, bool)
    for byte in range((remaining.bit_length() + 7) // 8, 8):  # length bytes a fitting length leaves zero
        plausible &= raw[byte : byte + count] == 0
    # Zeroed stretches: a zero length verifies only with its own checksum after it, no need to compute it.
    nonzero_length = np.zeros(count, bool)
    for byte in range(8):
        nonzero_length |= raw[byte : byte + count] != 0
    zero_length_checksum = np.ones(count, bool)
    for byte, expected in enumerate(_ZERO_LENGTH_CHECKSUM):
        zero_length_checksum &= raw[8 + byte : 8 + byte + count] == expected
    where = np.flatnonzero(plausible & (nonzero_length | zero_length_checksum))
    crc = np.full(len(where), 0xFFFFFFFF, np.uint32)
    for byte in range(8):
        crc = _CRC32C_TABLE[(crc ^ raw[where + byte]) & 0xFF] ^ (crc >> 8)
    crc ^= np.uint32(0xFFFFFFFF)
    masked = ((crc >> 15) | (crc << 17)) + np.uint32(0xA282EAD8)
    stored = np.zeros(len(where), np.uint32)
    for byte in range(4):
        stored |= raw[where + 8 + byte].astype(np.uint32) << (8 * byte)
    return where[masked == stored]


def _crc32c_table() -> np.ndarray:
    """The byte table of CRC32C (Castagnoli polynomial, reflected)."""
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(0x82F63B78), table >> 1).astype(np.uint32)
    return table


_CRC32C_TABLE = _crc32c_table()
_ZERO_LENGTH_CHECKSUM = struct.pack("<I", record_writer.masked_crc32c(bytes(8)))
