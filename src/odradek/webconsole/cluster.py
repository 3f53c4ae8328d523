"""What the web console asks the cluster, over the Kafka protocol, like any other client.

How it works: one librdkafka ``AdminClient`` (confluent-kafka) is shared by all requests; it
routes each request to the right broker itself (ListOffsets to partition leaders, group
requests to the group coordinator, DescribeCluster/Metadata to any broker), so the console
works against any Kafka-compatible cluster, not only Odradek. Its calls return futures that
block, so the web layer runs these methods in a thread pool. The message browser uses a
short-lived ``Consumer`` with no group (``assign`` + ``consume``), as kcat does, and never
commits. Offsets of many partitions are asked in one ``list_offsets`` call (one ListOffsets
request per leader), so a topic of 1,000 partitions costs two round trips, not 2,000.

librdkafka's own log lines (``%3|...|FAIL|...`` when a broker goes away) go to the
``odradek.webconsole.librdkafka`` logger (confluent-kafka's ``logger`` setting) instead of
straight to stderr. With a logger set, librdkafka queues its log events on the client's main
queue, which only ``poll()`` serves; the admin client's calls never poll it, so a small
thread polls it (``LOG_POLL_S``) until :meth:`ClusterClient.close`. The browser's consumer
serves its log events in its own ``consume()`` calls. A line repeated on every reconnect
attempt passes once per 30 s (:class:`~odradek.text.RepeatFilter`).

Groups of both kinds: librdkafka's ListGroups names each group's type (classic, or a
KIP-848 consumer group) and its ``describe_consumer_groups`` asks ConsumerGroupDescribe
for a consumer group (DescribeGroups for a classic one), which gives each member's target
assignment beside the partitions it owns: a member whose two differ is being reconciled.
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka.admin as _admin
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from odradek.text import RepeatFilter, plural

# confluent-kafka's stubs leave these untyped or unexported; they are used as plain objects.
AlterConfigOpType: Any = _admin.AlterConfigOpType  # type: ignore[attr-defined]
ConfigEntry: Any = _admin.ConfigEntry  # type: ignore[attr-defined]
ConfigResource: Any = _admin.ConfigResource  # type: ignore[attr-defined]
NewPartitions: Any = _admin.NewPartitions  # type: ignore[attr-defined]
NewTopic: Any = _admin.NewTopic  # type: ignore[attr-defined]
OffsetSpec: Any = _admin.OffsetSpec  # type: ignore[attr-defined]

#: librdkafka's request timeout for every admin call (seconds).
TIMEOUT = 15.0
#: States in which a group has no members, so its offsets may be reset (Kafka's
#: ConsumerGroupCommand refuses otherwise).
RESETTABLE_STATES = frozenset({"EMPTY", "DEAD", "UNKNOWN"})
#: How long one poll of the admin client's log queue waits for an event (seconds); also how
#: long :meth:`ClusterClient.close` waits at most for the polling thread to end.
LOG_POLL_S = 0.2
#: Where librdkafka's log lines go (their level mapped from syslog's, as confluent-kafka does).
LIBRDKAFKA_LOG = logging.getLogger("odradek.webconsole.librdkafka")
LIBRDKAFKA_LOG.addFilter(RepeatFilter())  # a reconnect complaint once per 30 s, not 20 a second
#: Samples of a group's total lag kept for the lag chart (one per poll, at most one a second).
LAG_HISTORY = 720


class ConsoleError(Exception):
    """A request the cluster refused, or bad input; the message is shown to the operator."""


@dataclass(frozen=True, slots=True)
class Broker:
    id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class Partition:
    id: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    earliest: int = -1
    latest: int = -1

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        return self.leader < 0

    @property
    def messages(self) -> int:
        return max(self.latest - self.earliest, 0) if self.earliest >= 0 else 0


@dataclass(frozen=True, slots=True)
class TopicSummary:
    name: str
    internal: bool
    partitions: tuple[Partition, ...]

    @property
    def under_replicated(self) -> int:
        return sum(p.under_replicated for p in self.partitions)

    @property
    def offline(self) -> int:
        return sum(p.offline for p in self.partitions)

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)


@dataclass(frozen=True, slots=True)
class Overview:
    cluster_id: str | None
    controller: int | None
    brokers: tuple[Broker, ...]
    topics: tuple[TopicSummary, ...]

    @property
    def partition_count(self) -> int:
        return sum(len(t.partitions) for t in self.topics)

    @property
    def under_replicated(self) -> int:
        return sum(t.under_replicated for t in self.topics)

    @property
    def offline(self) -> int:
        return sum(t.offline for t in self.topics)


@dataclass(frozen=True, slots=True)
class ConfigValue:
    name: str
    value: str | None
    is_default: bool
    read_only: bool
    sensitive: bool


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    client_id: str
    host: str
    group_instance_id: str | None
    assignment: tuple[tuple[str, int], ...]
    #: a consumer group's member (KIP-848): the partitions the group's target assignment
    #: gives it; None in a classic group
    target_assignment: tuple[tuple[str, int], ...] | None = None

    @property
    def reconciling(self) -> bool:
        return self.target_assignment is not None and self.target_assignment != self.assignment


@dataclass(frozen=True, slots=True)
class GroupOffset:
    topic: str
    partition: int
    committed: int | None
    log_end: int
    owner: str | None

    @property
    def lag(self) -> int | None:
        return None if self.committed is None else max(self.log_end - self.committed, 0)


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    state: str
    protocol_type: str
    #: "classic" or "consumer" (KIP-848), as ListGroups v5 names it
    group_type: str = "classic"


@dataclass(frozen=True, slots=True)
class GroupDetail:
    group_id: str
    state: str
    protocol: str
    coordinator: int | None
    members: tuple[Member, ...]
    offsets: tuple[GroupOffset, ...]
    group_type: str = "classic"

    @property
    def total_lag(self) -> int:
        return sum(o.lag or 0 for o in self.offsets)

    @property
    def resettable(self) -> bool:
        return self.state in RESETTABLE_STATES


@dataclass(frozen=True, slots=True)
class Record:
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass
class LagHistory:
    """Samples (unix ms, total lag) per group, bounded; filled whenever the lag is read."""

    samples: dict[str, deque[tuple[int, int]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, group: str, lag: int) -> None:
        now = int(time.time() * 1000)
        with self.lock:
            series = self.samples.setdefault(group, deque(maxlen=LAG_HISTORY))
            if series and now - series[-1][0] < 1000:
                series[-1] = (now, lag)
            else:
                series.append((now, lag))

    def get(self, group: str) -> list[tuple[int, int]]:
        with self.lock:
            return list(self.samples.get(group, ()))


def _result(future: Any, what: str) -> Any:
    try:
        return future.result(timeout=TIMEOUT)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else exc
        name = error.name() if hasattr(error, "name") else type(error).__name__
        text = error.str() if hasattr(error, "str") else str(error)
        raise ConsoleError(f"{what} failed: {name}: {text}") from exc
    except Exception as exc:  # librdkafka timeouts, bad arguments
        raise ConsoleError(f"{what} failed: {exc}") from exc


class ClusterClient:
    """The console's view of one cluster, reached through ``bootstrap``; ``security``:
    librdkafka's security settings (``odradek console --command-config``), for every
    client it makes."""

    def __init__(self, bootstrap: str, security: dict[str, str] | None = None) -> None:
        self.bootstrap = bootstrap
        self._security = dict(security or {})
        self.admin = AdminClient({**self._security,
                                  "bootstrap.servers": bootstrap, "client.id": "odradek-console",
                                  "socket.timeout.ms": int(TIMEOUT * 1000),
                                  "logger": LIBRDKAFKA_LOG})  # type: ignore[dict-item]
        self.lag_history = LagHistory()
        self._closed = threading.Event()
        self._log_poller = threading.Thread(target=self._poll_logs, daemon=True,
                                            name="odradek-console-librdkafka-log")
        self._log_poller.start()

    def _poll_logs(self) -> None:
        """Serve the admin client's queued log events until :meth:`close`."""
        while not self._closed.is_set():
            self.admin.poll(LOG_POLL_S)

    def close(self) -> None:
        """Stop the log polling thread; the admin client itself is freed with this object."""
        self._closed.set()
        self._log_poller.join(LOG_POLL_S * 10)

    # -- cluster and topics -------------------------------------------------------------------

    def _metadata(self) -> Any:
        """Metadata of every topic (no topic named: a named one may be auto-created)."""
        try:
            return self.admin.list_topics(timeout=TIMEOUT)
        except KafkaException as exc:
            raise ConsoleError(f"reading metadata failed: {exc.args[0]}") from exc

    @staticmethod
    def _topic(meta: Any) -> TopicSummary:
        parts = tuple(sorted(
            (Partition(p.id, p.leader, tuple(p.replicas), tuple(p.isrs))
             for p in meta.partitions.values()), key=lambda p: p.id))
        return TopicSummary(meta.topic, meta.topic.startswith("__"), parts)

    def overview(self) -> Overview:
        described = _result(self.admin.describe_cluster(request_timeout=TIMEOUT),
                            "describing the cluster")
        meta = self._metadata()
        brokers = tuple(sorted((Broker(n.id, n.host, n.port, n.rack)
                                for n in described.nodes), key=lambda b: b.id))
        controller = described.controller.id if described.controller is not None else None
        topics = tuple(sorted((self._topic(t) for t in meta.topics.values() if t.error is None),
                              key=lambda t: t.name))
        return Overview(described.cluster_id, controller, brokers, topics)

    def topic(self, name: str, with_offsets: bool = True) -> TopicSummary:
        """The topic's partitions; with ``with_offsets``, their earliest and latest offsets
        too (both asked at once)."""
        # DescribeTopics, not list_topics(name): librdkafka's Metadata request for a named
        # topic allows auto-creation, and opening a page must never create a topic.
        futures = self.admin.describe_topics(TopicCollection([name]), request_timeout=TIMEOUT)
        described = _result(futures[name], f"describing topic {name}")
        summary = TopicSummary(name, bool(described.is_internal), tuple(sorted(
            (Partition(p.id, p.leader.id if p.leader is not None else -1,
                       tuple(n.id for n in p.replicas), tuple(n.id for n in p.isr))
             for p in described.partitions), key=lambda p: p.id)))
        if not with_offsets:
            return summary
        wanted = [(name, p.id) for p in summary.partitions]
        earliest, latest = self.offsets_many(wanted, [OffsetSpec.earliest(), OffsetSpec.latest()])
        parts = tuple(
            Partition(p.id, p.leader, p.replicas, p.isr, earliest.get((name, p.id), -1),
                      latest.get((name, p.id), -1))
            for p in summary.partitions
        )
        return TopicSummary(summary.name, summary.internal, parts)

    def offsets(self, partitions: list[tuple[str, int]], spec: Any) -> dict[tuple[str, int], int]:
        """One offset per partition (earliest, latest or for a timestamp), in one call."""
        return self.offsets_many(partitions, [spec])[0]

    def offsets_many(self, partitions: list[tuple[str, int]],
                     specs: list[Any]) -> list[dict[tuple[str, int], int]]:
        """Like :meth:`offsets` for several specs, all sent before any answer is awaited."""
        if not partitions:
            return [{} for _ in specs]
        pending = [self.admin.list_offsets({TopicPartition(t, p): spec for t, p in partitions},
                                           request_timeout=TIMEOUT) for spec in specs]
        answers: list[dict[tuple[str, int], int]] = []
        for futures in pending:
            out: dict[tuple[str, int], int] = {}
            for tp, fut in futures.items():
                try:
                    out[(tp.topic, tp.partition)] = fut.result(timeout=TIMEOUT).offset
                except KafkaException:  # e.g. leader not available: shown as unknown (-1)
                    out[(tp.topic, tp.partition)] = -1
            answers.append(out)
        return answers

    def log_range(self, topic: str, partition: int) -> tuple[int, int]:
        """(earliest, latest) offsets of one partition."""
        tp = [(topic, partition)]
        earliest, latest = self.offsets_many(tp, [OffsetSpec.earliest(), OffsetSpec.latest()])
        return earliest[tp[0]], latest[tp[0]]

    def configs(self, name: str) -> list[ConfigValue]:
        res = ConfigResource(ConfigResource.Type.TOPIC, name)
        entries = _result(self.admin.describe_configs([res], request_timeout=TIMEOUT)[res],
                          f"describing configs of {name}")
        return sorted((ConfigValue(e.name, e.value, bool(e.is_default), bool(e.is_read_only),
                                   bool(e.is_sensitive)) for e in entries.values()),
                      key=lambda c: c.name)

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: dict[str, str]) -> None:
        if not name:
            raise ConsoleError("a topic needs a name")
        fut = self.admin.create_topics(
            [NewTopic(name, partitions, replication_factor, config=configs)],
            request_timeout=TIMEOUT)[name]
        _result(fut, f"creating topic {name}")

    def delete_topic(self, name: str) -> None:
        _result(self.admin.delete_topics([name], request_timeout=TIMEOUT)[name],
                f"deleting topic {name}")

    def add_partitions(self, name: str, total: int) -> None:
        _result(self.admin.create_partitions([NewPartitions(name, total)],
                                             request_timeout=TIMEOUT)[name],
                f"adding partitions to {name}")

    def alter_config(self, name: str, key: str, value: str | None) -> None:
        """Set ``key`` (or, with ``value`` None, go back to the default), as
        IncrementalAlterConfigs does (KIP-339)."""
        op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
        res = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
            ConfigEntry(key, value, incremental_operation=op)])
        _result(self.admin.incremental_alter_configs([res], request_timeout=TIMEOUT)[res],
                f"altering {key} of {name}")

    # -- messages -----------------------------------------------------------------------------

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int:
        found = self.offsets([(topic, partition)], OffsetSpec.for_timestamp(timestamp_ms))
        offset = found.get((topic, partition), -1)
        if offset < 0:  # no record at or after that time: the end of the log
            offset = self.offsets([(topic, partition)], OffsetSpec.latest())[(topic, partition)]
        return offset

    def read(self, topic: str, partition: int, offset: int, limit: int) -> list[Record]:
        """Up to ``limit`` records of one partition from ``offset``, up to the log end as it
        is now (the live tail asks again from the next offset a second later). Below the log
        start the read starts at the log start; a compacted gap ends at the partition end."""
        end = self.offsets([(topic, partition)], OffsetSpec.latest()).get((topic, partition), -1)
        if end < 0:
            raise ConsoleError(f"{topic}-{partition} has no leader to read from")
        if offset >= end:
            return []
        want = min(limit, end - max(offset, 0))
        consumer = Consumer({
            **self._security,
            "bootstrap.servers": self.bootstrap, "group.id": "odradek-console-browser",
            "enable.auto.commit": False, "enable.partition.eof": True,
            "auto.offset.reset": "earliest", "client.id": "odradek-console",
            "fetch.wait.max.ms": 100, "logger": LIBRDKAFKA_LOG,
        })
        try:
            consumer.assign([TopicPartition(topic, partition, max(offset, 0))])
            out: list[Record] = []
            deadline = time.monotonic() + TIMEOUT
            eof = False
            while not eof and len(out) < want and time.monotonic() < deadline:
                msgs: list[Any] = consumer.consume(want - len(out), timeout=0.5)
                for m in msgs:
                    error = m.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            eof = True
                            continue
                        raise ConsoleError(f"reading {topic}-{partition}: {error.str()}")
                    out.append(Record(m.partition(), m.offset(), m.timestamp()[1], m.key(),
                                      m.value(), tuple((k, v) for k, v in (m.headers() or ()))))
            return out[:want]
        finally:
            consumer.close()

    # -- consumer groups ----------------------------------------------------------------------

    def groups(self) -> list[GroupListing]:
        result = _result(self.admin.list_consumer_groups(request_timeout=TIMEOUT),
                         "listing groups")
        return sorted((GroupListing(g.group_id, g.state.name if g.state else "UNKNOWN",
                                    "consumer" if g.is_simple_consumer_group is False
                                    else "simple", _group_type(g.type))
                       for g in result.valid), key=lambda g: g.group_id)

    def group(self, group_id: str) -> GroupDetail:
        described = _result(
            self.admin.describe_consumer_groups([group_id], request_timeout=TIMEOUT)[group_id],
            f"describing group {group_id}")
        group_type = _group_type(described.type)
        members = tuple(
            Member(m.member_id, m.client_id, m.host, m.group_instance_id,
                   _partitions(m.assignment),
                   _partitions(m.target_assignment) if group_type == "consumer" else None)
            for m in described.members)
        owner = {tp: m.client_id or m.member_id for m in members for tp in m.assignment}
        committed = self.committed(group_id)
        wanted = sorted(set(committed) | set(owner))
        latest = self.offsets(wanted, OffsetSpec.latest())
        offsets = tuple(GroupOffset(t, p, committed.get((t, p)), latest.get((t, p), -1),
                                    owner.get((t, p))) for t, p in wanted)
        state = described.state.name if described.state else "UNKNOWN"
        coordinator = described.coordinator.id if described.coordinator is not None else None
        detail = GroupDetail(group_id, state, described.partition_assignor or "", coordinator,
                             members, offsets, group_type)
        self.lag_history.add(group_id, detail.total_lag)
        return detail

    def committed(self, group_id: str) -> dict[tuple[str, int], int]:
        futures = self.admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id)], request_timeout=TIMEOUT)
        result = _result(futures[group_id], f"fetching offsets of {group_id}")
        return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions
                if tp.offset >= 0}

    def reset_offsets(self, group_id: str, how: str, value: str = "") -> dict[tuple[str, int], int]:
        """New committed offsets for every partition the group has committed, like
        ``odradek groups reset-offsets --all-topics --execute``: refused unless the group is
        empty; targets are clamped to [earliest, latest]."""
        detail = self.group(group_id)
        if not detail.resettable:
            raise ConsoleError(
                f"group {group_id} is {detail.state} with {plural(len(detail.members), 'member')}; "
                "stop its consumers before resetting offsets")
        targets = [(o.topic, o.partition) for o in detail.offsets if o.committed is not None]
        if not targets:
            raise ConsoleError(f"group {group_id} has no committed offsets to reset")
        earliest, latest = self.offsets_many(targets,
                                             [OffsetSpec.earliest(), OffsetSpec.latest()])
        current = {(o.topic, o.partition): o.committed for o in detail.offsets}
        if how == "earliest":
            wanted = dict(earliest)
        elif how == "latest":
            wanted = dict(latest)
        elif how == "offset":
            wanted = {tp: _int(value, "offset") for tp in targets}
        elif how == "shift":
            shift = _int(value, "shift")
            wanted = {tp: (current[tp] or 0) + shift for tp in targets}
        elif how == "datetime":
            ts = parse_time(value)
            wanted = self.offsets(targets, OffsetSpec.for_timestamp(ts))
            wanted = {tp: (o if o >= 0 else latest[tp]) for tp, o in wanted.items()}
        else:
            raise ConsoleError(f"unknown reset strategy {how!r}")
        plan = {tp: min(max(wanted[tp], earliest[tp]), latest[tp]) for tp in targets}
        request = ConsumerGroupTopicPartitions(
            group_id, [TopicPartition(t, p, o) for (t, p), o in sorted(plan.items())])
        _result(self.admin.alter_consumer_group_offsets([request],
                                                        request_timeout=TIMEOUT)[group_id],
                f"committing offsets of {group_id}")
        return plan


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConsoleError(f"{what} must be an integer, not {text!r}") from None


def parse_time(text: str) -> int:
    """Unix milliseconds from ISO 8601 (``2024-05-01T12:00:00``, UTC when no zone is given)
    or from an integer already in milliseconds."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ConsoleError(f"not a timestamp: {text!r} (ISO 8601 or unix ms)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


def render_bytes(data: bytes | None, mode: str) -> str:
    """``data`` as text (UTF-8, invalid bytes replaced), pretty JSON or hex; never HTML: the
    templates escape whatever this returns."""
    if data is None:
        return "null"
    if mode == "hex":
        return data.hex(" ")
    if mode == "json":
        try:
            return json.dumps(json.loads(data), indent=2, ensure_ascii=False)
        except ValueError:
            return data.decode("utf-8", "replace")
    return data.decode("utf-8", "replace")


def _group_type(value: Any) -> str:
    """librdkafka's ConsumerGroupType as ListGroups names it: "consumer" for a KIP-848
    group, else "classic" (UNKNOWN: a broker older than ListGroups v5 has classic ones)."""
    name = getattr(value, "name", str(value or ""))
    return "consumer" if name.upper() == "CONSUMER" else "classic"


def _partitions(assignment: Any) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((tp.topic, tp.partition)
                        for tp in (assignment.topic_partitions if assignment else ())))

