"""ReplicaManager (odradek.cluster.replica_manager) over real parts: a LogManager in
tmp_path, ClusterMetadata over an EmbeddedStore, and the broker's purgatories."""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from odradek.cluster.errors import (
    FencedLeaderEpochError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)
from odradek.cluster.metadata import ClusterMetadata, TopicInfo
from odradek.cluster.partition import Partition, PartitionState
from odradek.cluster.replica_manager import PendingAppend, ReplicaManager, Replication
from odradek.cluster.store import EmbeddedStore
from odradek.server.purgatory import DelayedBytes, Purgatory
from odradek.storage import LogManager, TopicPartition, files
from tests._deadlines import describe, expired
from tests.storage._util import make_batch

ME = 0
OTHER = 1
T = TypeVar("T")
LONG = 10.0  # seconds: a deadline never reached when things work


@dataclass
class Node:
    """One broker's parts, restartable on the same directories."""

    root: Path
    log_manager: LogManager
    metadata: ClusterMetadata
    fetch: Purgatory
    produce: Purgatory
    replicas: ReplicaManager

    def restart(self) -> Node:
        self.stop()
        return _node(self.root)

    def stop(self) -> None:
        self.replicas.checkpoint_high_watermarks()
        self.log_manager.shutdown()
        self.metadata.store.close()


def _node(root: Path, start: bool = True, before: Callable[[Node], None] | None = None,
          brokers: tuple[int, ...] = (ME, OTHER)) -> Node:
    log_manager = LogManager([root / "logs"])
    metadata = ClusterMetadata(
        EmbeddedStore(root / "meta.json"), lambda: list(brokers), {"num.partitions": 1}
    )
    log_manager.startup(metadata.log_config)
    fetch, produce = Purgatory(), Purgatory()
    node = Node(root, log_manager, metadata, fetch, produce,
                ReplicaManager(ME, log_manager, metadata, fetch, produce))
    if before is not None:
        before(node)
    if start:
        node.replicas.startup()
    return node


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    started = _node(tmp_path)
    yield started
    started.log_manager.shutdown()


def _run(main: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(main, 30))


async def _until(condition: Callable[[], bool], what: str, timeout_s: float = LONG) -> None:
    started = time.monotonic()
    while not condition():
        if expired(started, timeout_s):
            raise AssertionError(f"timed out waiting for {what}: {describe(started, timeout_s)}")
        await asyncio.sleep(0.001)


def _topic(node: Node, name: str, assignment: dict[int, list[int]]) -> TopicInfo:
    return node.metadata.create_topic(name, len(assignment), len(assignment[0]),
                                      assignment=assignment)


def _error(call: Callable[..., object], *args: object) -> str:
    with pytest.raises(Exception) as caught:
        call(*args)
    return str(getattr(caught.value, "kafka_error", repr(caught.value)))


# -- hosting -------------------------------------------------------------------------------
def test_hosts_partitions_naming_this_broker(node: Node) -> None:
    _topic(node, "t", {0: [ME], 1: [OTHER], 2: [OTHER, ME]})
    assert set(node.replicas.partitions) == {TopicPartition("t", 0), TopicPartition("t", 2)}
    assert set(node.log_manager.logs) == {TopicPartition("t", 0), TopicPartition("t", 2)}
    assert node.replicas.get_partition("t", 0).is_leader  # type: ignore[union-attr]
    assert not node.replicas.get_partition("t", 2).is_leader  # type: ignore[union-attr]
    assert node.replicas.get_partition("t", 1) is None


