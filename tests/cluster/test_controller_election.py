"""Controller election (odradek.cluster.controller_election) with several electors, each
its own ZooKeeper session, in one process."""

from __future__ import annotations

import threading

import pytest

from odradek.cluster.controller_election import (
    CONTROLLER_EPOCH_PATH,
    CONTROLLER_PATH,
    ControllerElector,
    ControllerMovedError,
    current_controller,
)
from odradek.cluster.store import CreateOp, MetadataStore
from odradek.cluster.zk_store import ZooKeeperStore
from tests.cluster._zookeeper import ZooKeeperServer, expire_session, wait_for
from tests.cluster.conftest import Backend


class Log:
    """What the callbacks saw: ("become", broker, epoch) / ("resign", broker)."""

    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []
        self._lock = threading.Lock()

    def elector(self, store: MetadataStore, broker_id: int) -> ControllerElector:
        def become(epoch: int) -> None:
            with self._lock:
                self.events.append(("become", broker_id, epoch))

        def resign() -> None:
            with self._lock:
                self.events.append(("resign", broker_id))

        return ControllerElector(store, broker_id, become, resign)

    def becomes(self) -> list[tuple[object, ...]]:
        with self._lock:
            return [e for e in self.events if e[0] == "become"]

    def has(self, event: tuple[object, ...]) -> bool:
        with self._lock:
            return event in self.events


def _electors(zookeeper: ZooKeeperServer, chroot: str, stores: list[ZooKeeperStore],
              log: Log, ids: range) -> list[ControllerElector]:
    electors = []
    for broker_id in ids:
        store = zookeeper.store(chroot)
        stores.append(store)
        electors.append(log.elector(store, broker_id))
    return electors


def _active(electors: list[ControllerElector]) -> list[ControllerElector]:
    return [e for e in electors if e.is_active]


def test_single_broker_becomes_controller_at_epoch_1(backend: Backend) -> None:
    store = backend.open()
    log = Log()
    elector = log.elector(store, 0)
    elector.start()
    assert elector.is_active and elector.epoch == 1
    assert log.becomes() == [("become", 0, 1)]
    assert elector.current() == (0, 1)
    found = store.get_json(CONTROLLER_PATH)
    assert found is not None
    doc, _ = found
    assert isinstance(doc, dict)
    assert doc["version"] == 2 and doc["brokerid"] == 0 and doc["kraftControllerEpoch"] == -1
    assert isinstance(doc["timestamp"], str)
    epoch = store.get(CONTROLLER_EPOCH_PATH)
    assert epoch is not None and epoch.data == b"1"
    assert elector.epoch_zk_version == epoch.version
    node = store.get(CONTROLLER_PATH)
    assert node is not None and node.ephemeral


def test_exactly_one_controller(zookeeper: ZooKeeperServer, zk_chroot: str,
                                zk_stores: list[ZooKeeperStore]) -> None:
    log = Log()
    electors = _electors(zookeeper, zk_chroot, zk_stores, log, range(3))
    for e in electors:
        e.start()
    assert len(_active(electors)) == 1
    winner = _active(electors)[0]
    assert current_controller(zk_stores[0]) == (winner.broker_id, 1)
    wait_for(lambda: all(e.active_controller_id == winner.broker_id for e in electors),
             what="everyone to know the controller")


