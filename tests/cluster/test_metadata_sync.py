"""MetadataSync (odradek.cluster.metadata_sync) over a real ZooKeeper: a broker's partition
states kept in step with the state notifications."""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from odradek.cluster.controller import NOTIFICATION_PATH, NOTIFICATION_PREFIX
from odradek.cluster.leader_election import (
    LeaderAndIsr,
    notification_data,
    state_path,
    topic_path,
)
from odradek.cluster.metadata import ClusterMetadata, encode_topic_id
from odradek.cluster.metadata_sync import MetadataSync
from odradek.cluster.store import ConnectionLossError, Node, SessionEvent
from odradek.cluster.zk_store import ZooKeeperStore
from tests.cluster._zookeeper import ZooKeeperServer, wait_for


def _notify(store: ZooKeeperStore, *partitions: tuple[str, int]) -> str:
    return store.create(f"{NOTIFICATION_PATH}/{NOTIFICATION_PREFIX}",
                        notification_data(1, partitions), sequential=True).path


def _one_partition_synced(
    broker: ZooKeeperStore, writer: ZooKeeperStore,
) -> tuple[MetadataSync, Callable[[], int], str]:
    """Topic t with one partition at leader epoch 0 and one notification naming it,
    read by a started MetadataSync of ``broker``; the sync, a function that runs what
    the sync posted (as the event loop would) and answers t-0's leader epoch, and the
    path of the notification read."""
    writer.create_json(topic_path("t"), {
        "version": 3, "topic_id": encode_topic_id(uuid.uuid4()), "partitions": {"0": [0]},
    })
    writer.create(state_path("t", 0), LeaderAndIsr(0, 0, (0,), 1).encode())
    read = _notify(writer, ("t", 0))
    metadata = ClusterMetadata(broker, lambda: [0], {"num.partitions": 1})
    posted: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
    sync = MetadataSync(broker, metadata, posted.put)

    def epoch() -> int:
        while not posted.empty():
            posted.get()()
        return metadata.partition_state("t", 0).leader_epoch

    sync.start()
    assert epoch() == 0
    return sync, epoch, read


def test_a_broker_whose_last_notification_was_purged_reads_every_state(
    zookeeper: ZooKeeperServer, zk_chroot: str, zk_stores: list[ZooKeeperStore],
) -> None:
    """The purge took the broker's last-read notification and the unread one after it;
    the one that survives is newer and names another partition. Before, a broker
    reloaded only when an older notification survived, and so never read this state."""
    broker = zookeeper.store(zk_chroot)
    writer = zookeeper.store(zk_chroot)
    zk_stores += [broker, writer]
    sync, epoch, read = _one_partition_synced(broker, writer)
    try:
        with sync._lock:  # the broker busy: the writes below land before it looks
            writer.set(state_path("t", 0), LeaderAndIsr(0, 1, (0,), 1).encode())
            unread = _notify(writer, ("t", 0))
            _notify(writer, ("other", 0))
            writer.delete(read)
            writer.delete(unread)
        wait_for(lambda: epoch() == 1, what="the state named by a purged notification")
    finally:
        sync.close()


class _PurgedBeforeRead(ZooKeeperStore):
    """A broker's store whose next read of notifications finds the oldest ones purged
    between its listing and its read: the controller's purge running in that gap."""

    purge: list[str] = []

    def get_many(self, paths: Sequence[str], watch: Any = None) -> list[Node | None]:
        if self.purge and any(p.startswith(NOTIFICATION_PATH + "/") for p in paths):
            for path in self.purge:
                self.delete(path)
            self.purge = []
        return super().get_many(paths, watch)


def test_a_notification_purged_between_listing_and_reading_makes_the_broker_read_every_state(
    zookeeper: ZooKeeperServer, zk_chroot: str, zk_stores: list[ZooKeeperStore],
) -> None:
    """A broker that fell behind lists its unread notifications, and the controller's
    purge (oldest first, the newest kept) removes some before it reads them. Before, it
    skipped those as old and moved its last-read mark past them: the states they named
    were never read."""
    broker = _PurgedBeforeRead(zookeeper.connect_string(zk_chroot), 4000, 5000)
    writer = zookeeper.store(zk_chroot)
    zk_stores += [broker, writer]
    sync, epoch, read = _one_partition_synced(broker, writer)
    try:
        with sync._lock:  # the broker busy: the writes below land before it looks
            writer.set(state_path("t", 0), LeaderAndIsr(0, 1, (0,), 1).encode())
            unread = _notify(writer, ("t", 0))
            _notify(writer, ("other", 0))
            broker.purge = [read, unread]  # listed with the newest, gone when read
        wait_for(lambda: epoch() == 1, what="the state named by a notification purged unread")
        assert not broker.purge
    finally:
        sync.close()


