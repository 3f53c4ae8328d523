"""OffsetForLeaderEpoch (key 23) over a real socket, every served version: where an epoch
ended in the leader's log, and the leadership errors a follower or a KIP-320 consumer
acts on."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.client.connection import BrokerConnection
from odradek.records.builder import build_batch
from odradek.testing import RunningBroker, running_broker


@pytest.fixture(scope="module")
def rb() -> Iterator[RunningBroker]:
    with running_broker() as broker:
        yield broker


def ask(rb: RunningBroker, version: int, topic: str, current: int, epoch: int,
        partition: int = 0) -> Any:
    m = importlib.import_module(f"kio.schema.offset_for_leader_epoch.v{version}.request")
    fields: dict[str, Any] = {"topics": (m.OffsetForLeaderTopic(topic=topic, partitions=(
        m.OffsetForLeaderPartition(partition=partition, current_leader_epoch=current,
                                   leader_epoch=epoch),)),)}
    if version >= 3:
        fields["replica_id"] = -1

    async def go() -> Any:
        conn = await BrokerConnection.open(rb.bootstrap)
        try:
            return await conn.send(m.OffsetForLeaderEpochRequest(**fields))
        finally:
            await conn.close()

    (answer,) = asyncio.run(go()).topics[0].partitions
    return answer


@pytest.mark.parametrize("version", [2, 3, 4])
def test_end_offsets_of_epochs(rb: RunningBroker, version: int) -> None:
    topic = f"ofle-{uuid.uuid4().hex[:8]}"
    rb.call(rb.broker.metadata.create_topic, topic, 1, 1, {})
    partition = rb.broker.replica_manager.get_partition(topic, 0)
    assert partition is not None
    log = partition.log
    now = int(time.time() * 1000)
    # what earlier leaders wrote: epoch 2 at offsets 0-2, epoch 4 at 3-6
    rb.call(log.append_as_follower, _batch(0, 3, 2, now))
    rb.call(log.append_as_follower, _batch(3, 4, 4, now))
    # this broker leads at epoch 5 from offset 7 on
    rb.call(partition.update_state, dataclasses.replace(partition.state, leader_epoch=5))
    rb.call(partition.append_records_as_leader, build_batch([(b"k", b"v")] * 2, timestamp=now))
    assert log.log_end_offset == 9

    def end_of(epoch: int, current: int = 5) -> tuple[ErrorCode, int, int]:
        answer = ask(rb, version, topic, current, epoch)
        return answer.error_code, answer.leader_epoch, answer.end_offset

    assert end_of(5) == (ErrorCode.none, 5, 9)  # the latest epoch: the log end
    assert end_of(4) == (ErrorCode.none, 4, 7)  # where epoch 5 began
    assert end_of(3, current=-1) == (ErrorCode.none, 2, 3)  # unknown: the one below it
    assert end_of(2) == (ErrorCode.none, 2, 3)
    assert end_of(5, current=6)[0] == ErrorCode.unknown_leader_epoch
    assert end_of(5, current=4)[0] == ErrorCode.fenced_leader_epoch
    missing = ask(rb, version, topic, -1, 5, partition=7)
    assert missing.error_code == ErrorCode.unknown_topic_or_partition
    assert (missing.leader_epoch, missing.end_offset) == (-1, -1)


def _batch(base: int, count: int, epoch: int, now: int) -> bytes:
    """A batch as a previous leader wrote it: offsets from ``base``, its epoch stamped."""
    raw = bytearray(build_batch([(b"k", b"v")] * count, timestamp=now))
    raw[0:8] = base.to_bytes(8, "big")
    raw[12:16] = epoch.to_bytes(4, "big")  # partitionLeaderEpoch is outside the CRC
    return bytes(raw)
