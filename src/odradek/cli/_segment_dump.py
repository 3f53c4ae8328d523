"""The work of ``odradek dump-log`` (:mod:`odradek.cli.dump_log`): reading, checking and
printing segment files.

Imported where the command runs, not by its parser: the record and index modules it
needs cost every other ``odradek`` command their import (issue 51).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from odradek.records.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    CURRENT_MAGIC,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    BatchHeader,
    InvalidRecordError,
    Record,
    TimestampType,
    iter_records,
    validate_batch,
)
from odradek.records.compression import CompressionError
from odradek.records.legacy import LegacyMessage, iter_deep, iter_shallow
from odradek.storage import files
from odradek.storage.index import IndexCorruptError, OffsetIndex, TimeIndex
from odradek.storage.txn_index import decode_entries

# Batches larger than this are CRC-checked in chunks and not decoded record by record.
_MAX_WHOLE_BATCH = 256 * 1024 * 1024
_CRC_CHUNK = 8 * 1024 * 1024
_INDEX_READ_CHUNK = 64 * 1024
_LENGTH = struct.Struct(">i")
_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD
_MIN_LEGACY_LENGTH = 14  # a v0 message with null key and value
_LEGACY_CODECS = {0: "NoCompressionCodec", 1: "GZIPCompressionCodec",
                  2: "SnappyCompressionCodec", 3: "LZ4CompressionCodec"}
_LIFECYCLE_SUFFIXES = (
    files.DELETED_SUFFIX, files.CLEANED_SUFFIX, files.SWAP_SUFFIX,
)
_CONTROL_TYPES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER",
                  4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}


@dataclass(slots=True)
class Options:
    deep_iteration: bool = False
    print_data_log: bool = False
    index_sanity_check: bool = False
    verify_index_only: bool = False
    max_bytes: int = (1 << 31) - 1
    offsets_decoder: bool = False


@dataclass(slots=True)
class Problems:
    """Corruption found in one file, printed as a summary after its dump."""

    lines: list[str] = field(default_factory=list)

    def add(self, line: str) -> None:
        self.lines.append(line)

    def __bool__(self) -> bool:
        return bool(self.lines)


# -- .log --------------------------------------------------------------------------------
@dataclass(slots=True)
class BatchRead:
    """One batch read from a log file: its header, its bytes (None when too large to hold
    whole) and whether it is valid (``reason`` says why not)."""

    header: BatchHeader
    data: bytes | None
    valid: bool
    reason: str = ""


@dataclass(slots=True)
class LegacyRead:
    """One v0/v1 message entry (maybe a wrapper) read from a log file."""

    position: int
    data: bytes


@dataclass(slots=True)
class LogWalk:
    """Result of walking a log file: the invalid tail, if any."""

    end_position: int = 0
    invalid_tail: int = 0


def _crc_in_chunks(fd: int, position: int, size: int) -> int:
    # crc32c and the offsets decoder (the group coordinators' record types) are imported
    # where dump-log uses them: every odradek command builds this parser (issue 51)
    import crc32c

    crc = 0
    done = ATTRIBUTES_OFFSET
    while done < size:
        chunk = os.pread(fd, min(_CRC_CHUNK, size - done), position + done)
        if not chunk:
            break
        crc = crc32c.crc32c(chunk, crc)
        done += len(chunk)
    return int(crc)


def iter_log_batches(
    fd: int, limit: int, walk: LogWalk
) -> Iterator[BatchRead | LegacyRead]:
    """Stream the batches of a ``.log`` file up to ``limit`` bytes; fills ``walk`` with
    where it stopped and how many bytes at the end could not be read as a batch."""
    position = 0
    while position < limit:
        remaining = limit - position
        head = os.pread(fd, min(BATCH_HEADER_SIZE, remaining), position)
        if len(head) < LOG_OVERHEAD:
            break
        (length,) = _LENGTH.unpack_from(head, 8)
        size = length + LOG_OVERHEAD
        if len(head) > MAGIC_OFFSET and head[MAGIC_OFFSET] in (0, 1):
            if length < _MIN_LEGACY_LENGTH or size > remaining or size > _MAX_WHOLE_BATCH:
                break
            data = os.pread(fd, size, position)
            if len(data) < size:
                break
            yield LegacyRead(position, data)
            position += size
            continue
        if length < _MIN_BATCH_LENGTH or size > remaining or len(head) < BATCH_HEADER_SIZE:
            break
        header = BatchHeader.parse(head, 0, at=position)
        if size <= _MAX_WHOLE_BATCH:
            data = os.pread(fd, size, position)
            if len(data) < size:
                break
            try:
                validate_batch(data, 0, strict_offsets=False)
                yield BatchRead(header, data, True)
            except InvalidRecordError as exc:
                yield BatchRead(header, data, False, str(exc))
        else:
            reason = ""
            if header.magic != CURRENT_MAGIC:
                reason = f"unsupported magic byte {header.magic}"
            elif _crc_in_chunks(fd, position, size) != header.crc:
                reason = "CRC32C mismatch"
            yield BatchRead(header, None, not reason, reason)
        position += size
    walk.end_position = position
    walk.invalid_tail = limit - position


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _timestamp_label(header: BatchHeader) -> str:
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        return "LogAppendTime"
    return "CreateTime"


def _codec_name(header: BatchHeader) -> str:
    try:
        return header.compression.name.lower()
    except ValueError:
        return f"unknown({header.attributes & 0x07})"


def format_batch(batch: BatchRead) -> str:
    h = batch.header
    if h.magic != CURRENT_MAGIC:
        return (
            f"baseOffset: {h.base_offset} position: {h.position} size: {h.size} "
            f"magic: {h.magic} isvalid: false"
        )
    horizon = f"OptionalLong[{h.base_timestamp}]" if h.has_delete_horizon else "OptionalLong.empty"
    return (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
        f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} "
        f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
        f"partitionLeaderEpoch: {h.partition_leader_epoch} "
        f"isTransactional: {_bool(h.is_transactional)} isControl: {_bool(h.is_control)} "
        f"deleteHorizonMs: {horizon} position: {h.position} "
        f"{_timestamp_label(h)}: {h.max_timestamp} size: {h.size} magic: {h.magic} "
        f"compresscodec: {_codec_name(h)} crc: {h.crc} isvalid: {_bool(batch.valid)}"
    )


def _text(value: bytes) -> str:
    return value.decode("utf-8", "replace")


def _control_suffix(record: Record) -> str:
    key = record.key or b""
    if len(key) < 4:
        return " controlType: invalid"
    (kind,) = struct.unpack_from(">h", key, 2)
    name = _CONTROL_TYPES.get(kind, f"UNKNOWN({kind})")
    if kind in (0, 1):
        value = record.value or b""
        if len(value) >= 6:
            (epoch,) = struct.unpack_from(">i", value, 2)
            return f" endTxnMarker: {name} coordinatorEpoch: {epoch}"
        return f" endTxnMarker: {name} coordinatorEpoch: invalid"
    return f" controlType: {name}({kind})"


def format_record(
    header: BatchHeader, record: Record, print_data: bool, offsets_decoder: bool = False
) -> str:
    if header.base_sequence < 0:
        sequence = -1
    else:
        sequence = (header.base_sequence + record.offset - header.base_offset) % (1 << 31)
    key_size = -1 if record.key is None else len(record.key)
    value_size = -1 if record.value is None else len(record.value)
    header_keys = ",".join(h.key for h in record.headers)
    line = (
        f"| offset: {record.offset} {_timestamp_label(header)}: {record.timestamp} "
        f"keySize: {key_size} valueSize: {value_size} sequence: {sequence} "
        f"headerKeys: [{header_keys}]"
    )
    if header.is_control:
        line += _control_suffix(record)
    elif offsets_decoder:
        from odradek.cli._offsets_decoder import parse_offsets_record

        key, payload = parse_offsets_record(record.offset, record.key, record.value)
        line += f" key: {key}"
        if payload is not None:
            line += f" payload: {payload}"
    elif print_data:
        if record.key is not None:
            line += f" key: {_text(record.key)}"
        if record.value is not None:
            line += f" payload: {_text(record.value)}"
    return line


def _starting_offset(path: Path) -> int | None:
    try:
        return files.offset_from_filename(path.name)
    except ValueError:
        return None


def dump_log(path: Path, options: Options, out: TextIO) -> Problems:
    problems = Problems()
    start = _starting_offset(path)
    out.write(f"Log starting offset: {start if start is not None else 0}\n")
    deep = options.deep_iteration or options.print_data_log or options.offsets_decoder
    fd = os.open(path, os.O_RDONLY)
    try:
        file_size = os.fstat(fd).st_size
        limit = min(file_size, max(0, options.max_bytes))
        walk = LogWalk()
        next_offset = -1
        invalid = 0
        for batch in iter_log_batches(fd, limit, walk):
            if isinstance(batch, LegacyRead):
                last = _dump_legacy(batch, deep, options, out, problems)
                if last is not None:
                    if last < next_offset:
                        problems.add(f"Offsets go backwards at position {batch.position}")
                    next_offset = max(next_offset, last + 1)
                else:
                    invalid += 1
                continue
            h = batch.header
            out.write(format_batch(batch) + "\n")
            if not batch.valid:
                invalid += 1
                problems.add(f"Invalid batch at position {h.position}: {batch.reason}")
            elif h.base_offset < next_offset:
                problems.add(
                    f"Offsets go backwards at position {h.position}: base offset "
                    f"{h.base_offset} after last offset {next_offset - 1}"
                )
            if batch.valid:
                next_offset = max(next_offset, h.next_offset)
            if deep and h.magic == CURRENT_MAGIC:
                _dump_records(batch, options, out, problems)
        # Under --max-bytes, a batch cut by the limit is not corruption.
        if walk.invalid_tail and limit == file_size:
            message = f"Found {walk.invalid_tail} invalid bytes at the end of {path.name}"
            problems.add(message)
            out.write(message + "\n")
        if invalid:
            out.write(f"Found {invalid} invalid batch(es) in {path.name}\n")
    finally:
        os.close(fd)
    return problems


def format_legacy(
    message: LegacyMessage, position: int, valid: bool, print_data: bool,
    offsets_decoder: bool = False,
) -> str:
    payload = message.value or b""
    line = (
        f"offset: {message.offset} position: {position} isvalid: {_bool(valid)} "
        f"payloadsize: {len(payload)} magic: {message.magic} "
        f"compresscodec: {_LEGACY_CODECS.get(message.compression, 'unknown')} "
        f"crc: {message.crc}"
    )
    if message.key is not None:
        line += f" keysize: {len(message.key)}"
    if offsets_decoder:
        from odradek.cli._offsets_decoder import parse_offsets_record

        key, decoded = parse_offsets_record(message.offset, message.key, message.value)
        line += f" key: {key}"
        if decoded is not None:
            line += f" payload: {decoded}"
    elif print_data:
        if message.key is not None:
            line += f" key: {_text(message.key)}"
        line += f" payload: {_text(payload)}"
    return line


def _dump_legacy(
    entry: LegacyRead, deep: bool, options: Options, out: TextIO, problems: Problems
) -> int | None:
    """Print a v0/v1 entry; its last offset, or None when it is invalid."""
    print_data = options.print_data_log or options.offsets_decoder
    decoder = options.offsets_decoder
    try:
        ((_, message),) = iter_shallow(entry.data)
    except InvalidRecordError as exc:
        out.write(f"position: {entry.position} magic: {entry.data[MAGIC_OFFSET]} "
                  f"isvalid: false\n")
        problems.add(f"Invalid message at position {entry.position}: {exc}")
        return None
    if not deep or message.compression == 0:
        out.write(format_legacy(message, entry.position, True, print_data, decoder) + "\n")
        return message.offset
    try:
        inner = iter_deep(message)
    except (InvalidRecordError, CompressionError) as exc:
        out.write(format_legacy(message, entry.position, False, print_data, decoder) + "\n")
        problems.add(f"Invalid wrapper message at position {entry.position}: {exc}")
        return None
    for m in inner:
        out.write(format_legacy(m, entry.position, True, print_data, decoder) + "\n")
    return inner[-1].offset


def _dump_records(batch: BatchRead, options: Options, out: TextIO, problems: Problems) -> None:
    h = batch.header
    if batch.data is None:
        out.write(f"| records not decoded: batch of {h.size} bytes is too large\n")
        return
    try:
        for record in iter_records(batch.data):
            out.write(format_record(h, record, options.print_data_log or options.offsets_decoder,
                                    options.offsets_decoder) + "\n")
    except (InvalidRecordError, CompressionError, ValueError) as exc:
        out.write(f"| invalid records: {exc}\n")
        if batch.valid:
            problems.add(f"Invalid records in batch at position {h.position}: {exc}")


# -- indexes -----------------------------------------------------------------------------
def _iter_entries(path: Path, entry: struct.Struct) -> Iterator[tuple[int, tuple[int, int]]]:
    """(n, fields) per whole entry of an index file, read in chunks; stops at the first
    all-zero entry after the first (a preallocated tail)."""
    zero = bytes(entry.size)
    n = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(_INDEX_READ_CHUNK - _INDEX_READ_CHUNK % entry.size)
            if not chunk:
                return
            for pos in range(0, len(chunk) - entry.size + 1, entry.size):
                raw = chunk[pos : pos + entry.size]
                if raw == zero and n > 0:
                    return
                fields: tuple[int, int] = entry.unpack(raw)
                yield n, fields
                n += 1
            if len(chunk) % entry.size:
                return


def _segment_files(path: Path, index_suffix: str) -> tuple[Path, int]:
    """The ``.log`` next to an index file, and the segment's base offset."""
    name = path.name
    lifecycle = ""
    for suffix in _LIFECYCLE_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            lifecycle = suffix
            break
    stem = name[: -len(index_suffix)]
    base = _starting_offset(path)
    return path.with_name(stem + files.LOG_SUFFIX + lifecycle), base if base is not None else 0