def test_startup_hosts_known_topics_and_removes_deleted_ones(tmp_path: Path) -> None:
    first = _node(tmp_path)
    _topic(first, "kept", {0: [ME], 1: [ME]})
    _topic(first, "dropped", {0: [ME]})
    first.stop()

    def forget(node: Node) -> None:
        # Changes made while this broker was down: a topic deleted, a partition's log
        # left over (a topic deleted and re-created smaller).
        node.metadata.delete_topic("dropped")
        node.metadata.create_topic("late", 1, 1, assignment={0: [ME]})
        node.log_manager.get_or_create_log(TopicPartition("kept", 5))

    again = _node(tmp_path, before=forget)
    try:
        hosted = {TopicPartition("kept", 0), TopicPartition("kept", 1), TopicPartition("late", 0)}
        assert set(again.replicas.partitions) == hosted
        assert set(again.log_manager.logs) == hosted
        assert not any(p.name.startswith("dropped-0") and p.is_dir() and "delete" not in p.name
                       for p in (tmp_path / "logs").iterdir())
    finally:
        again.log_manager.shutdown()


def test_topic_created_later_is_hosted(node: Node) -> None:
    _topic(node, "t", {0: [ME]})
    partition = node.replicas.leader_partition("t", 0)
    assert partition.log is node.log_manager.get_log(TopicPartition("t", 0))


def test_config_change_reaches_the_log(node: Node) -> None:
    _topic(node, "t", {0: [ME]})
    node.metadata.set_topic_configs("t", {"retention.ms": "1234"}, validate_only=False)
    log = node.log_manager.get_log(TopicPartition("t", 0))
    assert log is not None and log.config.retention_ms == 1234
    assert node.replicas.get_partition("t", 0).log is log  # type: ignore[union-attr]


def test_deleted_topic_loses_logs_and_partitions(node: Node) -> None:
    _topic(node, "t", {0: [ME], 1: [ME]})
    node.metadata.delete_topic("t")
    assert node.replicas.partitions == {}
    assert node.log_manager.logs == {}
    assert _error(node.replicas.leader_partition, "t", 0) == "UNKNOWN_TOPIC_OR_PARTITION"


# -- the door for handlers -----------------------------------------------------------------
def test_leader_partition_errors(node: Node) -> None:
    _topic(node, "mine", {0: [ME, OTHER]})
    _topic(node, "followed", {0: [OTHER, ME]})
    _topic(node, "elsewhere", {0: [OTHER]})
    rm = node.replicas
    assert rm.leader_partition("mine", 0).is_leader
    assert rm.leader_partition("mine", 0, current_leader_epoch=0).leader_epoch == 0
    with pytest.raises(UnknownTopicOrPartitionError):
        rm.leader_partition("nothing", 0)
    assert _error(rm.leader_partition, "mine", 1) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert _error(rm.leader_partition, "followed", 0) == "NOT_LEADER_OR_FOLLOWER"
    assert _error(rm.leader_partition, "elsewhere", 0) == "NOT_LEADER_OR_FOLLOWER"
    assert _error(rm.leader_partition, "mine", 0, 1) == "UNKNOWN_LEADER_EPOCH"


def test_leader_partition_follows_the_state(node: Node) -> None:
    _topic(node, "t", {0: [ME]})
    partition = node.replicas.leader_partition("t", 0)
    partition.update_state(PartitionState(ME, 2, (ME,), (ME,)))
    with pytest.raises(FencedLeaderEpochError):
        node.replicas.leader_partition("t", 0, 1)
    partition.update_state(PartitionState(OTHER, 3, (OTHER,), (ME, OTHER)))
    with pytest.raises(NotLeaderOrFollowerError):
        node.replicas.leader_partition("t", 0)


def test_leader_without_a_log_is_not_available(node: Node) -> None:
    """The log could not be created (its dir went offline): LEADER_NOT_AVAILABLE."""
    node.log_manager.failure_channel.mark_offline(node.log_manager.log_dirs[0], "test")

    async def main() -> None:
        await node.replicas.change_topics(
            lambda: node.metadata.create_topic("t", 1, 1, assignment={0: [ME]}),
            wait=datetime.timedelta(seconds=LONG),
        )

    _run(main())
    assert not node.replicas.is_pending("t", 0)
    with pytest.raises(LeaderNotAvailableError, match="no log"):
        node.replicas.leader_partition("t", 0)


