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
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from ._cluster import Cluster, running_cluster
from .test_replication import create, producer, read_all, send, state, unique

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


def test_brokers_stopped_one_by_one_leave_first_and_lose_nothing(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
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
        for broker_id in range(1, 4):
            cluster.start(broker_id, wait_registered=False)
        cluster.wait_for(lambda: cluster.live_ids() == {1, 2, 3}, 30, "every broker back")
        for partition in range(PARTITIONS):
            read = dict(read_all(cluster, topic, partition))
            missing = {o: v for o, v in acked[partition].items() if read.get(o) != v}
            assert not missing, (partition, sorted(missing)[:10])


def test_a_stopping_follower_leaves_the_isr_before_it_unregisters(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
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


def test_every_broker_stopped_at_once_exits_within_seconds(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
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
