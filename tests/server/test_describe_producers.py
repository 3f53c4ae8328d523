"""DescribeProducers (KIP-664) over a real socket: the active producers of a partition
with their epochs, sequences, coordinator epochs and open transactions, and the errors
for partitions that do not exist or that this broker does not lead."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.api_versions.v3 import request as api_versions_v3
from kio.schema.describe_producers.v0 import request as dp_v0
from kio.static.primitive import i32

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import RequestContext
from odradek.server.handlers.describe_producers import describe_producers
from odradek.testing import RunningBroker, running_broker
from tests.cluster.test_replica_manager import ME, OTHER, _node, _topic
from tests.server._raw_client import TxnClient, batch, txn_batch


@pytest.fixture(scope="module")
def broker() -> Iterator[RunningBroker]:
    # transactional batches written raw, without the coordinator: no KIP-890 verification
    with running_broker({"transaction.partition.verification.enable": "false"}) as running:
        yield running


@pytest.fixture
def client(broker: RunningBroker) -> Iterator[TxnClient]:
    c = TxnClient(broker.port)
    yield c
    c.close()


def request(topics: dict[str, tuple[int, ...]]) -> Any:
    return dp_v0.DescribeProducersRequest(topics=tuple(
        dp_v0.TopicRequest(name=name,  # type: ignore[arg-type]
                           partition_indexes=tuple(map(i32, indexes)))
        for name, indexes in topics.items()))


def test_api_versions_advertises_describe_producers(client: TxnClient) -> None:
    response = client.call(api_versions_v3.ApiVersionsRequest(
        client_software_name="test", client_software_version="0"))
    [entry] = [k for k in response.api_keys if k.api_key == ApiKey.DESCRIBE_PRODUCERS]
    assert (entry.min_version, entry.max_version) == (0, 0)


def test_describes_idempotent_and_transactional_producers(
    broker: RunningBroker, client: TxnClient
) -> None:
    topic = f"dp-{uuid.uuid4().hex[:8]}"
    broker.call(broker.broker.metadata.create_topic, topic, 1, 1)
    before = int(time.time() * 1000)
    idem_pid, idem_epoch = client.init_producer_id()
    assert client.produce(topic, batch(idem_pid, idem_epoch, 0, 3)).error_code == ErrorCode.none
    txn_pid, txn_epoch = client.init_producer_id()
    assert client.produce(topic, txn_batch(txn_pid, txn_epoch, 0, 2),
                          transactional_id="dp-txn").error_code == ErrorCode.none  # 3-4

    def producers() -> dict[int, Any]:
        response = client.call(request({topic: (0,)}))
        [t] = response.topics
        [p] = t.partitions
        assert (t.name, p.partition_index, p.error_code) == (topic, 0, ErrorCode.none)
        return {int(s.producer_id): s for s in p.active_producers}

    found = producers()
    assert set(found) == {idem_pid, txn_pid}
    idem, txn = found[idem_pid], found[txn_pid]
    assert (idem.producer_epoch, idem.last_sequence, idem.coordinator_epoch,
            idem.current_txn_start_offset) == (idem_epoch, 2, -1, -1)
    assert (txn.producer_epoch, txn.last_sequence, txn.current_txn_start_offset) == (
        txn_epoch, 1, 3)
    assert int(idem.last_timestamp) >= before and int(txn.last_timestamp) >= before

    assert client.markers(topic, txn_pid, txn_epoch, commit=False,
                          coordinator_epoch=7) == 0
    txn = producers()[txn_pid]
    assert (txn.coordinator_epoch, txn.current_txn_start_offset) == (7, -1)


def test_partitions_that_do_not_exist(broker: RunningBroker, client: TxnClient) -> None:
    topic = f"dp-{uuid.uuid4().hex[:8]}"
    broker.call(broker.broker.metadata.create_topic, topic, 1, 1)
    response = client.call(request({topic: (0, 5), "no-such-topic": (0,)}))
    codes = {(t.name, int(p.partition_index)): p.error_code
             for t in response.topics for p in t.partitions}
    assert codes == {(topic, 0): ErrorCode.none,
                     (topic, 5): ErrorCode.unknown_topic_or_partition,
                     ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition}


def test_a_follower_answers_not_leader_or_follower(tmp_path: Path) -> None:
    """Only the leader describes its producers (Kafka's ``Partition.activeProducerState``
    reads the leader's log): with a real ReplicaManager following partition 1."""
    node = _node(tmp_path)
    _topic(node, "t", {0: [ME, OTHER], 1: [OTHER, ME]})
    services: Any = SimpleNamespace(replica_manager=node.replicas, authorizer=None)
    ctx = RequestContext(1, "test", ApiKey.DESCRIBE_PRODUCERS, 0, ("127.0.0.1", 1), "test")
    try:
        response = asyncio.run(describe_producers(services, ctx, request({"t": (0, 1)})))
    finally:
        node.stop()
    codes = {int(p.partition_index): p.error_code for p in response.topics[0].partitions}
    assert codes == {0: ErrorCode.none, 1: ErrorCode.not_leader_or_follower}
