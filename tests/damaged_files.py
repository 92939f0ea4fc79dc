"""Damaging event files the recorder wrote, one way at a time, for the tolerant reader's tests.

Each damage takes a healthy file's bytes and the index of one record, and returns the damaged bytes.
Records are located by walking the healthy file's length fields (no reader under test involved).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Callable

from tensorboard.summary.writer import record_writer

from xray_tb.io.checksums import use_fast_crc32c

HEADER, FOOTER = 12, 4
TIB = 1 << 40


def record_spans(data: bytes) -> list[tuple[int, int]]:
    """``(start, end)`` byte offsets of every record of a healthy event file."""
    spans, position = [], 0
    while position < len(data):
        (length,) = struct.unpack_from("<Q", data, position)
        end = position + HEADER + length + FOOTER
        assert end <= len(data), "not a healthy event file"
        spans.append((position, end))
        position = end
    return spans


def pack_record(payload: bytes, length: int | None = None) -> bytes:
    """A record holding ``payload`` with valid checksums (its length field ``length`` if given)."""
    use_fast_crc32c()
    crc = record_writer.masked_crc32c
    header = struct.pack("<Q", len(payload) if length is None else length)
    return header + struct.pack("<I", crc(header)) + payload + struct.pack("<I", crc(payload))


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]


def flip_data_crc(data: bytes, start: int, end: int) -> bytes:
    return _flip(data, end - 2)


def flip_payload_byte(data: bytes, start: int, end: int) -> bytes:
    return _flip(data, (start + HEADER + end - FOOTER) // 2)


def flip_length_byte(data: bytes, start: int, end: int) -> bytes:
    return _flip(data, start + 1)


def zero_record(data: bytes, start: int, end: int) -> bytes:
    return data[:start] + bytes(end - start) + data[end:]


def garbage_payload(data: bytes, start: int, end: int) -> bytes:
    """The payload replaced by bytes that are no protobuf, with checksums that verify."""
    return with_payload(data, start, end, b"\xff" * (end - start - HEADER - FOOTER))


def tebibyte_length(data: bytes, start: int, end: int) -> bytes:
    """The length field set to 1 TiB, with a length checksum that verifies."""
    payload = data[start + HEADER:end - FOOTER]
    return data[:start] + pack_record(payload, length=TIB) + data[end:]


#: name → damage(data, start, end) of one record
DAMAGES: dict[str, Callable[[bytes, int, int], bytes]] = {
    "flipped data crc": flip_data_crc,
    "flipped payload byte": flip_payload_byte,
    "flipped length byte": flip_length_byte,
    "zeroed record": zero_record,
    "valid-crc garbage payload": garbage_payload,
    "1 TiB length, valid header crc": tebibyte_length,
}


def damage_file(path: Path, damage: str, index: int) -> int:
    """Damage record ``index`` of the event file at ``path`` in place; its start offset."""
    data = path.read_bytes()
    start, end = record_spans(data)[index]
    path.write_bytes(DAMAGES[damage](data, start, end))
    return start


def with_payload(data: bytes, start: int, end: int, payload: bytes) -> bytes:
    """The record at ``start:end`` replaced by one holding ``payload``, checksums valid."""
    return data[:start] + pack_record(payload) + data[end:]