# -- change_topics: logs created off the loop ----------------------------------------------
def test_change_topics_creates_logs_off_the_loop(node: Node) -> None:
    rm = node.replicas

    async def main() -> None:
        info, timed_out = await rm.change_topics(
            lambda: node.metadata.create_topic("t", 3, 1, assignment={0: [ME], 1: [ME],
                                                                         2: [OTHER]})
        )
        assert isinstance(info, TopicInfo) and not timed_out
        # Nothing was created on the loop: the partitions answer LEADER_NOT_AVAILABLE.
        assert node.log_manager.logs == {}
        assert rm.is_pending("t", 0) and rm.is_pending("t", 1) and not rm.is_pending("t", 2)
        assert rm.topic_pending("t") and not rm.topic_pending("u")
        assert _error(rm.leader_partition, "t", 0) == "LEADER_NOT_AVAILABLE"
        # The next change runs once those logs are in place.
        _, timed_out = await rm.change_topics(
            lambda: node.metadata.create_topic("u", 1, 1, assignment={0: [ME]}),
            wait=datetime.timedelta(seconds=LONG),
        )
        assert not timed_out

    _run(main())
    assert not node.replicas.topic_pending("t")
    assert set(node.log_manager.logs) == set(node.replicas.partitions) == {
        TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)
    }
    assert node.replicas.leader_partition("t", 1).is_leader


def test_a_topic_made_through_another_broker_gets_its_logs_off_the_loop(node: Node) -> None:
    """Cluster mode: a topic created (then one deleted) through another broker reaches
    this one as a metadata change; its logs are made in the worker thread, after any
    creation under way, and one deleted meanwhile leaves no log behind."""
    rm = node.replicas
    rm.create_logs_off_loop = True
    metadata = node.metadata

    def remote(name: str, partitions: dict[int, list[int]]) -> TopicInfo:
        return TopicInfo(name, uuid.uuid4(), partitions)

    async def main() -> None:
        metadata.apply_topic("r", remote("r", {0: [ME], 1: [OTHER]}))
        assert node.log_manager.logs == {}  # nothing made on the loop
        assert rm.is_pending("r", 0) and not rm.is_pending("r", 1)
        metadata.apply_topic("gone", remote("gone", {0: [ME]}))
        metadata.apply_topic("gone", None)  # deleted before its log was made
        await _until(lambda: not rm.topic_pending("r") and not rm.topic_pending("gone"),
                     "the logs made")
        task = rm._log_creation
        if task is not None:
            await asyncio.wait((task,), timeout=LONG)

    _run(main())
    assert set(node.log_manager.logs) == set(rm.partitions) == {TopicPartition("r", 0)}


def test_change_topics_returns_the_changes_result_without_logs(node: Node) -> None:
    async def main() -> tuple[int, bool]:
        return await node.replicas.change_topics(lambda: 42)

    assert _run(main()) == (42, False)


def test_config_altered_while_the_log_is_created(node: Node) -> None:
    async def main() -> None:
        await node.replicas.change_topics(
            lambda: node.metadata.create_topic("t", 1, 1, assignment={0: [ME]})
        )
        # AlterConfigs does not wait for the logs (its handler calls the metadata).
        node.metadata.set_topic_configs("t", {"retention.ms": "777"}, validate_only=False)
        await node.replicas.change_topics(lambda: None)  # waits for the previous change
        assert not node.replicas.topic_pending("t")

    _run(main())
    log = node.log_manager.get_log(TopicPartition("t", 0))
    assert log is not None and log.config.retention_ms == 777


def test_topic_deleted_after_its_logs_were_asked_for(node: Node) -> None:
    async def main() -> None:
        await node.replicas.change_topics(
            lambda: node.metadata.create_topic("t", 2, 1, assignment={0: [ME], 1: [ME]})
        )
        await node.replicas.change_topics(lambda: node.metadata.delete_topic("t"))

    _run(main())
    assert node.log_manager.logs == {} and node.replicas.partitions == {}


