"""The controller (odradek.cluster.controller) over a real ZooKeeper: several brokers'
registrations, electors and controllers in one process, each broker its own session."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from odradek.cluster.controller import (
    NOTIFICATION_PATH,
    NOTIFICATION_PREFIX,
    Controller,
    ControllerEvent,
    Resync,
    TopicChange,
)
from odradek.cluster.controller_election import ControllerElector, ControllerMovedError
from odradek.cluster.leader_election import (
    LeaderAndIsr,
    decode_state,
    notification_data,
    state_path,
    topic_path,
)
from odradek.cluster.membership import (
    CONTROLLED_SHUTDOWN_PATH,
    STALE_BROKER_EPOCH,
    BrokerInfo,
    EndPoint,
    request_controlled_shutdown,
)
from odradek.cluster.metadata import assign_replicas, encode_topic_id
from odradek.cluster.reassignment import REASSIGN_PATH, Reassignment, encode_reassignments
from odradek.cluster.store import BadVersionError, CreateOp, DeleteOp, SetOp
from odradek.cluster.zk_store import ZooKeeperStore
from tests.cluster._zookeeper import ZooKeeperServer, expire_session, wait_for

ControllerFactory = Callable[[ZooKeeperStore, ControllerElector, int], Controller]


class Member:
    """One broker's cluster side: a registration in /brokers/ids (not renewed after its
    session expires, so a lost broker stays lost until :meth:`rejoin`), an elector, and
    the controller it starts on becoming controller and stops on resigning."""

    def __init__(self, zookeeper: ZooKeeperServer, chroot: str, broker_id: int,
                 factory: ControllerFactory) -> None:
        self.broker_id = broker_id
        self.store = zookeeper.store(chroot)
        self.factory = factory
        self.controller: Controller | None = None
        self.controllers: list[Controller] = []
        self.elector = ControllerElector(self.store, broker_id, self._become, self._resign)

    def _become(self, epoch: int) -> None:
        controller = self.factory(self.store, self.elector, epoch)
        self.controller = controller
        self.controllers.append(controller)
        controller.start()

    def _resign(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None

    def register(self) -> None:
        info = BrokerInfo(self.broker_id, (EndPoint("PLAINTEXT", "localhost", 9092),))
        self.store.create(info.path, info.encode(), ephemeral=True)

    @property
    def broker_epoch(self) -> int:
        node = self.store.get(f"/brokers/ids/{self.broker_id}")
        assert node is not None
        return node.czxid

    def start(self) -> Member:
        self.register()
        self.elector.start()
        return self

    def close(self) -> None:
        self.elector.close()
        for c in self.controllers:
            c.stop()
            c.join(5)
        self.store.close()


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, zk_chroot: str) -> Iterator[Cluster]:
    c = Cluster(zookeeper, zk_chroot)
    yield c
    c.close()


class Cluster:
    def __init__(self, zookeeper: ZooKeeperServer, chroot: str) -> None:
        self.zookeeper = zookeeper
        self.chroot = chroot
        self.members: dict[int, Member] = {}
        self.observer = zookeeper.store(chroot)  # the test's own session, for reading

    def start(self, ids: range, factory: ControllerFactory = Controller) -> None:
        for broker_id in ids:
            self.members[broker_id] = Member(self.zookeeper, self.chroot, broker_id,
                                             factory).start()
        # an elector is active a moment before its become callback has made the
        # controller (on the store's thread): wait for the controller too
        wait_for(lambda: (m := self.active()) is not None and m.controller is not None,
                 what="a controller")
        active = self.active()
        assert active is not None and active.controller is not None
        assert active.controller.wait_ready(10)

    def active(self) -> Member | None:
        found = [m for m in self.members.values() if m.elector.is_active]
        return found[0] if len(found) == 1 else None

    def controller_epoch(self) -> int:
        node = self.observer.get("/controller_epoch")
        return int(node.data) if node is not None else 0

    def create_topic(self, name: str, assignment: dict[int, list[int]]) -> None:
        self.observer.create_json(topic_path(name), {
            "version": 3, "topic_id": encode_topic_id(uuid.uuid4()),
            "partitions": {str(p): r for p, r in sorted(assignment.items())},
        })

    def states(self, name: str, count: int) -> dict[int, LeaderAndIsr]:
        nodes = self.observer.get_many([state_path(name, p) for p in range(count)])
        return {p: decode_state(n.data, n.version) for p, n in enumerate(nodes) if n}

    def wait_states(self, name: str, count: int,
                    condition: Callable[[dict[int, LeaderAndIsr]], bool] = lambda s: True,
                    what: str = "") -> dict[int, LeaderAndIsr]:
        found: dict[int, LeaderAndIsr] = {}

        def check() -> bool:
            nonlocal found
            found = self.states(name, count)
            return len(found) == count and condition(found)

        wait_for(check, 15, what or f"the states of {name}")
        return found

    def notifications(self) -> list[dict[str, Any]]:
        names = self.observer.children(NOTIFICATION_PATH)
        nodes = self.observer.get_many([f"{NOTIFICATION_PATH}/{n}" for n in names])
        return [json.loads(n.data) for n in nodes if n is not None]

    def close(self) -> None:
        for m in self.members.values():
            m.close()
        self.observer.close()


def named(doc: dict[str, Any]) -> set[tuple[str, int]]:
    return {(e["topic"], e["partition"]) for e in doc["partitions"]}


def non_controller(cluster: Cluster) -> Member:
    active = cluster.active()
    return next(m for m in cluster.members.values() if m is not active)


@pytest.mark.parametrize("rf", [1, 3])
def test_initial_states_of_a_new_topic(cluster: Cluster, rf: int) -> None:
    cluster.start(range(3))
    epoch = cluster.controller_epoch()
    assignment = assign_replicas([0, 1, 2], 6, rf, start_index=0)
    cluster.create_topic("t", assignment)
    states = cluster.wait_states("t", 6)
    for p, replicas in assignment.items():
        assert states[p] == LeaderAndIsr(replicas[0], 0, tuple(replicas), epoch, 0)
    docs = cluster.notifications()
    assert len(docs) == 1
    assert docs[0]["version"] == 1 and docs[0]["controller_epoch"] == epoch
    assert named(docs[0]) == {("t", p) for p in range(6)}


def test_lost_broker_hands_leadership_to_the_next_isr_replica(cluster: Cluster) -> None:
    cluster.start(range(3))
    epoch = cluster.controller_epoch()
    assignment = assign_replicas([0, 1, 2], 6, 3, start_index=0)
    cluster.create_topic("t", assignment)
    before = cluster.wait_states("t", 6)
    lost = non_controller(cluster)
    led = {p for p, s in before.items() if s.leader == lost.broker_id}
    assert led
    expire_session(lost.store, cluster.zookeeper)  # its registration is not renewed
    after = cluster.wait_states(
        "t", 6, lambda s: all(s[p].leader != lost.broker_id for p in led), "the move"
    )
    for p, replicas in assignment.items():
        if p in led:
            survivors = tuple(r for r in replicas if r != lost.broker_id)
            assert after[p] == LeaderAndIsr(survivors[0], 1, survivors, epoch, 1)
        else:
            # a lost follower leaves the ISR at once; leader and leader epoch stand
            isr = tuple(r for r in before[p].isr if r != lost.broker_id)
            assert after[p] == LeaderAndIsr(before[p].leader, 0, isr, epoch, 1)
    docs = cluster.notifications()
    assert len(docs) == 2 and named(docs[1]) == {("t", p) for p in range(6)}


def test_lost_rf1_partitions_go_offline_and_return_with_their_broker(cluster: Cluster) -> None:
    cluster.start(range(3))
    epoch = cluster.controller_epoch()
    cluster.create_topic("t", assign_replicas([0, 1, 2], 6, 1, start_index=0))
    before = cluster.wait_states("t", 6)
    lost = non_controller(cluster)
    led = {p for p, s in before.items() if s.leader == lost.broker_id}
    assert len(led) == 2
    expire_session(lost.store, cluster.zookeeper)
    offline = cluster.wait_states("t", 6, lambda s: all(s[p].leader == -1 for p in led))
    for p in led:  # Kafka's OfflinePartition: no leader, the last ISR kept
        assert offline[p] == LeaderAndIsr(-1, 1, (lost.broker_id,), epoch, 1)
    lost.register()  # the broker comes back
    back = cluster.wait_states("t", 6, lambda s: all(s[p].leader != -1 for p in led))
    for p in led:
        assert back[p] == LeaderAndIsr(lost.broker_id, 2, (lost.broker_id,), epoch, 2)
    docs = cluster.notifications()
    assert [named(d) for d in docs[1:]] == [{("t", p) for p in led}] * 2


def test_added_partitions_get_states(cluster: Cluster) -> None:
    cluster.start(range(3))
    assignment = assign_replicas([0, 1, 2], 3, 1, start_index=0)
    cluster.create_topic("t", assignment)
    cluster.wait_states("t", 3)
    grown = {**assignment, **assign_replicas([0, 1, 2], 3, 1, 3, start_index=0)}
    node = cluster.observer.get(topic_path("t"))
    assert node is not None
    doc = json.loads(node.data)
    doc["partitions"] = {str(p): r for p, r in grown.items()}
    cluster.observer.set_json(topic_path("t"), doc, node.version)
    states = cluster.wait_states("t", 6)
    for p in range(3, 6):
        assert states[p].leader == grown[p][0] and states[p].leader_epoch == 0
    docs = cluster.notifications()
    assert named(docs[-1]) == {("t", 3), ("t", 4), ("t", 5)}


def test_deleted_topic_is_forgotten_and_a_new_one_under_its_name_starts_afresh(
    cluster: Cluster,
) -> None:
    cluster.start(range(3))
    cluster.create_topic("t", assign_replicas([0, 1, 2], 3, 1, start_index=0))
    cluster.wait_states("t", 3)
    cluster.observer.delete(topic_path("t"), recursive=True)
    cluster.create_topic("t", {0: [2], 1: [1]})
    states = cluster.wait_states("t", 2, lambda s: s[0].leader == 2)
    assert states[0].leader_epoch == 0 and states[1] == LeaderAndIsr(1, 0, (1,), 1, 0)


def test_controller_failover(cluster: Cluster) -> None:
    cluster.start(range(3))
    cluster.create_topic("t", assign_replicas([0, 1, 2], 6, 3, start_index=0))
    cluster.wait_states("t", 6)
    old = cluster.active()
    assert old is not None
    expire_session(old.store, cluster.zookeeper)
    old.register()  # the old controller's broker is back, as a plain broker
    # /controller_epoch says 2 a moment before the winner's elector is active, and that a
    # moment before its become callback has made the controller (on the store's thread),
    # while the old elector may still be active (it has not heard): wait for the
    # controller of epoch 2 itself
    wait_for(lambda: cluster.controller_epoch() == 2
             and (m := cluster.active()) is not None and m.controller is not None
             and m.controller.epoch == 2,
             what="a controller at epoch 2")
    new = cluster.active()
    assert new is not None and new.controller is not None
    assert new.controller.epoch == 2 and new.controller.wait_ready(10)
    # The new controller does the work from now on: a lost broker, a new topic.
    before = cluster.states("t", 6)
    lost = max((m for m in cluster.members.values() if m is not new),
               key=lambda m: sum(s.leader == m.broker_id for s in before.values()))
    led = {p for p, s in before.items() if s.leader == lost.broker_id}
    assert led
    seen = len(cluster.notifications())
    expire_session(lost.store, cluster.zookeeper)
    cluster.create_topic("u", assign_replicas([0, 1, 2], 3, 1, start_index=0))
    after = cluster.wait_states(
        "t", 6, lambda s: all(s[p].leader != lost.broker_id for p in led), "the move"
    )
    for p in led:
        assert after[p].controller_epoch == 2
        assert after[p].leader_epoch == before[p].leader_epoch + 1
        assert after[p].leader in before[p].isr
    u = cluster.wait_states("u", 3)
    assert all(s.controller_epoch == 2 for s in u.values())
    wait_for(lambda: len(cluster.notifications()) >= seen + 2, what="the notifications")
    assert all(d["controller_epoch"] == 2 for d in cluster.notifications()[seen:])


class HeldController(Controller):
    """A controller whose worker can be held inside an event (a long pause)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hold = False
        self.held = threading.Event()
        self.gate = threading.Event()
        self.errors: list[Exception] = []

    def process(self, event: ControllerEvent) -> None:
        if self.hold:
            self.held.set()
            self.gate.wait(30)
        try:
            super().process(event)
        except ControllerMovedError as exc:
            self.errors.append(exc)
            raise


