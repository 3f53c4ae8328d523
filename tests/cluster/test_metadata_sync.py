"""MetadataSync (odradek.cluster.metadata_sync) over a real ZooKeeper: a broker's partition
states kept in step with the state notifications."""

from __future__ import annotations

import queue
import uuid
from collections.abc import Callable

from odradek.cluster.controller import NOTIFICATION_PATH, NOTIFICATION_PREFIX
from odradek.cluster.leader_election import (
    LeaderAndIsr,
    notification_data,
    state_path,
    topic_path,
)
from odradek.cluster.metadata import ClusterMetadata, encode_topic_id
from odradek.cluster.metadata_sync import MetadataSync
from odradek.cluster.zk_store import ZooKeeperStore
from tests.cluster._zookeeper import ZooKeeperServer, wait_for


def _notify(store: ZooKeeperStore, *partitions: tuple[str, int]) -> str:
    return store.create(f"{NOTIFICATION_PATH}/{NOTIFICATION_PREFIX}",
                        notification_data(1, partitions), sequential=True).path


def test_a_broker_whose_last_notification_was_purged_reads_every_state(
    zookeeper: ZooKeeperServer, zk_chroot: str, zk_stores: list[ZooKeeperStore],
) -> None:
    """The purge took the broker's last-read notification and the unread one after it;
    the one that survives is newer and names another partition. Before, a broker
    reloaded only when an older notification survived, and so never read this state."""
    broker = zookeeper.store(zk_chroot)
    writer = zookeeper.store(zk_chroot)
    zk_stores += [broker, writer]
    writer.create_json(topic_path("t"), {
        "version": 3, "topic_id": encode_topic_id(uuid.uuid4()), "partitions": {"0": [0]},
    })
    writer.create(state_path("t", 0), LeaderAndIsr(0, 0, (0,), 1).encode())
    read = _notify(writer, ("t", 0))
    metadata = ClusterMetadata(broker, lambda: [0], {"num.partitions": 1})
    posted: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
    sync = MetadataSync(broker, metadata, posted.put)

    def epoch() -> int:
        while not posted.empty():  # what the event loop would run
            posted.get()()
        return metadata.partition_state("t", 0).leader_epoch

    sync.start()
    assert epoch() == 0
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