def test_shutdown_waits_for_logs_being_created(node: Node) -> None:
    async def main() -> None:
        await node.replicas.change_topics(
            lambda: node.metadata.create_topic("t", 4, 1, assignment={p: [ME] for p in range(4)})
        )
        await node.replicas.shutdown()

    _run(main())
    assert len(node.replicas.partitions) == 4
    path = node.log_manager.log_dirs[0] / files.REPLICATION_OFFSET_CHECKPOINT
    assert path.read_text() == "0\n4\nt 0 0\nt 1 0\nt 2 0\nt 3 0\n"


# -- high-watermark checkpoint -------------------------------------------------------------
def _set_isr(partition: Partition, isr: tuple[int, ...]) -> None:
    s = partition.state
    partition.update_state(PartitionState(s.leader, s.leader_epoch, isr, s.replicas))


def test_checkpoint_written_in_kafkas_format_and_restored(tmp_path: Path) -> None:
    node = _node(tmp_path)
    _topic(node, "t", {0: [ME, OTHER], 1: [ME]})
    _topic(node, "u", {0: [OTHER]})  # not hosted here
    waiting = node.replicas.leader_partition("t", 0)
    waiting.append_records_as_leader(make_batch(5))
    _set_isr(waiting, (ME,))  # the follower drops out: the high watermark moves to 5
    _set_isr(waiting, (ME, OTHER))  # it is back; its position is unknown again
    waiting.append_records_as_leader(make_batch(2))
    node.replicas.leader_partition("t", 1).append_records_as_leader(make_batch(3))
    assert (waiting.high_watermark, waiting.log.log_end_offset) == (5, 7)
    node.replicas.checkpoint_high_watermarks()
    path = tmp_path / "logs" / files.REPLICATION_OFFSET_CHECKPOINT
    assert path.read_text() == "0\n2\nt 0 5\nt 1 3\n"

    node = node.restart()
    try:
        restored = node.replicas.leader_partition("t", 0)
        assert (restored.high_watermark, restored.log.log_end_offset) == (5, 7)
        assert node.replicas.leader_partition("t", 1).high_watermark == 3
    finally:
        node.log_manager.shutdown()


def test_missing_checkpoint_starts_from_the_log_start(tmp_path: Path) -> None:
    node = _node(tmp_path)
    _topic(node, "t", {0: [ME, OTHER]})
    partition = node.replicas.leader_partition("t", 0)
    partition.append_records_as_leader(make_batch(5))
    _set_isr(partition, (ME,))
    node.log_manager.shutdown()
    node.metadata.store.close()  # no checkpoint written
    node = _node(tmp_path)
    try:
        assert node.replicas.leader_partition("t", 0).high_watermark == 0
    finally:
        node.log_manager.shutdown()


def test_damaged_checkpoint_ignored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    node = _node(tmp_path)
    _topic(node, "t", {0: [ME, OTHER], 1: [ME]})
    partition = node.replicas.leader_partition("t", 0)
    partition.append_records_as_leader(make_batch(5))
    _set_isr(partition, (ME,))
    node.replicas.leader_partition("t", 1).append_records_as_leader(make_batch(2))
    node.stop()
    path = tmp_path / "logs" / files.REPLICATION_OFFSET_CHECKPOINT
    path.write_bytes(b"0\n7\nt 0 five\n")
    with caplog.at_level(logging.WARNING, logger="odradek.cluster.replica_manager"):
        node = _node(tmp_path)
    try:
        assert any(files.REPLICATION_OFFSET_CHECKPOINT in r.getMessage()
                   for r in caplog.records if r.levelno == logging.WARNING)
        assert node.replicas.leader_partition("t", 0).high_watermark == 0
        # A leader alone in its ISR moves it to its log end at once.
        assert node.replicas.leader_partition("t", 1).high_watermark == 2
    finally:
        node.log_manager.shutdown()


