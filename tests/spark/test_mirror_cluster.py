"""``odradek mirror`` between two clusters in cluster mode, losing a broker on each side.

One ZooKeeper (Debian's) holds two clusters in two chroots, each of two brokers; the
mirrored topic has replication factor 2 on both sides (``min.insync.replicas`` 1, so a
partition stays writable with one replica left). A producer writes to the source with
acks=all (idempotent) and keeps every acknowledged record. While ``odradek mirror``
runs, a broker that leads source partitions is killed with SIGKILL, and later one that
leads target partitions; then both come back and take their partitions' leadership back.
The oracle: every acknowledged record is on
the target exactly once, in the same partition, in the source's order; the target's
partitions equal the source's record for record; the mirror was never restarted. The
mirror's query runs in the tests' Spark session (``mirror_in_session``): the brokers' loss
is the subject here, not the command's process (tests/spark/test_mirror.py kills that).
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
import traceback
from collections import defaultdict
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from tests.interop._cluster import Cluster, cluster_zookeeper, running_cluster
from tests.spark.test_mirror import (
    SessionMirror,
    ends,
    mirror_in_session,
    read_all,
    wait_until,
)

TOPIC = "c.t"
PARTITIONS = 2
OVERRIDES = {
    "offsets.topic.replication.factor": 2,
    "default.replication.factor": 2,
    # a follower that stops fetching leaves the ISR in seconds, not Kafka's 30
    "replica.lag.time.max.ms": 5000,
    # the target keeps every mirrored record: nothing may hide the comparison
    "log.cleaner.enable": False,
    # a broker that comes back leads its preferred partitions again within seconds, each
    # of them: at Kafka's 10 %, the broker's 25 idle __consumer_offsets partitions rejoin
    # the ISR first and move back, and the busy partition 0, rejoining a moment later, is
    # then 1 imbalanced partition in 26 (under 10 %), left on the other broker for good
    "auto.leader.rebalance.enable": True,
    "leader.imbalance.check.interval.seconds": 1,
    "leader.imbalance.per.broker.percentage": 0,
}


class AckedProducer(threading.Thread):
    """acks=all, idempotent; ``acked[partition]`` lists the acknowledged values in offset
    order (the delivery reports of one partition come in order)."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.producer = ck.Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "message.timeout.ms": 120_000, "log_level": 3,
        })
        self.acked: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
        self.failed = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.lock = threading.Lock()

    def count(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.acked.values())

    def counts(self) -> list[int]:
        with self.lock:
            return [len(self.acked[p]) for p in range(PARTITIONS)]

    def _delivered(self, err: Any, msg: Any) -> None:
        with self.lock:
            if err is not None:
                self.failed += 1
            else:
                self.acked[msg.partition()].append((msg.offset(), msg.value()))

    def run(self) -> None:
        seq = 0
        try:
            while not self.stop.is_set():
                for _ in range(20):
                    self.producer.produce(TOPIC, f"v{seq}".encode(), f"k{seq % 97}".encode(),
                                          seq % PARTITIONS, on_delivery=self._delivered,
                                          timestamp=1_700_000_000_000 + seq,
                                          headers=[("n", str(seq).encode())])
                    seq += 1
                self.producer.poll(0)
                self.stop.wait(0.05)  # some 400 records/s: the mirror keeps up between faults
            if self.producer.flush(150) != 0:
                raise AssertionError("records never answered by the source")
        except BaseException as exc:
            self.error = exc


def note(what: str) -> None:
    """A timestamped line in the captured output (to line up with the mirror's log)."""
    print(f"{time.strftime('%H:%M:%S', time.gmtime())} {what}", flush=True)


def print_threads() -> None:
    """Where each thread of this process is (the mirror's query runs its micro-batches
    here, through Spark's callback server): a failed wait shows what the mirror waits on."""
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        print(f"--- thread {names.get(ident, ident)}", flush=False)
        print("".join(traceback.format_stack(frame)), flush=True)


def leader(cluster: Cluster, topic: str, partition: int) -> int:
    raw = cluster.zk_get(f"/brokers/topics/{topic}/partitions/{partition}/state")
    return int(json.loads(raw)["leader"]) if raw else -1


def in_sync(cluster: Cluster, topic: str) -> bool:
    for p in range(PARTITIONS):
        raw = cluster.zk_get(f"/brokers/topics/{topic}/partitions/{p}/state")
        if raw is None or len(json.loads(raw)["isr"]) != 2:
            return False
    return True


def grows(producer: AckedProducer, what: str) -> None:
    """Every partition gets more acknowledged records from now on."""
    before = producer.counts()
    wait_until(lambda: all(n > b + 200 for n, b in zip(producer.counts(), before, strict=True)),
               what)


