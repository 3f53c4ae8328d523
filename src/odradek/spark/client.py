"""The Kafka client side of the Spark connector (librdkafka through confluent-kafka).

Driver side: partition discovery and offset resolution (watermarks, offsets for
timestamps). Worker side: reading one planned offset range into Arrow record batches, and
producing rows. Reading a planned range ``[from, until)`` of one partition always yields the
same records (a replayed micro-batch reads exactly what the first attempt read), because the
range is fixed before any task runs and the reader stops at ``until`` whatever arrives later.

confluent-kafka needs a ``group.id`` to build a consumer; the reader sets one but only ever
uses ``assign`` and never commits, so no consumer group is joined.

librdkafka's own log lines (``%3|...|FAIL|...`` when a broker goes away) go to the
``odradek.spark.librdkafka`` logger (confluent-kafka's ``logger`` setting), in the driver and
in Spark's Python workers alike (where Spark's ``spark.sql.pyspark.worker.logging.enabled``
collects them, or Python's last-resort handler prints WARNING and above), never raw to
stderr. With a logger set librdkafka queues its log events until the client is polled:
``consume()``/``flush()`` serve them, and :func:`serve_log` serves those of a client that
only asks metadata, after each call and before it is closed. A line repeated on every
reconnect attempt passes once per 30 s (:class:`~odradek.text.RepeatFilter`).

Riding out a lost broker (:func:`ride_out`): librdkafka sends a metadata or watermark
query to the broker its cached metadata names, and was seen to wait out the whole timeout
on a leader just killed, or to fail UNKNOWN_PARTITION at once from a cached leaderless
answer, where a new client asks afresh and finds the new leader within seconds. So each
attempt is bounded (5 s, doubled on each retry) and a failed one is retried with a new
client until ``kafka.default.api.timeout.ms`` has passed, as the Java consumer's
``endOffsets`` retries within ``default.api.timeout.ms``. The driver's discovery and
watermarks go through it with a cached client, a task's range check and the mirror's
replay fence with a client of their own (:func:`watermarks_anew`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import confluent_kafka as ck
import pyarrow as pa
import pyarrow.compute as pc

from odradek.spark.options import EARLIEST, LATEST, OdradekOptionError, OffsetSpec, ReadOptions
from odradek.text import RepeatFilter

__all__ = [
    "HEADERS_TYPE",
    "LIBRDKAFKA_LOG",
    "OdradekSparkError",
    "Offsets",
    "TransientSparkError",
    "admin_client",
    "arrow_schema",
    "close_consumer",
    "consumer",
    "discover",
    "read_range",
    "resolve",
    "ride_out",
    "serve_log",
    "watermarks",
    "watermarks_anew",
]

Offsets = dict[tuple[str, int], int]
_T = TypeVar("_T")
#: the first attempt's bound in :func:`ride_out` (doubled on each retry)
FIRST_ATTEMPT_MS = 5000
RETRY_BACKOFF_S = 0.5

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_TS_TYPE = pa.timestamp("us", tz="UTC")
_M: Any = ck.Message
#: Where every client of the connector sends librdkafka's log lines.
LIBRDKAFKA_LOG = logging.getLogger("odradek.spark.librdkafka")
LIBRDKAFKA_LOG.addFilter(RepeatFilter())  # a reconnect complaint once per 30 s, not 20 a second


class OdradekSparkError(RuntimeError):
    """A failure talking to the brokers (unreachable, missing topic, data loss, timeout)."""


class TransientSparkError(OdradekSparkError):
    """A request that may succeed if sent again: timed out, or the leader moved or is
    not known yet (a broker lost, a leader election under way)."""


#: librdkafka errors after which a request is worth sending again (besides those it
#: flags retriable itself)
_TRANSIENT = frozenset({
    ck.KafkaError._TIMED_OUT,
    ck.KafkaError._TRANSPORT,
    ck.KafkaError._ALL_BROKERS_DOWN,
    ck.KafkaError._DESTROY_BROKER,  # the handle of a broker gone from the metadata
    ck.KafkaError.LEADER_NOT_AVAILABLE,
    ck.KafkaError.NOT_LEADER_FOR_PARTITION,  # NOT_LEADER_OR_FOLLOWER (KIP-392)
    ck.KafkaError.OFFSET_NOT_AVAILABLE,
    ck.KafkaError.REQUEST_TIMED_OUT,
})


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", _TS_TYPE),
        ("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(("headers", HEADERS_TYPE))
    return pa.schema(fields)


class _Consumer(ck.Consumer):
    """A consumer that keeps librdkafka's last error (``error_cb``: a failed SASL
    authentication or TLS handshake), so that a request failing with only "transport
    failure" can say why."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.last_error = ""
        super().__init__({**config, "error_cb": self._on_error})

    def _on_error(self, err: Any) -> None:
        self.last_error = str(err.str())


