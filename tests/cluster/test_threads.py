"""Who owns what between the event loop and worker threads (docs/architecture.md,
"Threads"), over real parts: ClusterMetadata on an EmbeddedStore, run the way cluster mode
runs it (the store round trips of an admin change in a worker thread, the local view
changed on the loop).

The races are made deterministic: a topic whose partition map pauses the worker thread
in the middle of its walk over the topics, until the loop has applied a change.
"""

from __future__ import annotations

import asyncio
import datetime
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from odradek.cluster import loop_owned
from odradek.cluster.metadata import ClusterMetadata, TopicInfo
from odradek.cluster.partition import PartitionState
from odradek.cluster.replica_manager import ReplicaManager
from odradek.cluster.store import EmbeddedStore
from odradek.server.purgatory import Purgatory
from odradek.storage import LogManager, checkpoint, files

LONG = 10.0  # seconds: a deadline never reached when things work


class _PausingPartitions(dict[int, list[int]]):
    """A topic's partitions whose size, asked on a worker thread, first stops that thread
    until ``resume`` is set (``reached`` tells the loop it stopped there)."""

    def __init__(self, partitions: dict[int, list[int]]) -> None:
        super().__init__(partitions)
        self.reached = threading.Event()
        self.resume = threading.Event()

    def __len__(self) -> int:
        if threading.current_thread() is not threading.main_thread() and not self.reached.is_set():
            self.reached.set()
            assert self.resume.wait(LONG), "the loop never resumed the worker"
        return super().__len__()


@dataclass
class _Broker:
    """The parts of a cluster-mode broker that an admin change goes through."""

    metadata: ClusterMetadata
    replicas: ReplicaManager
    log_manager: LogManager


def _broker(tmp_path: Path, loop: asyncio.AbstractEventLoop) -> _Broker:
    md = ClusterMetadata(EmbeddedStore(tmp_path / "meta.json"), lambda: [0, 1, 2],
                         {"num.partitions": 1, "default.replication.factor": 1})
    def post(fn: Callable[[], None]) -> None:  # as cluster mode sets it
        loop.call_soon_threadsafe(fn)

    md.defer_local = post
    md.partition_states = {}
    md.max_broker_partitions = 1000  # the limit check walks every topic
    log_manager = LogManager([tmp_path / "logs"])
    log_manager.startup(md.log_config)
    replicas = ReplicaManager(0, log_manager, md, Purgatory(), Purgatory())
    replicas.startup()
    return _Broker(md, replicas, log_manager)


def _topic(name: str, partitions: dict[int, list[int]] | None = None) -> TopicInfo:
    return TopicInfo(name, uuid.uuid4(), partitions if partitions is not None else {0: [1]})


async def _when(event: threading.Event) -> None:
    assert await asyncio.to_thread(event.wait, LONG), "the worker never got there"


def test_a_creation_in_a_worker_survives_a_topic_applied_meanwhile(tmp_path: Path) -> None:
    """Issue 52: CreateTopics hands its ZooKeeper work to a worker thread
    (``ReplicaManager.change_topics``), which walks every topic (the partition limits)
    while the loop applies a topic another broker created: the worker walks a copy the
    loop never changes, so the creation succeeds, and both topics end in the view."""

    async def main() -> None:
        broker = _broker(tmp_path, asyncio.get_running_loop())
        md = broker.metadata
        pausing = _PausingPartitions({0: [1]})
        md.apply_topic("first", _topic("first", pausing))
        md.apply_topic("second", _topic("second"))
        creation = asyncio.ensure_future(broker.replicas.change_topics(
            lambda: md.create_topic("mine", 1, 1), datetime.timedelta(seconds=LONG)))
        await _when(pausing.reached)
        md.apply_topic("theirs", _topic("theirs"))  # a ZooKeeper watch, on the loop
        pausing.resume.set()
        info, timed_out = await asyncio.wait_for(creation, LONG)
        assert info.name == "mine" and not timed_out
        assert sorted(md.topics) == ["first", "mine", "second", "theirs"]
        broker.log_manager.shutdown()

    asyncio.run(main())


