"""acks=all Produce over several partitions (server/handlers/produce.py with a real
ReplicaManager): each partition is judged at the leader epoch it was appended at, all
waited on at once (Kafka's DelayedProduce)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from odradek.cluster.partition import PartitionState
from odradek.protocol.errors import ErrorCode
from odradek.protocol.produce_reader import ProduceRequestView, TopicProduceData
from odradek.protocol.produce_writer import PartitionResult
from odradek.protocol.registry import RequestContext
from odradek.server.handlers import produce as produce_handler
from odradek.storage import TopicPartition
from tests.cluster.test_replica_manager import LONG, ME, OTHER, _node, _set_isr, _topic, _until
from tests.storage._util import make_batch


def test_acks_all_judges_each_partition_at_the_epoch_of_its_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While partition 0 waits for its follower, partition 1 loses its leadership, is
    truncated (its records gone) and leads again at a later epoch, where the high
    watermark passes the old offsets with other records. Partition 1's answer must be
    NOT_LEADER_OR_FOLLOWER, not a success for records no replica keeps."""
    node = _node(tmp_path)
    _topic(node, "t", {0: [ME, OTHER], 1: [ME, OTHER]})
    p0 = node.replicas.leader_partition("t", 0)
    p1 = node.replicas.leader_partition("t", 1)
    answers: list[list[tuple[str, list[PartitionResult]]]] = []

    me, real_write = threading.get_ident(), produce_handler.write_produce_response

    def capture(version: int, topics: list[tuple[str, list[PartitionResult]]],
                throttle_ms: int = 0) -> bytes:
        if threading.get_ident() != me:  # another test's broker, on its own loop thread
            return real_write(version, topics, throttle_ms)
        answers.append(topics)
        return b""

    monkeypatch.setattr(produce_handler, "write_produce_response", capture)
    services: Any = SimpleNamespace(
        replica_manager=node.replicas, topic_stats=None, authorizer=None,
        client_quotas=SimpleNamespace(produce=SimpleNamespace(active=False)),
    )
    ctx = RequestContext(1, "test", 0, 9, ("127.0.0.1", 1), "test")
    request = ProduceRequestView(None, -1, int(LONG * 1000), (TopicProduceData("t", (
        (0, memoryview(make_batch(3))), (1, memoryview(make_batch(3))),
    )),))

    async def main() -> None:
        task = asyncio.create_task(produce_handler.produce(services, ctx, request))
        await _until(lambda: node.produce.watching(TopicPartition("t", 0)) == 1,
                     "the produce to park")
        s = p1.state
        p1.update_state(PartitionState(OTHER, s.leader_epoch + 1, (OTHER,), s.replicas))
        p1.log.truncate_to(0)
        p1.update_state(PartitionState(ME, s.leader_epoch + 2, (ME,), s.replicas))
        p1.append_records_as_leader(make_batch(5))  # other records, at the new epoch
        assert p1.high_watermark == 5
        assert not task.done()
        _set_isr(p0, (ME,))  # partition 0's follower drops out: its records are committed
        await asyncio.wait_for(task, LONG)

    try:
        asyncio.run(main())
    finally:
        node.stop()
    [[(_, results)]] = answers
    codes = {r.index: ErrorCode(r.error_code) for r in results}
    assert codes == {0: ErrorCode.none, 1: ErrorCode.not_leader_or_follower}