def carries_on(tgt: Cluster, mirror: SessionMirror, what: str) -> None:
    """Every target partition grows from now on (the mirror writes to the new leaders);
    a mirror that stopped fails the wait at once, with its error."""
    known: list[list[int]] = []

    def alive() -> None:
        if not mirror.running():
            raise AssertionError(f"the mirror stopped while waiting for {what}: "
                                 f"{type(mirror.error).__name__}: {mirror.error}")

    def answered() -> bool:  # ends() is -1s while the cluster does not answer
        alive()
        known.append(ends(tgt.bootstrap, TOPIC, PARTITIONS))
        return min(known[-1]) >= 0

    def grown() -> bool:
        alive()
        return all(e > n for e, n in zip(ends(tgt.bootstrap, TOPIC, PARTITIONS), now,
                                         strict=True))

    wait_until(answered, "the target's end offsets")
    now = known[-1]
    wait_until(grown, what)


@pytest.mark.timeout(1200)
def test_mirror_rides_out_a_leader_killed_on_each_side(mirror_spark: Any, tmp_path: Path
                                                        ) -> None:
    zookeeper = cluster_zookeeper(tmp_path / "zookeeper")
    producer: AckedProducer | None = None
    log = tmp_path / "mirror.log"
    try:
        with (
            running_cluster(tmp_path / "source", 2, OVERRIDES, zookeeper=zookeeper) as src,
            running_cluster(tmp_path / "target", 2, OVERRIDES, zookeeper=zookeeper) as tgt,
        ):
            # each broker leads one partition at the start
            src.create_topic(TOPIC, PARTITIONS, config={"min.insync.replicas": "1"},
                             replica_assignment=[[1, 2], [2, 1]])
            src.wait_for(lambda: in_sync(src, TOPIC), 60, "the source topic in sync")
            producer = AckedProducer(src.bootstrap)
            producer.start()
            grows(producer, "the first acknowledged records")
            with mirror_in_session(mirror_spark, src.bootstrap, tgt.bootstrap,
                                   tmp_path / "ckpt", log, r"c\..*",
                                   replication_factor=2) as mirror:
                wait_until(lambda: min(ends(tgt.bootstrap, TOPIC, PARTITIONS)) > 0,
                           "mirrored records on every target partition")
                tgt.wait_for(lambda: in_sync(tgt, TOPIC), 60, "the target topic in sync")

                victim = leader(src, TOPIC, 0)
                src.kill9(victim)
                note(f"killed source broker {victim}")
                src.wait_for(lambda: leader(src, TOPIC, 0) not in (-1, victim), 60,
                             "a new leader of the source's partition 0")
                grows(producer, "acknowledged records after the source broker's loss")
                carries_on(tgt, mirror, "the mirror carrying on after the source broker's loss")

                victims = {"source": victim, "target": leader(tgt, TOPIC, 0)}
                tgt.kill9(victims["target"])
                note(f"killed target broker {victims['target']}")
                tgt.wait_for(lambda: leader(tgt, TOPIC, 0) not in (-1, victims["target"]),
                             60, "a new leader of the target's partition 0")
                grows(producer, "acknowledged records after the target broker's loss")
                carries_on(tgt, mirror, "the mirror carrying on after the target broker's loss")

                # both come back, catch up, and lead partition 0 again (the controller's
                # preferred-leader check): a second leader move on each side
                for cluster, side in ((src, "source"), (tgt, "target")):
                    cluster.start(victims[side])
                note("both brokers back")
                for cluster, side in ((src, "source"), (tgt, "target")):
                    def back(c: Cluster = cluster, b: int = victims[side]) -> bool:
                        return leader(c, TOPIC, 0) == b and in_sync(c, TOPIC)

                    cluster.wait_for(back, 120, f"the {side}'s broker {victims[side]} back "
                                     "as leader of partition 0, in sync")
                grows(producer, "acknowledged records after the leaders moved back")
                carries_on(tgt, mirror, "the mirror carrying on after the leaders moved back")
                producer.stop.set()
                producer.join(180)
                assert producer.error is None, producer.error

                source = [read_all(src.bootstrap, TOPIC, p) for p in range(PARTITIONS)]
                wait_until(lambda: ends(tgt.bootstrap, TOPIC, PARTITIONS)
                           == [len(s) for s in source], "the target to catch up")
                for p in range(PARTITIONS):
                    got = read_all(tgt.bootstrap, TOPIC, p)
                    # the target partition is the source partition, record for record
                    assert [r[1:] for r in got] == [r[1:] for r in source[p]], p
                    # every acknowledged record exactly once, in the source's order
                    acked = [v for _, v in producer.acked[p]]
                    by_offset = {r[0]: r[2] for r in source[p]}
                    assert all(by_offset.get(o) == v for o, v in producer.acked[p]), (
                        f"the source lost or moved acknowledged records in {p}")
                    values = [r[2] for r in got]
                    assert len(set(values)) == len(values), f"doubled records in {p}"
                    at = {v: i for i, v in enumerate(values)}
                    missing = [v for v in acked if v not in at]
                    assert not missing, f"{len(missing)} acknowledged records lost in {p}"
                    positions = [at[v] for v in acked]
                    assert positions == sorted(positions), f"order changed in {p}"
                assert producer.count() > 1000
                assert mirror.running(), f"the mirror did not ride both losses out: {mirror.error}"
                assert mirror.stop() == 0
    except BaseException:
        with contextlib.suppress(OSError):
            print(log.read_text(errors="replace")[-8000:])
        print_threads()
        raise
    finally:
        if producer is not None:
            producer.stop.set()
        zookeeper.stop()