def _why(c: ck.Consumer) -> str:
    """`` (last error: ...)`` when librdkafka reported one (a broker's refusal)."""
    serve_log(c)
    last = getattr(c, "last_error", "")
    return f" (last error: {last})" if last else ""


def consumer(client: dict[str, str], extra: dict[str, Any] | None = None) -> ck.Consumer:
    config: dict[str, Any] = {
        "group.id": "odradek-spark-reader",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        # the Java consumer's default (and so Spark's), not librdkafka's read_committed:
        # planning and reading agree on the isolation level the options give
        "isolation.level": "read_uncommitted",
        "logger": LIBRDKAFKA_LOG,
        **(extra or {}),
        **client,
    }
    try:
        return _Consumer(config)
    except (ck.KafkaException, ValueError, TypeError) as exc:
        raise OdradekOptionError(f"bad kafka.* client option: {exc}") from None


def admin_client(client: dict[str, str]) -> Any:
    from confluent_kafka.admin import AdminClient

    try:
        config: dict[str, Any] = {"logger": LIBRDKAFKA_LOG, **client}
        return AdminClient(config)
    except (ck.KafkaException, ValueError, TypeError) as exc:
        raise OdradekOptionError(f"bad kafka.* client option: {exc}") from None


def serve_log(c: Any) -> None:
    """Hand the log events ``c`` (a consumer or an admin client) has queued to the logger.
    A consumer here is never polled for records (metadata only, or about to be closed), so
    ``poll(0)`` returns at once."""
    c.poll(0)


def close_consumer(c: ck.Consumer) -> None:
    """Serve the queued log events (a broker's complaint before a failure), then close."""
    try:
        serve_log(c)
    finally:
        c.close()


def discover(c: ck.Consumer, opts: ReadOptions, *, require_topics: bool,
             timeout_ms: int | None = None) -> list[tuple[str, int]]:
    """Topic-partitions matching subscribe / subscribePattern / assign, sorted. The
    metadata request waits up to ``timeout_ms`` (default ``kafka.default.api.timeout.ms``);
    a timed-out or transport failure is a :class:`TransientSparkError`."""
    timeout_ms = opts.api_timeout_ms if timeout_ms is None else timeout_ms
    try:
        md = c.list_topics(timeout=timeout_ms / 1000)
    except ck.KafkaException as exc:
        err = exc.args[0]
        transient = err.retriable() or err.code() in _TRANSIENT
        raise (TransientSparkError if transient else OdradekSparkError)(
            f"cannot reach the brokers at kafka.bootstrap.servers={opts.bootstrap!r} within "
            f"{timeout_ms} ms (kafka.default.api.timeout.ms): {exc}{_why(c)}"
        ) from None
    finally:
        serve_log(c)
    topics = {
        name: sorted(tm.partitions)
        for name, tm in md.topics.items()
        if tm.error is None or tm.error.code() == ck.KafkaError.NO_ERROR
    }
    if opts.assign:
        out = []
        for t, p in opts.assign:
            if t not in topics or p not in topics[t]:
                if require_topics:
                    raise OdradekSparkError(
                        f"assigned partition {t}-{p} does not exist (option 'assign')"
                    )
                continue
            out.append((t, p))
        return out
    if opts.subscribe:
        missing = [t for t in opts.subscribe if t not in topics]
        if missing and require_topics:
            raise OdradekSparkError(
                f"subscribed topic(s) {', '.join(missing)} do not exist (option 'subscribe')"
            )
        return sorted((t, p) for t in opts.subscribe if t in topics for p in topics[t])
    return sorted((t, p) for t, ps in topics.items() if opts.topic_filter(t) for p in ps)