# -- events: purgatories -------------------------------------------------------------------
def test_appends_notify_the_fetch_purgatory_with_their_bytes(node: Node) -> None:
    _topic(node, "t", {0: [ME]})
    tp = TopicPartition("t", 0)
    partition = node.replicas.leader_partition("t", 0)
    batches = [make_batch(2, seed=1), make_batch(3, seed=2)]

    async def main() -> DelayedBytes:
        op = DelayedBytes([tp], threshold=sum(len(b) for b in batches))
        parked = asyncio.create_task(node.fetch.park(op, LONG))
        await _until(lambda: node.fetch.watching(tp) == 1, "the fetch to park")
        partition.append_records_as_leader(batches[0])
        assert op.accumulated == len(batches[0]) and not parked.done()
        partition.append_records_as_leader(batches[1])
        assert await parked
        return op

    op = _run(main())
    assert op.accumulated == sum(len(b) for b in batches)
    assert node.fetch.watching(tp) == 0


async def _replicated(node: Node, partition: Partition, last_offset: int,
                      timeout_s: float) -> bool:
    append = PendingAppend(partition, partition.leader_epoch, last_offset + 1)
    [outcome] = await node.replicas.wait_for_replication([append], timeout_s)
    return outcome is Replication.REPLICATED


def test_wait_for_replication_at_once_when_passed(node: Node) -> None:
    _topic(node, "t", {0: [ME]})
    partition = node.replicas.leader_partition("t", 0)
    info = partition.append_records_as_leader(make_batch(3), acks=-1)

    async def main() -> tuple[bool, bool]:
        passed = await _replicated(node, partition, info.last_offset, 0)
        not_yet = await _replicated(node, partition, info.last_offset + 1, 0)
        return passed, not_yet

    assert _run(main()) == (True, False)


def test_wait_for_replication_completes_when_the_high_watermark_moves(node: Node) -> None:
    _topic(node, "t", {0: [ME, OTHER]})
    tp = TopicPartition("t", 0)
    partition = node.replicas.leader_partition("t", 0)

    async def main() -> bool:
        info = partition.append_records_as_leader(make_batch(3), acks=-1)
        assert partition.high_watermark == 0
        waiting = asyncio.create_task(
            _replicated(node, partition, info.last_offset, LONG)
        )
        await _until(lambda: node.produce.watching(tp) == 1, "the produce to park")
        partition.append_records_as_leader(make_batch(1))  # an event, not the condition
        await asyncio.sleep(0)
        assert not waiting.done()
        started = time.monotonic()
        _set_isr(partition, (ME,))  # the follower leaves the ISR: the watermark moves
        result = await waiting
        assert time.monotonic() - started < LONG / 2
        return result

    assert _run(main())
    assert node.produce.watching(tp) == 0


def test_wait_for_replication_waits_on_all_at_once(node: Node) -> None:
    """A partition woken by a leadership change ends its part, not the others' wait."""
    _topic(node, "t", {0: [ME, OTHER], 1: [ME, OTHER]})
    p0 = node.replicas.leader_partition("t", 0)
    p1 = node.replicas.leader_partition("t", 1)
    appends = []
    for partition in (p0, p1):
        info = partition.append_records_as_leader(make_batch(2), acks=-1)
        appends.append(PendingAppend(partition, partition.leader_epoch, info.last_offset + 1))

    async def main() -> list[Replication]:
        waiting = asyncio.create_task(node.replicas.wait_for_replication(appends, LONG))
        await _until(lambda: node.produce.watching(TopicPartition("t", 1)) == 1, "a park")
        s = p1.state
        p1.update_state(PartitionState(ME, s.leader_epoch + 1, s.isr, s.replicas))
        node.produce.wake_all(TopicPartition("t", 1))  # as a new leader epoch does
        await _until(lambda: node.produce.watching(TopicPartition("t", 0)) == 1, "a park")
        assert not waiting.done()
        _set_isr(p0, (ME,))
        return await waiting

    assert _run(main()) == [Replication.REPLICATED, Replication.LEADERSHIP_MOVED]