class _LogHeaders:
    """Random and forward access to the batch headers of a ``.log`` (no bodies read)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY)
        self.size = os.fstat(self.fd).st_size
        self._position = 0
        self._current: BatchHeader | None = None

    def close(self) -> None:
        os.close(self.fd)

    def header_at(self, position: int) -> BatchHeader | None:
        if position < 0 or position + BATCH_HEADER_SIZE > self.size:
            return None
        head = os.pread(self.fd, BATCH_HEADER_SIZE, position)
        if len(head) < BATCH_HEADER_SIZE or head[MAGIC_OFFSET] != CURRENT_MAGIC:
            return None
        header = BatchHeader.parse(head, 0, at=position)
        if header.batch_length < _MIN_BATCH_LENGTH or position + header.size > self.size:
            return None
        return header

    def batch_holding(self, offset: int) -> BatchHeader | None:
        """Forward walk (restarting from the top if asked for an earlier offset) to the
        first batch whose last offset is ≥ ``offset``."""
        if self._current is not None and self._current.base_offset > offset:
            self._position, self._current = 0, None
        if self._current is not None and self._current.last_offset >= offset:
            return self._current
        while True:
            header = self.header_at(self._position)
            if header is None:
                self._current = None
                return None
            self._position = header.position + header.size
            self._current = header
            if header.last_offset >= offset:
                return header


def _log_for_index(path: Path, suffix: str, out: TextIO) -> tuple[_LogHeaders | None, int]:
    log_path, base = _segment_files(path, suffix)
    if not log_path.exists():
        out.write(f"No log file {log_path.name} next to {path.name}: entries not checked\n")
        return None, base
    return _LogHeaders(log_path), base


def dump_offset_index(path: Path, options: Options, out: TextIO) -> Problems:
    problems = Problems()
    quiet = options.index_sanity_check or options.verify_index_only
    if os.path.getsize(path) % OffsetIndex.ENTRY.size:
        problems.add(
            f"Index length {os.path.getsize(path)} is not a multiple of {OffsetIndex.ENTRY.size}"
        )
    log, base = _log_for_index(path, files.INDEX_SUFFIX, out)
    try:
        last_offset, last_position = -1, -1
        for n, (rel, position) in _iter_entries(path, OffsetIndex.ENTRY):
            offset = base + rel
            if n == 0 and rel == 0 and position == 0:
                # An empty preallocated index, or a real first entry: only the log can tell.
                first = log.header_at(0) if log is not None else None
                if first is None or first.last_offset != offset:
                    break
            if not quiet:
                out.write(f"offset: {offset} position: {position}\n")
            if n > 0 and (offset <= last_offset or position <= last_position):
                problems.add(
                    f"Index entry {n} (offset {offset}, position {position}) is not after "
                    f"(offset {last_offset}, position {last_position})"
                )
            last_offset, last_position = offset, position
            if log is None:
                continue
            header = log.header_at(position)
            if header is None:
                problems.add(
                    f"Index position {position} mismatch: no batch there for offset {offset} "
                    f"(log size {log.size})"
                )
            elif header.last_offset != offset:
                problems.add(
                    f"Index position {position} mismatch: index offset {offset}, "
                    f"log last offset {header.last_offset}"
                )
    finally:
        if log is not None:
            log.close()
    return problems


def dump_time_index(path: Path, options: Options, out: TextIO) -> Problems:
    problems = Problems()
    quiet = options.index_sanity_check or options.verify_index_only
    if os.path.getsize(path) % TimeIndex.ENTRY.size:
        problems.add(
            f"Time index length {os.path.getsize(path)} is not a multiple of "
            f"{TimeIndex.ENTRY.size}"
        )
    log, base = _log_for_index(path, files.TIME_INDEX_SUFFIX, out)
    try:
        last_ts, last_offset = -1, -1
        for n, (timestamp, rel) in _iter_entries(path, TimeIndex.ENTRY):
            offset = base + rel
            if n == 0 and timestamp == 0 and rel == 0:
                first = log.header_at(0) if log is not None else None
                if first is None or first.max_timestamp != 0:
                    break
            if not quiet:
                out.write(f"timestamp: {timestamp} offset: {offset}\n")
            if n > 0 and (timestamp <= last_ts or offset < last_offset):
                problems.add(
                    f"Found out of order timestamp: entry {n} (timestamp {timestamp}, offset "
                    f"{offset}) after (timestamp {last_ts}, offset {last_offset})"
                )
            last_ts, last_offset = timestamp, offset
            if log is None:
                continue
            header = log.batch_holding(offset)
            if header is None or header.base_offset > offset:
                problems.add(f"Time index offset {offset} mismatch: no batch holds it")
            elif header.max_timestamp != timestamp:
                problems.add(
                    f"Found timestamp mismatch: index timestamp {timestamp} at offset "
                    f"{offset}, log max timestamp {header.max_timestamp}"
                )
    finally:
        if log is not None:
            log.close()
    return problems


# -- driver ------------------------------------------------------------------------------
def _kind(path: Path) -> str:
    name = path.name
    for suffix in _LIFECYCLE_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    for suffix in (files.LOG_SUFFIX, files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX,
                   files.TXN_INDEX_SUFFIX):
        if name.endswith(suffix):
            return suffix
    return ""


def dump_txn_index(path: Path, out: TextIO) -> Problems:
    problems = Problems()
    try:
        entries = decode_entries(path.read_bytes(), path)
    except IndexCorruptError as exc:
        problems.add(str(exc))
        return problems
    for e in entries:
        out.write(f"version: 0 producerId: {e.producer_id} firstOffset: {e.first_offset} "
                  f"lastOffset: {e.last_offset} lastStableOffset: {e.last_stable_offset}\n")
    return problems


def dump_file(path: Path, options: Options, out: TextIO) -> Problems:
    out.write(f"Dumping {path}\n")
    kind = _kind(path)
    if kind == files.LOG_SUFFIX:
        problems = dump_log(path, options, out)
    elif kind == files.INDEX_SUFFIX:
        problems = dump_offset_index(path, options, out)
    elif kind == files.TIME_INDEX_SUFFIX:
        problems = dump_time_index(path, options, out)
    elif kind == files.TXN_INDEX_SUFFIX:
        problems = dump_txn_index(path, out)
    else:
        out.write(f"Ignoring unknown file {path}\n")
        return Problems()
    if kind != files.LOG_SUFFIX and (options.index_sanity_check or options.verify_index_only):
        verdict = "failed" if problems else "passed"
        out.write(f"{path} {verdict} sanity check.\n")
    if problems:
        out.write(f"Found {len(problems.lines)} problem(s) in {path}:\n")
        for line in problems.lines:
            out.write(f"  {line}\n")
    return problems
