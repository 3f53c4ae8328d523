"""A follower's truncation made visible (issue 48): every truncation of a log's end logs one
INFO line saying from which offset to which and why, and counts in the metrics; one below
the high watermark the replica knew (acknowledged records) logs a WARNING.

The follower's side runs the real fetcher (``ReplicaFetcher._truncate``) against a real
leader partition; the OffsetForLeaderEpoch exchange between them is carried by
:class:`LeaderEnd`, which answers from the leader's own leader-epoch cache as the broker's
handler does (``tests/server/test_offset_for_leader_epoch.py`` covers the handler)."""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.offset_for_leader_epoch.v4 import response as ofle_v4
from kio.schema.types import TopicName
from kio.static.primitive import i32, i32Timedelta, i64

from odradek.cluster.partition import Partition, PartitionState
from odradek.cluster.replica_fetcher import (
    FetcherConfig,
    ReplicaFetcher,
    ReplicaFetcherManager,
    _FetchState,
)
from odradek.storage import LogManager, TopicPartition
from odradek.storage.config import LogConfig
from odradek.storage.log import TRUNCATION_STATS
from odradek.testing import running_broker
from tests.server.test_metrics import scrape, value
from tests.storage._util import make_batch

TP = TopicPartition("t", 0)


@pytest.fixture
def log_managers(tmp_path: Path) -> Iterator[tuple[LogManager, LogManager]]:
    leader, follower = LogManager([tmp_path / "leader"]), LogManager([tmp_path / "follower"])
    leader.startup()
    follower.startup()
    yield leader, follower
    leader.shutdown()
    follower.shutdown()


class LeaderEnd:
    """The leader's end of the OffsetForLeaderEpoch exchange: its epoch cache's answer."""

    def __init__(self, leader: Partition) -> None:
        self.leader = leader

    async def send(self, request: Any) -> Any:
        log = self.leader.log
        topics = []
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                epoch, end = log.leader_epoch_cache.end_offset_for(int(p.leader_epoch),
                                                                   log.log_end_offset)
                partitions.append(ofle_v4.EpochEndOffset(
                    error_code=ErrorCode.none, partition=p.partition,
                    leader_epoch=i32(epoch), end_offset=i64(end)))
            topics.append(ofle_v4.OffsetForLeaderTopicResult(
                topic=TopicName(str(topic.topic)), partitions=tuple(partitions)))
        return ofle_v4.OffsetForLeaderEpochResponse(
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
            topics=tuple(topics))

    async def close(self) -> None:
        pass


def _diverged(managers: tuple[LogManager, LogManager]) -> tuple[Partition, Partition]:
    """Leader broker 2 and follower broker 1 of t-0: both hold 5 records of epoch 1 and
    epoch 3 from offset 5; epoch 3 ended at 7 on the leader (then epoch 5 began), while the
    follower holds 5 records of epoch 3 (5..9): its tail 7..9 diverges."""
    config = LogConfig.build({}, {})
    leader_log = managers[0].get_or_create_log(TP, config)
    follower_log = managers[1].get_or_create_log(TP, config)
    for log, counts in ((leader_log, [(1, 5), (3, 2)]),
                        (follower_log, [(1, 5), (3, 2), (3, 3)])):
        for epoch, count in counts:
            log.append_as_leader(make_batch(count), leader_epoch=epoch)
    state = PartitionState(2, 5, (2, 1), (2, 1))
    leader = Partition(2, leader_log, state)  # leads at epoch 5 from offset 7
    leader.append_records_as_leader(make_batch(4))  # 7..10 at epoch 5
    follower = Partition(1, follower_log, state)
    return leader, follower


def _truncate(leader: Partition, follower: Partition) -> None:
    manager = ReplicaFetcherManager(1, lambda _b: asyncio.sleep(0, None), FetcherConfig())
    fetcher = ReplicaFetcher(manager, 2)
    state = _FetchState(follower, 5)
    fetcher.partitions[TP] = state
    asyncio.run(fetcher._truncate(LeaderEnd(leader), [(TP, state)]))
    assert not state.truncating