def test_wait_for_replication_times_out(node: Node) -> None:
    _topic(node, "t", {0: [ME, OTHER]})
    partition = node.replicas.leader_partition("t", 0)
    info = partition.append_records_as_leader(make_batch(1))

    async def main() -> bool:
        return await _replicated(node, partition, info.last_offset, 0.02)

    assert not _run(main())
    assert node.produce.watching(TopicPartition("t", 0)) == 0


def test_deleting_a_topic_wakes_its_waiters(node: Node) -> None:
    _topic(node, "t", {0: [ME, OTHER]})
    tp = TopicPartition("t", 0)
    partition = node.replicas.leader_partition("t", 0)
    info = partition.append_records_as_leader(make_batch(1))

    async def main() -> tuple[bool, bool]:
        produce = asyncio.create_task(
            _replicated(node, partition, info.last_offset, LONG)
        )
        fetch = asyncio.create_task(node.fetch.wait([tp], 1 << 20, 0, LONG))
        await _until(lambda: node.produce.watching(tp) == node.fetch.watching(tp) == 1,
                     "both to park")
        node.metadata.delete_topic("t")
        return await produce, await fetch

    assert _run(main()) == (False, False)  # woken, not satisfied


# -- ISR changes of unknown outcome ----------------------------------------------------------
@pytest.mark.parametrize("applied", [True, False], ids=["written", "not-written"])
def test_an_isr_change_of_unknown_outcome_is_read_back(tmp_path: Path, applied: bool) -> None:
    """A timed-out ISR write may have been applied: until the state is read again the high
    watermark counts the replica being added, and afterwards the stored state decides."""
    node = _node(tmp_path)
    node.metadata.partition_states = {}
    _topic(node, "t", {0: [ME, OTHER]})
    node.metadata.apply_partition_states({("t", 0): PartitionState(ME, 1, (ME,), (ME, OTHER),
                                                                   5, 1)})
    released = asyncio.Event()
    reads: list[int] = []

    def writer(topic: str, index: int, new: Any) -> int:
        raise TimeoutError("no answer from ZooKeeper")

    def reader(topic: str, index: int) -> PartitionState:
        reads.append(index)
        isr = (ME, OTHER) if applied else (ME,)
        return PartitionState(ME, 1, isr, (), 6 if applied else 5, 1)

    async def main() -> None:
        rm = node.replicas
        rm.isr_writer = writer

        async def slow_reader(topic: str, index: int) -> PartitionState:
            await released.wait()
            return reader(topic, index)

        def blocking_reader(topic: str, index: int) -> PartitionState:
            future = asyncio.run_coroutine_threadsafe(slow_reader(topic, index), loop)
            return future.result(LONG)

        loop = asyncio.get_running_loop()
        rm.isr_reader = blocking_reader
        partition = rm.get_partition("t", 0)
        assert partition is not None
        partition.append_records_as_leader(make_batch(10))
        assert partition.high_watermark == 10  # alone in the ISR
        rm.record_follower_fetch(partition, OTHER, 10)  # caught up: joins the ISR
        await _until(lambda: bool(rm._isr_tasks), "the ISR write under way")
        partition.append_records_as_leader(make_batch(5))
        # outcome unknown: OTHER (at 10) still holds the high watermark
        assert partition.pending_isr == (ME, OTHER) and partition.high_watermark == 10
        released.set()
        await _until(lambda: partition.pending_isr is None, "the outcome resolved")
        if applied:
            assert partition.state.isr == (ME, OTHER) and partition.state.partition_epoch == 6
            assert partition.high_watermark == 10
        else:
            assert partition.state.isr == (ME,)
            assert partition.high_watermark == 15

    _run(main())
    assert reads == [0]
    node.log_manager.shutdown()


