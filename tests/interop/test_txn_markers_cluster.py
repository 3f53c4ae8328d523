"""Transaction markers on three brokers (replication factor 3): WriteTxnMarkers is served
by the partition leader alone and answers once the ISR has the marker; followers
replicate markers and their ``.txnindex``; after the leader is killed -9, the new
leader's read_committed answers hold the same aborted transactions and last stable
offset, and a read_committed consumer sees the committed records only. The transactions
are written without a coordinator, so KIP-890's verification is off here
(``transaction.partition.verification.enable=false``)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from odradek.protocol.errors import ErrorCode
from tests.server._raw_client import TXN_ID, TxnClient, txn_batch

from ._cluster import Cluster, running_cluster

pytestmark = [pytest.mark.interop, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("txn-markers"), 3,
                         {"replica.lag.time.max.ms": 5000,
                          "transaction.partition.verification.enable": "false"}) as c:
        yield c


def _state(cluster: Cluster, topic: str) -> dict[str, Any]:
    raw = cluster.zk_get(f"/brokers/topics/{topic}/partitions/0/state")
    return json.loads(raw) if raw else {"leader": -1, "isr": []}


def _client(cluster: Cluster, broker_id: int) -> TxnClient:
    return TxnClient(int(cluster.address(broker_id).rsplit(":", 1)[1]))


def test_markers_replicate_and_survive_the_leader(cluster: Cluster) -> None:
    topic = f"txc-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    cluster.wait_for(lambda: len(_state(cluster, topic)["isr"]) == 3, 60, "the ISR")
    leader = int(_state(cluster, topic)["leader"])
    follower = next(b for b in (1, 2, 3) if b != leader)
    c = _client(cluster, leader)
    try:
        pid, epoch = c.init_producer_id()

        def produce(records: bytes, transactional: bool = True) -> int:
            def done() -> tuple[int] | None:  # a tuple: offset 0 is an answer too
                answer = c.produce(topic, records, TXN_ID if transactional else None)
                return (int(answer.base_offset),) if answer.error_code == 0 else None
            return cluster.wait_for(done, 30, "a produce to the new topic")[0]

        assert produce(txn_batch(pid, epoch, 0, 2, tag="aborted")) == 0
        assert produce(txn_batch(-1, -1, -1, tag="plain"), transactional=False) == 2
        f = _client(cluster, follower)
        try:
            assert f.markers(topic, pid, epoch, commit=False) == (
                ErrorCode.not_leader_or_follower.value)
        finally:
            f.close()
        assert c.markers(topic, pid, epoch, commit=False, coordinator_epoch=1) == 0  # 3
        assert produce(txn_batch(pid, epoch, 2, 2, tag="committed")) == 4
        assert c.markers(topic, pid, epoch, commit=True, coordinator_epoch=1) == 0  # 6
        answer = c.fetch(topic)
        assert (answer.high_watermark, answer.last_stable_offset) == (7, 7)
    finally:
        c.close()

    cluster.kill9(leader)
    new_leader = cluster.wait_for(
        lambda: (s := _state(cluster, topic))["leader"] not in (-1, leader) and s["leader"],
        30, "a new leader")
    c = _client(cluster, int(new_leader))
    try:
        def settled() -> Any:
            answer = c.fetch(topic)
            return answer if answer.error_code == 0 and answer.high_watermark == 7 else None

        answer = cluster.wait_for(settled, 30, "the new leader's high watermark")
        assert answer.last_stable_offset == 7
        assert [(int(t.producer_id), int(t.first_offset))
                for t in answer.aborted_transactions] == [(pid, 0)]
    finally:
        c.close()

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": topic,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "log_level": 3})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    try:
        def three() -> bool:
            for msg in consumer.consume(10, 0.5):
                if msg.error() is None:
                    got.append(msg.value())
            return len(got) >= 3
        cluster.wait_for(three, 60, "the committed records")
    finally:
        consumer.close()
    assert got == [b"plain--1", b"committed-2", b"committed-3"]
    cluster.restore()
