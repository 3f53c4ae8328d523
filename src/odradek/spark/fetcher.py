"""Worker-side reads without a per-record Python object: raw batches to Arrow.

How it works: a Spark task reads one planned range ``[start, until)`` of one partition.
It finds the partition's leader (Metadata), checks the range against the log start and
the high watermark (ListOffsets, with ``failOnDataLoss``), then sends Fetch requests
(v12, long-polling) from ``position`` and hands each response's record batches to a
column builder (:mod:`odradek.records.columnar`, native code), which keeps the records
with ``position <= offset < until``. ``position`` moves to the end of the last whole batch
received, so offsets removed by compaction and control batches are stepped over. Buffers
become an Arrow ``RecordBatch`` (zero-copy) whenever enough rows gather.

``kafka.isolation.level=read_committed`` (Kafka's consumer setting, as Spark's Kafka source
passes it): Fetch asks with isolation_level=1, so the broker answers only up to the last
stable offset, with the aborted transactions the answer may hold; the column builder then
drops those transactions' batches whole (:class:`~odradek.records.columnar.AbortedFilter`,
the Java consumer's rule) and every control batch. A range planned past the last stable
offset (an explicit ``endingOffsets``) waits for the open transactions to end, within
``kafkaConsumer.pollTimeoutMs``. The data-loss check stays against the high watermark.

Why not librdkafka here: through confluent-kafka every record becomes a Python ``Message``
with Python ``bytes`` for its key and value before Arrow sees it; decoding whole batches in
C builds no per-record object and reads several times faster (bench/README.md, "Spark",
has the figures and how to measure them).

Errors: a leader move or a broker restart (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE,
connection loss, ...) re-resolves the leader and retries with backoff until
``kafkaConsumer.pollTimeoutMs`` passes without progress; OFFSET_OUT_OF_RANGE is data loss,
handled as ``failOnDataLoss`` says; anything else fails the task with the Kafka error name.

TLS and SASL (PLAIN, SCRAM) are Odradek's own client's
(:func:`odradek.client.security.client_security`, built in the task from the ``kafka.*``
security options the driver translated to librdkafka's keys); options it cannot honour
(mutual TLS, any other librdkafka property) send the read through
librdkafka instead (:func:`supports`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from odradek.client.admin import Admin, FetchedPartition
from odradek.client.connection import BrokerConnection, ClientError
from odradek.client.security import ClientSecurity, client_security
from odradek.protocol.errors import ErrorCode
from odradek.records.batch import InvalidRecordError
from odradek.records.columnar import (
    AbortedFilter,
    BinaryBuffers,
    ColumnBuilder,
    Columns,
    add_batches,
    new_builder,
)
from odradek.spark.client import HEADERS_TYPE, OdradekSparkError, arrow_schema
from odradek.spark.options import OdradekOptionError, ReadOptions

__all__ = ["FLUSH_BYTES", "FLUSH_ROWS", "read_range", "supports", "to_arrow"]

# kafka.* options this client honours; any other sends the read through librdkafka.
_UNDERSTOOD = {
    "bootstrap.servers",
    "client.id",
    "fetch.max.bytes",
    "max.partition.fetch.bytes",
    "fetch.wait.max.ms",
    # security, as librdkafka_config leaves it (client/security.py)
    "security.protocol",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.endpoint.identification.algorithm",
}
# ...and these only with the values it implements.
_UNDERSTOOD_VALUES = {
    "isolation.level": {"read_uncommitted", "read_committed"},
    "sasl.mechanism": {"plain", "scram-sha-256", "scram-sha-512"},
    "sasl.mechanisms": {"plain", "scram-sha-256", "scram-sha-512"},
}

_RETRIABLE = {
    int(code.value) for code in (
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.replica_not_available,
        ErrorCode.kafka_storage_error,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.request_timed_out,
        ErrorCode.offset_not_available,
        ErrorCode.not_enough_replicas,
        # a topic still being created; a deleted one fails at kafkaConsumer.pollTimeoutMs
        ErrorCode.unknown_topic_or_partition,
    )
}
_OUT_OF_RANGE = int(ErrorCode.offset_out_of_range.value)

FLUSH_ROWS = 131_072  # rows per Arrow batch handed to Spark
FLUSH_BYTES = 64 * 1024 * 1024
_TS_TYPE = pa.timestamp("us", tz="UTC")
_HEADER_STRUCT = HEADERS_TYPE.value_type


def supports(client: dict[str, str]) -> bool:
    """Whether the ``kafka.*`` options can all be honoured by this client."""
    for key, value in client.items():
        if key in _UNDERSTOOD:
            continue
        allowed = _UNDERSTOOD_VALUES.get(key)
        if allowed is None or value.strip().lower() not in allowed:
            return False
    return True


def _int(client: dict[str, str], key: str, default: int) -> int:
    # The driver's librdkafka consumer has already accepted these values.
    try:
        return max(1, int(client.get(key, default)))
    except ValueError:
        raise OdradekOptionError(f"option 'kafka.{key}' must be an integer") from None


class _PartitionReader:
    def __init__(self, opts: ReadOptions, topic: str, partition: int) -> None:
        self.opts = opts
        self.topic = topic
        self.partition = partition
        self.bootstrap = [b.strip() for b in opts.bootstrap.split(",") if b.strip()]
        self.conn: BrokerConnection | None = None
        client = opts.client
        self.security: ClientSecurity = client_security(client)
        self.client_id = client.get("client.id", "odradek-spark-reader")
        self.max_bytes = _int(client, "fetch.max.bytes", 64 * 1024 * 1024)
        self.partition_max_bytes = _int(client, "max.partition.fetch.bytes", 16 * 1024 * 1024)
        self.max_wait_ms = _int(client, "fetch.wait.max.ms", 500)
        self.timeout = opts.api_timeout_ms / 1000
        level = client.get("isolation.level", "read_uncommitted").strip().lower()
        self.isolation_level = 1 if level == "read_committed" else 0

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    async def connect(self) -> Admin:
        """A connection to the partition's leader (found through a bootstrap server)."""
        if self.conn is not None:
            return Admin(self.conn)
        boot = await BrokerConnection.open_any(self.bootstrap, self.timeout,
                                               client_id=self.client_id, security=self.security)
        try:
            host, port = await asyncio.wait_for(
                Admin(boot).leader(self.topic, self.partition), self.timeout
            )
        finally:
            await boot.close()
        self.conn = await BrokerConnection.open(
            f"{host}:{port}", self.timeout, client_id=self.client_id, security=self.security,
        )
        return Admin(self.conn)

    async def disconnect(self) -> None:
        if self.conn is not None:
            conn, self.conn = self.conn, None
            await conn.close()

    async def watermarks(self) -> tuple[int, int]:
        admin = await self.connect()
        low, _ = await asyncio.wait_for(
            admin.list_offset(self.topic, self.partition, -2), self.timeout
        )
        high, _ = await asyncio.wait_for(
            admin.list_offset(self.topic, self.partition, -1), self.timeout
        )
        return low, high

    async def fetch(self, position: int) -> FetchedPartition:
        admin = await self.connect()
        out = await asyncio.wait_for(
            admin.fetch_partitions(
                self.topic, {self.partition: position}, max_wait_ms=self.max_wait_ms,
                max_bytes=self.max_bytes, partition_max_bytes=self.partition_max_bytes,
                isolation_level=self.isolation_level,
            ),
            self.timeout + self.max_wait_ms / 1000,
        )
        if self.partition not in out:
            raise ClientError(f"the fetch response has no data for {self.name}")
        return out[self.partition]