def test_a_follower_that_is_not_registered_does_not_join_the_isr(tmp_path: Path) -> None:
    """Kafka's isReplicaIsrEligible (KIP-841): a caught-up follower whose broker has left
    (a controlled shutdown under way, or gone) is not added to the ISR; once registered
    again, its next fetch adds it."""
    node = _node(tmp_path)
    node.metadata.partition_states = {}
    _topic(node, "t", {0: [ME, OTHER]})
    node.metadata.apply_partition_states({("t", 0): PartitionState(ME, 1, (ME,), (ME, OTHER),
                                                                   5, 1)})
    written: list[Any] = []
    alive: set[int] = {ME}

    def writer(topic: str, index: int, new: Any) -> int:
        written.append(new)
        return 6

    async def main() -> None:
        rm = node.replicas
        rm.isr_writer = writer
        rm.broker_alive = alive.__contains__
        partition = rm.get_partition("t", 0)
        assert partition is not None
        partition.append_records_as_leader(make_batch(10))
        rm.record_follower_fetch(partition, OTHER, 10)  # caught up, but not registered
        assert not rm._isr_tasks and partition.pending_isr is None
        alive.add(OTHER)
        rm.record_follower_fetch(partition, OTHER, 10)
        await _until(lambda: bool(written), "the ISR write")

    _run(main())
    assert [tuple(w.isr) for w in written] == [(ME, OTHER)]
    node.log_manager.shutdown()


# -- Q38 (issue 48): a state read before the leader's own ISR write, applied after it ---------
def test_a_stale_notification_does_not_undo_the_leaders_isr_write(tmp_path: Path) -> None:
    """The sequence of Q38's lost record, as far as the leader's side goes. Two followers
    join the ISR one after the other (ISR writes at partition epochs 6 and 7); the
    notification of the first write is handled with the state read before the second
    landed. Applied, it took the second follower out of the ISR the leader counted, while
    ZooKeeper (and the controller) listed it: the high watermark passed its log end, an
    acks=all append was acknowledged, and the controller, moving the leadership in a
    controlled shutdown, could elect that follower and truncate the record away."""
    late = 2
    node = _node(tmp_path, brokers=(ME, OTHER, late))
    node.metadata.partition_states = {}
    _topic(node, "t", {0: [ME, OTHER, late]})
    node.metadata.apply_partition_states({("t", 0): PartitionState(
        ME, 1, (ME,), (ME, OTHER, late), 5, 1)})
    written: list[Any] = []

    def writer(topic: str, index: int, new: Any) -> int:
        written.append(new)
        return int(new.zk_version) + 1  # ZooKeeper's next version of the state znode

    async def main() -> None:
        rm = node.replicas
        rm.isr_writer = writer
        partition = rm.get_partition("t", 0)
        assert partition is not None
        partition.append_records_as_leader(make_batch(10))
        rm.record_follower_fetch(partition, OTHER, 10)
        await _until(lambda: partition.state.partition_epoch == 6, "OTHER in the ISR")
        # the notification of epoch 6 is handled now: its state is read (ISR [ME, OTHER])
        read_then = node.metadata.partition_state("t", 0)
        read_then = PartitionState(ME, 1, (ME, OTHER), read_then.replicas, 6, 1)
        rm.record_follower_fetch(partition, late, 10)
        await _until(lambda: partition.state.partition_epoch == 7, "the late one in the ISR")
        assert partition.state.isr == (ME, OTHER, late)
        # ... and applied after the second write landed
        node.metadata.apply_partition_states({("t", 0): read_then})
        assert partition.state.isr == (ME, OTHER, late)
        appended = partition.append_records_as_leader(make_batch(5), acks=-1)
        pending = PendingAppend(partition, 1, appended.last_offset + 1)
        rm.record_follower_fetch(partition, OTHER, 15)  # OTHER has it; the late one not
        assert partition.high_watermark == 10
        assert rm.replication_of(pending) is Replication.PENDING
        # the leadership moves to the late follower (a controlled shutdown of this broker)
        node.metadata.apply_partition_states({("t", 0): PartitionState(
            late, 2, (late, OTHER), (ME, OTHER, late), 8, 2)})
        assert rm.replication_of(pending) is Replication.LEADERSHIP_MOVED

    _run(main())
    assert [tuple(w.isr) for w in written] == [(ME, OTHER), (ME, OTHER, late)]
    node.log_manager.shutdown()


