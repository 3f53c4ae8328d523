"""The fault-injection harness of issue 15: a real ZooKeeper, three broker processes,
idempotent acks=all producers and a consumer, while faults are injected.

Used by the short run in the suite (``tests/interop/test_faults.py``) and the long one
(``bench/faults.py``). The oracle, checked by :meth:`FaultRun.verify`:

- every acknowledged record is read back exactly once, at the offset its acknowledgement
  named, in order per partition (offsets unchanged); one acknowledged without an offset
  (librdkafka infers a delivery from a later batch's success and names none) is found by
  its value;
- every record a consumer saw during the run is still there at the same offset at the end
  (what was visible below the high watermark is never taken back);
- no value appears twice (the idempotent producer's retries are deduplicated);
- the replicas of every partition hold the same bytes (no divergence);

and it counts, per fault, the time from the fault to the moment every partition has
acknowledged a record handed to the producer after the fault's act (the kill, the pause,
the cut): an acknowledgement of a record sent before it proves nothing, and on a loaded
machine the producer's thread may deliver a backlog of those well after the act.

:meth:`FaultRun.interrupt` (safe to call from a signal handler: it sets a flag) makes the
fault in progress give up at its next wait (:class:`Interrupted`); its own clean-up still
runs (SIGCONT, proxies healed) and :meth:`FaultRun.heal` restores the rest, so a run can be
stopped early and still be verified.
"""

from __future__ import annotations

import json
import logging
import random
import sys
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from tests._deadlines import expired

from ._cluster import SESSION_TIMEOUT_MS, Cluster

TOPIC_CONFIG = {"min.insync.replicas": "2"}


class Interrupted(Exception):
    """Raised by a fault's wait once :meth:`FaultRun.interrupt` was called."""


@dataclass
class Report:
    faults: list[tuple[str, float]] = field(default_factory=list)  # (what, s to next ack)
    acknowledged: int = 0
    failed_sends: int = 0
    lost: int = 0
    moved: int = 0
    duplicated: int = 0
    retracted: int = 0
    diverged: list[str] = field(default_factory=list)
    # each value found more than once: where (partition, offsets)
    duplicates: list[str] = field(default_factory=list)
    # each acknowledged record not read back: where, and how far the read got
    missing: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.moved or self.duplicated or self.retracted
                    or self.diverged)

    def summary(self) -> str:
        times = [t for _, t in self.faults]
        worst = max(times, default=0.0)
        return (f"faults {len(self.faults)}, acknowledged {self.acknowledged}, failed sends "
                f"{self.failed_sends}, lost {self.lost}, moved {self.moved}, duplicated "
                f"{self.duplicated}, retracted {self.retracted}, diverged "
                f"{len(self.diverged)}; fault to next ack: worst {worst:.1f} s, mean "
                f"{sum(times) / max(1, len(times)):.1f} s")


