"""Writing DataFrames to topics: batch and streaming, with a replay fence for streams.

Rows need a ``value`` column (binary or string); ``key`` (binary/string), ``topic``
(string), ``partition`` (int) and ``headers`` (array<struct<key:string,value:binary>>) are
optional, as in Spark's Kafka sink. The ``topic`` option, when given, overrides the column.

Streaming fence. Each micro-batch task knows its query id and batch id (Spark's local
properties ``sql.streaming.queryId`` / ``streaming.sql.batchId``). Markers go to one
compacted single-partition topic (``odradek.sinkCommitTopic``, default
``_odradek_spark_sink_commits``):

* ``<query>/<batch>/<task partition>`` — written by a task after all its rows are acknowledged;
* ``<query>`` → last committed batch id — written by the driver in ``commit(batchId)``.

Before producing, a task scans the marker topic backwards from its end until it meets its
query's latest commit marker. If that marker is >= its batch id, or its own task marker is
there, the task writes nothing. So a micro-batch Spark replays after a crash is not written
twice, nor is any task of it that had completed. A task that dies half-way through its rows
and is retried writes those rows again (at-least-once for that task's partial output),
unless the sink is transactional.

Transactional mode (``kafka.transactional.id``, a prefix, as Flink's Kafka sink takes
one; Kafka's transactional producer, KIP-98): each task writes through a transactional
producer whose transactional.id is ``<prefix>-<query id>-<task partition>`` (a batch
write: ``<prefix>-<task partition>``), the same for every attempt of the task. Its
``init_transactions`` fences any earlier attempt (a zombie gets PRODUCER_FENCED) and has
the coordinator abort the transaction such an attempt left open, or finish the one it was
committing. Only then does the task read the markers, read_committed, once the marker
partition's last stable offset has reached the high watermark it had after the fencing
(so every transaction that could hold its own marker has ended). It then writes its rows
and its task marker in one transaction and commits it: rows and marker become visible to
read_committed readers together, or not at all.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import confluent_kafka as ck
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
)

from odradek.spark.client import (
    LIBRDKAFKA_LOG,
    OdradekSparkError,
    admin_client,
    close_consumer,
    serve_log,
)
from odradek.spark.options import OdradekOptionError, WriteOptions, parse_write_options

__all__ = ["OdradekBatchWriter", "OdradekStreamWriter", "SinkCommitMessage", "read_markers"]


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    query: str | None
    batch: int | None
    task: int
    rows: int
    skipped: bool


def _check_schema(schema: StructType, opts: WriteOptions) -> None:
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OdradekOptionError("the DataFrame to write needs a 'value' column (binary or string)")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], BinaryType | StringType):
            raise OdradekOptionError(
                f"column '{name}' must be binary or string, not {fields[name].simpleString()}"
            )
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise OdradekOptionError("column 'topic' must be a string")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise OdradekOptionError("column 'partition' must be an int")
    if "headers" in fields:
        ht = fields["headers"]
        ok = (
            isinstance(ht, ArrayType)
            and isinstance(ht.elementType, StructType)
            and [f.name for f in ht.elementType.fields] == ["key", "value"]
        )
        if not ok:
            raise OdradekOptionError(
                "column 'headers' must be array<struct<key:string,value:binary>>"
            )
    if opts.topic is None and "topic" not in fields:
        raise OdradekOptionError("no topic: set the 'topic' option or add a 'topic' column")


def task_transactional_id(prefix: str, query: str | None, task: int) -> str:
    """The transactional.id of a task: the same for every attempt of it (so an attempt
    fences the earlier ones), distinct between tasks and between streaming queries."""
    return f"{prefix}-{query}-{task}" if query else f"{prefix}-{task}"


def _producer(
    opts: WriteOptions, errors: list[str], transactional_id: str | None = None
) -> ck.Producer:
    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(f"{msg.topic()}-{msg.partition()}: {err}")

    config: dict[str, Any] = {
        "acks": "all",
        "linger.ms": 10,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "delivery.report.only.error": True,
        "on_delivery": on_delivery,
        "message.timeout.ms": opts.api_timeout_ms,
        "logger": LIBRDKAFKA_LOG,  # its log events are served by poll() and flush()
        **opts.client,
    }
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
        # librdkafka requires a record's delivery timeout within the transaction's
        txn_timeout = int(opts.client.get("transaction.timeout.ms", 60_000))
        config["message.timeout.ms"] = min(opts.api_timeout_ms, txn_timeout)
    try:
        return ck.Producer(config)
    except (ck.KafkaException, ValueError, TypeError) as exc:
        raise OdradekOptionError(f"bad kafka.* client option: {exc}") from None


def _flush(producer: ck.Producer, errors: list[str], opts: WriteOptions) -> None:
    left = producer.flush(opts.api_timeout_ms / 1000)
    if errors:
        raise OdradekSparkError(f"{len(errors)} record(s) not written, first: {errors[0]}")
    if left:
        raise OdradekSparkError(
            f"{left} record(s) not acknowledged within {opts.api_timeout_ms} ms "
            f"(kafka.default.api.timeout.ms); brokers at {opts.bootstrap!r} unreachable?"
        )


def produce_batches(
    opts: WriteOptions, batches: Iterator[pa.RecordBatch], producer: ck.Producer
) -> int:
    rows = 0
    produce = producer.produce
    poll = producer.poll
    for rb in batches:
        n = rb.num_rows
        if n == 0:
            continue
        names = {name.lower(): i for i, name in enumerate(rb.schema.names)}
        values = rb.column(names["value"]).to_pylist()
        keys = rb.column(names["key"]).to_pylist() if "key" in names else [None] * n
        if opts.topic is not None:
            topics = [opts.topic] * n
        else:
            topics = rb.column(names["topic"]).to_pylist()
        parts = (
            [-1 if p is None else p for p in rb.column(names["partition"]).to_pylist()]
            if "partition" in names
            else None
        )
        headers = rb.column(names["headers"]).to_pylist() if "headers" in names else None
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise OdradekSparkError("a row has a null 'topic' and no 'topic' option is set")
            while True:
                try:
                    if headers is not None and headers[i]:
                        produce(
                            topic,
                            values[i],
                            keys[i],
                            -1 if parts is None else parts[i],
                            headers=[(h["key"], h["value"]) for h in headers[i]],
                        )
                    elif parts is not None:
                        produce(topic, values[i], keys[i], parts[i])
                    else:
                        produce(topic, values[i], keys[i])
                    break
                except BufferError:
                    poll(0.05)
        poll(0)
        rows += n
    return rows


def _txn_error(what: str, tid: str, exc: BaseException) -> OdradekSparkError:
    return OdradekSparkError(f"{what} (transactional.id {tid!r}): {exc}")


def write_transactionally(
    opts: WriteOptions, batches: Iterator[pa.RecordBatch], query: str | None,
    batch: int | None, task: int,
) -> SinkCommitMessage:
    """The task's rows (and, streaming, its marker) in one transaction (module header)."""
    assert opts.transactional_id is not None
    tid = task_transactional_id(opts.transactional_id, query, task)
    errors: list[str] = []
    producer = _producer(opts, errors, tid)
    timeout = opts.api_timeout_ms / 1000
    try:
        producer.init_transactions(timeout)  # fences earlier attempts of this task
    except ck.KafkaException as exc:
        raise _txn_error("cannot initialize the transactional producer", tid, exc) from None
    if query is not None and batch is not None:
        committed, done = read_markers(opts, query, batch, read_committed=True)
        if committed >= batch or task in done:
            return SinkCommitMessage(query, batch, task, 0, True)
    try:
        producer.begin_transaction()
        rows = produce_batches(opts, batches, producer)
        if query is not None:
            producer.produce(opts.commit_topic, json.dumps({"rows": rows}).encode(),
                             f"{query}/{batch}/{task}".encode(), 0)
        producer.commit_transaction(timeout)
    except BaseException as exc:
        with contextlib.suppress(Exception):
            producer.abort_transaction(timeout)
        if isinstance(exc, ck.KafkaException):
            detail = f"{exc}; first failed record: {errors[0]}" if errors else str(exc)
            raise _txn_error("the transaction failed and was aborted", tid,
                             RuntimeError(detail)) from None
        raise
    finally:
        serve_log(producer)
    return SinkCommitMessage(query, batch, task, rows, False)


class OdradekBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise OdradekOptionError(
                "save mode 'overwrite' is not allowed for topics: use append (records are appended)"
            )
        self.opts = parse_write_options(options)
        _check_schema(schema, self.opts)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        from pyspark import TaskContext

        tc = TaskContext.get()
        task = tc.partitionId() if tc else 0
        if self.opts.transactional_id is not None:
            return write_transactionally(self.opts, iterator, None, None, task)
        errors: list[str] = []
        producer = _producer(self.opts, errors)
        rows = produce_batches(self.opts, iterator, producer)
        _flush(producer, errors, self.opts)
        return SinkCommitMessage(None, None, task, rows, False)


def ensure_commit_topic(opts: WriteOptions) -> None:
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    admin = admin_client(opts.client)
    futures = admin.create_topics(
        [NewTopic(opts.commit_topic, 1, config={"cleanup.policy": "compact"})],
        request_timeout=opts.api_timeout_ms / 1000,
    )
    try:
        _create_commit_topic(opts, futures)
    finally:
        serve_log(admin)


def _create_commit_topic(opts: WriteOptions, futures: Any) -> None:
    try:
        futures[opts.commit_topic].result(opts.api_timeout_ms / 1000)
    except ck.KafkaException as exc:
        if exc.args[0].code() != ck.KafkaError.TOPIC_ALREADY_EXISTS:
            raise OdradekSparkError(
                f"cannot create the sink commit topic {opts.commit_topic!r} "
                f"(odradek.sinkCommitTopic) at {opts.bootstrap!r}: {exc}"
            ) from None
    except Exception as exc:  # concurrent.futures.TimeoutError and friends
        raise OdradekSparkError(
            f"cannot create the sink commit topic {opts.commit_topic!r} "
            f"at {opts.bootstrap!r}: {exc!r}"
        ) from None