def watermarks(
    c: ck.Consumer, tps: list[tuple[str, int]], timeout_ms: int
) -> dict[tuple[str, int], tuple[int, int]]:
    out = {}
    for t, p in tps:
        try:
            out[(t, p)] = c.get_watermark_offsets(
                ck.TopicPartition(t, p), timeout=timeout_ms / 1000
            )
        except ck.KafkaException as exc:
            err = exc.args[0]
            # UNKNOWN_PARTITION for a partition the discovery just listed is librdkafka
            # holding on to a leaderless answer (a leader killed, its election under
            # way): its watermark query takes a partition with no leader as settled and
            # fails at once until its metadata refresh; a new client asks afresh (Q31)
            transient = (err.retriable() or err.code() in _TRANSIENT
                         or err.code() == ck.KafkaError._UNKNOWN_PARTITION)
            raise (TransientSparkError if transient else OdradekSparkError)(
                f"cannot list offsets of {t}-{p}: {exc}{_why(c)}") from None
        finally:
            serve_log(c)
    return out


def ride_out(query: Callable[[int], _T], timeout_ms: int, renew: Callable[[], None]) -> _T:
    """``query(attempt_ms)``, each attempt bounded and one failed with a
    :class:`TransientSparkError` retried after ``renew()`` (drop the client: the next
    attempt's fetches fresh metadata) until ``timeout_ms`` has passed (module header)."""
    deadline = time.monotonic() + timeout_ms / 1000
    attempt_ms = min(FIRST_ATTEMPT_MS, timeout_ms)
    while True:
        try:
            return query(attempt_ms)
        except TransientSparkError:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                raise
            renew()
            time.sleep(min(RETRY_BACKOFF_S, left_ms / 1000))
            attempt_ms = max(1, min(2 * attempt_ms, left_ms))


def watermarks_anew(
    client: dict[str, str], tps: list[tuple[str, int]], timeout_ms: int
) -> dict[tuple[str, int], tuple[int, int]]:
    """:func:`watermarks` through a consumer of its own (``client``: librdkafka
    settings), ridden out (:func:`ride_out`) with a new consumer for each retry."""
    held: list[ck.Consumer] = []

    def query(attempt_ms: int) -> dict[tuple[str, int], tuple[int, int]]:
        if not held:
            held.append(consumer(client))
        return watermarks(held[0], tps, attempt_ms)

    def renew() -> None:
        if held:
            close_consumer(held.pop())

    try:
        return ride_out(query, timeout_ms, renew)
    finally:
        renew()


def _for_times(c: ck.Consumer, wanted: dict[tuple[str, int], int], timeout_ms: int) -> Offsets:
    if not wanted:
        return {}
    query = [ck.TopicPartition(t, p, ts) for (t, p), ts in wanted.items()]
    try:
        found = c.offsets_for_times(query, timeout=timeout_ms / 1000)
    except ck.KafkaException as exc:
        raise OdradekSparkError(f"cannot list offsets by timestamp: {exc}") from None
    finally:
        serve_log(c)
    out: Offsets = {}
    for tp in found:
        if tp.error is not None:
            raise OdradekSparkError(
                f"cannot list offsets by timestamp for {tp.topic}-{tp.partition}: {tp.error}"
            )
        out[(tp.topic, tp.partition)] = tp.offset  # -1 when no record has a timestamp >= ts
    return out


def resolve(
    c: ck.Consumer,
    spec: OffsetSpec,
    tps: list[tuple[str, int]],
    marks: dict[tuple[str, int], tuple[int, int]],
    opts: ReadOptions,
    *,
    starting: bool,
) -> Offsets:
    """Turn a starting/ending spec into concrete offsets for ``tps``."""
    name = "starting" if starting else "ending"
    if spec.kind in ("offsets", "timestamps"):
        unknown = sorted(set(spec.per_partition) - set(tps))
        if unknown:
            opt = f"{name}Offsets" + ("ByTimestamp" if spec.kind == "timestamps" else "")
            raise OdradekOptionError(
                f"option '{opt}' names partitions that are not subscribed or do not exist: "
                + ", ".join(f"{t}-{p}" for t, p in unknown)
            )
    out: Offsets = {}
    if spec.kind in ("timestamp", "timestamps"):
        wanted = (
            {tp: spec.timestamp for tp in tps}
            if spec.kind == "timestamp"
            else {tp: ts for tp, ts in spec.per_partition.items()}
        )
        found = _for_times(c, wanted, opts.api_timeout_ms)
        for tp in tps:
            low, high = marks[tp]
            if tp not in found:  # partition not named in ...ByTimestamp
                out[tp] = low if starting else high
                continue
            off = found[tp]
            if off < 0:
                if starting and opts.timestamp_strategy == "error":
                    raise OdradekSparkError(
                        f"no record at or after the starting timestamp in {tp[0]}-{tp[1]} "
                        "(set startingOffsetsByTimestampStrategy=latest to start at the end)"
                    )
                off = high
            out[tp] = off
        return out
    for tp in tps:
        low, high = marks[tp]
        if spec.kind == "earliest":
            out[tp] = low
        elif spec.kind == "latest":
            out[tp] = high
        else:
            off = spec.per_partition.get(tp, EARLIEST if starting else LATEST)
            out[tp] = low if off == EARLIEST else high if off == LATEST else off
    return out


