"""Every served version of the data-path APIs answers a well-formed request (no closed
connection, sane error codes). Requests are built for each version from kio's classes."""

from __future__ import annotations

import asyncio
import datetime
import importlib
import time
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.client.connection import BrokerConnection
from odradek.records.builder import build_batch
from odradek.server.handlers._entities import make
from odradek.testing import RunningBroker


def req(api: str, version: int) -> Any:
    return importlib.import_module(f"kio.schema.{api}.v{version}.request")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _send(broker: RunningBroker, request: Any) -> Any:
    conn = await BrokerConnection.open(broker.bootstrap)
    try:
        return await conn.send(request)
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def topic(shared_broker: RunningBroker) -> tuple[str, uuid.UUID]:
    name = f"versions-{uuid.uuid4().hex[:8]}"
    broker = shared_broker.broker
    info = shared_broker.call(broker.metadata.create_topic, name, 2, 1, {})
    log = broker.get_log(name, 0)
    assert log is not None
    shared_broker.call(log.append_as_leader,
                       build_batch([(b"k", b"v")] * 3, timestamp=int(time.time() * 1000)))
    return name, info.topic_id


@pytest.mark.parametrize("version", range(0, 13))
def test_metadata(shared_broker: RunningBroker, topic: tuple[str, uuid.UUID], version: int) -> None:
    m = req("metadata", version)
    request = make(m.MetadataRequest, topics=(make(m.MetadataRequestTopic, name=topic[0],
                                                   topic_id=None),),
                   allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                   include_topic_authorized_operations=False)
    response = run(_send(shared_broker, request))
    assert response.brokers[0].port == shared_broker.port
    (t,) = response.topics
    assert t.error_code == ErrorCode.none
    assert len(t.partitions) == 2


@pytest.mark.parametrize("version", range(3, 12))
def test_produce(shared_broker: RunningBroker, topic: tuple[str, uuid.UUID], version: int) -> None:
    m = req("produce", version)
    batch = build_batch([(b"k", b"v")], timestamp=int(time.time() * 1000))
    request = make(m.ProduceRequest, transactional_id=None, acks=1,
                   timeout=datetime.timedelta(seconds=5),
                   topic_data=(make(m.TopicProduceData, name=topic[0], partition_data=(
                       make(m.PartitionProduceData, index=1, records=batch),)),))
    response = run(_send(shared_broker, request))
    p = response.responses[0].partition_responses[0]
    assert p.error_code == ErrorCode.none
    assert p.base_offset >= 0


@pytest.mark.parametrize("version", range(4, 18))
def test_fetch(shared_broker: RunningBroker, topic: tuple[str, uuid.UUID], version: int) -> None:
    m = req("fetch", version)
    request = make(
        m.FetchRequest, replica_id=-1, replica_state=make(m.ReplicaState, replica_id=-1,
                                                          replica_epoch=-1)
        if hasattr(m, "ReplicaState") else None,
        max_wait=datetime.timedelta(milliseconds=10), min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=0, session_epoch=-1, cluster_id=None, rack_id="",
        forgotten_topics_data=(),
        topics=(make(m.FetchTopic, topic=topic[0], topic_id=topic[1], partitions=(
            make(m.FetchPartition, partition=0, fetch_offset=0, partition_max_bytes=1 << 20,
                 current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1,
                 replica_directory_id=None),)),),
    )
    response = run(_send(shared_broker, request))
    p = response.responses[0].partitions[0]
    assert p.error_code == ErrorCode.none
    assert p.high_watermark == 3
    assert p.records and len(p.records) > 61


@pytest.mark.parametrize("version", range(1, 10))
def test_list_offsets(
    shared_broker: RunningBroker, topic: tuple[str, uuid.UUID], version: int
) -> None:
    m = req("list_offsets", version)
    request = make(m.ListOffsetsRequest, replica_id=-1, isolation_level=0, timeout_ms=1000,
                   topics=(make(m.ListOffsetsTopic, name=topic[0], partitions=(
                       make(m.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1,
                            timestamp=-1),)),))
    response = run(_send(shared_broker, request))
    p = response.topics[0].partitions[0]
    assert p.error_code == ErrorCode.none
    assert p.offset == 3


@pytest.mark.parametrize("version", range(2, 8))
def test_create_and_delete_topics(shared_broker: RunningBroker, version: int) -> None:
    name = f"cd-{version}-{uuid.uuid4().hex[:6]}"
    m = req("create_topics", version)
    request = make(m.CreateTopicsRequest, timeout=datetime.timedelta(seconds=5),
                   validate_only=False, topics=(make(
                       m.CreatableTopic, name=name, num_partitions=1, replication_factor=1,
                       assignments=(), configs=(make(m.CreatableTopicConfig,
                                                     name="retention.ms", value="1000"),)),))
    response = run(_send(shared_broker, request))
    assert response.topics[0].error_code == ErrorCode.none
    dversion = min(version - 1, 6)
    d = req("delete_topics", dversion)
    request = make(d.DeleteTopicsRequest, timeout=datetime.timedelta(seconds=5),
                   topic_names=(name,),
                   topics=(make(d.DeleteTopicState, name=name, topic_id=uuid.UUID(int=0)),)
                   if hasattr(d, "DeleteTopicState") else None)
    response = run(_send(shared_broker, request))
    assert response.responses[0].error_code == ErrorCode.none