def read_range(
    opts: ReadOptions, topic: str, partition: int, start: int, until: int,
    flush_rows: int = FLUSH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``topic-partition`` with ``start <= offset < until``."""
    if until <= start:
        return
    reader = _PartitionReader(opts, topic, partition)
    # A bare loop, not asyncio.Runner: in the main thread the Runner swaps the SIGINT
    # handler on every run() and the signal module's enum conversion of the previous
    # handler repr()s the previous task, result included: a 16 MiB fetch response each time
    # (its cost is in bench/README.md, "Spark").
    loop = asyncio.new_event_loop()
    try:
        yield from _read(loop, reader, new_builder(opts.include_headers), start, until,
                         flush_rows)
    except InvalidRecordError as exc:
        raise OdradekSparkError(f"corrupt record batch in {reader.name}: {exc}") from None
    finally:
        with contextlib.suppress(Exception):
            loop.run_until_complete(reader.disconnect())
        loop.close()


_CONNECTION = -1  # no error code: the connection failed or timed out


def _read(
    loop: asyncio.AbstractEventLoop, reader: _PartitionReader, builder: ColumnBuilder,
    start: int, until: int, flush_rows: int,
) -> Iterator[pa.RecordBatch]:
    opts = reader.opts
    name = reader.name
    last_progress = time.monotonic()
    backoff = 0.05
    checked = False
    position = start
    while position < until:
        last_error = ""
        try:
            if not checked:
                position, until = _check_range(opts, name, position, until,
                                               *loop.run_until_complete(reader.watermarks()))
                checked = True
                if position >= until:
                    break
            answer = loop.run_until_complete(reader.fetch(position))
            code, high_watermark, records = (
                answer.error_code, answer.high_watermark, answer.records)
        except ClientError as exc:
            code, high_watermark, records = (
                _CONNECTION if exc.error_code is None else exc.error_code), -1, b""
            last_error = str(exc)
        except (OSError, TimeoutError) as exc:
            code, high_watermark, records = _CONNECTION, -1, b""
            last_error = str(exc) or type(exc).__name__
        if code == _OUT_OF_RANGE:
            checked = False  # re-checked against the log start and end: data loss rules
            continue
        if code != 0:
            if code != _CONNECTION and code not in _RETRIABLE:
                raise OdradekSparkError(
                    f"error reading {name}: {last_error or ErrorCode(code).name.upper()}"
                )
            if time.monotonic() - last_progress > opts.poll_timeout_ms / 1000:
                raise _timed_out(opts, name, position, until,
                                 f"last error: {last_error or ErrorCode(code).name.upper()}")
            # the leader may have moved: look it up again
            loop.run_until_complete(reader.disconnect())
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
            checked = False
            continue
        backoff = 0.05
        aborted = None
        if reader.isolation_level:
            aborted = AbortedFilter(answer.aborted_transactions)
            high_watermark = answer.last_stable_offset
        added = add_batches(builder, records, position, until, aborted=aborted)
        if added.next_offset > position:
            position = added.next_offset
            last_progress = time.monotonic()
        elif records:
            raise OdradekSparkError(
                f"a record batch of {name} at offset {position} is larger than the fetch "
                f"limits (kafka.max.partition.fetch.bytes={reader.partition_max_bytes}, "
                f"kafka.fetch.max.bytes={reader.max_bytes}); raise them"
            )
        elif time.monotonic() - last_progress > opts.poll_timeout_ms / 1000:
            raise _timed_out(opts, name, position, until,
                             ("last stable offset" if reader.isolation_level else
                              "high watermark") + f" {high_watermark}")
        if builder.rows >= flush_rows or builder.nbytes >= FLUSH_BYTES:
            yield to_arrow(builder.finish(), reader.topic, reader.partition,
                           opts.include_headers)
    if builder.rows:
        yield to_arrow(builder.finish(), reader.topic, reader.partition, opts.include_headers)


def _timed_out(
    opts: ReadOptions, name: str, position: int, until: int, detail: str
) -> OdradekSparkError:
    return OdradekSparkError(
        f"timed out after {opts.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs) reading "
        f"{name} at offset {position} (planned up to {until}); {detail}"
    )


def _check_range(
    opts: ReadOptions, name: str, position: int, until: int, low: int, high: int
) -> tuple[int, int]:
    """The planned range against the log's start and high watermark (failOnDataLoss)."""
    hint = "; set failOnDataLoss=false to skip them"
    if position < low:
        if opts.fail_on_data_loss:
            raise OdradekSparkError(
                f"data loss: offsets {position}..{low - 1} of {name} are no longer available "
                f"(deleted by retention?){hint}"
            )
        position = low
    if until > high:
        if opts.fail_on_data_loss:
            raise OdradekSparkError(
                f"data loss: {name} ends at offset {high} but offsets up to {until - 1} were "
                f"planned (topic recreated or truncated?){hint}"
            )
        until = high
    return position, until


def _binary(buffers: BinaryBuffers, typ: pa.DataType) -> pa.Array:
    validity, offsets, data, nulls = buffers
    return pa.Array.from_buffers(
        typ, len(offsets) // 4 - 1,
        [pa.py_buffer(validity) if nulls else None, pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=nulls,
    )


def _header_keys(buffers: BinaryBuffers) -> pa.Array:
    keys = _binary(buffers, pa.string())
    try:
        keys.validate(full=True)
    except pa.ArrowInvalid:  # not UTF-8: decoded with replacement, as Java's String does
        raw = _binary(buffers, pa.binary()).to_pylist()
        keys = pa.array([k.decode("utf-8", "replace") for k in raw], pa.string())
    return keys


def to_arrow(cols: Columns, topic: str, partition: int, include_headers: bool) -> pa.RecordBatch:
    """The builder's buffers as a RecordBatch with the schema of Spark's Kafka source."""
    rows, offsets, stamps, types, key, value, headers = cols
    millis = pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(stamps)])
    columns = [
        _binary(key, pa.binary()),
        _binary(value, pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), rows),
        pa.repeat(pa.scalar(partition, pa.int32()), rows),
        pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(offsets)]),
        pc.multiply(millis, 1000).cast(_TS_TYPE),
        pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(types)]),
    ]
    if include_headers:
        assert headers is not None
        lists, count, hkey, hvalue = headers
        entries = pa.StructArray.from_arrays(
            [_header_keys(hkey), _binary(hvalue, pa.binary())], fields=list(_HEADER_STRUCT)
        )
        validity, list_offsets, _, nulls = lists
        columns.append(pa.Array.from_buffers(
            pa.list_(_HEADER_STRUCT), rows,
            [pa.py_buffer(validity) if nulls else None, pa.py_buffer(list_offsets)],
            null_count=nulls, children=[entries],
        ))
        assert len(entries) == count
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))