def test_a_divergent_tail_is_truncated_with_one_info_line_and_counted(
    log_managers: tuple[LogManager, LogManager], caplog: pytest.LogCaptureFixture,
) -> None:
    leader, follower = _diverged(log_managers)
    follower.update_follower_high_watermark(5)  # what the old leader had committed
    before = TRUNCATION_STATS.snapshot()
    with caplog.at_level(logging.INFO, logger="odradek.storage.log"):
        _truncate(leader, follower)
    assert follower.log.log_end_offset == 7
    lines = [r for r in caplog.records if r.name == "odradek.storage.log"]
    assert [r.levelno for r in lines] == [logging.INFO], caplog.text
    assert lines[0].getMessage() == (
        "Truncating t-0 from 10 to 7 (broker 1: OffsetForLeaderEpoch of epoch 3 answered "
        "epoch 3 ending at 7 by leader 2 at epoch 5): 3 offsets removed")
    after = TRUNCATION_STATS.snapshot()
    assert (after[0] - before[0], after[1] - before[1], after[2] - before[2]) == (1, 3, 0)


def test_a_truncation_below_the_high_watermark_warns_with_the_numbers(
    log_managers: tuple[LogManager, LogManager], caplog: pytest.LogCaptureFixture,
) -> None:
    leader, follower = _diverged(log_managers)
    # the follower had been told offsets up to 9 were committed: 7 and 8 acknowledged
    follower.update_follower_high_watermark(9)
    before = TRUNCATION_STATS.snapshot()
    with caplog.at_level(logging.INFO, logger="odradek.storage.log"):
        _truncate(leader, follower)
    warnings = [r.getMessage() for r in caplog.records
                if r.name == "odradek.storage.log" and r.levelno == logging.WARNING]
    assert warnings == [
        "Truncating t-0 to 7, below its high watermark 9: 2 acknowledged offsets (7..8) "
        "removed (broker 1: OffsetForLeaderEpoch of epoch 3 answered epoch 3 ending at 7 "
        "by leader 2 at epoch 5)"]
    after = TRUNCATION_STATS.snapshot()
    assert (after[0] - before[0], after[2] - before[2]) == (1, 1)


def test_a_follower_below_the_leaders_log_start_starts_again_and_says_so(
    log_managers: tuple[LogManager, LogManager], caplog: pytest.LogCaptureFixture,
) -> None:
    _leader, follower = _diverged(log_managers)
    follower.update_follower_high_watermark(5)
    with caplog.at_level(logging.INFO, logger="odradek.storage.log"):
        follower.log.truncate_fully_and_start_at(20, "below the leader's log start 20")
    assert follower.log.log_start_offset == follower.log.log_end_offset == 20
    assert [r.getMessage() for r in caplog.records if r.name == "odradek.storage.log"] == [
        "Truncating t-0 from 10 to 0, starting again at 20 (below the leader's log start "
        "20): 10 offsets removed"]


def test_truncations_are_on_the_metrics_page(tmp_path: Path) -> None:
    with running_broker(overrides={"metrics.listener": "http://127.0.0.1:0"},
                        data_dir=tmp_path) as rb:
        server = rb.broker.metrics_server
        assert server is not None
        names = ("odradek_log_truncations_total", "odradek_log_truncated_offsets_total",
                 "odradek_log_truncations_below_high_watermark_total")
        page = scrape(server.url)
        before = [value(page, name) for name in names]
        manager = rb.broker.log_manager
        plog = rb.call(manager.get_or_create_log, TopicPartition("m", 0),
                       LogConfig.build({}, {}))
        rb.call(plog.append_as_leader, make_batch(2), 0)
        rb.call(plog.append_as_leader, make_batch(4, seed=1), 0)
        rb.call(plog.truncate_to, 2, "a test")  # the log's own high watermark is 6
        page = scrape(server.url)
        assert [value(page, name) - b for name, b in zip(names, before, strict=True)] == [
            1, 4, 1]