class _DropsOnNextNotificationRead(ZooKeeperStore):
    """A broker's store whose next listing of the notifications fails as it would when
    the connection drops at that moment (the watch that fired is then gone)."""

    fail_next = False

    def children(self, path: str, watch: Any = None) -> list[str]:
        if self.fail_next and path == NOTIFICATION_PATH:
            self.fail_next = False
            raise ConnectionLossError(f"{path}: ConnectionLoss")
        return super().children(path, watch)


def test_a_watch_whose_read_failed_is_set_again_when_the_session_comes_back(
    zookeeper: ZooKeeperServer, zk_chroot: str, zk_stores: list[ZooKeeperStore],
) -> None:
    """The notification watch fired and the read that sets it again failed with
    ConnectionLoss; the same session came back. Before, nothing set the watch again and
    the broker never learned a partition state from then on (the 300-fault run's broker
    kept fetching from a leader that had moved)."""
    broker = _DropsOnNextNotificationRead(zookeeper.connect_string(zk_chroot), 4000, 5000)
    writer = zookeeper.store(zk_chroot)
    zk_stores += [broker, writer]
    sync, epoch, _read = _one_partition_synced(broker, writer)
    try:
        broker.fail_next = True
        writer.set(state_path("t", 0), LeaderAndIsr(0, 1, (0,), 1).encode())
        _notify(writer, ("t", 0))
        wait_for(lambda: not broker.fail_next, what="the failed read of the notifications")
        assert epoch() == 0  # missed: no watch is set now
        broker._dispatch(lambda: broker._notify(SessionEvent.RECONNECTED))
        wait_for(lambda: epoch() == 1, what="the state read once the session came back")
        writer.set(state_path("t", 0), LeaderAndIsr(0, 2, (0,), 1).encode())
        _notify(writer, ("t", 0))
        wait_for(lambda: epoch() == 2, what="a later state, through the watch set again")
    finally:
        sync.close()


def test_broker_configs_read_again_in_a_new_session_reach_the_metadata_through_the_loop(
    zookeeper: ZooKeeperServer, zk_chroot: str, zk_stores: list[ZooKeeperStore],
) -> None:
    """Issue 52: a new session reads the dynamic broker configs again on the store's
    thread; they are posted to the event loop, which owns the metadata cache, rather than
    written into it from that thread while the loop reads it."""
    broker = zookeeper.store(zk_chroot)
    writer = zookeeper.store(zk_chroot)
    zk_stores += [broker, writer]
    sync, run_posted, _read = _one_partition_synced(broker, writer)
    metadata = sync.metadata
    try:
        assert metadata.broker_configs(ClusterMetadata.DEFAULT_BROKER_ENTITY) == {}
        writer.set_or_create(f"{ClusterMetadata.BROKER_CONFIGS}/<default>",
                             b'{"version":1,"config":{"log.retention.ms":"1000"}}')
        handled = threading.Event()
        broker._dispatch(lambda: broker._notify(SessionEvent.NEW_SESSION))
        broker._dispatch(handled.set)  # after the new session's reads, in order
        assert handled.wait(10)
        # nothing changed in the metadata until the loop runs what was posted
        assert metadata.broker_configs(ClusterMetadata.DEFAULT_BROKER_ENTITY) == {}
        run_posted()  # as the event loop does
        assert metadata.broker_configs(ClusterMetadata.DEFAULT_BROKER_ENTITY) == {
            "log.retention.ms": "1000"}
    finally:
        sync.close()


