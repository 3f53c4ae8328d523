"""The replication and controller gauges of ``/metrics`` in a real 2-broker cluster (real
ZooKeeper, two ``odradek serve``): one controller among the brokers, with ZooKeeper's
epoch; a follower stopped makes its leader's partition under-replicated once the leader
drops it from the ISR (a shrink), and back again once it has caught up (an expansion); the
follower's fetches are replication bytes."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from tests.interop._broker import free_port
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


def test_replication_gauges_follow_a_stopped_follower(tmp_path: Path) -> None:
    ports = {1: free_port(), 2: free_port()}
    per_broker = {b: {"metrics.listener": f"http://127.0.0.1:{p}"} for b, p in ports.items()}
    # the leader drops a silent follower from the ISR after replica.lag.time.max.ms
    with running_cluster(tmp_path, size=2, per_broker=per_broker,
                         overrides={"replica.lag.time.max.ms": 5000}) as cluster:
        controller, epoch = cluster.wait_controller()
        cluster.create_topic(TOPIC, 1, replica_assignment=[[1, 2]])  # leader 1, follower 2

        def settled() -> bool:
            leader = gauges(ports[1])
            return (leader["kafka_server_replicamanager_leadercount"] == 1
                    and leader["kafka_server_replicamanager_underreplicatedpartitions"] == 0)

        cluster.wait_for(settled, 30, "broker 1 leading a fully replicated partition")
        pages = {b: gauges(p) for b, p in ports.items()}
        assert sum(page["kafka_controller_kafkacontroller_activecontrollercount"]
                   for page in pages.values()) == 1
        assert pages[controller]["kafka_controller_kafkacontroller_activecontrollercount"] == 1
        assert pages[controller]["kafka_controller_kafkacontroller_controllerepoch"] == epoch
        assert pages[controller]["kafka_controller_kafkacontroller_offlinepartitionscount"] == 0
        for page in pages.values():
            assert page["kafka_server_metadataloader_currentcontrollerid"] == controller
            assert page["kafka_server_replicamanager_partitioncount"] == 1
        assert pages[2]["kafka_server_replicamanager_leadercount"] == 0

        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        producer.produce(TOPIC, b"v" * 500, partition=0)
        assert producer.flush(30) == 0  # acks=all: the follower has fetched it
        assert gauges(ports[1])[
            "kafka_server_brokertopicmetrics_replicationbytesout_total"] >= 500

        before = gauges(ports[1])
        cluster.stop(2)
        cluster.wait_for(
            lambda: gauges(ports[1])["kafka_server_replicamanager_underreplicatedpartitions"]
            == 1, 60, "the partition under-replicated on broker 1")
        page = gauges(ports[1])
        assert page["kafka_server_replicamanager_leadercount"] == 1
        # (a loaded machine may delay a live follower past the lag time too: at least one)
        assert page["kafka_server_replicamanager_isrshrinks_total"] >= (
            before["kafka_server_replicamanager_isrshrinks_total"] + 1)
        assert page["kafka_controller_kafkacontroller_activecontrollercount"] == 1  # now

        cluster.start(2)
        cluster.wait_for(
            lambda: gauges(ports[1])["kafka_server_replicamanager_underreplicatedpartitions"]
            == 0, 60, "the follower back in the ISR")
        assert gauges(ports[1])["kafka_server_replicamanager_isrexpands_total"] >= (
            before["kafka_server_replicamanager_isrexpands_total"] + 1)
