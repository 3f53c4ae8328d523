"""Hot-path encoder for Produce response bodies (versions 3-11).

How it works
------------
A produce request to many partitions gets one small result per partition; encoding them
through kio's generic (pure Python, reflective) writer costs more than appending the
batches. This writer packs the same bytes directly with ``struct``. Layout (Kafka's
``ProduceResponse.json``; "flexible" = v9+, compact arrays / strings and tagged fields)::

    ProduceResponse
      responses             array of
        name                string
        partition_responses array of
          index               int32
          error_code          int16
          base_offset         int64
          log_append_time_ms  int64                 (-1 unless LogAppendTime)
          log_start_offset    int64                 v5+
          record_errors       array of {batch_index int32,
                                        batch_index_error_message nullable string}  v8+
          error_message       nullable string       v8+
          <tagged fields>     v9+; tag 0 current_leader (v10+) only when not (-1, -1)
        <tagged fields>     v9+
      throttle_time_ms      int32
      <tagged fields>       v9+; tag 0 node_endpoints (v10+) only when not empty

record_errors name the records a rule refused (KIP-467: a key missing on a compacted
topic, a timestamp out of range). The broker never sets current_leader or node_endpoints
yet, so they are written as their defaults. A partition without
an error message (the common case) is one ``struct`` pack of its fixed fields plus the
version's constant tail (empty record_errors, null error_message, no tagged fields). The
unit tests check the output byte for byte against kio's encoding for every version.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from odradek.protocol.primitives import I32, array_length, nullable_string, string

__all__ = ["PartitionResult", "write_produce_response"]

MIN_VERSION = 3
MAX_VERSION = 11
_FLEXIBLE = 9
_LOG_START_OFFSET = 5
_ERROR_DETAILS = 8

_PART = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time_ms
_PART_V5 = struct.Struct(">ihqqq")  # ... and log_start_offset
_I64 = struct.Struct(">q")


def _tail(version: int) -> bytes:
    """What follows log_start_offset for a partition without an error message."""
    flexible = version >= _FLEXIBLE
    out = b""
    if version >= _ERROR_DETAILS:
        out += array_length(0, flexible) + nullable_string(None, flexible)
    if flexible:
        out += b"\x00"
    return out


_TAILS = {v: _tail(v) for v in range(MIN_VERSION, MAX_VERSION + 1)}


@dataclass(slots=True)
class PartitionResult:
    """One partition's answer. Not frozen: one is built per partition per request, and a
    frozen dataclass's ``__init__`` costs several times more."""

    index: int
    error_code: int
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: tuple[tuple[int, str | None], ...] = ()
    """(batch_index, batch_index_error_message) of each record refused (v8+)."""


def write_produce_response(
    version: int, topics: list[tuple[str, list[PartitionResult]]], throttle_time_ms: int = 0
) -> bytes:
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Produce response v{version} is not supported by this writer")
    flexible = version >= _FLEXIBLE
    tail = _TAILS[version]
    # Compact lengths and counts below 127 are one byte, written inline (every answer
    # has some, and a call each cost more than the rest of a one-partition answer).
    n = len(topics)
    out = bytearray((n + 1,)) if flexible and n < 0x7F else bytearray(array_length(n, flexible))
    for name, partitions in topics:
        raw = name.encode()
        if flexible and len(raw) < 0x7F:
            out.append(len(raw) + 1)
            out += raw
        else:
            out += string(name, flexible)
        n = len(partitions)
        if flexible and n < 0x7F:
            out.append(n + 1)
        else:
            out += array_length(n, flexible)
        for p in partitions:
            if p.error_message is None and not p.record_errors and version >= _LOG_START_OFFSET:
                out += _PART_V5.pack(p.index, p.error_code, p.base_offset,
                                     p.log_append_time_ms, p.log_start_offset)
                out += tail
                continue
            out += _PART.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms)
            if version >= _LOG_START_OFFSET:
                out += _I64.pack(p.log_start_offset)
            if version >= _ERROR_DETAILS:
                out += array_length(len(p.record_errors), flexible)
                for batch_index, message in p.record_errors:
                    out += I32.pack(batch_index)
                    out += nullable_string(message, flexible)
                    if flexible:
                        out += b"\x00"  # record error tagged fields
                out += nullable_string(p.error_message, flexible)
            if flexible:
                out += b"\x00"  # partition tagged fields: current_leader is the default
        if flexible:
            out += b"\x00"  # topic tagged fields
    out += I32.pack(throttle_time_ms)
    if flexible:
        out += b"\x00"  # response tagged fields: node_endpoints is empty
    return bytes(out)