def test_stale_controller_writes_are_fenced_and_it_resigns(cluster: Cluster) -> None:
    """The controller stalls (its worker and its store's event thread held) while its
    session expires and another broker takes over; when it resumes, the work it was
    doing changes nothing in ZooKeeper and it resigns."""
    cluster.start(range(3), HeldController)
    cluster.create_topic("t", assign_replicas([0, 1, 2], 6, 3, start_index=0))
    cluster.wait_states("t", 6)
    stale = cluster.active()
    assert stale is not None
    controller = stale.controller
    assert isinstance(controller, HeldController)
    # 1. Hold the worker in the next event: a broker lost.
    controller.hold = True
    lost = non_controller(cluster)
    expire_session(lost.store, cluster.zookeeper)
    assert controller.held.wait(10)
    # 2. Hold the stale broker's store thread too, so it cannot hear its own expiry.
    store_gate, in_store = threading.Event(), threading.Event()

    def block(_path: str) -> None:
        in_store.set()
        store_gate.wait(30)

    stale.store.get("/block", watch=block)
    cluster.observer.create("/block", b"")
    assert in_store.wait(10)
    try:
        # 3. Its session expires; another broker becomes controller (epoch 2) and moves
        #    the lost broker's partitions.
        expire_session(stale.store, cluster.zookeeper)
        wait_for(lambda: cluster.controller_epoch() == 2, what="epoch 2")
        moved = cluster.wait_states(
            "t", 6,
            lambda s: all(x.leader != lost.broker_id for x in s.values())
            and all(x.leader != stale.broker_id for x in s.values()),
            "the new controller's moves",
        )
        notified = len(cluster.notifications())
        assert stale.elector.is_active  # it has not heard yet
        # 4. Resume the stale controller's worker: its writes fail, and it resigns.
        processed = len(controller.history)
        controller.gate.set()
        # It reads the states of the lost broker's partitions again first, and finds them
        # moved by the new controller: nothing left to write. Had it written, the write
        # would have failed on the epoch fence (ControllerMovedError, test_controller_
        # election.py); either way it writes nothing, and resigns once it hears (its store
        # thread released) that its session expired.
        wait_for(lambda: len(controller.history) > processed or controller.errors,
                 what="the held event processed")
        store_gate.set()
        # the elector is inactive a moment before its resign callback has stopped the
        # controller (on the store's thread): wait for the stop too
        wait_for(lambda: not stale.elector.is_active and controller.stopped,
                 what="resignation")
        assert cluster.states("t", 6) == moved
        assert len(cluster.notifications()) == notified
        assert all(d["controller_epoch"] == 2 for d in cluster.notifications()[1:])
    finally:
        store_gate.set()
        controller.gate.set()