def read_markers(
    opts: WriteOptions, query: str, batch: int, window: int = 2000,
    read_committed: bool = False,
) -> tuple[int, set[int]]:
    """(last committed batch id of ``query`` or -1, task partitions already done in ``batch``).

    ``read_committed``: markers of aborted transactions do not count, and the scan starts
    once the partition's last stable offset has reached the high watermark it has now, so
    a marker of a transaction that has ended is never behind an open one."""
    from odradek.spark.client import consumer, watermarks_anew

    tp = ck.TopicPartition(opts.commit_topic, 0)
    high = _stable_end(opts) if read_committed else None
    level = "read_committed" if read_committed else "read_uncommitted"
    client = {**opts.client, "isolation.level": level}
    low, last = watermarks_anew(client, [(opts.commit_topic, 0)],
                                opts.api_timeout_ms)[(opts.commit_topic, 0)]
    c = consumer(client)
    done: set[int] = set()
    committed = -1
    prefix = f"{query}/{batch}/".encode()
    qkey = query.encode()
    try:
        end = last if high is None else high
        while end > low and committed < 0:
            begin = max(low, end - window)
            c.assign([ck.TopicPartition(opts.commit_topic, 0, begin)])
            pos = begin
            deadline = time.monotonic() + opts.api_timeout_ms / 1000
            while pos < end:
                msgs: list[Any] = c.consume(10_000, timeout=0.5)
                if not msgs:
                    if c.position([tp])[0].offset >= end:
                        break
                    if time.monotonic() > deadline:
                        raise OdradekSparkError(
                            f"timed out reading sink markers in {opts.commit_topic!r} at {pos}"
                        )
                    continue
                for m in msgs:
                    if m.error() is not None:
                        raise OdradekSparkError(f"error reading sink markers: {m.error()}")
                    if m.offset() >= end:
                        break
                    k = m.key()
                    if k == qkey:
                        committed = max(committed, int(json.loads(m.value())["batch"]))
                    elif k is not None and k.startswith(prefix):
                        done.add(int(k[len(prefix) :]))
                pos = msgs[-1].offset() + 1
            end = begin
    except ck.KafkaException as exc:
        raise OdradekSparkError(
            f"cannot read sink markers from {opts.commit_topic!r}: {exc}"
        ) from None
    finally:
        close_consumer(c)
    return committed, done