def compare_read_back(
    report: Report, acked: dict[int, dict[int, bytes]], unplaced: dict[int, list[bytes]],
    seen: dict[int, dict[int, bytes]], final: dict[int, dict[int, bytes]],
    ends: dict[int, int],
) -> None:
    """The oracle's comparison, into ``report``: each record acknowledged at an offset is
    read back there (else lost, or moved if another value is there); each acknowledged
    without one (``unplaced``: librdkafka names no offset when it infers a delivery from
    a later batch's success) is read back in its partition; the acknowledged records of a
    partition lie in the order they were sent (values ``v-<sequence>``); what a consumer
    saw during the run is still there; no value is read back twice."""
    values: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for p in sorted(final.keys() | acked.keys() | unplaced.keys()):
        read = final.get(p, {})
        where: dict[bytes, int] = {}
        for offset, value in read.items():
            values[value].append((p, offset))
            where[value] = offset

        def lost(value: bytes, at: str, p: int = p, read: dict[int, bytes] = read) -> None:
            report.lost += 1
            report.missing.append(
                f"lost {value!r} acknowledged {at}; end offset {ends.get(p)}, "
                f"{len(read)} records read back, the highest at {max(read, default=-1)}")

        placed: list[tuple[int, int]] = []  # (sequence, offset) of each found
        for offset, value in acked.get(p, {}).items():
            found = read.get(offset)
            if found is None:
                lost(value, f"at (partition, offset) ({p}, {offset})")
            elif found != value:
                report.moved += 1
            else:
                placed.append((int(value[2:]), offset))
        for value in unplaced.get(p, ()):
            offset = where.get(value)
            if offset is None:
                lost(value, f"without an offset on partition {p}")
            else:
                placed.append((int(value[2:]), offset))
        placed.sort()
        for (seq_a, off_a), (seq_b, off_b) in pairwise(placed):
            if off_b <= off_a:
                report.moved += 1
                report.missing.append(
                    f"out of order on partition {p}: v-{seq_a} at {off_a}, v-{seq_b} at "
                    f"{off_b}")
        for offset, value in seen.get(p, {}).items():
            if read.get(offset) != value:
                report.retracted += 1
    report.duplicated = sum(len(at) - 1 for at in values.values() if len(at) > 1)
    report.duplicates = [f"{value!r} at (partition, offset) {at}"
                         for value, at in values.items() if len(at) > 1]


def partition_state(cluster: Cluster, topic: str, partition: int) -> dict[str, Any] | None:
    raw = cluster.zk_get(f"/brokers/topics/{topic}/partitions/{partition}/state")
    return json.loads(raw) if raw else None


# librdkafka (2.10 and later) forgets the brokers a Metadata answer does not list. When
# every broker was killed, the first one back answers alone (the others still wait for
# their old sessions to expire), so a client may know that one broker only; killed next,
# it leaves the client with no broker to ask, as it would against Kafka, until KIP-899's
# re-bootstrap from bootstrap.servers: after 300 s by default, after 5 s here, so that a
# fault's recovery time measures the cluster rather than that timer.
REBOOTSTRAP = {"metadata.recovery.strategy": "rebootstrap",
               "metadata.recovery.rebootstrap.trigger.ms": 5000}


#: librdkafka's idempotence log lines worth keeping past the ring: a batch failed, retried,
#: or taken as delivered without an offset (DUPSEQ: "marking the messages successfully
#: delivered"), the producer id's state.
NOTABLE = ("DUPSEQ", "ERRSEQ", "UNKPID", "ERRPID", "FATAL", "failed", "persisted", "Persisted",
           "retry", "Retry", "epoch", "PID")


class _RingLogger(logging.Handler):
    """A librdkafka client's log into a bounded ring (errors also to standard error, as
    librdkafka prints them without a logger); its idempotence lines (:data:`NOTABLE`) are
    also kept in ``notable``, a ring of their own, since the whole ring holds only the
    last few seconds of a fault run."""

    def __init__(self, ring: deque[str], notable: deque[str] | None = None) -> None:
        super().__init__(logging.DEBUG)
        self.ring = ring
        self.notable = notable
        self.logger = logging.getLogger(f"faults.librdkafka.{id(self)}")
        self.logger.propagate = False
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        line = f"{time.strftime('%H:%M:%S', time.localtime(record.created))}" \
               f".{int(record.msecs):03d} {record.getMessage()}"
        self.ring.append(line)
        if self.notable is not None and any(word in line for word in NOTABLE):
            self.notable.append(line)
        if record.levelno >= logging.ERROR:
            print(f"librdkafka: {line}", file=sys.stderr, flush=True)