def test_a_deletion_in_a_worker_leaves_the_partition_states_to_the_loop(
    tmp_path: Path,
) -> None:
    """Deleting a topic off the loop changes the partition states only through the loop
    (where applying the deletion drops them): the worker never writes the loop's dict
    while the loop walks it."""

    async def main() -> None:
        broker = _broker(tmp_path, asyncio.get_running_loop())
        md = broker.metadata
        await broker.replicas.change_topics(lambda: md.create_topic("gone", 2, 1))
        states = {("gone", p): PartitionState(1, 0, (1,), (1,)) for p in range(2)}
        md.apply_partition_states(states)
        written_on: set[str] = set()

        class Watching(dict[Any, Any]):
            def __delitem__(self, key: Any) -> None:
                written_on.add(threading.current_thread().name)
                super().__delitem__(key)

        md.partition_states = Watching(md.partition_states or {})
        await broker.replicas.change_topics(lambda: md.delete_topic("gone"))
        await asyncio.sleep(0)  # the deletion, queued to the loop
        assert md.get("gone") is None
        assert not any(k[0] == "gone" for k in md.partition_states)
        assert written_on <= {threading.current_thread().name}
        broker.log_manager.shutdown()

    asyncio.run(main())


def test_the_periodic_high_watermark_checkpoint_reads_the_partitions_on_the_loop(
    tmp_path: Path,
) -> None:
    """The broker runs the checkpoint in a worker every interval: the high watermarks are
    read on the loop, which owns the partitions (a loop-owned dict in debug mode), and the
    file is written in the worker."""

    async def main() -> None:
        broker = _broker(tmp_path, asyncio.get_running_loop())
        md = broker.metadata
        _, timed_out = await broker.replicas.change_topics(
            lambda: md.create_topic("hosted", 1, 1, None, {0: [0]}),
            datetime.timedelta(seconds=LONG))
        assert not timed_out and broker.replicas.get_partition("hosted", 0) is not None
        await asyncio.to_thread(broker.replicas.checkpoint_high_watermarks)
        path = tmp_path / "logs" / files.REPLICATION_OFFSET_CHECKPOINT
        written = checkpoint.read_offsets(path)
        assert written == {("hosted", 0): 0}
        # What the broker runs every interval: read here, written in a worker that never
        # waits on the loop (under a loop busy past on_loop's timeout, a worker waiting
        # for it gave up and skipped the checkpoint: an ERROR in a valgrind run).
        path.unlink()
        waited = []
        real_on_loop, own_loop = loop_owned.on_loop, asyncio.get_running_loop()

        def counted(loop: asyncio.AbstractEventLoop | None, fn: Any) -> Any:
            if loop is own_loop:  # another test's broker goes through uncounted
                waited.append(fn)
            return real_on_loop(loop, fn)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("odradek.cluster.replica_manager.on_loop", counted)
            await broker.replicas.checkpoint_high_watermarks_off_loop()
        assert checkpoint.read_offsets(path) == {("hosted", 0): 0} and waited == []
        broker.log_manager.shutdown()

    asyncio.run(main())


def test_debug_mode_refuses_a_loop_owned_dict_touched_from_a_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ODRADEK_DEBUG_THREADS=1 (the suite's conftest sets it; set here too, so the
    test runs whatever the environment) a loop-owned dict refuses to be read or written
    on a thread other than its loop's."""
    monkeypatch.setattr(loop_owned, "DEBUG", True)

    async def main() -> None:
        owned: dict[str, int] = loop_owned.loop_dict()
        owned["a"] = 1  # bound to this loop's thread
        with pytest.raises(loop_owned.WrongThreadError):
            await asyncio.to_thread(owned.__setitem__, "b", 2)
        with pytest.raises(loop_owned.WrongThreadError):
            await asyncio.to_thread(lambda: list(owned.values()))
        assert owned == {"a": 1}

    asyncio.run(main())


def test_without_debug_mode_a_loop_owned_dict_is_a_plain_dict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The production cost is nil: the class is chosen at construction."""
    monkeypatch.setattr(loop_owned, "DEBUG", False)
    assert type(loop_owned.loop_dict()) is dict
