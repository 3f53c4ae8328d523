"""The replication and controller gauges of ``/metrics`` in a real 2-broker cluster (real
ZooKeeper, two ``odradek serve``): one controller among the brokers, with ZooKeeper's
epoch; a follower paused (SIGSTOP, its ZooKeeper session kept) makes its leader's
partition under-replicated once the leader drops it from the ISR (a shrink), and back
again once it has caught up (an expansion); the follower's fetches are replication bytes."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from tests.interop._cluster import running_cluster

pytestmark = pytest.mark.interop

TOPIC = "replicated"


def gauges(port: int) -> dict[str, float]:
    """The label-less samples of one broker's page, by name."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {sample.name: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples if not sample.labels}


def test_replication_gauges_follow_a_paused_follower(tmp_path: Path) -> None:
    # The leader drops a silent follower from the ISR after replica.lag.time.max.ms; the
    # session outlives that, so the paused follower stays registered and only the leader
    # changes the ISR (the cluster test harness's 6 s would race it).
    with running_cluster(tmp_path, size=2,
                         overrides={"replica.lag.time.max.ms": 5000,
                                    "zookeeper.session.timeout.ms": 40000,
                                    # bound by each broker itself, read back below
                                    "metrics.listener": "http://127.0.0.1:0"}) as cluster:
        ports = {b: urllib.parse.urlsplit(broker.metrics_url or "").port or 0
                 for b, broker in cluster.brokers.items()}
        assert all(ports.values()), ports
        controller, epoch = cluster.wait_controller()
        # The controller leads, so that stopping the follower leaves the controller in
        # place: the ISR then shrinks on the leader (a new controller would rewrite it).
        leader, follower = controller, 3 - controller
        cluster.create_topic(TOPIC, 1, replica_assignment=[[leader, follower]])

        def settled() -> bool:
            # both replicas in the ISR in ZooKeeper, and the leader knows it
            raw = cluster.zk_get(f"/brokers/topics/{TOPIC}/partitions/0/state")
            if raw is None or sorted(json.loads(raw)["isr"]) != [1, 2]:
                return False
            # (the leader's own view may start from an ISR of itself: AtMinIsr, with
            # min.insync.replicas=1, tells an ISR of one from one of two)
            page = gauges(ports[leader])
            # and the follower hosts it (it applies the new state on its own watch)
            if gauges(ports[follower])["kafka_server_replicamanager_partitioncount"] != 1:
                return False
            return (page["kafka_server_replicamanager_leadercount"] == 1
                    and page["kafka_server_replicamanager_underreplicatedpartitions"] == 0
                    and page["kafka_server_replicamanager_atminisrpartitioncount"] == 0)

        cluster.wait_for(settled, 30, f"broker {leader} leading a fully replicated partition")
        pages = {b: gauges(p) for b, p in ports.items()}
        assert sum(page["kafka_controller_kafkacontroller_activecontrollercount"]
                   for page in pages.values()) == 1
        assert pages[controller]["kafka_controller_kafkacontroller_activecontrollercount"] == 1
        assert pages[controller]["kafka_controller_kafkacontroller_controllerepoch"] == epoch
        assert pages[controller]["kafka_controller_kafkacontroller_offlinepartitionscount"] == 0
        for page in pages.values():
            assert page["kafka_server_metadataloader_currentcontrollerid"] == controller
            assert page["kafka_server_replicamanager_partitioncount"] == 1
        assert pages[follower]["kafka_server_replicamanager_leadercount"] == 0

        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        producer.produce(TOPIC, b"v" * 500, partition=0)
        assert producer.flush(30) == 0  # acks=all: the follower has fetched it
        assert gauges(ports[leader])[
            "kafka_server_brokertopicmetrics_replicationbytesout_total"] >= 500

        cluster.wait_for(settled, 30, "the ISR of two, still")
        before = gauges(ports[leader])
        assert before["kafka_server_replicamanager_atminisrpartitioncount"] == 0
        cluster.sigstop(follower)
        cluster.wait_for(
            lambda: gauges(ports[leader])[
                "kafka_server_replicamanager_underreplicatedpartitions"] == 1,
            60, "the partition under-replicated on its leader")
        page = gauges(ports[leader])
        assert page["kafka_server_replicamanager_leadercount"] == 1
        assert page["kafka_server_replicamanager_isrshrinks_total"] >= (
            before["kafka_server_replicamanager_isrshrinks_total"] + 1)
        assert page["kafka_controller_kafkacontroller_activecontrollercount"] == 1  # now

        cluster.sigcont(follower)
        cluster.wait_for(
            lambda: gauges(ports[leader])[
                "kafka_server_replicamanager_underreplicatedpartitions"] == 0,
            60, "the follower back in the ISR")
        assert gauges(ports[leader])["kafka_server_replicamanager_isrexpands_total"] >= (
            before["kafka_server_replicamanager_isrexpands_total"] + 1)