class FaultRun:
    """One topic (replication factor 3, ``min.insync.replicas`` 2), a producer thread and
    a consumer thread on ``cluster``; :meth:`inject` runs faults, :meth:`verify` checks."""

    def __init__(self, cluster: Cluster, topic: str, partitions: int = 3,
                 rate_per_s: float = 500.0) -> None:
        self.cluster = cluster
        self.topic = topic
        self.partitions = partitions
        self.rate_per_s = rate_per_s
        self.acked: dict[int, dict[int, bytes]] = defaultdict(dict)
        # acknowledged without an offset: librdkafka's implicit acknowledgement (a later
        # batch of the partition succeeded, so an earlier one whose answer was lost or an
        # error was written after all) and its DUPLICATE_SEQUENCE_NUMBER case; found by
        # value when read back
        self.acked_unplaced: dict[int, list[bytes]] = defaultdict(list)
        self.seen: dict[int, dict[int, bytes]] = defaultdict(dict)
        self.failed = 0
        # records handed to the producer so far (their values are v-<sequence>), and the
        # highest sequence acknowledged on each partition
        self.sent = 0
        self.acked_up_to: dict[int, int] = {}
        self._recovery_from = 0  # the first sequence that counts as the fault's recovery
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.errors: list[str] = []
        # what the harness met that is neither a failure nor a finding
        self.notes: list[str] = []
        self.report = Report()
        # a plain flag, not an Event: set from signal handlers, where locks may deadlock
        self.interrupted = False
        # the producer's librdkafka log (its broker, topic and idempotence events), the
        # newest lines kept for the report of a fault the cluster did not recover from
        self.client_log: deque[str] = deque(maxlen=20_000)
        self.client_notable: deque[str] = deque(maxlen=20_000)
        self._producer: Any = None

    # -- set-up ---------------------------------------------------------------------------
    def create_topic(self) -> None:
        self.cluster.create_topic(self.topic, self.partitions, 3, TOPIC_CONFIG)
        self.cluster.wait_for(self.fully_in_sync, 60, f"{self.topic} fully in sync")

    def fully_in_sync(self) -> bool:
        """Every broker registered, a controller elected, and every partition led with its
        three replicas in sync."""
        if not all(self.cluster.registered(b) for b in sorted(self.cluster.brokers)):
            return False
        if self.cluster.controller()[0] is None:
            return False
        for p in range(self.partitions):
            state = partition_state(self.cluster, self.topic, p)
            if state is None or state["leader"] < 0 or len(state["isr"]) != 3:
                return False
        return True

    def _state(self, partition: int) -> dict[str, Any]:
        return partition_state(self.cluster, self.topic, partition) or {"leader": -1,
                                                                        "isr": []}

    def leader(self, partition: int = 0) -> int:
        state = partition_state(self.cluster, self.topic, partition)
        assert state is not None
        return int(state["leader"])

    # -- load -----------------------------------------------------------------------------
    def start(self) -> None:
        for target in (self._produce, self._consume):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self._threads.append(thread)
        self.wait_acks(1, 60)

    def _produce(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({
            "bootstrap.servers": self.cluster.bootstrap, "acks": "all",
            "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 120000,
            "debug": "eos,broker,topic",
            "logger": _RingLogger(self.client_log, self.client_notable).logger,
            **REBOOTSTRAP,
        })
        self._producer = producer

        def delivered(err: Any, msg: Any) -> None:
            with self._lock:
                if err is not None:
                    self.failed += 1
                    return
                value = msg.value()
                offset = msg.offset()
                if offset is None:
                    self.acked_unplaced[msg.partition()].append(value)
                else:
                    self.acked[msg.partition()][offset] = value
                sequence = int(value[2:])
                if sequence > self.acked_up_to.get(msg.partition(), -1):
                    self.acked_up_to[msg.partition()] = sequence

        sequence = 0
        # rate_per_s <= 0: as fast as the producer goes (busy partitions show races that a
        # paced load hides)
        interval = 1.0 / self.rate_per_s if self.rate_per_s > 0 else 0.0
        next_send = time.monotonic()
        try:
            while not self._stop.is_set():
                value = f"v-{sequence}".encode()
                try:
                    producer.produce(self.topic, value=value,
                                     partition=sequence % self.partitions,
                                     on_delivery=delivered)
                except BufferError:  # the producer's queue is full: let it drain
                    producer.poll(0.01)
                    continue
                sequence += 1
                self.sent = sequence
                if interval:
                    next_send += interval
                    producer.poll(max(0.0, next_send - time.monotonic()))
                else:
                    producer.poll(0)
            remaining = producer.flush(120)
            if remaining:
                self.errors.append(f"{remaining} records never answered")
        except Exception as exc:
            self.errors.append(f"producer: {exc!r}")

    def _consume(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({
            "bootstrap.servers": self.cluster.bootstrap, "group.id": f"{self.topic}-watch",
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "log_level": 3,
            **REBOOTSTRAP,
        })
        consumer.assign([TopicPartition(self.topic, p, 0) for p in range(self.partitions)])
        try:
            while not self._stop.is_set():
                for msg in consumer.consume(500, 0.2):
                    if msg.error() is None:
                        with self._lock:
                            self.seen[msg.partition()][msg.offset()] = msg.value()
        except Exception as exc:
            self.errors.append(f"consumer: {exc!r}")
        finally:
            consumer.close()

    def acks(self) -> int:
        with self._lock:
            return (sum(len(v) for v in self.acked.values())
                    + sum(len(v) for v in self.acked_unplaced.values()))

    def wait_acks(self, more: int, timeout: float) -> float:
        """Wait for ``more`` acknowledgements from now; the seconds it took."""
        started = time.monotonic()
        target = self.acks() + more
        self.cluster.wait_for(lambda: self.acks() >= target, timeout,
                              f"{more} more acknowledged records")
        return time.monotonic() - started

    # -- faults ---------------------------------------------------------------------------
    def inject(self, name: str, fault: Callable[[], None]) -> float:
        """Run ``fault``; return (and report) the seconds from its start until every
        partition acknowledged a record sent after the fault's act (:meth:`_acted`; a
        fault that does not call it, from its start)."""
        started = time.monotonic()
        self._recovery_from = self.sent
        fault()

        def resumed() -> bool:
            with self._lock:
                return all(self.acked_up_to.get(p, -1) >= self._recovery_from
                           for p in range(self.partitions))

        try:
            self._wait(resumed, 4 * SESSION_TIMEOUT_MS / 1000 + 60,
                       f"acknowledgements on every partition after {name}")
        except AssertionError as exc:
            whole = self.cluster.root / f"librdkafka-producer-{time.strftime('%H%M%S')}.log"
            whole.write_text("\n".join(self.client_log) + "\n")
            raise AssertionError(f"{exc}\n{self.stall_report()}\n(the producer's whole "
                                 f"log kept: {whole})") from None
        took = time.monotonic() - started
        self.report.faults.append((name, took))
        return took

    def stall_report(self, client_lines: int = 400) -> str:
        """Where each partition stands for the producer and in ZooKeeper, and the
        producer's newest librdkafka lines: what a fault the cluster did not recover from
        needs to be explained."""
        with self._lock:
            acked = dict(sorted(self.acked_up_to.items()))
        queued = len(self._producer) if self._producer is not None else None
        lines = [f"--- producer: {self.sent} records sent, recovery counted from "
                 f"{self._recovery_from}, highest acknowledged per partition {acked}, "
                 f"{queued} waiting in its queue"]
        lines += [f"{self.topic}-{p} in ZooKeeper: {self._state(p)}"
                  for p in range(self.partitions)]
        lines.append(f"--- the producer's librdkafka log (last {client_lines} lines)")
        lines += list(self.client_log)[-client_lines:]
        return "\n".join(lines)

    def _acted(self) -> None:
        """The fault's act is done: only records sent from now on show the recovery."""
        self._recovery_from = self.sent

    def interrupt(self) -> None:
        """Make the fault in progress stop at its next wait (see the module's docstring)."""
        self.interrupted = True

    def _wait(self, condition: Callable[[], Any], timeout: float, what: str) -> None:
        """A fault's wait: :meth:`Cluster.wait_for`, given up once :meth:`interrupt` was
        called."""
        def checked() -> Any:
            if self.interrupted:
                raise Interrupted(what)
            return condition()

        self.cluster.wait_for(checked, timeout, what)

    def heal(self, timeout: float = 90.0) -> None:
        zookeeper = self.cluster.zookeeper
        if zookeeper is not None:
            zookeeper.resume()  # a ZooKeeper pause stopped midway (SIGCONT is harmless)
        self.cluster.restore()
        self.cluster.wait_for(self.fully_in_sync, timeout, f"{self.topic} back in sync")

    def kill9_leader(self) -> None:
        self.cluster.kill9(self.leader(random.randrange(self.partitions)))
        self._acted()

    def kill9_controller(self) -> None:
        controller, _ = self.cluster.wait_controller()
        self.cluster.kill9(controller)
        self._acted()

    def pause_past_session(self) -> None:
        """SIGSTOP a partition leader until ZooKeeper expires its session, then SIGCONT."""
        victim = self.leader(random.randrange(self.partitions))
        self.cluster.sigstop(victim)
        self._acted()
        try:
            self._wait(lambda: not self.cluster.registered(victim),
                       2 * SESSION_TIMEOUT_MS / 1000 + 10, f"{victim} expired")
        finally:
            self.cluster.sigcont(victim)

    def sigterm_leader(self) -> None:
        """SIGTERM a partition leader under load (a controlled shutdown: the controller
        moves its leaderships before it unregisters); :meth:`heal` starts it again."""
        # no _acted(): a leader shutting down keeps serving until its leaderships moved,
        # so records sent after the SIGTERM may rightly be acknowledged at once
        self.cluster.stop(self.leader(random.randrange(self.partitions)))

    def kill9_all(self) -> None:
        """kill -9 of every broker at once, then every broker started again (each waits
        out its old registration until ZooKeeper expires it)."""
        for broker_id in sorted(self.cluster.brokers):
            self.cluster.kill9(broker_id)
        self._acted()
        self.cluster.restore()

    def pause_follower_past_session(self) -> None:
        """SIGSTOP a follower (in a partition's ISR, not its leader) until ZooKeeper expires
        its session, then SIGCONT: it comes back fenced, out of the ISRs, and catches up."""
        state = self._state(random.randrange(self.partitions))
        followers = [b for b in state["isr"] if b != state["leader"]]
        victim = random.choice(followers or sorted(self.cluster.brokers))
        self.cluster.sigstop(victim)
        self._acted()
        try:
            self._wait(lambda: not self.cluster.registered(victim),
                       2 * SESSION_TIMEOUT_MS / 1000 + 10, f"{victim} expired")
        finally:
            self.cluster.sigcont(victim)

    def pause_zookeeper(self, past_session: bool) -> None:
        """SIGSTOP ZooKeeper for half the session timeout, or (``past_session``) for twice
        it, then SIGCONT: the brokers ride out the first; after the second their sessions
        may be expired by ZooKeeper as it resumes, and they register again. The pause is
        the fault itself, hence a fixed length."""
        zookeeper = self.cluster.zookeeper
        assert zookeeper is not None
        seconds = SESSION_TIMEOUT_MS / 1000 * (2.0 if past_session else 0.5)
        zookeeper.pause()
        self._acted()
        try:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and not self.interrupted:
                time.sleep(0.05)
        finally:
            zookeeper.resume()

    def isolate_leader(self, zookeeper: bool = False) -> None:
        """Cut a partition leader off from clients and the other brokers (and, with
        ``zookeeper``, from ZooKeeper) until the cut has had its effect, then reconnect it.
        Without ZooKeeper cut it stays registered and keeps its leadership: the cut lasts
        until its followers have left its ISR (with min.insync.replicas 2 it then refuses
        acks=all). With it, the cut lasts until the controller has moved its leadership
        away; back, it truncates what it alone held."""
        partition = random.randrange(self.partitions)
        victim = self.leader(partition)
        self.cluster.isolate(victim, zookeeper)
        self._acted()
        try:
            if zookeeper:
                self._wait(
                    lambda: self._state(partition)["leader"] not in (victim, -1),
                    2 * SESSION_TIMEOUT_MS / 1000 + 20,
                    f"leadership of partition {partition} moved off the isolated {victim}")
            else:
                # The victim was read as leader an instant ago, but a controller may be
                # moving leaderships still (ZooKeeper expiring every session as it
                # resumes from a pause past the session timeout, the states not yet
                # rewritten): a victim that is no longer leader has no ISR to shrink.
                def effect() -> bool:
                    state = self._state(partition)
                    if state["leader"] != victim:
                        self.notes.append(f"a leader cut off: {victim} was no longer leader "
                                          f"of partition {partition} (now {state})")
                        return True
                    return bool(state["isr"] == [victim])

                self._wait(effect, 60, f"the isolated {victim} alone in its ISR")
        finally:
            self.cluster.reconnect(victim)

    def rolling_restart(self) -> None:
        """SIGTERM each broker in turn (a controlled shutdown), waiting for it to rejoin
        and every partition to be fully in sync before the next."""
        for broker_id in sorted(self.cluster.brokers):
            self.cluster.stop(broker_id)
            self.cluster.start(broker_id)
            self._wait(self.fully_in_sync, 90, f"in sync after restarting {broker_id}")

    # -- the oracle -----------------------------------------------------------------------
    def finish(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(180)

    def verify(self) -> Report:
        """Read everything back and compare (every broker must be up and in sync)."""
        from confluent_kafka import Consumer, TopicPartition

        report = self.report
        report.acknowledged = self.acks()
        report.failed_sends = self.failed
        ends = self._end_offsets()
        final: dict[int, dict[int, bytes]] = defaultdict(dict)
        consumer = Consumer({
            "bootstrap.servers": self.cluster.bootstrap, "group.id": f"{self.topic}-verify",
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "log_level": 3,
        })
        consumer.assign([TopicPartition(self.topic, p, 0) for p in range(self.partitions)])
        started = time.monotonic()
        try:
            while (any(len(final[p]) < ends[p] for p in range(self.partitions))
                   and not expired(started, 120)):
                for msg in consumer.consume(1000, 1.0):
                    if msg.error() is None:
                        final[msg.partition()][msg.offset()] = msg.value()
        finally:
            consumer.close()
        compare_read_back(report, self.acked, self.acked_unplaced, self.seen, final, ends)
        report.diverged = self._diverged()
        if report.lost:  # what the producer's librdkafka said, for the cause
            kept = self.cluster.root / f"librdkafka-producer-notable-{time.strftime('%H%M%S')}.log"
            kept.write_text("\n".join([*self.client_notable, "--- the last lines:",
                                        *self.client_log]) + "\n")
            report.missing.append(f"(the producer's idempotence lines kept: {kept})")
        return report

    def _end_offsets(self) -> dict[int, int]:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.cluster.bootstrap,
                             "group.id": f"{self.topic}-ends", "log_level": 3})
        try:
            return {p: consumer.get_watermark_offsets(TopicPartition(self.topic, p), 30)[1]
                    for p in range(self.partitions)}
        finally:
            consumer.close()

    def _log_bytes(self, broker_id: int, partition: int) -> bytes:
        directory: Path = self.cluster.data_dir(broker_id) / f"{self.topic}-{partition}"
        return b"".join(f.read_bytes() for f in sorted(directory.glob("*.log")))

    def _diverged(self) -> list[str]:
        """Partitions whose replicas' logs differ once followers caught up (waited for)."""
        out = []
        for p in range(self.partitions):
            def same(p: int = p) -> bool:
                logs = {b: self._log_bytes(b, p) for b in sorted(self.cluster.brokers)}
                return len(set(logs.values())) == 1

            try:
                self.cluster.wait_for(same, 60, f"replicas of {self.topic}-{p} equal")
            except AssertionError:
                sizes = {b: len(self._log_bytes(b, p)) for b in sorted(self.cluster.brokers)}
                out.append(f"{self.topic}-{p}: {sizes}")
        return out