def _recreate(writer: ZooKeeperStore, name: str) -> str:
    """Delete ``name`` (with its states) and create it again under a new id, its one
    partition's state at leader epoch 0 (a new state znode: version 0), as the controller
    writes it for a new topic, with the notification naming it. Returns the new id."""
    writer.delete(topic_path(name), recursive=True)
    topic_id = encode_topic_id(uuid.uuid4())
    writer.create_json(topic_path(name), {"version": 3, "topic_id": topic_id,
                                          "partitions": {"0": [0]}})
    writer.create(state_path(name, 0), LeaderAndIsr(0, 0, (0,), 1).encode())
    _notify(writer, (name, 0))
    return topic_id


def _moved_on(writer: ZooKeeperStore, name: str) -> None:
    """``name``-0 at leader epoch 2 (state znode version 2), with its notification."""
    for epoch in (1, 2):
        writer.set(state_path(name, 0), LeaderAndIsr(0, epoch, (0,), 1).encode())
    _notify(writer, (name, 0))


def test_a_topic_deleted_and_created_again_while_the_broker_was_busy_takes_its_new_states(
    zookeeper: ZooKeeperServer, zk_chroot: str, zk_stores: list[ZooKeeperStore],
) -> None:
    """The broker's watch thread busy while t is deleted and created again (a client's
    DeleteTopics then CreateTopics of the same name): when it looks, the name is still
    listed, and its data watch reads the new topic. Before, the view took the new topic id
    but kept the old topic's partition state (leader epoch 2), and skipped the new one
    (leader epoch 0, a new state znode at version 0) as older: the broker stayed at the
    old topic's leader epoch, wedged."""
    broker = zookeeper.store(zk_chroot)
    writer = zookeeper.store(zk_chroot)
    zk_stores += [broker, writer]
    sync, epoch, _read = _one_partition_synced(broker, writer)
    metadata = sync.metadata
    try:
        _moved_on(writer, "t")
        wait_for(lambda: epoch() == 2, what="t-0 at leader epoch 2")
        busy, handled = threading.Event(), threading.Event()
        def hold() -> None:  # the watch thread held while the writes land
            assert busy.wait(30)

        broker._dispatch(hold)
        new_id = _recreate(writer, "t")
        busy.set()
        broker._dispatch(handled.set)
        wait_for(lambda: handled.is_set() and epoch() == 0 and encode_topic_id(
            metadata.get("t").topic_id) == new_id,  # type: ignore[union-attr]
            what="the new t and its state at leader epoch 0")
    finally:
        sync.close()


class _Deaf(ZooKeeperStore):
    """A broker's store whose watches deliver nothing while ``deaf``: what a broker hears
    of the changes made while its session was lost (the watches went with it)."""

    deaf = False

    def _watch(self, watcher: Any, path: str) -> Any:
        deliver = super()._watch(watcher, path)
        return lambda event: None if self.deaf else deliver(event)


def test_a_new_session_drops_the_topics_deleted_while_the_old_one_was_lost(
    zookeeper: ZooKeeperServer, zk_chroot: str, zk_stores: list[ZooKeeperStore],
) -> None:
    """While the broker's session was lost, topic u was deleted, and t deleted and created
    again. The new session reads every topic again. Before, it only added: u stayed in
    the broker's view (and its logs on disk) for good, and t kept its old state."""
    broker = _Deaf(zookeeper.connect_string(zk_chroot), 4000, 5000)
    writer = zookeeper.store(zk_chroot)
    zk_stores += [broker, writer]
    writer.create_json(topic_path("u"), {
        "version": 3, "topic_id": encode_topic_id(uuid.uuid4()), "partitions": {"0": [0]},
    })
    sync, epoch, _read = _one_partition_synced(broker, writer)
    metadata = sync.metadata
    try:
        assert metadata.get("u") is not None
        _moved_on(writer, "t")
        wait_for(lambda: epoch() == 2, what="t-0 at leader epoch 2")
        broker.deaf = True
        writer.delete(topic_path("u"), recursive=True)
        new_id = _recreate(writer, "t")
        broker.deaf = False
        handled = threading.Event()
        broker._dispatch(lambda: broker._notify(SessionEvent.NEW_SESSION))
        broker._dispatch(handled.set)  # after the new session's reads, in order
        assert handled.wait(10)
        assert epoch() == 0  # runs what was posted, as the event loop does
        assert metadata.get("u") is None
        assert encode_topic_id(metadata.get("t").topic_id) == new_id  # type: ignore[union-attr]
    finally:
        sync.close()