def test_old_notifications_are_purged(cluster: Cluster) -> None:
    def factory(store: ZooKeeperStore, elector: ControllerElector, epoch: int) -> Controller:
        return Controller(store, elector, epoch, notifications_kept=3)

    cluster.start(range(1), factory)
    for i in range(6):
        cluster.create_topic(f"t{i}", {0: [0]})
        cluster.wait_states(f"t{i}", 1)
    wait_for(lambda: len(cluster.notifications()) == 3, what="the purge")
    names = cluster.observer.children(NOTIFICATION_PATH)
    kept = [named(d) for d in cluster.notifications()]
    assert kept == [{("t3", 0)}, {("t4", 0)}, {("t5", 0)}], names


def test_every_writers_notifications_are_purged(cluster: Cluster) -> None:
    """A leader changing its ISR writes a notification too: the controller purges those
    as well (before, only a controller failover did, and the parent grew for ever), and
    always keeps the newest."""
    def factory(store: ZooKeeperStore, elector: ControllerElector, epoch: int) -> Controller:
        return Controller(store, elector, epoch, notifications_kept=3)

    cluster.start(range(1), factory)
    for i in range(6):  # as leaders write them (server/zk_cluster.py)
        cluster.observer.create(f"{NOTIFICATION_PATH}/{NOTIFICATION_PREFIX}",
                                notification_data(1, [(f"isr{i}", 0)]), sequential=True)
    wait_for(lambda: len(cluster.notifications()) == 3, what="the purge")
    assert [named(d) for d in cluster.notifications()] == [
        {("isr3", 0)}, {("isr4", 0)}, {("isr5", 0)}]