# -- a topic deleted and created again under its name, the deletion unheard --------------
def test_a_topic_created_again_under_its_name_replaces_the_old_one(tmp_path: Path) -> None:
    """A broker may learn of a topic's deletion and re-creation as one change: its watch on
    ``/brokers/topics/<t>`` read the new topic (a new topic id) before its children watch
    saw the name gone, or both happened while its ZooKeeper session was lost. The new
    topic's states start again at leader epoch 0, partition epoch 0. Before, the view kept
    the old topic's states (leader epoch 3), skipped the new ones as older, and the
    partition kept the old topic's log: the new topic served the old one's records and
    stayed at its leader epoch, wedged until the controller's epochs passed it."""
    node = _node(tmp_path)
    node.metadata.partition_states = {}
    old = _topic(node, "t", {0: [ME, OTHER]})
    node.metadata.apply_partition_states({("t", 0): PartitionState(
        ME, 3, (ME, OTHER), (ME, OTHER), 4, 1)})
    partition = node.replicas.get_partition("t", 0)
    assert partition is not None and partition.leader_epoch == 3
    partition.append_records_as_leader(make_batch(10))
    # the deletion unheard: the new topic arrives as a change of the old one
    new = TopicInfo("t", uuid.uuid4(), {0: [OTHER, ME]}, {}, 0, -1)
    assert new.topic_id != old.topic_id
    node.metadata.apply_topic("t", new)
    node.metadata.apply_partition_states({("t", 0): PartitionState(
        OTHER, 0, (OTHER, ME), (OTHER, ME), 0, 1)})
    assert node.metadata.partition_state("t", 0).leader_epoch == 0
    fresh = node.replicas.get_partition("t", 0)
    assert fresh is not None and fresh is not partition
    assert fresh.state.leader == OTHER and fresh.leader_epoch == 0
    assert fresh.log.log_end_offset == 0  # not the old topic's records
    # a late copy of the old topic (read before the deletion) does not bring it back
    node.metadata.apply_topic("t", old)
    assert node.metadata.get("t") == new
    assert node.replicas.get_partition("t", 0) is fresh
    node.log_manager.shutdown()


def test_a_state_read_before_a_deletion_and_applied_after_it_does_not_wedge_the_next_topic(
        tmp_path: Path) -> None:
    """The broker that ran DeleteTopics applies the deletion from its worker; its watch
    thread may have read a state of the old topic just before (a leader's ISR change) and
    post it after. Before, that state stayed in the view, the topic gone, and when the
    name was created again the new topic's states (leader epoch 0) were skipped as older
    than it: the new partition never got its leader on this broker."""
    node = _node(tmp_path)
    node.metadata.partition_states = {}
    _topic(node, "t", {0: [ME, OTHER]})
    stale = PartitionState(ME, 3, (ME, OTHER), (ME, OTHER), 4, 1)
    node.metadata.apply_partition_states({("t", 0): stale})
    node.metadata.delete_topic("t")
    node.metadata.apply_partition_states({("t", 0): stale})  # read before, posted after
    node.metadata.apply_topic("t", None)  # the watch's report of the deletion
    _topic(node, "t", {0: [OTHER, ME]})
    node.metadata.apply_partition_states({("t", 0): PartitionState(
        OTHER, 0, (OTHER, ME), (OTHER, ME), 0, 1)})
    partition = node.replicas.get_partition("t", 0)
    assert partition is not None
    assert partition.state.leader == OTHER and partition.leader_epoch == 0
    node.log_manager.shutdown()
