"""``odradek mirror``: MirrorMaker as a Spark Structured Streaming job.

How it works (Kafka's MirrorMaker 2, KIP-382: MirrorSourceConnector for the records and the
topic configs, MirrorCheckpointConnector for the consumer-group offsets; here one Spark
query and one driver thread):

* The query reads the source cluster through this connector (``subscribePattern`` from
  ``--include`` / ``--exclude``, ``includeHeaders``, from the earliest offsets, and
  ``--isolation-level``, read_committed unless told otherwise, as Kafka's consumer
  ``isolation.level``: the records of aborted transactions and the transaction markers
  never reach the target, and a planned range ends at the last stable offset) and hands
  each micro-batch to ``foreachBatch``, which writes it with :class:`MirrorSink` (a
  Python data source, so tasks get the connector's Arrow batches). One Spark task is one
  source offset range of one partition; it writes the range's records to the same
  partition number of ``prefix + topic`` on the target with key, value, headers and
  timestamp, through an idempotent producer (acks=all), so a partition's records land in
  order and once. The writer's ``commit`` hands the tasks' offset syncs to the driver
  through a file in the checkpoint directory.
* Before the tasks run, the driver makes sure every matching source topic exists on the
  target (created with the source's partition count and its topic-level configs; partitions
  added at the source are added at the target) and saves the micro-batch's *plan*, the
  end offsets of the target partitions; the tasks use it to skip what an earlier attempt
  of the same micro-batch already wrote (:mod:`odradek.spark.offset_sync`). With Spark's
  own checkpoint (which replays the last planned micro-batch over the same offsets), that
  makes a restart after kill -9 neither lose nor double a record.
* Transactional mode (``--transactional-id PREFIX``; the exactly-once source tasks of
  KIP-618, which commit their source offsets in the transaction of the records they
  wrote): no plan. Each task writes its range through a transactional producer whose
  transactional.id, ``PREFIX-<target topic>-<partition>``, is the same for every task and
  attempt that writes that partition, so its ``init_transactions`` fences every earlier
  one and has the target's coordinator abort the transaction such an attempt left open.
  The task then reads the source offset committed for the target partition under the
  group ``--group`` on the target (OffsetFetch, require_stable), skips the rows before it,
  writes the rest and commits, in the same transaction, the source offset after its last
  row (TxnOffsetCommit, with the target offset of its first record as metadata, so a
  replay that writes nothing still reports exact offset syncs). Records and offset become
  visible together or not at all: a replay or retry resumes at the committed offset.
* After the tasks, the driver records their offset syncs, and commits the micro-batch's
  end offsets on the source under the group ``--group`` (``odradek-mirror``), so
  ``odradek groups describe`` on the source shows the mirror's lag.
* A driver thread, every ``--sync-interval`` seconds, picks up new source topics and
  partitions (also while no records flow) and translates consumer groups' committed
  offsets (MirrorMaker 2's ``sync.group.offsets.enabled``): for each group on the source
  with offsets on mirrored topics, the translated offsets are committed to the same group
  on the target, only while that group has no active members there, and only forward.
  The same thread brings the target topics' configs in line with their source topics
  (MirrorMaker 2's ``sync.topic.configs.enabled``): keys set, changed or removed at the
  source are set or removed on the target, except :data:`EXCLUDED_CONFIGS`.
* The query runs on a processing-time trigger of ``--poll-interval-ms`` (100 ms): a
  micro-batch starts at most once an interval (one that took longer is followed at once),
  so while records flow the mirror copies up to ``--max-records-per-batch`` per interval,
  and while none do, the source is asked for new offsets once an interval. A session
  whose log level lets WARN through logs Spark's "Current batch is falling behind" for
  each micro-batch longer than the interval (``odradek mirror``'s own logs only errors).
  With Spark's default trigger an idle query asks again 10 ms after each empty answer
  (``spark.sql.streaming.pollingDelay``), one Metadata and two ListOffsets per partition
  each time. An idle streaming read of one 3-partition topic through the connector
  (local[2], 30 s) cost 30 % of a core that way, the broker's part 17 %; with a 100 ms
  trigger 6 %, the broker's 3 % (8.9 s and 1.8 s of CPU). 0 keeps Spark's default trigger.
* A cluster that does not answer is waited for: the driver retries its topic sync and plan
  for up to :data:`RIDE_OUT_S`, the sync thread skips a round, the tasks' clients retry
  within their timeouts; beyond that the query fails and a restart resumes exactly.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import confluent_kafka as ck
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.errors import StreamingQueryException
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from odradek.client.connection import BrokerConnection, ClientError
from odradek.client.groups import GroupsClient
from odradek.client.security import ClientSecurity, client_security
from odradek.spark.home import use_compiled_spark_home
from odradek.spark.offset_sync import MirrorState, runs_of

__all__ = [
    "MirrorConfig",
    "MirrorError",
    "MirrorJob",
    "MirrorSink",
    "TaskResult",
    "TransientMirrorError",
    "combined_pattern",
    "transactional_id_of",
    "write_range",
    "write_range_transactionally",
]

log = logging.getLogger("odradek.mirror")

#: topic configs not copied to the target (as MirrorMaker 2's DefaultConfigPropertyFilter:
#: they belong to the target cluster's operation, not to the data)
EXCLUDED_CONFIGS = frozenset({
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "message.timestamp.difference.max.ms",
    "message.timestamp.type",  # the target keeps the source's timestamps as CreateTime
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
    "unclean.leader.election.enable",
    "min.insync.replicas",
})
_T = TypeVar("_T")
_QUEUE_FULL_POLL_S = 0.05
#: how long the driver keeps retrying a cluster that does not answer before a micro-batch
RIDE_OUT_S = 300.0
#: the first attempt's bound on the plan's ListOffsets and the topic sync's Metadata,
#: doubled on each retry up to ``--timeout``: a ListOffsets sent just after a target
#: leader was killed -9 was seen to wait out its whole timeout (30 s) although a new
#: leader was elected within seconds, and retries through the same admin client to go to
#: the dead leader again; a retry goes through a new admin client (fresh metadata)
FIRST_ATTEMPT_S = 5.0


class MirrorError(RuntimeError):
    """Something the mirror cannot go on with; the message says what and where."""


class TransientMirrorError(MirrorError):
    """A cluster that did not answer in time: fatal at start, retried by the sync loop."""


@dataclass(frozen=True)
class MirrorConfig:
    source: str
    target: str
    include: str
    exclude: str | None = None
    topic_prefix: str = ""
    checkpoint_dir: Path = Path("odradek-mirror-checkpoint")
    master: str = "local[*]"
    group: str = "odradek-mirror"
    sync_interval_s: float = 5.0
    #: the query's processing-time trigger (module header); 0: Spark's default trigger
    poll_interval_ms: int = 100
    max_records_per_batch: int = 500_000
    replication_factor: int = -1
    api_timeout_ms: int = 30_000
    #: the source reader's ``isolation.level``
    isolation_level: str = "read_committed"
    #: transactional mode: the prefix of the tasks' transactional.ids (None: not transactional)
    transactional_id: str | None = None
    # librdkafka settings of each side: secrets (a SASL password), kept out of the repr
    source_client: dict[str, str] = field(default_factory=dict, repr=False)
    target_client: dict[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.poll_interval_ms < 0:
            raise ValueError(f"poll_interval_ms must be >= 0, not {self.poll_interval_ms}")

    def source_conf(self) -> dict[str, str]:
        return {"bootstrap.servers": self.source, **self.source_client}

    def target_conf(self) -> dict[str, str]:
        return {"bootstrap.servers": self.target, **self.target_client}


def combined_pattern(include: str, exclude: str | None) -> str:
    """One regex (matched on the whole topic name) for ``--include`` minus ``--exclude``."""
    for name, rx in (("--include", include), ("--exclude", exclude)):
        if rx is None:
            continue
        try:
            re.compile(rx)
        except re.error as exc:
            raise MirrorError(f"{name} is not a valid regex: {exc}") from None
    if exclude is None:
        return include
    return f"(?!(?:{exclude})\\Z)(?:{include})"


# ----------------------------------------------------------------------- worker side


#: producers kept by a Python worker between tasks (Spark reuses its workers): one
#: InitProducerId and one connection set per worker instead of one per task
_PRODUCERS: dict[str, tuple[ck.Producer, list[str]]] = {}


def _producer(conf: dict[str, str], timeout_ms: int) -> tuple[ck.Producer, list[str]]:
    key = json.dumps([conf, timeout_ms], sort_keys=True)
    if key in _PRODUCERS:
        return _PRODUCERS[key]
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(f"{msg.topic()}-{msg.partition()}: {err}")

    producer = ck.Producer({
        "enable.idempotence": True,  # in order and once per partition: the fence needs it
        "acks": "all",
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "delivery.report.only.error": True,
        "on_delivery": on_delivery,
        "message.timeout.ms": timeout_ms,
        "log_level": 2,
        **conf,
    })
    _PRODUCERS[key] = (producer, errors)
    return producer, errors


def _target_end(conf: dict[str, str], topic: str, partition: int, timeout_ms: int) -> int:
    """The target partition's end offset, a target leader lost meanwhile ridden out
    within ``timeout_ms`` (:func:`odradek.spark.client.ride_out`)."""
    from odradek.spark.client import watermarks_anew

    _, high = watermarks_anew(conf, [(topic, partition)], timeout_ms)[(topic, partition)]
    return int(high)


def _task_partition(rb: pa.RecordBatch) -> tuple[str, int]:
    """The (topic, partition) of a task's rows: a mirror task reads one partition."""
    topics = pc.unique(rb.column("topic"))
    parts = pc.unique(rb.column("partition"))
    if len(topics) != 1 or len(parts) != 1:
        raise MirrorError("a mirror task got rows of several partitions")
    return str(topics[0].as_py()), int(parts[0].as_py())


