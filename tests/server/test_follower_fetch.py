"""A follower's Fetch seen by the leader (server/handlers/fetch.py with a real
ReplicaManager): only a fetch that is served tells the leader where the follower is
(Kafka's ReplicaManager.fetchMessages reads, then updateFollowerFetchState)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from odradek.cluster.partition import PartitionState
from odradek.protocol.errors import ErrorCode
from odradek.server.fetch_session import CachedPartition
from odradek.server.handlers import fetch as fetch_handler
from odradek.storage.log import FetchDataInfo
from tests.cluster.test_replica_manager import ME, OTHER, _node, _topic
from tests.storage._util import make_batch


def _fetch(node: Any, offset: int) -> Any:
    cp = CachedPartition("t", None, 0, offset, 1 << 20)
    return fetch_handler._read_one(node.replicas, cp, 1 << 20, True, False, OTHER)


def test_a_follower_fetching_past_the_log_end_is_not_taken_as_caught_up(
    tmp_path: Path,
) -> None:
    node = _node(tmp_path)
    written: list[Any] = []
    node.replicas.isr_writer = lambda topic, index, new: written.append(new) or 1
    _topic(node, "t", {0: [ME, OTHER]})
    node.metadata.apply_partition_states({("t", 0): PartitionState(ME, 1, (ME,), (ME, OTHER))})
    partition = node.replicas.leader_partition("t", 0)
    partition.append_records_as_leader(make_batch(3))

    async def main() -> None:
        answer = _fetch(node, 10)  # past the leader's log end (a diverged follower)
        assert answer.error_code == ErrorCode.offset_out_of_range
        assert partition.follower_states[OTHER].log_end_offset == -1  # not recorded
        assert partition.pending_isr is None and not written  # and not in the ISR
        served = _fetch(node, 3)  # at the log end: served, caught up, joins
        assert isinstance(served, FetchDataInfo)
        assert partition.follower_states[OTHER].log_end_offset == 3
        assert partition.pending_isr == (ME, OTHER)

    try:
        asyncio.run(main())
    finally:
        node.stop()


def test_the_high_watermark_a_follower_moves_goes_back_in_its_answer(tmp_path: Path) -> None:
    node = _node(tmp_path)
    _topic(node, "t", {0: [ME, OTHER]})
    partition = node.replicas.leader_partition("t", 0)
    partition.append_records_as_leader(make_batch(3))
    assert partition.high_watermark == 0
    served = _fetch(node, 3)
    assert isinstance(served, FetchDataInfo)
    assert served.high_watermark == partition.high_watermark == 3
    node.stop()