def _batch(
    msgs: list[Any], topic: str, partition: int, include_headers: bool, schema: pa.Schema
) -> pa.RecordBatch:
    # map() over the unbound C methods: no Python frame per record (faster than
    # comprehensions calling m.key() etc.).
    n = len(msgs)
    types, stamps = zip(*map(_M.timestamp, msgs), strict=True)
    ts_ms = pa.array(stamps, pa.int64())
    columns = [
        pa.array(list(map(_M.key, msgs)), pa.binary()),
        pa.array(list(map(_M.value, msgs)), pa.binary()),
        pa.array([topic] * n, pa.string()),
        pa.array([partition] * n, pa.int32()),
        pa.array(list(map(_M.offset, msgs)), pa.int64()),
        pc.multiply(ts_ms, 1000).cast(_TS_TYPE),
        pc.subtract(pa.array(types, pa.int32()), 1),  # librdkafka 1/2 -> Kafka ids 0/1
    ]
    if include_headers:
        columns.append(
            pa.array(
                # null when a record has no headers, as Spark's Kafka source gives
                [[{"key": k, "value": v} for k, v in hs] if (hs := m.headers()) else None
                 for m in msgs],
                HEADERS_TYPE,
            )
        )
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def read_range(
    opts: ReadOptions, topic: str, partition: int, start: int, until: int, batch_size: int = 20_000
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``topic-partition`` with ``start <= offset < until``."""
    if until <= start:
        return
    schema = arrow_schema(opts.include_headers)
    c = consumer(
        opts.client,
        {
            # librdkafka >= 2.1 stops fetching for fetch.queue.backoff.ms (1 s) whenever its
            # local queue is over a threshold; a task drains its queue continuously, so the
            # backoff only idles the connection (reads of a backlog ~5x slower with it).
            "fetch.queue.backoff.ms": 0,
            "fetch.wait.max.ms": 10,
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 4 * 1024 * 1024,
            "queued.max.messages.kbytes": 256 * 1024,
        },
    )
    try:
        low, high = watermarks_anew(opts.client, [(topic, partition)],
                                    opts.api_timeout_ms)[(topic, partition)]
        if start < low:
            if opts.fail_on_data_loss:
                raise OdradekSparkError(
                    f"data loss: offsets {start}..{low - 1} of {topic}-{partition} are no longer "
                    "available (deleted by retention?); set failOnDataLoss=false to skip them"
                )
            start = low
        if until > high:
            if opts.fail_on_data_loss:
                raise OdradekSparkError(
                    f"data loss: {topic}-{partition} ends at offset {high} but offsets up to "
                    f"{until - 1} were planned (topic recreated or truncated?); "
                    "set failOnDataLoss=false to skip them"
                )
            until = high
        if until <= start:
            return
        c.assign([ck.TopicPartition(topic, partition, start)])
        position = start
        idle_since = time.monotonic()
        timeout_s = opts.poll_timeout_ms / 1000
        while position < until:
            msgs: list[Any] = c.consume(num_messages=batch_size, timeout=0.5)
            if not msgs:
                pos: int = c.position([ck.TopicPartition(topic, partition)])[0].offset
                if pos >= until:  # the rest of the range is control records or compacted away
                    return
                if time.monotonic() - idle_since > timeout_s:
                    raise OdradekSparkError(
                        f"timed out after {opts.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs) "
                        f"reading {topic}-{partition} at offset {position} (planned up to {until})"
                    )
                continue
            idle_since = time.monotonic()
            errors = list(map(_M.error, msgs))
            if errors.count(None) != len(errors):
                bad = next(e for e in errors if e is not None)
                raise OdradekSparkError(f"error reading {topic}-{partition}: {bad}")
            if msgs[-1].offset() >= until:
                msgs = [m for m in msgs if m.offset() < until]
                if msgs:
                    yield _batch(msgs, topic, partition, opts.include_headers, schema)
                return
            position = msgs[-1].offset() + 1
            yield _batch(msgs, topic, partition, opts.include_headers, schema)
    finally:
        close_consumer(c)