def _produce(producer: ck.Producer, target: str, p: int, rb: pa.RecordBatch) -> int:
    """Hand the rows of ``rb`` to ``producer`` for partition ``p`` of ``target``."""
    keys = rb.column("key").to_pylist()
    values = rb.column("value").to_pylist()
    stamps = pc.divide(rb.column("timestamp").cast(pa.int64()), 1000).to_pylist()
    headers = rb.column("headers").to_pylist()
    produce = producer.produce
    for i in range(rb.num_rows):
        hs = headers[i]
        while True:
            try:
                if hs:
                    produce(target, values[i], keys[i], p, timestamp=stamps[i],
                            headers=[(h["key"], h["value"]) for h in hs])
                else:
                    produce(target, values[i], keys[i], p, timestamp=stamps[i])
                break
            except BufferError:
                producer.poll(_QUEUE_FULL_POLL_S)
    producer.poll(0)
    return int(rb.num_rows)


def write_range(
    target_conf: dict[str, str],
    prefix: str,
    timeout_ms: int,
    plan: dict[tuple[str, int], int],
    batches: Iterator[pa.RecordBatch],
    check: bool = True,
) -> TaskResult | None:
    """One Spark task: the rows of one source offset range (one partition, offset order)
    to the same partition of ``prefix + topic``, skipping the records an earlier attempt of
    this micro-batch already wrote (``plan`` holds the target end offsets before it).
    ``check=False`` (the first attempt of a micro-batch that was never planned before)
    knows that nothing was written and skips asking the target for its end offset."""
    tp: tuple[str, int] | None = None
    producer: ck.Producer | None = None
    errors: list[str] = []
    skip = 0
    offsets: list[int] = []
    written = 0
    t_from = 0
    target = ""
    for rb in batches:
        n = rb.num_rows
        if n == 0:
            continue
        this = _task_partition(rb)
        if tp is None:
            tp = this
            target = prefix + tp[0]
            if tp not in plan:
                raise MirrorError(f"{tp[0]}-{tp[1]} is not in the micro-batch's plan")
            t_from = plan[tp]
            if check:
                end = _target_end(target_conf, target, tp[1], timeout_ms)
                skip = end - t_from
                if skip < 0:
                    raise MirrorError(
                        f"target partition {target}-{tp[1]} ends at {end}, before {t_from} "
                        "where this micro-batch began (target topic deleted or truncated?)"
                    )
            producer, errors = _producer(target_conf, timeout_ms)
            errors.clear()
        elif this != tp:
            raise MirrorError("a mirror task got rows of several partitions")
        assert producer is not None
        offsets.extend(rb.column("offset").to_pylist())
        k = min(skip, n)
        skip -= k
        if k == n:
            continue
        written += _produce(producer, target, tp[1], rb.slice(k))
    if tp is None:
        return None
    assert producer is not None
    left = producer.flush(timeout_ms / 1000)
    if errors or left:
        _PRODUCERS.clear()  # a producer in trouble is not reused
        if errors:
            raise MirrorError(f"{len(errors)} record(s) not written, first: {errors[0]}")
        raise MirrorError(
            f"{left} record(s) not acknowledged by the target within {timeout_ms} ms"
        )
    if skip > 0:
        raise MirrorError(
            f"target partition {target}-{tp[1]} has {skip} more record(s) than the mirror "
            "wrote: another producer writes to it"
        )
    return TaskResult(tp[0], tp[1], len(offsets), written, runs_of(offsets, t_from))