def _stable_end(opts: WriteOptions) -> int:
    """The marker partition's high watermark, once its last stable offset has reached it
    (the transactions open now have ended); waits up to ``kafka.default.api.timeout.ms``.
    Each query rides out a lost leader with a new consumer (``watermarks_anew``)."""
    from odradek.spark.client import watermarks_anew

    timeout_ms = opts.api_timeout_ms
    deadline = time.monotonic() + timeout_ms / 1000
    tp = (opts.commit_topic, 0)

    def end(level: str) -> int:
        return watermarks_anew({**opts.client, "isolation.level": level}, [tp],
                               timeout_ms)[tp][1]

    high = end("read_uncommitted")
    backoff = 0.01
    while True:
        stable = end("read_committed")
        if stable >= high:
            return int(high)
        if time.monotonic() > deadline:
            raise OdradekSparkError(
                f"the sink markers in {opts.commit_topic!r} stay behind an open "
                f"transaction (last stable offset {stable}, high watermark {high}) for "
                f"{opts.api_timeout_ms} ms (kafka.default.api.timeout.ms)"
            )
        time.sleep(backoff)  # polling a condition, with a deadline
        backoff = min(backoff * 2, 0.5)


class OdradekStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        self.opts = parse_write_options(options)
        _check_schema(schema, self.opts)
        ensure_commit_topic(self.opts)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        from pyspark import TaskContext

        tc = TaskContext.get()
        query = tc.getLocalProperty("sql.streaming.queryId") if tc else None
        batch_s = tc.getLocalProperty("streaming.sql.batchId") if tc else None
        task = tc.partitionId() if tc else 0
        if query is None or batch_s is None:
            raise OdradekSparkError(
                "streaming write without a query id / batch id in the task context"
            )
        batch = int(batch_s)
        if self.opts.transactional_id is not None:
            return write_transactionally(self.opts, iterator, query, batch, task)
        committed, done = read_markers(self.opts, query, batch)
        if committed >= batch or task in done:
            return SinkCommitMessage(query, batch, task, 0, True)
        errors: list[str] = []
        producer = _producer(self.opts, errors)
        rows = produce_batches(self.opts, iterator, producer)
        _flush(producer, errors, self.opts)
        marker = json.dumps({"rows": rows}).encode()
        producer.produce(self.opts.commit_topic, marker, f"{query}/{batch}/{task}".encode(), 0)
        _flush(producer, errors, self.opts)
        return SinkCommitMessage(query, batch, task, rows, False)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        queries = {m.query for m in messages if isinstance(m, SinkCommitMessage) and m.query}
        if not queries:
            return
        errors: list[str] = []
        producer = _producer(self.opts, errors)
        for q in queries:
            producer.produce(
                self.opts.commit_topic, json.dumps({"batch": batchId}).encode(), q.encode(), 0
            )
        _flush(producer, errors, self.opts)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Records already acknowledged stay in the topics (Kafka has no undo without
        transactions); completed tasks keep their markers so a retry does not repeat them."""