def test_expired_controller_is_replaced_with_a_higher_epoch(
    zookeeper: ZooKeeperServer, zk_chroot: str, zk_stores: list[ZooKeeperStore]
) -> None:
    log = Log()
    electors = _electors(zookeeper, zk_chroot, zk_stores, log, range(3))
    for e in electors:
        e.start()
    old = _active(electors)[0]
    old_store = zk_stores[old.broker_id]
    expire_session(old_store, zookeeper)
    wait_for(lambda: log.has(("resign", old.broker_id)), what="the old controller resigning")

    def new_controller() -> bool:
        controller, epoch = current_controller(zk_stores[0])
        return controller not in (-1, old.broker_id) and epoch == 2

    wait_for(new_controller, what="a new controller at epoch 2")
    controller, _ = current_controller(zk_stores[0])
    wait_for(lambda: [e.broker_id for e in _active(electors)] == [controller],
             what="one active elector")
    new = _active(electors)[0]
    assert new.epoch == 2 and ("become", controller, 2) in log.becomes()
    # The deposed controller's fenced writes fail; the new one's succeed.
    with pytest.raises(ControllerMovedError):
        old.fenced_multi([CreateOp("/fenced-old", b"")])
    new.fenced_multi([CreateOp("/fenced-new", b"")])
    assert zk_stores[0].get("/fenced-new") is not None
    assert zk_stores[0].get("/fenced-old") is None


def test_stale_epoch_writes_are_fenced(zookeeper: ZooKeeperServer, zk_chroot: str,
                                       zk_stores: list[ZooKeeperStore]) -> None:
    """A controller that has not yet heard it was deposed cannot write."""
    log = Log()
    a, b = _electors(zookeeper, zk_chroot, zk_stores, log, range(2))
    a.start()
    b.start()
    assert a.is_active
    # Depose a behind its back: b's store deletes /controller and b wins epoch 2.
    b.close()
    zk_stores[1].delete(CONTROLLER_PATH)
    wait_for(lambda: current_controller(zk_stores[1])[0] == 0 and a.epoch == 2,
             what="a re-elected at epoch 2")
    # a is controller again at epoch 2: its previous zk version is stale in a copy.
    stale = log.elector(zk_stores[0], 0)
    stale._active, stale.epoch, stale.epoch_zk_version = True, 1, 1
    with pytest.raises(ControllerMovedError):
        stale.fenced_multi([CreateOp("/stale", b"")])
    a.fenced_multi([CreateOp("/fresh", b"")])


def test_concurrent_elections_never_share_an_epoch(zookeeper: ZooKeeperServer, zk_chroot: str,
                                                   zk_stores: list[ZooKeeperStore]) -> None:
    log = Log()
    electors = _electors(zookeeper, zk_chroot, zk_stores, log, range(5))
    barrier = threading.Barrier(len(electors))

    def run(e: ControllerElector) -> None:
        barrier.wait()
        e.start()

    threads = [threading.Thread(target=run, args=(e,)) for e in electors]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for _round in range(4):  # kill the controller a few times: each epoch has one winner
        wait_for(lambda: len(_active(electors)) == 1, what="one controller")
        controller = _active(electors)[0]
        epoch = controller.epoch
        zk_stores[controller.broker_id].delete(CONTROLLER_PATH)
        wait_for(lambda ep=epoch: any(e.is_active and e.epoch == ep + 1 for e in electors),
                 what=f"epoch {epoch + 1}")
    wait_for(lambda: len(_active(electors)) == 1, what="one controller at the end")
    epochs = [e[2] for e in log.becomes()]
    assert len(epochs) == len(set(epochs)), log.becomes()
    assert sorted(epochs) == list(range(1, len(epochs) + 1))


def test_close_hands_over(backend: Backend) -> None:
    store = backend.open()
    log = Log()
    first = log.elector(store, 0)
    first.start()
    first.close()
    assert log.has(("resign", 0))
    assert store.get(CONTROLLER_PATH) is None
    second = log.elector(store, 1)
    second.start()
    assert second.is_active and second.epoch == 2


def test_embedded_expiry_resigns_and_reelects(backend: Backend) -> None:
    store = backend.open()
    log = Log()
    elector = log.elector(store, 0)
    elector.start()
    backend.expire(store)
    wait_for(lambda: log.has(("resign", 0)), what="resignation")
    # the elector is active at epoch 2 a moment before its become callback has run (on
    # the store's thread): wait for the callback too
    wait_for(lambda: elector.is_active and elector.epoch == 2 and log.has(("become", 0, 2)),
             what="re-election at epoch 2")
    assert log.becomes() == [("become", 0, 1), ("become", 0, 2)]
