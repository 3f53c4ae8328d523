"""Controlled shutdown (Kafka's ControlledShutdown) of the brokers of a three-broker cluster
over a real ZooKeeper, driven by SIGTERM as a supervisor or ``odradek dev-cluster`` stops
them.

- Stopped one by one (the controller first), each broker exits cleanly within
  :data:`STOP_BOUND_S`, and, while the others run, it has left every ISR and led nothing
  with another in-sync replica *before* it unregistered: the controller moved it off while
  it was still a member (the partition states were last written before the
  ``/brokers/ids`` change that its unregistering was). Every acknowledged record is read
  back once the brokers are started again.
- A follower that stops leaves the ISR before its registration goes.
- Every broker stopped at once (a whole cluster's Ctrl-C): none waits for a controller
  that cannot move anything, each exits cleanly within the bound.

The three tests share the module's cluster (:func:`tests.interop._cluster.cluster3`, which
restarts whatever a test stopped before the next one), in this order: the follower, one by
one (which restarts the brokers itself to read back), then all at once (the last: it
leaves them stopped).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from ._cluster import REGISTER_TIMEOUT_S, Cluster, cluster3, cluster3_shared
from .test_replication import create, producer, send, state, unique

__all__ = ["cluster3", "cluster3_shared"]  # the fixtures, used by name

pytestmark = pytest.mark.interop

#: A healthy cluster's broker stops in a second or two; the bound leaves room for a busy
#: machine and stays well under controlled.shutdown.max.retries x retry.backoff.ms (15 s)
#: and dev-cluster's 15 s before SIGKILL.
STOP_BOUND_S = 10.0
PARTITIONS = 6


def stat(cluster: Cluster, path: str) -> Any:
    return cluster.zk.exists(path)


def timed_stop(cluster: Cluster, broker_id: int) -> tuple[int | None, float]:
    started = time.monotonic()
    rc = cluster.stop(broker_id)
    return rc, time.monotonic() - started


def assert_left_before_unregistering(cluster: Cluster, topic: str, broker_id: int) -> None:
    """``broker_id`` (just stopped, others running) leads no partition of ``topic`` and is
    in no ISR, and every state that changed for it was written before its registration
    went (the last change of ``/brokers/ids``'s children, its ``pzxid``)."""
    unregistered = stat(cluster, "/brokers/ids").pzxid
    for p in range(PARTITIONS):
        path = f"/brokers/topics/{topic}/partitions/{p}/state"
        current = state(cluster, topic, p)
        assert current["leader"] != broker_id, (p, current, cluster.describe())
        assert broker_id not in current["isr"], (p, current, cluster.describe())
        assert stat(cluster, path).mzxid < unregistered, (
            f"the state of {topic}-{p} ({current}) was written after broker {broker_id} "
            f"unregistered: the controller took it out as a failed broker, not in its "
            f"controlled shutdown\n{cluster.describe()}")


def read_every_partition(cluster: Cluster, topic: str) -> dict[int, dict[int, bytes]]:
    """``{partition: {offset: value}}`` of every partition of ``topic``, read with one
    consumer up to each partition's high watermark."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    def consumer() -> Any:
        return Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": unique("r"),
                         "enable.auto.commit": False, "log_level": 3})

    errors: list[str] = []

    def high_watermarks() -> dict[int, int] | None:
        # a fresh client each attempt: one that saw a partition leaderless (a broker
        # restarting) may keep its stale view for a long while
        c = consumer()
        try:
            return {p: int(c.get_watermark_offsets(TopicPartition(topic, p), 10)[1])
                    for p in range(PARTITIONS)}
        except KafkaException as exc:  # metadata not known yet, or a leader moving
            errors[:] = [str(exc)]
            return None
        finally:
            c.close()

    ends = cluster.wait_for(high_watermarks, 90, f"the ends of {topic} ({errors})")
    read: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
    reader = consumer()
    try:
        reader.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])

        def to_the_ends() -> bool:
            for msg in reader.consume(1000, 0.5):
                if msg.error() is None:
                    read[msg.partition()][msg.offset()] = msg.value()
            return all(ends[p] == 0 or (read[p] and max(read[p]) >= ends[p] - 1)
                       for p in range(PARTITIONS))

        cluster.wait_for(to_the_ends, 60, f"{topic} read to {ends}")
        return read
    finally:
        reader.close()


def test_a_stopping_follower_leaves_the_isr_before_it_unregisters(cluster3: Cluster) -> None:
    cluster = cluster3
    topic = unique("follower")
    cluster.create_topic(topic, PARTITIONS, replica_assignment=[[1, 2, 3]] * PARTITIONS)
    cluster.wait_for(lambda: all(state(cluster, topic, p)["isr"] == [1, 2, 3]
                                 for p in range(PARTITIONS)), 60, f"{topic} in sync")
    epochs = [state(cluster, topic, p)["leader_epoch"] for p in range(PARTITIONS)]
    rc, took = timed_stop(cluster, 3)
    assert rc == 0 and took < STOP_BOUND_S, (rc, took, cluster.describe())
    assert_left_before_unregistering(cluster, topic, 3)
    for p in range(PARTITIONS):
        # a follower leaving changes the ISR only: same leader, same leader epoch
        assert state(cluster, topic, p)["isr"] == [1, 2]
        assert state(cluster, topic, p)["leader_epoch"] == epochs[p]


def test_brokers_stopped_one_by_one_leave_first_and_lose_nothing(cluster3: Cluster) -> None:
    cluster = cluster3
    topic = unique("cs")
    create(cluster, topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
    p = producer(cluster, acks="all", **{"enable.idempotence": True})
    acked: dict[int, dict[int, bytes]] = {}
    for partition in range(PARTITIONS):
        values = [f"{partition}-{i}".encode() for i in range(200)]
        results = send(p, topic, values, partition)
        assert all(isinstance(r, int) for r in results), results
        acked[partition] = dict(zip(results, values, strict=True))
    controller, _ = cluster.wait_controller()
    order = [controller, *sorted(set(range(1, 4)) - {controller})]
    for n, broker_id in enumerate(order):
        rc, took = timed_stop(cluster, broker_id)
        assert rc == 0 and took < STOP_BOUND_S, (
            f"broker {broker_id} exited with {rc} after {took:.1f} s\n{cluster.describe()}")
        if n < len(order) - 1:
            assert_left_before_unregistering(cluster, topic, broker_id)
    cluster.restore()  # the three started side by side
    cluster.wait_for(lambda: cluster.live_ids() == {1, 2, 3}, REGISTER_TIMEOUT_S,
                     "every broker back")
    read = read_every_partition(cluster, topic)
    for partition in range(PARTITIONS):
        missing = {o: v for o, v in acked[partition].items()
                   if read[partition].get(o) != v}
        assert not missing, (partition, sorted(missing)[:10])


def test_every_broker_stopped_at_once_exits_within_seconds(cluster3: Cluster) -> None:
    cluster = cluster3
    topic = unique("all")
    create(cluster, topic, PARTITIONS, 3)
    send(producer(cluster, acks="all"), topic, [b"v"] * 10)
    started = time.monotonic()
    for broker_id in range(1, 4):
        os.killpg(cluster.brokers[broker_id].pid, signal.SIGTERM)
    for broker_id in range(1, 4):
        rc = cluster.stop(broker_id)
        took = time.monotonic() - started
        assert rc == 0 and took < STOP_BOUND_S, (
            f"broker {broker_id} exited with {rc} after {took:.1f} s\n{cluster.describe()}")