def transactional_id_of(prefix: str, target_topic: str, partition: int) -> str:
    """The transactional.id that writes one target partition: the same for every task and
    every attempt that writes it, so each one fences those before it."""
    return f"{prefix}-{target_topic}-{partition}"


def _txn_error(what: str, tid: str, exc: BaseException) -> MirrorError:
    return MirrorError(f"{what} (transactional.id {tid!r}): {exc}")


def _committed(consumer: ck.Consumer, topic: str, partition: int,
               timeout_ms: int) -> tuple[int, dict[str, Any]]:
    """The source offset committed for a target partition (-1: none) and its metadata."""
    try:
        got = consumer.committed([ck.TopicPartition(topic, partition)],
                                 timeout=timeout_ms / 1000)[0]
    except ck.KafkaException as exc:
        raise MirrorError(f"cannot read the mirror's committed offset of {topic}-{partition} "
                          f"on the target: {exc.args[0]}") from None
    if got.error is not None:
        raise MirrorError(f"cannot read the mirror's committed offset of {topic}-{partition} "
                          f"on the target: {got.error}")
    try:
        meta = json.loads(got.metadata) if got.metadata else {}
    except ValueError:
        meta = {}
    return int(got.offset), meta if isinstance(meta, dict) else {}


def write_range_transactionally(
    target_conf: dict[str, str],
    prefix: str,
    timeout_ms: int,
    transactional_id: str,
    group: str,
    batches: Iterator[pa.RecordBatch],
) -> TaskResult | None:
    """One Spark task in transactional mode (module header): the rows of one source
    offset range from the source offset the target's group ``group`` has committed for the
    target partition on, in one transaction under
    :func:`transactional_id_of` ``(transactional_id, ...)``, with the offset after the
    range's last row committed to ``group`` in the same transaction."""
    tp: tuple[str, int] | None = None
    producer: ck.Producer | None = None
    consumer: ck.Consumer | None = None
    tid = target = ""
    errors: list[str] = []
    first: list[int] = []  # the target offset of the first record written
    resume = -1
    meta: dict[str, Any] = {}
    offsets: list[int] = []
    written = 0
    timeout = timeout_ms / 1000

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(f"{msg.topic()}-{msg.partition()}: {err}")
        elif not first:
            first.append(int(msg.offset()))

    try:
        for rb in batches:
            n = rb.num_rows
            if n == 0:
                continue
            this = _task_partition(rb)
            if tp is None:
                tp = this
                target = prefix + tp[0]
                tid = transactional_id_of(transactional_id, target, tp[1])
                txn_timeout = int(target_conf.get("transaction.timeout.ms", 60_000))
                producer = ck.Producer({
                    "acks": "all",
                    "linger.ms": 5,
                    "batch.size": 1_000_000,
                    "queue.buffering.max.messages": 1_000_000,
                    "queue.buffering.max.kbytes": 1_048_576,
                    "on_delivery": on_delivery,
                    "log_level": 2,
                    # bounds librdkafka's wait in send_offsets_to_transaction on a group
                    # coordinator that left the cluster (docs/compatibility.md)
                    "connections.max.idle.ms": 10_000,
                    **target_conf,
                    "transactional.id": tid,
                    # librdkafka wants a record's delivery timeout within the transaction's
                    "message.timeout.ms": min(timeout_ms, txn_timeout),
                })
                try:
                    # fences every earlier attempt and ends the transaction it left open
                    producer.init_transactions(timeout)
                except ck.KafkaException as exc:
                    raise _txn_error("cannot initialize the transactional producer", tid,
                                     exc) from None
                consumer = ck.Consumer({
                    "enable.auto.commit": False, "log_level": 2,
                    "isolation.level": "read_committed",  # OffsetFetch with require_stable
                    **target_conf, "group.id": group,
                })
                resume, meta = _committed(consumer, target, tp[1], timeout_ms)
                producer.begin_transaction()
            elif this != tp:
                raise MirrorError("a mirror task got rows of several partitions")
            assert producer is not None
            column = rb.column("offset")
            offsets.extend(column.to_pylist())
            k = int(pc.sum(pc.less(column, resume)).as_py() or 0) if resume >= 0 else 0
            if k == n:
                continue
            written += _produce(producer, target, tp[1], rb.slice(k))
        if tp is None:
            return None
        assert producer is not None and consumer is not None
        runs: list[tuple[int, int, int]] = []
        if written:
            left = producer.flush(timeout)
            if errors or left or not first:
                detail = (f"{len(errors)} record(s) not written, first: {errors[0]}" if errors
                          else f"{left} record(s) not acknowledged within {timeout_ms} ms")
                raise MirrorError(detail)
            mine = offsets[len(offsets) - written:]
            runs = runs_of(mine, first[0])
            end = mine[-1] + 1
            meta = {"source": mine[0], "target": first[0]}
            producer.send_offsets_to_transaction(
                [ck.TopicPartition(target, tp[1], end, metadata=json.dumps(meta))],
                consumer.consumer_group_metadata(), timeout)
        elif "source" in meta and "target" in meta:
            # a replay of a range an earlier attempt committed: its records were written
            # from the committed metadata's target offset on (the offset syncs stay exact)
            done = [o for o in offsets if int(meta["source"]) <= o < resume]
            runs = runs_of(done, int(meta["target"]))
        producer.commit_transaction(timeout)
    except BaseException as exc:
        if producer is not None and tp is not None:
            with contextlib.suppress(Exception):
                producer.abort_transaction(timeout)
        if isinstance(exc, ck.KafkaException):
            raise _txn_error("the transaction failed and was aborted", tid, exc) from None
        raise
    finally:
        if consumer is not None:
            consumer.close()
    return TaskResult(tp[0], tp[1], len(offsets), written, runs)


