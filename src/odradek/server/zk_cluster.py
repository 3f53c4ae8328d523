"""A broker's membership of a ZooKeeper cluster, wired to its event loop (cluster mode).

How it works: :class:`ZkCluster` owns this broker's ZooKeeper session and the parts that
live on it: the registration ``/brokers/ids/<id>`` (:mod:`odradek.cluster.membership`),
the watch on the live brokers, the controller election
(:mod:`odradek.cluster.controller_election`) and, once elected, the controller
(:mod:`odradek.cluster.controller`), and the sync of topics and partition states
(:mod:`odradek.cluster.metadata_sync`). Every ZooKeeper call runs on the store's thread or
a worker thread; what the event loop needs (the live brokers, the controller's id) is
handed over with ``post`` (``loop.call_soon_threadsafe``) or read as a single attribute.

The order at start follows Kafka's ZooKeeper mode: connect (and refuse at once a
``broker.id`` a live broker holds, unless its registration holds this broker's own
endpoints: then it is this broker's before a restart, waited out until its session
expires), read the cluster's topics and states, load the logs,
open the listeners, then register (the registration carries the bound ports) and run for
controller. A clean stop first asks for a controlled shutdown while still registered (and,
if it is the controller, while still controlling): :meth:`ZkCluster.request_controlled_shutdown`,
after which the broker waits for the controller's answer in the partition states it
applies (:meth:`odradek.server.broker.Broker.stop`); then it leaves in the reverse order
of the start: resign, unregister, close the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Sequence

from odradek.cluster.controller import Controller, PreferredElection, UncleanElection
from odradek.cluster.controller_election import ControllerElector
from odradek.cluster.leader_election import (
    NOTIFICATION_PATH,
    NOTIFICATION_PREFIX,
    LeaderAndIsr,
    decode_state,
    notification_data,
    state_path,
)
from odradek.cluster.membership import (
    CONTROLLED_SHUTDOWN_PATH,
    BrokerChangeWatcher,
    BrokerInfo,
    BrokerRegistration,
    ChildrenWatcher,
    EndPoint,
    ShutdownRequest,
    wait_out_previous_registration,
)
from odradek.cluster.metadata import ClusterMetadata
from odradek.cluster.metadata_sync import MetadataSync
from odradek.cluster.partition import PartitionState
from odradek.cluster.reassignment import (
    REASSIGN_PATH,
    Reassignment,
    decode_reassignments,
    encode_reassignments,
)
from odradek.cluster.store import BadVersionError, CreateOp, NodeExistsError, NoNodeError, SetOp
from odradek.cluster.zk_security import ZkClientSecurity
from odradek.cluster.zk_store import ZooKeeperStore
from odradek.server.config import BrokerConfig
from odradek.storage import TopicPartition
from odradek.storage.config import LogConfig

__all__ = ["ZkCluster"]

log = logging.getLogger(__name__)

Post = Callable[[Callable[[], None]], None]


class ZkCluster:
    def __init__(self, config: BrokerConfig, post: Post) -> None:
        self.config = config
        self.post = post
        self.broker_id = config.broker_id
        self.rack: str | None = config["broker.rack"] or None
        self.store: ZooKeeperStore
        self._live: dict[int, BrokerInfo] = {}
        self._live_changed: asyncio.Event | None = None  # while a start awaits its listing
        self._shutting_down: frozenset[int] = frozenset()
        self._watcher: BrokerChangeWatcher | None = None
        self._shutdown_watcher: ChildrenWatcher | None = None
        self._sync: MetadataSync | None = None
        self._registration: BrokerRegistration | None = None
        self._elector: ControllerElector | None = None
        self._controller: Controller | None = None
        self._metadata: ClusterMetadata | None = None
        # Set by the broker: layer the dynamic broker configs again (on the event loop).
        self.on_broker_configs: Callable[[], None] | None = None

    # -- start (each step blocking: called with asyncio.to_thread) --------------------------
    def connect(self, broker_id: int) -> None:
        """Open the session; refuse a broker id that a live broker holds, as Kafka does,
        but wait out a registration with this broker's own endpoints: the one its
        previous run left when killed, until ZooKeeper expires that session
        (:func:`~odradek.cluster.membership.wait_out_previous_registration`)."""
        timeout = int(self.config["zookeeper.connection.timeout.ms"])
        session_timeout_ms = int(self.config["zookeeper.session.timeout.ms"])
        # Kafka reads the JAAS file (and the ZooKeeper client's TLS properties its
        # zookeeper.ssl.* keys fall back to) from the JVM's -D properties: KAFKA_OPTS.
        security = ZkClientSecurity.for_broker(self.config.values, self.config.raw,
                                               os.environ)
        self.store = ZooKeeperStore(
            self.config["zookeeper.connect"],
            session_timeout_ms=session_timeout_ms,
            connection_timeout_ms=timeout if timeout > 0 else None,
            security=security,
        )
        endpoints = [EndPoint(listener.name.upper(), listener.host, listener.port)
                     for listener in self.config.advertised_listeners]
        try:
            wait_out_previous_registration(self.store, broker_id, endpoints,
                                           session_timeout_ms / 1000)
        except BaseException:
            self.store.close()
            raise
        log.info("connected to ZooKeeper at %s", self.config["zookeeper.connect"])

    def follow(self, metadata: ClusterMetadata) -> dict[tuple[str, int], PartitionState]:
        """Watch the live brokers, topics and partition states; returns every state."""
        self._metadata = metadata
        self._watcher = BrokerChangeWatcher(self.store, self._brokers_changed)
        self._live = self._watcher.start()
        self._shutdown_watcher = ChildrenWatcher(self.store, CONTROLLED_SHUTDOWN_PATH,
                                                 self._shutting_down_changed)
        self._shutting_down = _broker_ids(self._shutdown_watcher.start())
        self._sync = MetadataSync(self.store, metadata, self.post, self.broker_id,
                                  on_broker_configs=self._broker_configs_changed)
        return self._sync.start()

    def _broker_configs_changed(self) -> None:
        if self.on_broker_configs is not None:
            self.on_broker_configs()

    def _brokers_changed(self, brokers: dict[int, BrokerInfo]) -> None:
        def apply() -> None:
            joined = sorted(set(brokers) - set(self._live))
            left = sorted(set(self._live) - set(brokers))
            # registered again since last read (a new broker epoch, KIP-380)
            bounced = sorted(b for b, info in brokers.items() if b in self._live
                             and info.broker_epoch != self._live[b].broker_epoch)
            self._live = brokers
            if self._live_changed is not None:
                self._live_changed.set()
            if joined or left or bounced:
                log.info("live brokers now %s (joined %s, left %s, bounced %s)",
                         sorted(brokers), joined, left, bounced)

        self.post(apply)

    def _shutting_down_changed(self, names: frozenset[str]) -> None:
        ids = _broker_ids(names)

        def apply() -> None:
            self._shutting_down = ids

        self.post(apply)

    async def register(self, endpoints: Sequence[EndPoint]) -> None:
        """Register (``/brokers/ids/<id>``) and stand for controller, then wait until this
        broker's own view of the live brokers lists the registration made, so that the
        first Metadata it answers once started names it. The view follows the watch on
        ``/brokers/ids``, a moment after the create: a client that met the gap was told
        of no broker at all, and librdkafka's AdminClient then waits for the named broker
        of an alter of broker configs until its timeout, never asking again (seen in a
        whole run, issue 51). The listeners are open meanwhile: a client that connects
        during the registration itself can still meet the gap (docs/architecture.md)."""
        await asyncio.to_thread(self._register, endpoints)
        timeout_s = self.config["zookeeper.session.timeout.ms"] / 1000
        if not await self._listed(timeout_s):
            log.warning("broker %d registered but its view of the live brokers did not "
                        "list it within %.0f s; going on", self.broker_id, timeout_s)

    async def _listed(self, timeout_s: float) -> bool:
        """Wait (on the loop) until the live brokers include this broker's registration;
        False after ``timeout_s``."""
        registration = self._registration
        assert registration is not None
        changed = self._live_changed = asyncio.Event()
        deadline = asyncio.get_running_loop().time() + timeout_s
        try:
            while True:
                info = self._live.get(self.broker_id)
                if info is not None and info.broker_epoch == registration.broker_epoch:
                    return True
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    return False
                changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), remaining)
        finally:
            self._live_changed = None

    def _register(self, endpoints: Sequence[EndPoint]) -> None:
        self._registration = BrokerRegistration(
            self.store, self.broker_id, endpoints, self.rack, on_error=self._fatal
        )
        self._registration.register()
        self._elector = ControllerElector(
            self.store, self.broker_id,
            on_become_controller=self._become_controller, on_resign=self._resign,
        )
        self._elector.start()

    def _become_controller(self, epoch: int) -> None:
        assert self._elector is not None
        if self._controller is not None:
            self._controller.stop()
        config = self.config
        rebalance = bool(config["auto.leader.rebalance.enable"])
        self._controller = Controller(
            self.store, self._elector, epoch, unclean=self._unclean,
            auto_rebalance_interval_s=(
                float(config["leader.imbalance.check.interval.seconds"]) if rebalance else None
            ),
            imbalance_percentage=int(config["leader.imbalance.per.broker.percentage"]),
        )
        self._controller.start()

    def _unclean(self, topic: str) -> bool:
        """The topic's unclean.leader.election.enable (its override, else the broker's).
        Called on the controller's thread: the override is read from ZooKeeper, as Kafka's
        controller reads it, not from the metadata cache, which is the event loop's
        (docs/architecture.md, "Threads"); the broker defaults are replaced whole."""
        metadata = self._metadata
        if metadata is None:
            return False
        overrides = metadata.read_configs(metadata.topic_config_path(topic))
        config = LogConfig.build(metadata.broker_defaults, overrides)
        return bool(config["unclean.leader.election.enable"])

    # -- the leader's side of the ISR --------------------------------------------------
    def write_isr(self, topic: str, partition: int, new: LeaderAndIsr) -> int:
        """A leader's ISR change (blocking): the state set conditionally on the version it
        read, with a notification in the same transaction so that every broker (and the
        controller's next read) learns it. Returns the state's new version."""
        results = self.store.multi([
            SetOp(state_path(topic, partition), new.encode(), new.zk_version),
            CreateOp(f"{NOTIFICATION_PATH}/{NOTIFICATION_PREFIX}",
                     notification_data(new.controller_epoch, [(topic, partition)]),
                     sequential=True),
        ])
        written = results[0]
        assert written is not None
        return written.version

    # -- reassignments ---------------------------------------------------------------------
    def read_reassignments(self) -> dict[tuple[str, int], Reassignment]:
        node = self.store.get(REASSIGN_PATH)
        return decode_reassignments(node.data) if node is not None else {}

    def add_reassignments(self, entries: Sequence[Reassignment]) -> None:
        """Merge ``entries`` into ``/admin/reassign_partitions`` (conditionally: retried if
        the controller or another admin changed it meanwhile); the controller does the
        rest."""
        while True:
            node = self.store.get(REASSIGN_PATH)
            merged = decode_reassignments(node.data) if node is not None else {}
            for entry in entries:
                merged[(entry.topic, entry.partition)] = entry
            data = encode_reassignments(merged.values())
            try:
                if node is None:
                    self.store.create(REASSIGN_PATH, data)  # with /admin if missing
                else:
                    self.store.multi([SetOp(REASSIGN_PATH, data, node.version)])
                return
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue

    def read_state(self, topic: str, partition: int) -> PartitionState | None:
        """A partition's state as stored now (blocking); its replicas are left empty."""
        node = self.store.get(state_path(topic, partition))
        if node is None:
            return None
        stored = decode_state(node.data, node.version)
        return PartitionState(stored.leader, stored.leader_epoch, stored.isr, (),
                              node.version, stored.controller_epoch)

    def elect_preferred(
        self, partitions: list[tuple[str, int]] | None,
        on_done: Callable[[list[tuple[str, int]]], None],
    ) -> bool:
        """Ask this broker's controller for a preferred leader election; False when this
        broker is not the controller."""
        controller = self._controller
        if controller is None or controller.stopped:
            return False
        controller.submit(PreferredElection(
            None if partitions is None
            else tuple(TopicPartition(t, p) for t, p in partitions),
            lambda done: on_done([(tp.topic, tp.partition) for tp in done]),
        ))
        return True

    def elect_unclean(
        self, partitions: list[tuple[str, int]],
        on_done: Callable[[dict[tuple[str, int], int]], None],
    ) -> bool:
        """Ask this broker's controller for an unclean election of the offline
        ``partitions``; False when this broker is not the controller."""
        controller = self._controller
        if controller is None or controller.stopped:
            return False
        controller.submit(UncleanElection(
            tuple(TopicPartition(t, p) for t, p in partitions),
            lambda done: on_done({(tp.topic, tp.partition): b for tp, b in done.items()}),
        ))
        return True

    def _resign(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    def _fatal(self, exc: Exception) -> None:
        log.critical("broker %d cannot stay in the cluster: %s", self.broker_id, exc)

    # -- what the event loop reads ---------------------------------------------------------
    def live_broker_ids(self) -> list[int]:
        return sorted(self._live)

    def is_alive(self, broker_id: int) -> bool:
        """Whether ``broker_id`` is registered (this broker's view)."""
        return broker_id in self._live

    def isr_eligible(self, broker_id: int) -> bool:
        """Whether a follower on ``broker_id`` may join an ISR: registered and not in
        controlled shutdown (KIP-841's ``isReplicaIsrEligible``)."""
        return broker_id in self._live and broker_id not in self._shutting_down

    def live_broker_racks(self) -> dict[int, str]:
        racks = {b: info.rack for b, info in self._live.items() if info.rack is not None}
        # Kafka's rack awareness needs every broker's rack, or none.
        return racks if len(racks) == len(self._live) else {}

    def live_endpoints(self, name: str | None = None) -> list[tuple[int, str, int, str | None]]:
        """(id, host, port, rack) of every live broker with a listener named ``name``
        (default: the inter-broker listener); brokers without it are left out, as Kafka's
        metadata cache leaves them out."""
        name = name or self.config.inter_broker_listener
        out = []
        for broker_id, info in sorted(self._live.items()):
            endpoint = info.endpoint(name)
            if endpoint is not None:
                out.append((broker_id, endpoint.host, endpoint.port, info.rack))
        return out

    @property
    def controller_id(self) -> int:
        return self._elector.active_controller_id if self._elector is not None else -1

    @property
    def controller_epoch(self) -> int:
        """This broker's controller term (``/controller_epoch``), -1 when not the controller."""
        controller = self._controller
        return controller.epoch if controller is not None else -1

    # -- stop ------------------------------------------------------------------------------
    @property
    def registered(self) -> bool:
        registration = self._registration
        return registration is not None and registration.registered

    def request_controlled_shutdown(self, timeout_s: float) -> ShutdownRequest | None:
        """Ask the controller to move this broker's leaderships and take it out of the
        ISRs, and wait up to ``timeout_s`` for its answer (blocking); None when not
        registered (nothing to ask) or no answer came."""
        registration = self._registration
        if registration is None or not registration.registered:
            return None
        return registration.request_controlled_shutdown(timeout_s)

    def leave(self) -> None:
        """Resign, then unregister: the controller moves leadership away at once."""
        if self._elector is not None:
            self._elector.close()
        if self._controller is not None:
            self._controller.stop()
            self._controller.join(5.0)
            self._controller = None
        if self._registration is not None:
            self._registration.unregister()

    def close(self) -> None:
        if self._sync is not None:
            self._sync.close()
        if self._watcher is not None:
            self._watcher.close()
        if self._shutdown_watcher is not None:
            self._shutdown_watcher.close()
        if hasattr(self, "store"):
            self.store.close()


def _broker_ids(names: frozenset[str]) -> frozenset[int]:
    return frozenset(int(n) for n in names if n.isdigit())