def test_the_newest_notification_is_never_purged(cluster: Cluster) -> None:
    """Brokers that read the newest notification must not lose it to a purge: they would
    take it for notifications missed and read every state."""
    def factory(store: ZooKeeperStore, elector: ControllerElector, epoch: int) -> Controller:
        return Controller(store, elector, epoch, notification_retention_s=0.0)

    cluster.start(range(1), factory)
    cluster.create_topic("t", {0: [0]})
    cluster.wait_states("t", 1)
    cluster.create_topic("u", {0: [0]})
    cluster.wait_states("u", 1)
    wait_for(lambda: len(cluster.notifications()) <= 1, what="the purge")
    active = cluster.active()
    assert active is not None and active.controller is not None
    controller = active.controller
    processed = len(controller.history)
    controller.submit(Resync(frozenset()))  # one more event, one more purge after it
    wait_for(lambda: len(controller.history) > processed, what="the event")
    assert [named(d) for d in cluster.notifications()] == [{("u", 0)}]


@pytest.mark.parametrize(("original", "isr_before"), [
    ((0, 1), (0, 1, 2)),  # the leader leaves: a new leader, the ISR without it
    ((1, 0), (1, 2)),  # the leader stays, the ISR already without the leaving replica
])
def test_a_move_completes_with_the_assignment_and_the_state_in_one_write(
    cluster: Cluster, original: tuple[int, int], isr_before: tuple[int, ...]
) -> None:
    """The last step of a reassignment writes the target assignment and the state in ONE
    transaction (the state even when unchanged, so that its version moves). Written one
    after the other, a broker could read the ISR without the leaving replica while its
    assignment still named it, and the leader, tracking that replica's fetches, added it
    back; and an ISR change the leader computed from the old assignment stayed
    writable. Kafka sends the leader the new replica set before it shrinks the ISR."""
    cluster.start(range(3))
    cluster.create_topic("t", {0: list(original)})
    cluster.wait_states("t", 1)
    target = (2, 1)
    cluster.observer.create(REASSIGN_PATH, encode_reassignments(
        [Reassignment("t", 0, target, original)]))
    wait_for(lambda: json.loads(cluster.observer.get(topic_path("t")).data)  # type: ignore[union-attr]
             ["partitions"]["0"] == [2, 1, 0], 15, "the expanded assignment")
    # the leader grows its ISR (as server/zk_cluster.py's write_isr: conditional, with a
    # notification); the controller completes the move then
    state = cluster.states("t", 1)[0]
    grown = LeaderAndIsr(state.leader, state.leader_epoch, isr_before, state.controller_epoch,
                         state.zk_version)
    written = cluster.observer.multi([
        SetOp(state_path("t", 0), grown.encode(), state.zk_version),
        CreateOp(f"{NOTIFICATION_PATH}/{NOTIFICATION_PREFIX}",
                 notification_data(state.controller_epoch, [("t", 0)]), sequential=True),
    ])[0]
    assert written is not None
    wait_for(lambda: cluster.observer.get(REASSIGN_PATH) is None, 15, "the move completed")
    final = cluster.states("t", 1)[0]
    assert set(final.isr) == {1, 2} and final.leader in target, final
    client = cluster.observer.client
    _, assigned = client.get(topic_path("t"))
    _, stated = client.get(state_path("t", 0))
    assert json.loads(client.get(topic_path("t"))[0])["partitions"]["0"] == list(target)
    assert assigned.mzxid == stated.mzxid, "the assignment and the state in one transaction"
    # an ISR change the leader made from the old assignment (adding the leaving replica
    # 0 back) is fenced by the state's new version
    stale = LeaderAndIsr(grown.leader, grown.leader_epoch, tuple(sorted({*isr_before, 0})),
                         grown.controller_epoch, written.version)
    with pytest.raises(BadVersionError):
        cluster.observer.multi([SetOp(state_path("t", 0), stale.encode(), written.version)])