@dataclass
class TaskResult(WriterCommitMessage):
    topic: str
    partition: int
    records: int
    written: int
    runs: list[tuple[int, int, int]]


class MirrorSink(DataSource):
    """The mirror's writer, a Python data source (``format("odradek-mirror")``) so that
    tasks get Arrow batches. Options: ``target`` (JSON librdkafka config), ``prefix``,
    ``timeoutMs``, ``plan`` (JSON ``[[topic, partition, target offset], ...]``), ``replay``
    (whether the plan was saved by an earlier attempt), ``results`` (a file that
    ``commit`` writes the tasks' results to, for the driver) and, in transactional mode,
    ``transactionalId`` (the prefix) and ``group`` (the target group of the offsets)."""

    @classmethod
    def name(cls) -> str:
        return "odradek-mirror"

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return MirrorWriter(dict(self.options))


class MirrorWriter(DataSourceArrowWriter):
    def __init__(self, raw: dict[str, str]) -> None:
        options = {str(k).lower(): str(v) for k, v in raw.items()}  # Spark's are case-blind
        self.target = json.loads(options["target"])
        self.prefix = options.get("prefix", "")
        self.timeout_ms = int(options["timeoutms"])
        self.plan = {(str(t), int(p)): int(o) for t, p, o in json.loads(options["plan"])}
        self.results = options["results"]
        self.replay = options.get("replay", "true") == "true"
        self.transactional_id = options.get("transactionalid")
        self.group = options.get("group", "odradek-mirror")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        if self.transactional_id is not None:
            result = write_range_transactionally(self.target, self.prefix, self.timeout_ms,
                                                 self.transactional_id, self.group, iterator)
            return result if result is not None else WriterCommitMessage()
        tc = TaskContext.get()
        retry = tc is None or tc.attemptNumber() > 0  # a retried task may have written some
        result = write_range(self.target, self.prefix, self.timeout_ms, self.plan, iterator,
                             check=self.replay or retry)
        return result if result is not None else WriterCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        out = [
            [m.topic, m.partition, m.records, m.written, m.runs]
            for m in messages if isinstance(m, TaskResult)
        ]
        path = Path(self.results)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(out), encoding="utf-8")
        os.replace(tmp, path)


# ----------------------------------------------------------------------- driver side


def _result(future: Any, timeout_s: float, what: str) -> Any:
    try:
        return future.result(timeout=timeout_s)
    except ck.KafkaException as exc:
        raise TransientMirrorError(f"{what}: {exc.args[0]}") from None
    except Exception as exc:  # concurrent.futures.TimeoutError and friends
        raise TransientMirrorError(f"{what}: {exc!r}") from None


def _own_client(conf: dict[str, str]) -> ClientSecurity | None:
    """The security for Odradek's own client, or None where it cannot honour ``conf``
    (a librdkafka setting it does not know: the group sync then uses librdkafka)."""
    from odradek.spark.fetcher import supports

    if not supports(conf):
        return None
    try:
        return client_security(conf)
    except ValueError:
        return None


class MirrorJob:
    def __init__(self, cfg: MirrorConfig) -> None:
        from confluent_kafka.admin import AdminClient

        self.cfg = cfg
        self.pattern = combined_pattern(cfg.include, cfg.exclude)
        self.timeout_s = cfg.api_timeout_ms / 1000
        self.src = AdminClient({"log_level": 2, **cfg.source_conf()})
        self.tgt = AdminClient({"log_level": 2, **cfg.target_conf()})
        self.state = MirrorState(cfg.checkpoint_dir)
        self.syncs = self.state.load_syncs()
        self.managed = self.state.load_topics()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.failure: BaseException | None = None
        self.batches = 0
        self.records = 0
        self._committer: ck.Consumer | None = None
        self._commits_sent = self._commits_done = 0
        self._own_security: dict[str, ClientSecurity | None] = {
            "source": _own_client(cfg.source_conf()),
            "target": _own_client(cfg.target_conf()),
        }

    # -- clusters and topics

    def _topics(self, which: str, timeout_s: float) -> dict[str, int]:
        """The topics of the ``"source"`` or ``"target"`` cluster with their partition
        counts, from one Metadata request bounded by ``timeout_s``. A failed one renews
        that side's admin client: librdkafka sends it to one broker of its choice, and
        was seen to wait out the whole timeout on one that had been killed while
        another was up (whole run Q29); a new client bootstraps afresh."""
        from confluent_kafka.admin import AdminClient

        source = which == "source"
        admin, address = (self.src, self.cfg.source) if source else (self.tgt, self.cfg.target)
        try:
            md = admin.list_topics(timeout=timeout_s)
        except ck.KafkaException as exc:
            fresh = AdminClient({"log_level": 2, **(
                self.cfg.source_conf() if source else self.cfg.target_conf())})
            if source:
                self.src = fresh
            else:
                self.tgt = fresh
            raise TransientMirrorError(
                f"cannot reach the {which} cluster at {address} within "
                f"{int(timeout_s * 1000)} ms: {exc.args[0]}"
            ) from None
        return {
            name: len(tm.partitions) for name, tm in md.topics.items()
            if tm.error is None or tm.error.code() == ck.KafkaError.NO_ERROR
        }

    def matching(self, source_topics: dict[str, int]) -> dict[str, int]:
        return {
            t: n for t, n in source_topics.items()
            if not t.startswith("__") and re.fullmatch(self.pattern, t) is not None
        }

    def _topic_configs(
        self, admin: Any, which: str, topics: list[str]
    ) -> dict[str, dict[str, str]]:
        """The mirrored configs set on each topic (one DescribeConfigs): the entries whose
        source is ``DYNAMIC_TOPIC_CONFIG``, less :data:`EXCLUDED_CONFIGS`."""
        from confluent_kafka.admin import ConfigResource, ConfigSource  # type: ignore[attr-defined]

        if not topics:
            return {}
        resources = [ConfigResource("topic", t) for t in topics]
        futures = admin.describe_configs(resources, request_timeout=self.timeout_s)
        out = {}
        for res in resources:
            entries = _result(futures[res], self.timeout_s,
                              f"cannot read the configs of {which} topic {res.name!r}")
            out[res.name] = {
                name: e.value for name, e in entries.items()
                if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
                and name not in EXCLUDED_CONFIGS and e.value is not None
            }
        return out

    def _source_configs(self, topic: str) -> dict[str, str]:
        return self._topic_configs(self.src, "source", [topic])[topic]

    def sync_configs(self, source: dict[str, int]) -> int:
        """Bring the mirrored configs of the target topics in line with their source topics
        (MirrorMaker 2's ``sync.topic.configs.enabled``): a key set or changed at the source
        is set on the target, a key removed at the source (back to its default) is removed
        on the target (IncrementalAlterConfigs SET / DELETE). Keys of
        :data:`EXCLUDED_CONFIGS` are left alone on both sides. Returns the keys altered."""
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            AlterConfigOpType,
            ConfigEntry,
            ConfigResource,
        )

        prefix = self.cfg.topic_prefix
        with self.lock:
            topics = sorted(t for t in source if prefix + t in self.managed)
        wanted = self._topic_configs(self.src, "source", topics)
        have = self._topic_configs(self.tgt, "target", [prefix + t for t in topics])
        altered = 0
        for topic in topics:
            name = prefix + topic
            want, got = wanted[topic], have[name]
            ops = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                   for k, v in sorted(want.items()) if got.get(k) != v]
            ops += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                    for k in sorted(got) if k not in want]
            if not ops:
                continue
            res = ConfigResource("topic", name, incremental_configs=ops)
            try:
                _result(
                    self.tgt.incremental_alter_configs([res], request_timeout=self.timeout_s)[res],
                    self.timeout_s, f"cannot alter the configs of target topic {name!r}")
            except TransientMirrorError as exc:  # e.g. a value the target refuses: next round
                log.warning("%s", exc)
                continue
            log.info("target topic %s: configs %s", name,
                     ", ".join(f"{e.name}={e.value}" if e.value is not None else f"-{e.name}"
                               for e in ops))
            altered += len(ops)
        return altered

    def sync_topics(self, timeout_s: float | None = None) -> dict[str, int]:
        """Create missing target topics, add partitions the source gained; returns the
        mirrored source topics with their partition counts. ``timeout_s`` bounds each
        cluster's Metadata request (default ``--timeout``)."""
        from confluent_kafka.admin import NewPartitions, NewTopic  # type: ignore[attr-defined]

        attempt_s = self.timeout_s if timeout_s is None else timeout_s
        with self.lock:
            source = self.matching(self._topics("source", attempt_s))
            target = self._topics("target", attempt_s)
            changed = False
            for topic, n in sorted(source.items()):
                name = self.cfg.topic_prefix + topic
                have = target.get(name)
                if have is None:
                    configs = self._source_configs(topic)
                    new = NewTopic(name, n, self.cfg.replication_factor, config=configs)
                    try:
                        self.tgt.create_topics([new])[name].result(timeout=self.timeout_s)
                    except ck.KafkaException as exc:
                        if exc.args[0].code() != ck.KafkaError.TOPIC_ALREADY_EXISTS:
                            raise MirrorError(
                                f"cannot create target topic {name!r}: {exc.args[0]}"
                            ) from None
                    log.info("created target topic %s (%d partitions, %s)", name, n, configs)
                    self.managed.add(name)
                    changed = True
                elif have < n:
                    if name not in self.managed:
                        raise MirrorError(
                            f"target topic {name!r} exists with {have} partition(s), fewer than "
                            f"the {n} of source topic {topic!r}: records keep their partition, "
                            f"so add partitions to it (odradek topics alter) or mirror "
                            "elsewhere (--topic-prefix)"
                        )
                    _result(
                        self.tgt.create_partitions([NewPartitions(name, n)])[name],
                        self.timeout_s, f"cannot add partitions to target topic {name!r}",
                    )
                    log.info("target topic %s: %d -> %d partitions", name, have, n)
                elif name not in self.managed:
                    self.managed.add(name)  # adopted: same layout
                    changed = True
            if changed:
                self.state.save_topics(self.managed)
            return source

    def _target_ends(
        self, tps: list[tuple[str, int]], timeout_s: float
    ) -> dict[tuple[str, int], int]:
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

        if not tps:
            return {}
        prefix = self.cfg.topic_prefix
        request = {ck.TopicPartition(prefix + t, p): OffsetSpec.latest()  # type: ignore[no-untyped-call]
                   for t, p in tps}
        futures = self.tgt.list_offsets(request, request_timeout=timeout_s)
        out = {}
        try:
            for tp, fut in futures.items():
                info = _result(fut, timeout_s,
                               f"cannot list the end offset of {tp.topic}-{tp.partition}")
                out[(tp.topic[len(prefix):], tp.partition)] = int(info.offset)
        except TransientMirrorError:
            # the admin client kept sending to a killed leader while its metadata said so:
            # the next attempt goes through a new one, which fetches fresh metadata
            from confluent_kafka.admin import AdminClient

            self.tgt = AdminClient({"log_level": 2, **self.cfg.target_conf()})
            raise
        return out

    # -- one micro-batch

    def plan(
        self, batch_id: int, source: dict[str, int], timeout_s: float | None = None
    ) -> tuple[dict[tuple[str, int], int], bool]:
        """The saved plan of a replayed micro-batch (and True), or the target ends now,
        saved before any task runs (and False)."""
        plan = self.state.load_plan(batch_id)
        if plan is not None:
            log.info("micro-batch %d is a replay: resuming from its saved plan", batch_id)
            return plan, True
        plan = self._target_ends([(t, p) for t, n in source.items() for p in range(n)],
                                 self.timeout_s if timeout_s is None else timeout_s)
        self.state.save_plan(batch_id, plan)
        return plan, False

    def _retrying(self, what: str, fn: Any) -> Any:
        """``fn(timeout_s)``, retried while a cluster does not answer, for up to
        :data:`RIDE_OUT_S`: a broker restarting or a leader moving is ridden out. The
        attempts' timeout starts at :data:`FIRST_ATTEMPT_S` and doubles up to ``--timeout``."""
        deadline = time.monotonic() + RIDE_OUT_S
        attempt_s = min(FIRST_ATTEMPT_S, self.timeout_s)
        while True:
            try:
                return fn(attempt_s)
            except TransientMirrorError as exc:
                if time.monotonic() > deadline or self.stopping.is_set():
                    raise
                log.warning("%s: %s; retrying", what, exc)
                attempt_s = min(2 * attempt_s, self.timeout_s)
                time.sleep(1)

    def process_batch(self, df: Any, batch_id: int) -> None:
        source = self._retrying("topic sync", self.sync_topics)
        plan: dict[tuple[str, int], int] = {}
        replay = False
        if self.cfg.transactional_id is None:  # transactional tasks resume by themselves
            plan, replay = self._retrying("planning", lambda t: self.plan(batch_id, source, t))
        results = self.state.dir / "results.json"
        results.unlink(missing_ok=True)
        writer = df.write.format(MirrorSink.name())
        if self.cfg.transactional_id is not None:
            writer = (writer.option("transactionalId", self.cfg.transactional_id)
                      .option("group", self.cfg.group))
        (
            writer
            .option("target", json.dumps(self.cfg.target_conf()))
            .option("prefix", self.cfg.topic_prefix)
            .option("timeoutMs", str(self.cfg.api_timeout_ms))
            .option("plan", json.dumps([[t, p, o] for (t, p), o in plan.items()]))
            .option("results", str(results))
            .option("replay", "true" if replay else "false")
            .mode("append")
            .save()
        )
        records = written = 0
        with self.lock:
            for topic, partition, n, w, runs in json.loads(results.read_text(encoding="utf-8")):
                self.syncs.add((topic, partition), [(a, b, c) for a, b, c in runs])
                records += n
                written += w
            self.state.save_syncs(self.syncs)
        self._commit_progress(batch_id)
        self.batches += 1
        self.records += written
        print(f"odradek mirror: micro-batch {batch_id}: {records} record(s), {written} written"
              + (f", {records - written} already there (replay)" if written < records else ""),
              file=sys.stderr, flush=True)

    def _commit_progress(self, batch_id: int) -> None:
        """Commit the micro-batch's end offsets (Spark's offset log) on the source."""
        path = self.cfg.checkpoint_dir / "offsets" / str(batch_id)
        try:
            ends = json.loads(path.read_text(encoding="utf-8").strip().splitlines()[-1])
        except (OSError, ValueError, IndexError) as exc:
            log.warning("cannot read Spark's offset log %s: %s", path, exc)
            return
        offsets = [ck.TopicPartition(t, int(p), int(off))
                   for t, parts in ends.items() for p, off in parts.items()]
        if not offsets:
            return
        # A consumer's commit (not the admin client's AlterConsumerGroupOffsets: librdkafka
        # aborts the process when a broker's connection drops under a coordinator-bound
        # admin request, its issues #4605 / #5397), asynchronous, waited for at most
        # --timeout: a synchronous commit has no timeout and can wait for ever on a
        # coordinator killed under it (issues #3740 / #3847).
        if self._committer is None:
            self._committer = ck.Consumer({
                "group.id": self.cfg.group, "enable.auto.commit": False, "log_level": 2,
                "on_commit": self._committed, **self.cfg.source_conf(),
            })
        with self.lock:
            self._commits_sent += 1
            wanted = self._commits_sent
        self._committer.commit(offsets=offsets, asynchronous=True)
        deadline = time.monotonic() + self.timeout_s
        while self._commits_done < wanted and not self.stopping.is_set():
            if time.monotonic() > deadline:
                log.warning("the mirror's offsets were not committed on the source within "
                            "%d ms; the next micro-batch commits again", self.cfg.api_timeout_ms)
                return
            self._committer.poll(0.1)  # serves the commit's callback

    def _committed(self, err: Any, _partitions: Any) -> None:
        with self.lock:
            self._commits_done += 1
        if err is not None:
            log.warning("cannot commit the mirror's offsets on the source: %s", err)

    # -- consumer-group offsets

    def sync_groups(self) -> int:
        """Translate the committed offsets of the source's groups onto the target; returns
        the number of offsets committed."""
        listed = _result(self.src.list_consumer_groups(request_timeout=self.timeout_s),
                         self.timeout_s, "cannot list the source's consumer groups")
        done = 0
        for listing in listed.valid:
            group = listing.group_id
            if group == self.cfg.group:
                continue
            got = self._group_offsets("source", group)
            wanted: dict[tuple[str, int], int] = {}
            with self.lock:
                for tp, offset in got.items():
                    if tp not in self.syncs.runs:
                        continue
                    off = self.syncs.translate(tp, offset)
                    if off is not None:
                        wanted[tp] = off
            if wanted:
                done += self._commit_translated(group, wanted)
        return done

    def _commit_translated(self, group: str, wanted: dict[tuple[str, int], int]) -> int:
        if self._group_active_on_target(group):
            log.debug("group %s is active on the target: offsets not synced", group)
            return 0
        prefix = self.cfg.topic_prefix
        current = self._group_offsets("target", group)
        commit = {(prefix + t, p): off for (t, p), off in sorted(wanted.items())
                  if current.get((prefix + t, p), -1) < off}
        if commit:
            self._commit_group_offsets(group, commit)
        return len(commit)

    # The group sync's reads and writes of other groups' offsets go through Odradek's own
    # client where it can honour the cluster's client settings (as the connector's reads
    # do: fetcher.supports), else through librdkafka's admin client, whose
    # coordinator-bound requests abort the process when a broker's connection drops under
    # them (librdkafka's issues #4605 / #5397). Both are bounded by --timeout.

    def _groups_call(self, side: str, group: str, what: str,
                     call: Callable[[GroupsClient], Awaitable[_T]]) -> _T:
        """``call`` on the group's coordinator on ``side``, through Odradek's client."""
        conf = self.cfg.source_conf() if side == "source" else self.cfg.target_conf()
        security = self._own_security[side]
        assert security is not None
        servers = [b.strip() for b in conf["bootstrap.servers"].split(",") if b.strip()]

        async def run() -> _T:
            boot = await BrokerConnection.open_any(servers, self.timeout_s, security=security)
            try:
                _, host, port = await GroupsClient(boot).find_coordinator(group)
            finally:
                await boot.close()
            coordinator = await BrokerConnection.open(f"{host}:{port}", self.timeout_s,
                                                      security=security)
            try:
                return await call(GroupsClient(coordinator))
            finally:
                await coordinator.close()

        try:
            return asyncio.run(asyncio.wait_for(run(), self.timeout_s))
        except (ClientError, OSError, TimeoutError) as exc:
            raise TransientMirrorError(f"{what}: {exc or type(exc).__name__}") from None

    def _group_offsets(self, side: str, group: str) -> dict[tuple[str, int], int]:
        """The group's committed offsets on ``side`` (none for a group without any)."""
        what = f"cannot fetch the offsets of group {group!r} on the {side}"
        if self._own_security[side] is not None:
            got = self._groups_call(side, group, what, lambda c: c.fetch_offsets(group))
            return {(o.topic, o.partition): o.offset for o in got}
        from confluent_kafka import ConsumerGroupTopicPartitions

        admin = self.src if side == "source" else self.tgt
        try:
            listed = admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group)], request_timeout=self.timeout_s
            )[group].result(timeout=self.timeout_s)
        except ck.KafkaException:
            if side == "source":
                raise TransientMirrorError(what) from None
            return {}  # the group does not exist on the target yet
        except concurrent.futures.TimeoutError:  # no answer: not now
            raise TransientMirrorError(f"{what}: no answer in {self.timeout_s} s") from None
        return {(tp.topic, tp.partition): tp.offset
                for tp in listed.topic_partitions or [] if tp.offset >= 0}

    def _group_active_on_target(self, group: str) -> bool:
        what = f"cannot describe group {group!r} on the target"
        if self._own_security["target"] is not None:
            desc = self._groups_call("target", group, what, lambda c: c.describe_group(group))
            return bool(desc.members)
        try:
            found = self.tgt.describe_consumer_groups(
                [group], request_timeout=self.timeout_s)[group].result(timeout=self.timeout_s)
        except ck.KafkaException:
            return False  # the group does not exist on the target yet
        except concurrent.futures.TimeoutError:
            raise TransientMirrorError(f"{what}: no answer in {self.timeout_s} s") from None
        return bool(found.members)

    def _commit_group_offsets(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        what = f"cannot commit translated offsets of group {group!r} on the target"
        if self._own_security["target"] is not None:
            self._groups_call("target", group, what,
                              lambda c: c.commit_offsets(group, offsets))
            return
        from confluent_kafka import ConsumerGroupTopicPartitions

        commit = [ck.TopicPartition(t, p, off) for (t, p), off in offsets.items()]
        _result(self.tgt.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, commit)], request_timeout=self.timeout_s
        )[group], self.timeout_s, what)

    def _sync_loop(self) -> None:
        attempt_s = min(FIRST_ATTEMPT_S, self.timeout_s)
        while not self.stopping.wait(self.cfg.sync_interval_s):
            try:
                # one bounded attempt a round, as _retrying's: a failed one renews its
                # client (_topics) and the next round, sync_interval_s later, waits longer
                source = self.sync_topics(attempt_s)
                attempt_s = min(FIRST_ATTEMPT_S, self.timeout_s)
                self.sync_groups()
                self.sync_configs(source)
            except TransientMirrorError as exc:  # a broker away: try again next round
                log.warning("sync skipped this round: %s", exc)
                attempt_s = min(2 * attempt_s, self.timeout_s)
            except Exception as exc:  # reported by run(): ends the mirror
                log.error("the sync thread failed, the mirror stops: %s", exc)
                self.failure = exc
                self.stopping.set()

    # -- the whole job

    def stop(self) -> None:
        """End :meth:`run`: its query stops and it returns (0 unless something failed)."""
        self.stopping.set()

    def run(self, spark: Any = None) -> int:
        """Mirror until stopped (SIGINT, SIGTERM or :meth:`stop`) or failed; 0 once stopped.

        Without ``spark`` (``odradek mirror``) the job starts its own Spark application
        on ``--master``, stops it at the end and takes SIGINT and SIGTERM. Given a running
        SparkSession (an application that embeds the mirror, or the tests' shared
        session), its query runs there, in whatever thread calls this; the session is
        left running and the signals alone."""
        self.sync_topics()  # fails early: unreachable clusters, a target too small
        own = spark is None
        if own:
            from pyspark.sql import SparkSession

            # Spark's Python processes import pyspark compiled, not from pyspark.zip
            # (odradek.spark.home), unless SPARK_HOME or PYSPARK_PYTHON is the user's
            use_compiled_spark_home()
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            spark = (
                SparkSession.builder.master(self.cfg.master)
                .appName("odradek-mirror")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.sql.session.timeZone", "UTC")
                .config("spark.sql.streaming.stopTimeout", "30s")
                # workers forked with the connector imported (odradek.spark.daemon)
                .config("spark.python.daemon.module", "odradek.spark.daemon")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(MirrorSink)
        reader = (
            spark.readStream.format("odradek")
            .option("kafka.bootstrap.servers", self.cfg.source)
            .option("kafka.default.api.timeout.ms", str(self.cfg.api_timeout_ms))
            .option("kafka.isolation.level", self.cfg.isolation_level)
            .option("subscribePattern", self.pattern)
            .option("startingOffsets", "earliest")
            .option("includeHeaders", "true")
            .option("maxOffsetsPerTrigger", str(self.cfg.max_records_per_batch))
        )
        for k, v in self.cfg.source_client.items():
            reader = reader.option(f"kafka.{k}", v)
        stream = reader.load()
        writer = (
            stream.writeStream.foreachBatch(self.process_batch)
            .option("checkpointLocation", str(self.cfg.checkpoint_dir))
            .queryName("odradek-mirror")
        )
        if self.cfg.poll_interval_ms > 0:
            writer = writer.trigger(processingTime=f"{self.cfg.poll_interval_ms} milliseconds")
        query = writer.start()
        if own:
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda *_: self.stop())
        syncer = threading.Thread(target=self._sync_loop, name="odradek-mirror-sync",
                                  daemon=True)
        syncer.start()
        print(f"odradek mirror: {self.cfg.source} -> {self.cfg.target}, topics matching "
              f"{self.pattern!r}, checkpoint {self.cfg.checkpoint_dir}", file=sys.stderr,
              flush=True)
        try:
            while query.isActive and not self.stopping.is_set():
                try:
                    query.awaitTermination(1)
                except StreamingQueryException:
                    break  # it raises the query's failure: query.exception() below has it
            error = query.exception()
        finally:
            self.stopping.set()
            if query.isActive:
                query.stop()
            syncer.join(self.timeout_s)
            if self._committer is not None:
                # close() can wait for ever on a commit a lost coordinator never answers
                # (librdkafka's issue #3740): bounded, in a thread of its own
                closer = threading.Thread(target=self._committer.close, daemon=True,
                                          name="odradek-mirror-close")
                closer.start()
                closer.join(self.timeout_s)
            if own:
                spark.stop()
        if error is not None:
            # str(): the failure's description and the JVM's stack (its repr is empty)
            log.error("the mirror's Spark query failed: %s", str(error))
            raise MirrorError(f"the mirror's Spark query failed: {error}")
        if self.failure is not None:
            raise MirrorError(str(self.failure))
        return 0