class TopicsHeldController(Controller):
    """A controller that leaves TopicChange events aside while ``hold_topics`` is set: it
    hears of a new topic only after the events that follow."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hold_topics = False
        self.held: list[ControllerEvent] = []

    def process(self, event: ControllerEvent) -> None:
        if self.hold_topics and isinstance(event, TopicChange):
            self.held.append(event)
            return
        super().process(event)


def test_a_move_of_a_topic_the_controller_has_not_heard_of_yet_is_not_dropped(
    cluster: Cluster,
) -> None:
    """A broker accepts AlterPartitionReassignments for a topic it knows; the controller
    may read the reassignment before the topic's TopicChange (issue 52's stress test:
    topics created and moved at once through three brokers). It takes the topic then,
    rather than drop the move as if the topic were gone: the client was told it was
    accepted."""
    cluster.start(range(3), TopicsHeldController)
    active = cluster.active()
    assert active is not None and isinstance(active.controller, TopicsHeldController)
    controller = active.controller
    controller.hold_topics = True
    cluster.create_topic("new", {0: [0]})
    wait_for(lambda: controller.held, 15, "the TopicChange held")
    cluster.observer.create(REASSIGN_PATH, encode_reassignments(
        [Reassignment("new", 0, (1,), (0,))]))
    wait_for(lambda: json.loads(cluster.observer.get(topic_path("new")).data)  # type: ignore[union-attr]
             ["partitions"]["0"] == [1, 0], 15, "the expanded assignment")
    assert cluster.observer.get(REASSIGN_PATH) is not None  # under way, not dropped
    assert cluster.states("new", 1)[0].leader == 0  # elected when taken


def test_controlled_shutdown_moves_leaderships_and_shrinks_isrs_while_registered(
    cluster: Cluster,
) -> None:
    cluster.start(range(3))
    epoch = cluster.controller_epoch()
    assignment = assign_replicas([0, 1, 2], 6, 3, start_index=0)
    cluster.create_topic("t", assignment)
    before = cluster.wait_states("t", 6)
    stopping = non_controller(cluster)
    b = stopping.broker_id
    answer = request_controlled_shutdown(stopping.store, b, stopping.broker_epoch, 15)
    assert answer is not None and answer.error_code == 0 and answer.remaining == 0
    after = cluster.states("t", 6)
    for p, replicas in assignment.items():
        if before[p].leader == b:
            # Kafka's controlled-shutdown election: the next ISR replica, a new epoch
            successor = next(r for r in replicas if r != b)
            assert after[p] == LeaderAndIsr(successor, 1,
                                             tuple(r for r in before[p].isr if r != b), epoch, 1)
        else:
            assert after[p] == LeaderAndIsr(before[p].leader, 0,
                                             tuple(r for r in before[p].isr if r != b), epoch, 1)
    assert cluster.observer.get(f"/brokers/ids/{b}") is not None  # still registered
    # a broker shutting down is not elected: its partitions' other replicas lose theirs
    other = next(m for m in cluster.members.values()
                 if m is not stopping and m is not cluster.active())
    expire_session(other.store, cluster.zookeeper)
    offline = cluster.wait_states("t", 6, lambda s: all(
        s[p].leader != other.broker_id for p in s), "the move off the lost broker")
    assert all(state.leader != b for state in offline.values())


def test_the_controllers_own_controlled_shutdown(cluster: Cluster) -> None:
    cluster.start(range(3))
    cluster.create_topic("t", assign_replicas([0, 1, 2], 6, 3, start_index=0))
    cluster.wait_states("t", 6)
    active = cluster.active()
    assert active is not None
    answer = request_controlled_shutdown(active.store, active.broker_id, active.broker_epoch,
                                         15)
    assert answer is not None and answer.error_code == 0 and answer.remaining == 0
    assert all(active.broker_id not in s.isr for s in cluster.states("t", 6).values())
    assert cluster.active() is active  # it controls until it resigns


def test_a_request_with_a_stale_broker_epoch_is_refused(cluster: Cluster) -> None:
    cluster.start(range(3))
    cluster.create_topic("t", assign_replicas([0, 1, 2], 6, 3, start_index=0))
    before = cluster.wait_states("t", 6)
    stopping = non_controller(cluster)
    stale = stopping.broker_epoch - 1  # an earlier incarnation's
    answer = request_controlled_shutdown(stopping.store, stopping.broker_id, stale, 15)
    assert answer is not None and answer.error_code == STALE_BROKER_EPOCH
    assert cluster.states("t", 6) == before
    # asked again with its epoch, it is heard
    answer = request_controlled_shutdown(stopping.store, stopping.broker_id,
                                         stopping.broker_epoch, 15)
    assert answer is not None and answer.error_code == 0
    assert all(stopping.broker_id not in s.isr for s in cluster.states("t", 6).values())


def test_a_bounced_broker_is_seen_gone_and_back(cluster: Cluster) -> None:
    """Its registration replaced in one transaction (the set of brokers never changes):
    only the broker epoch says it was bounced (KIP-380), and its leaderships move
    through a new leader epoch, its followers' places in the ISRs are lost."""
    cluster.start(range(3))
    epoch = cluster.controller_epoch()
    assignment = assign_replicas([0, 1, 2], 6, 3, start_index=0)
    cluster.create_topic("t", assignment)
    before = cluster.wait_states("t", 6)
    bounced = non_controller(cluster)
    b = bounced.broker_id
    old_epoch = bounced.broker_epoch
    path = f"/brokers/ids/{b}"
    node = bounced.store.get(path)
    assert node is not None
    bounced.store.multi([DeleteOp(path), CreateOp(path, node.data, ephemeral=True)])
    assert bounced.broker_epoch != old_epoch
    after = cluster.wait_states("t", 6, lambda s: all(b not in s[p].isr for p in s),
                                "the bounced broker out of every ISR")
    for p in assignment:
        if before[p].leader == b:
            assert after[p].leader != b and after[p].leader_epoch == 1
        else:
            assert after[p].leader == before[p].leader and after[p].leader_epoch == 0
        assert after[p].controller_epoch == epoch
    assert not cluster.observer.children(CONTROLLED_SHUTDOWN_PATH)
