"""The controller: partition leadership decided in one place and written to ZooKeeper
(Kafka's KafkaController with its ControllerEventManager and PartitionStateMachine,
ZooKeeper mode).

How it works: the broker whose :class:`~odradek.cluster.controller_election.ControllerElector`
wins starts a :class:`Controller` from ``on_become_controller(epoch)`` and stops it from
``on_resign()``. The controller owns one worker thread and one event queue, processed in
order, as Kafka's ControllerEventManager: ZooKeeper watch callbacks only enqueue an event;
every read, decision and write happens on the worker, never on an asyncio loop.

Events (Kafka's ControllerEvent subclasses):

- :class:`Startup` (Kafka's Startup → ``onControllerFailover``): read the live brokers
  (``/brokers/ids`` children), every topic's assignment (``/brokers/topics/<t>``) and every
  partition state, with pipelined reads (:meth:`MetadataStore.get_many`), then elect.
- :class:`BrokerChange` (BrokerChange): ``/brokers/ids`` changed; partitions whose leader
  is gone, or offline ones whose ISR replica is back, get a new leader. Each live broker is
  known with its epoch, its registration's czxid (KIP-380): a broker whose epoch changed
  was bounced (its session lost and a new one registered) and is handled as gone and back,
  its leaderships moved through a new leader epoch (Kafka's ``onBrokerFailure`` then
  ``onBrokerStartup`` for bounced brokers).
- :class:`ControlledShutdownChange` (ControlledShutdown): ``/controlled_shutdown``
  changed (:mod:`odradek.cluster.membership`). A request whose broker epoch is not the
  broker's registered one comes from an older incarnation and is refused
  (answered ``STALE_BROKER_EPOCH``); for every other, the broker joins the brokers
  shutting down, which :func:`~odradek.cluster.leader_election.decide` never elects and
  takes out of the ISRs they follow, and the partitions it hosts are decided again: its
  leaderships move to another in-sync replica where one can lead (Kafka's
  ``doControlledShutdown``). The request is then answered with the partitions the broker
  still leads with other ISR replicas. Startup answers the requests left unanswered by a
  previous controller.
- :class:`TopicChange` (TopicChange): ``/brokers/topics`` children changed; new topics get
  their first states, deleted ones are forgotten (the deleting broker removes
  ``/brokers/topics/<t>`` recursively, states included).
- :class:`PartitionModifications` (PartitionModifications): a topic's assignment changed;
  new partitions get their first states.
- :class:`ReassignmentChange`: ``/admin/reassign_partitions`` changed, or the state of a
  partition being moved did: each move takes its next step (:mod:`odradek.cluster.
  reassignment`).
- :class:`Resync`: re-read (some topics or everything) after a write whose outcome is
  unknown or that failed on a concurrent change, then elect again.

What to write for each partition is :func:`~odradek.cluster.leader_election.decide`
(the rules there). Writes go through the elector's ``fenced_multi`` (a version check of
``/controller_epoch`` in the same transaction, so a deposed controller's writes fail in
ZooKeeper itself with :class:`ControllerMovedError`, and the elector resigns). One
transaction holds at most :data:`MAX_OPS_PER_MULTI` ops and :data:`MAX_MULTI_BYTES` bytes:
the states of a batch of partitions (created with their ``partitions/<p>`` parents when
new, else set conditionally on the version read) and ONE notification,
``/partition_state_notification/state_change_<seq>`` (sequential) holding
``{"version":1,"controller_epoch":E,"partitions":[{"topic":t,"partition":p},...]}``. States
and their notification are thus written together or not at all: a broker never sees a
notification before its states, and a controller dying between the two cannot leave
changed states that nobody announced.

Notifications are purged oldest first (a prefix of the sequence order), keeping those
younger than :data:`NOTIFICATION_RETENTION_S` (Kafka's 15 minutes for change
notifications) but never more than :data:`NOTIFICATIONS_KEPT` (so a broker lists a
bounded number of children on every change), and always the newest. Every writer's are
purged: this controller's own and those of leaders changing their ISR, which a children
watch on the parent shows it (as Kafka's controller deletes the ``isr_change_notification``
entries it processed). Ages count from when this controller created a notification or
first saw it. Because purging only ever removes the oldest and keeps the newest, a broker
that read the newest notification loses nothing to a purge; one whose last-read
notification is gone may have missed some, and reloads every state.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from odradek.cluster.controller_election import ControllerElector, ControllerMovedError
from odradek.cluster.leader_election import (
    NO_LEADER,
    NOTIFICATION_PATH,
    NOTIFICATION_PREFIX,
    TOPICS_PATH,
    LeaderAndIsr,
    decide,
    decide_preferred,
    decode_state,
    notification_data,
    partition_path,
    partitions_path,
    state_path,
    topic_path,
)
from odradek.cluster.membership import (
    BROKER_IDS_PATH,
    CONTROLLED_SHUTDOWN_PATH,
    NO_BROKER_EPOCH,
    STALE_BROKER_EPOCH,
    ShutdownRequest,
    decode_shutdown_request,
)
from odradek.cluster.metadata import decode_topic_id
from odradek.cluster.reassignment import (
    REASSIGN_PATH,
    Reassignment,
    completion,
    decode_reassignments,
    encode_reassignments,
    expanded,
)
from odradek.cluster.store import (
    BadVersionError,
    CreateOp,
    DeleteOp,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    Op,
    SetOp,
    StoreError,
    Watcher,
)
from odradek.storage import TopicPartition
from odradek.text import plural

__all__ = [
    "NOTIFICATION_PATH",
    "NOTIFICATION_PREFIX",
    "BrokerChange",
    "ControlledShutdownChange",
    "Controller",
    "ControllerEvent",
    "NotificationChange",
    "PartitionModifications",
    "PreferredElection",
    "ProcessedEvent",
    "ReassignmentChange",
    "Resync",
    "Startup",
    "TopicChange",
    "UncleanElection",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

# Ops in one transaction (the fence check included): ZooKeeper applies a multi as one
# request, so a bounded batch keeps each one quick and within jute.maxbuffer.
MAX_OPS_PER_MULTI = 1000
# Bytes of paths and data in one transaction: half of ZooKeeper's default jute.maxbuffer
# (1 MiB), which a thousand states of long topic names could otherwise approach.
MAX_MULTI_BYTES = 512 * 1024
NOTIFICATION_RETENTION_S = 15 * 60.0  # Kafka's changeExpirationMs for change notifications
NOTIFICATIONS_KEPT = 1000
RETRY_BACKOFF_S = 0.5  # before re-reading after a failed read or write
IDLE_CHECK_S = 30.0  # an idle controller looks for notifications to purge this often
HISTORY = 100  # processed events kept for inspection (Kafka's controller event metrics)
_NOTIFICATION_ENTRY_BYTES = 32  # {"topic":..,"partition":..} around the topic name


# -- events (Kafka's ControllerEvent) -------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Startup:
    pass


@dataclass(frozen=True, slots=True)
class BrokerChange:
    pass


@dataclass(frozen=True, slots=True)
class TopicChange:
    pass


@dataclass(frozen=True, slots=True)
class ControlledShutdownChange:
    """``/controlled_shutdown`` changed: a broker asks to leave (or left)."""


@dataclass(frozen=True, slots=True)
class PartitionModifications:
    topic: str


@dataclass(frozen=True, slots=True)
class Resync:
    """Re-read ``topics`` (None: everything, brokers included) and elect again."""

    topics: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class PreferredElection:
    """Move leadership of ``partitions`` (None: every partition) to preferred replicas;
    ``on_done`` is called (on the worker thread) with the partitions moved."""

    partitions: tuple[TopicPartition, ...] | None = None
    on_done: Callable[[list[TopicPartition]], None] | None = None


@dataclass(frozen=True, slots=True)
class ReassignmentChange:
    """``/admin/reassign_partitions`` changed, or the state of a partition being moved."""


@dataclass(frozen=True, slots=True)
class UncleanElection:
    """Give offline ``partitions`` a leader even out of the ISR (KIP-460's UNCLEAN
    election type); ``on_done`` is called (on the worker thread) with the new leaders."""

    partitions: tuple[TopicPartition, ...]
    on_done: Callable[[dict[TopicPartition, int]], None] | None = None


@dataclass(frozen=True, slots=True)
class NotificationChange:
    """A notification was written (by this controller or a leader) or purged."""


@dataclass(frozen=True, slots=True)
class _Purge:
    pass


ControllerEvent = (Startup | BrokerChange | ControlledShutdownChange | TopicChange
                   | PartitionModifications | Resync | PreferredElection | ReassignmentChange
                   | UncleanElection | NotificationChange | _Purge)


@dataclass(frozen=True, slots=True)
class ProcessedEvent:
    """What one event cost (Kafka's EventQueueTimeMs and per-state timers)."""

    name: str
    queue_s: float
    process_s: float
    states_written: int
    multis: int


@dataclass(slots=True)
class _Topic:
    topic_id: uuid.UUID
    partitions: dict[int, tuple[int, ...]]


class Controller:
    """Partition leadership for one controller term (``epoch``) of ``elector``."""

    def __init__(
        self,
        store: MetadataStore,
        elector: ControllerElector,
        epoch: int,
        *,
        max_ops_per_multi: int = MAX_OPS_PER_MULTI,
        notification_retention_s: float = NOTIFICATION_RETENTION_S,
        notifications_kept: int = NOTIFICATIONS_KEPT,
        clock: Callable[[], float] = time.monotonic,
        unclean: Callable[[str], bool] = lambda _topic: False,
        auto_rebalance_interval_s: float | None = None,
        imbalance_percentage: int = 10,
    ) -> None:
        if max_ops_per_multi < 8:
            raise ValueError("max_ops_per_multi must leave room for a state and its parents")
        self.store = store
        self.elector = elector
        self.epoch = epoch
        self.broker_id = elector.broker_id
        self.max_ops_per_multi = max_ops_per_multi
        self.notification_retention_s = notification_retention_s
        self.notifications_kept = notifications_kept
        self._clock = clock
        # The topic's unclean.leader.election.enable (read when no ISR replica is live).
        self.unclean = unclean
        # auto.leader.rebalance.enable: how often leadership is checked for imbalance.
        self.auto_rebalance_interval_s = auto_rebalance_interval_s
        self.imbalance_percentage = imbalance_percentage
        self._next_rebalance = (clock() + auto_rebalance_interval_s
                                if auto_rebalance_interval_s is not None else None)
        self._queue: queue.SimpleQueue[tuple[ControllerEvent, float] | None] = (
            queue.SimpleQueue()
        )
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"odradek-controller-{self.broker_id}", daemon=True
        )
        self.history: collections.deque[ProcessedEvent] = collections.deque(maxlen=HISTORY)
        self.load_s = 0.0      # Startup: reading brokers, assignments and states
        self.startup_s = 0.0   # Startup: reading, electing and writing, until ready
        # Everything below belongs to the worker thread.
        self._live: frozenset[int] = frozenset()
        self._epochs: dict[int, int] = {}  # live broker -> its broker epoch (czxid)
        self._shutting_down: frozenset[int] = frozenset()
        self._topics: dict[str, _Topic] = {}
        self._states: dict[TopicPartition, LeaderAndIsr] = {}
        self._unreadable: set[TopicPartition] = set()
        self._has_partitions_node: set[str] = set()      # topics with .../partitions
        self._has_partition_node: set[TopicPartition] = set()  # .../partitions/<p>
        self._notifications: collections.deque[tuple[str, float]] = collections.deque()
        self._written = 0
        self._multis = 0
        self._only_stale = True  # every failed write of this batch was a version conflict
        # Paths whose watch is armed (watch callbacks run on the store's thread).
        self._armed: set[str] = set()
        self._armed_lock = threading.Lock()

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        """Start the worker; it begins with :class:`Startup`. Returns at once."""
        self._enqueue(Startup())
        self._thread.start()

    def stop(self) -> None:
        """Stop processing (from ``on_resign``): the event being processed finishes, and
        no write after it is attempted. Returns at once; :meth:`join` waits."""
        self._stopping.set()
        self._queue.put(None)

    def join(self, timeout: float | None = None) -> None:
        if threading.current_thread() is not self._thread and self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def stopped(self) -> bool:
        return self._stopping.is_set()

    @property
    def ready(self) -> bool:
        """Startup finished: every partition had its state read and, if needed, written."""
        return self._ready.is_set()

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout)

    # -- the event queue --------------------------------------------------------------------
    def submit(self, event: ControllerEvent) -> None:
        """Queue an event from any thread (e.g. a preferred leader election asked for)."""
        self._enqueue(event)

    def _enqueue(self, event: ControllerEvent) -> None:
        if not self._stopping.is_set():
            self._queue.put((event, self._clock()))

    def _on_watch(self, path: str) -> None:
        """Every watch of ours: on the store's thread, so only enqueue."""
        with self._armed_lock:
            self._armed.discard(path)
        if path == BROKER_IDS_PATH:
            self._enqueue(BrokerChange())
        elif path == CONTROLLED_SHUTDOWN_PATH:
            self._enqueue(ControlledShutdownChange())
        elif path == REASSIGN_PATH or (path.startswith(TOPICS_PATH + "/")
                                       and path.endswith("/state")):
            self._enqueue(ReassignmentChange())
        elif path == TOPICS_PATH:
            self._enqueue(TopicChange())
        elif path == NOTIFICATION_PATH:
            self._enqueue(NotificationChange())
        elif path.startswith(TOPICS_PATH + "/"):
            self._enqueue(PartitionModifications(path[len(TOPICS_PATH) + 1:]))

    def _arm(self, path: str) -> bool:
        """True if ``path`` needs its watch armed by the next read (one watch per path)."""
        with self._armed_lock:
            if path in self._armed:
                return False
            self._armed.add(path)
            return True

    def _disarm(self, paths: Iterable[str]) -> None:
        with self._armed_lock:
            self._armed.difference_update(paths)

    def _run(self) -> None:
        while True:
            idle = IDLE_CHECK_S
            if self._next_rebalance is not None:
                idle = max(0.01, min(idle, self._next_rebalance - self._clock()))
            try:
                item = self._queue.get(timeout=idle)
            except queue.Empty:
                item = (_Purge(), self._clock())
            if item is None or self._stopping.is_set():
                return
            event, queued_at = item
            started = self._clock()
            self._written = self._multis = 0
            try:
                self.process(event)
            except ControllerMovedError as exc:
                # The elector has resigned (and so stopped us) or is about to.
                log.warning("controller %d (epoch %d) was deposed: %s", self.broker_id,
                            self.epoch, exc)
                self._stopping.set()
                return
            except StoreError as exc:
                log.warning("controller %d: %s failed (%s); re-reading everything",
                            self.broker_id, type(event).__name__, exc)
                self._retry(Resync(None))
            except Exception:
                log.exception("controller %d: %s failed; re-reading everything",
                              self.broker_id, type(event).__name__)
                self._retry(Resync(None))
            done = self._clock()
            self.history.append(ProcessedEvent(
                type(event).__name__, started - queued_at, done - started,
                self._written, self._multis,
            ))

    def _retry(self, event: ControllerEvent) -> None:
        if not self._stopping.wait(RETRY_BACKOFF_S):
            self._enqueue(event)

    def process(self, event: ControllerEvent) -> None:
        """Process one event (on the worker thread)."""
        if isinstance(event, Startup):
            self._on_startup()
        elif isinstance(event, BrokerChange):
            self._on_broker_change()
        elif isinstance(event, ControlledShutdownChange):
            self._on_controlled_shutdown()
        elif isinstance(event, TopicChange):
            self._on_topic_change()
        elif isinstance(event, PartitionModifications):
            self._on_partition_modifications(event.topic)
        elif isinstance(event, Resync):
            self._on_resync(event.topics)
        elif isinstance(event, ReassignmentChange):
            self._on_reassignments()
        elif isinstance(event, PreferredElection):
            done = self.elect_preferred(
                self._all_partitions() if event.partitions is None else event.partitions
            )
            if event.on_done is not None:
                event.on_done(done)
        elif isinstance(event, NotificationChange):
            self._track_notifications()
        elif isinstance(event, UncleanElection):
            leaders = self.elect_unclean(event.partitions)
            if event.on_done is not None:
                event.on_done(leaders)
        if self._next_rebalance is not None and self._clock() >= self._next_rebalance:
            assert self.auto_rebalance_interval_s is not None
            self._next_rebalance = self._clock() + self.auto_rebalance_interval_s
            self._check_imbalance()
        self._maybe_purge()

    # -- events ----------------------------------------------------------------------------
    def _on_startup(self) -> None:
        started = self._clock()
        self._ensure_notification_parent()
        self._reload_everything()
        self.load_s = self._clock() - started
        log.info("controller %d (epoch %d) read %s, %s, %s in %.3f s", self.broker_id,
                 self.epoch, plural(len(self._live), "broker"), plural(len(self._topics), "topic"),
                 plural(sum(len(t.partitions) for t in self._topics.values()), "partition"),
                 self.load_s)
        self._elect(self._all_partitions())
        self._on_controlled_shutdown()  # what a previous controller left unanswered
        self._on_reassignments()
        self.startup_s = self._clock() - started
        self._ready.set()

    def _reload_everything(self) -> None:
        self._epochs = self._read_live()
        self._live = frozenset(self._epochs)
        self._shutting_down = frozenset(
            b for b, (request, _) in self._read_shutdown_requests().items()
            if request.broker_epoch == self._epochs.get(b))
        names = self._read_topic_names()
        for name in list(self._topics):
            self._forget(name)
        self._load_topics(names)
        self._track_notifications()

    def _track_notifications(self) -> None:
        """List the notifications (arming the children watch), start the age of those
        not seen before, whoever wrote them, and forget those gone."""
        watch = self._on_watch if self._arm(NOTIFICATION_PATH) else None
        try:
            listed = self.store.children(NOTIFICATION_PATH, watch)
        except StoreError:
            self._disarm([NOTIFICATION_PATH])
            raise
        now = self._clock()
        paths = {f"{NOTIFICATION_PATH}/{name}" for name in listed
                 if name.startswith(NOTIFICATION_PREFIX)}
        kept = [(path, seen) for path, seen in self._notifications if path in paths]
        known = {path for path, _ in kept}
        kept += [(path, now) for path in paths if path not in known]
        self._notifications = collections.deque(sorted(kept))

    def _on_broker_change(self) -> None:
        epochs = self._read_live()
        live = frozenset(epochs)
        bounced = sorted(b for b in live & self._live
                         if epochs[b] != self._epochs.get(b, NO_BROKER_EPOCH))
        if live == self._live and not bounced:
            return
        gone, back = sorted(self._live - live), sorted(live - self._live)
        log.info("controller %d: brokers %s gone, %s back, %s bounced (live: %s)",
                 self.broker_id, gone, back, bounced, sorted(live))
        self._epochs = epochs
        # A broker shutting down that left is done; a bounced one's request was its old
        # incarnation's.
        self._shutting_down = self._shutting_down & live - set(bounced)
        # Leaders change ISRs with writes of their own: read again the states this change
        # decides on (pipelined), so that the writes below rarely fail on a stale version.
        changed = set(gone) | set(back) | set(bounced)
        self._load_states([
            tp for tp in self._all_partitions()
            if changed.intersection(self._topics[tp.topic].partitions[tp.partition])
        ])
        if bounced:
            # gone first: their leaderships move (or go offline) through a new epoch ...
            self._live = live - set(bounced)
            self._elect(self._all_partitions())
        # ... and back: offline partitions they can lead come back
        self._live = live
        self._elect(self._all_partitions())
        if back or bounced:
            # a broker may have asked to stop before this controller knew it registered
            self._on_controlled_shutdown()

    def _on_controlled_shutdown(self) -> None:
        """Kafka's ``doControlledShutdown`` for every request not answered yet."""
        requests = self._read_shutdown_requests()
        self._shutting_down = frozenset(
            b for b, (request, _) in requests.items()
            if request.broker_epoch == self._epochs.get(b))
        asking = sorted(b for b in self._shutting_down if requests[b][0].error_code is None)
        if asking:
            tps = [tp for tp in self._all_partitions()
                   if set(asking).intersection(self._topics[tp.topic].partitions[tp.partition])]
            self._load_states(tps)
            led = sum(1 for tp in tps if (state := self._states.get(tp)) is not None
                      and state.leader in asking)
            log.info("controller %d: controlled shutdown of brokers %s: deciding %s, %s led "
                     "by them", self.broker_id, asking, plural(len(tps), "partition"),
                     plural(led, "partition"))
            self._elect(tps)
        for broker, (request, version) in sorted(requests.items()):
            if request.error_code is not None or broker not in self._epochs:
                continue  # answered already, or gone
            if broker in self._shutting_down:
                remaining = sum(1 for state in self._states.values()
                                if state.leader == broker and len(state.isr) > 1)
                answer = ShutdownRequest(request.broker_epoch, 0, remaining)
            else:
                log.warning("controller %d: controlled shutdown of broker %d refused: "
                            "STALE_BROKER_EPOCH (the request's broker epoch %d, the "
                            "registration's %d)", self.broker_id, broker,
                            request.broker_epoch, self._epochs[broker])
                answer = ShutdownRequest(request.broker_epoch, STALE_BROKER_EPOCH)
            with contextlib.suppress(BadVersionError, NoNodeError):  # asked again, or gone
                self.elector.fenced_multi([SetOp(f"{CONTROLLED_SHUTDOWN_PATH}/{broker}",
                                                 answer.encode(), version)], epoch=self.epoch)

    def _on_topic_change(self) -> None:
        names = set(self._read_topic_names())
        for gone in sorted(set(self._topics) - names):
            log.info("controller %d: topic %s deleted", self.broker_id, gone)
            self._forget(gone)
        new = sorted(names - set(self._topics))
        self._load_topics(new)
        self._elect(self._partitions_of(new))

    def _on_partition_modifications(self, name: str) -> None:
        known = self._topics.get(name)
        if known is None:
            return  # not ours yet: TopicChange loads it
        path = topic_path(name)
        node = self.store.get(path, self._on_watch if self._arm(path) else None)
        if node is None:
            self._forget(name)
            return
        topic = _decode_topic(name, node.data)
        if topic.topic_id != known.topic_id:  # deleted and created again under the name
            self._forget(name)
            self._load_topics([name])
            self._elect(self._partitions_of([name]))
            return
        added = sorted(set(topic.partitions) - set(known.partitions))
        known.partitions = topic.partitions
        if added:
            log.info("controller %d: topic %s has %d new partitions", self.broker_id, name,
                     len(added))
            tps = [TopicPartition(name, p) for p in added]
            self._load_states(tps)
            self._elect(tps)

    def _on_resync(self, topics: frozenset[str] | None) -> None:
        if topics is None:
            self._reload_everything()
            self._elect(self._all_partitions())
            return
        names = set(self._read_topic_names())
        for name in sorted(topics):
            self._forget(name)
        present = sorted(topics & names)
        self._load_topics(present)
        self._elect(self._partitions_of(present))

    # -- reassignments (cluster/reassignment.py) ------------------------------------------
    def _on_reassignments(self) -> None:
        node = self._watched(REASSIGN_PATH, self.store.get)
        if node is None:
            return
        try:
            entries = decode_reassignments(node.data)
        except StoreError as exc:
            log.error("controller %d: ignoring %s", self.broker_id, exc)
            return
        done = [key for key, entry in entries.items() if self._reassign(entry)]
        if not done:
            return
        left = [e for key, e in entries.items() if key not in done]
        op: Op = (SetOp(REASSIGN_PATH, encode_reassignments(left), node.version) if left
                  else DeleteOp(REASSIGN_PATH, node.version))
        try:
            self.elector.fenced_multi([op], epoch=self.epoch)
        except (BadVersionError, NoNodeError):
            self._enqueue(ReassignmentChange())  # changed meanwhile: read it again
        log.info("controller %d: %d reassignments done, %d under way", self.broker_id,
                 len(done), len(left))

    def _take_new_topic(self, name: str) -> _Topic | None:
        """A topic this controller has not heard of, named by a reassignment: the broker
        that accepted the move knew it, so it may be new, its TopicChange still to come.
        Taken now as TopicChange takes it (its partitions elected; that event then finds
        it known); None when ZooKeeper has no such topic. Dropped as gone, the move was
        lost while the client had been told it was accepted."""
        self._load_topics([name])
        self._elect(self._partitions_of([name]))
        return self._topics.get(name)

    def _reassign(self, entry: Reassignment) -> bool:
        """One step of moving a partition; True once it is where it should be (or gone)."""
        tp = TopicPartition(entry.topic, entry.partition)
        topic = self._topics.get(tp.topic)
        if topic is None:
            topic = self._take_new_topic(tp.topic)
        if topic is None or tp.partition not in topic.partitions:
            return True
        destination = entry.destination
        moving = expanded(entry.original, destination)
        current = topic.partitions[tp.partition]
        if current == destination:
            return True
        if current != moving:
            self._write_assignment(tp, moving)
        self._watched(state_path(*tp), self.store.get)  # told when the leader grows the ISR
        self._load_states([tp])
        state = self._states.get(tp)
        if state is None:
            return False
        new = completion(destination, state, self._live, self.epoch)
        if new is None:
            return False
        if not self._complete(tp, destination, new):
            return False  # not written (a concurrent change): read again and retried
        log.info("controller %d: %s-%d moved from %s to %s", self.broker_id, tp.topic,
                 tp.partition, list(entry.original), list(destination))
        return True

    def _complete(self, tp: TopicPartition, destination: tuple[int, ...],
                  new: LeaderAndIsr) -> bool:
        """The last step of a move: the assignment becomes ``destination`` and the state
        ``new`` (the ISR without the replicas leaving, maybe a new leader) in ONE
        transaction, the assignment's op first, with the state's notification. A broker
        reads both through watches fired in that order, so it knows the new replica set no
        later than the ISR without the leaving replicas: the leader cannot add one back
        because a stale assignment still names it (Kafka sends the leader the new replica
        set, ``RS = TRS``, before it shrinks the ISR, for that reason). The state is
        written even when unchanged: its new version fences an ISR change the leader
        made from the old replica set and has not written yet. Returns whether it was
        written; a failure reads the topic again and retries the move."""
        failed: set[str] = set()
        self._flush([(tp, new)], [self._assignment_op(tp, destination),
                                  *self._state_ops(tp, new, set())], failed)
        only_stale, self._only_stale = self._only_stale, True
        if failed:
            for event in (Resync(frozenset(failed)), ReassignmentChange()):
                # a version conflict: read again now; otherwise after a pause
                (self._enqueue if only_stale else self._retry)(event)
            return False
        self._topics[tp.topic].partitions[tp.partition] = destination
        return True

    def _assignment_op(self, tp: TopicPartition, replicas: tuple[int, ...]) -> SetOp:
        """The conditional write of one partition's replicas in ``/brokers/topics/<t>``."""
        path = topic_path(tp.topic)
        node = self.store.get(path)
        if node is None:
            raise NoNodeError(path)
        doc = json.loads(node.data)
        doc["partitions"][str(tp.partition)] = list(replicas)
        return SetOp(path, json.dumps(doc).encode(), node.version)

    def _write_assignment(self, tp: TopicPartition, replicas: tuple[int, ...]) -> None:
        """Set one partition's replicas in ``/brokers/topics/<t>``, conditionally."""
        self.elector.fenced_multi([self._assignment_op(tp, replicas)], epoch=self.epoch)
        self._topics[tp.topic].partitions[tp.partition] = replicas

    # -- reading ---------------------------------------------------------------------------
    def _watched(self, path: str, read: Callable[[str, Watcher | None], T]) -> T:
        """``read(path, watch)``, arming our watch on ``path`` unless it is armed already
        (a failed read leaves it to be armed by the next one)."""
        watch = self._on_watch if self._arm(path) else None
        try:
            return read(path, watch)
        except StoreError:
            self._disarm([path])
            raise

    def _read_live(self) -> dict[int, int]:
        """The registered brokers, each with its broker epoch (its registration's czxid)."""
        names = [n for n in self._watched(BROKER_IDS_PATH, self.store.children) if n.isdigit()]
        nodes = self.store.get_many([f"{BROKER_IDS_PATH}/{n}" for n in names])
        return {int(n): node.czxid or NO_BROKER_EPOCH
                for n, node in zip(names, nodes, strict=True) if node is not None}

    def _read_shutdown_requests(self) -> dict[int, tuple[ShutdownRequest, int]]:
        """The controlled-shutdown requests of live brokers, each with its node's version
        (arming the children watch)."""
        names = [n for n in self._watched(CONTROLLED_SHUTDOWN_PATH, self.store.children)
                 if n.isdigit()]
        nodes = self.store.get_many([f"{CONTROLLED_SHUTDOWN_PATH}/{n}" for n in names])
        return {int(name): (decode_shutdown_request(node.data), node.version)
                for name, node in zip(names, nodes, strict=True)
                if node is not None and int(name) in self._epochs}

    def _read_topic_names(self) -> list[str]:
        return self._watched(TOPICS_PATH, self.store.children)

    def _load_topics(self, names: Sequence[str]) -> None:
        """Read the assignments of ``names`` (arming their data watches), then their states."""
        paths = [topic_path(n) for n in names]
        to_arm = [p for p in paths if self._arm(p)]
        try:
            nodes = dict(zip(to_arm, self.store.get_many(to_arm, self._on_watch), strict=True))
            rest = [p for p in paths if p not in nodes]
            nodes.update(zip(rest, self.store.get_many(rest), strict=True))
        except StoreError:
            self._disarm(to_arm)
            raise
        loaded = []
        for name, path in zip(names, paths, strict=True):
            node = nodes[path]
            if node is None:
                continue  # deleted while we read: TopicChange follows
            try:
                self._topics[name] = _decode_topic(name, node.data)
            except StoreError as exc:
                log.error("controller %d: skipping topic %s: %s", self.broker_id, name, exc)
                continue
            loaded.append(name)
        self._load_states(self._partitions_of(loaded))

    def _load_states(self, tps: Sequence[TopicPartition]) -> None:
        nodes = self.store.get_many([state_path(*tp) for tp in tps])
        missing = []
        for tp, node in zip(tps, nodes, strict=True):
            if node is None:
                missing.append(tp)
                continue
            self._has_partitions_node.add(tp.topic)
            self._has_partition_node.add(tp)
            try:
                self._states[tp] = decode_state(node.data, node.version)
            except StoreError as exc:
                # Never overwrite what we cannot read: leave the partition alone.
                log.error("controller %d: leaving %s-%d alone: %s", self.broker_id, *tp, exc)
                self._unreadable.add(tp)
        if not missing:
            return
        # Partitions without a state: which of their parent znodes exist already?
        topics = sorted({tp.topic for tp in missing} - self._has_partitions_node)
        parents = self.store.get_many(
            [partitions_path(t) for t in topics] + [partition_path(*tp) for tp in missing]
        )
        for t, node in zip(topics, parents, strict=False):
            if node is not None:
                self._has_partitions_node.add(t)
        for tp, node in zip(missing, parents[len(topics):], strict=True):
            if node is not None:
                self._has_partition_node.add(tp)

    def _forget(self, name: str) -> None:
        topic = self._topics.pop(name, None)
        if topic is None:
            return
        for p in topic.partitions:
            tp = TopicPartition(name, p)
            self._states.pop(tp, None)
            self._unreadable.discard(tp)
            self._has_partition_node.discard(tp)
        self._has_partitions_node.discard(name)

    def _partitions_of(self, names: Iterable[str]) -> list[TopicPartition]:
        return [
            TopicPartition(n, p)
            for n in names if n in self._topics
            for p in sorted(self._topics[n].partitions)
        ]

    def _all_partitions(self) -> list[TopicPartition]:
        return self._partitions_of(sorted(self._topics))

    # -- electing and writing --------------------------------------------------------------
    def _unclean(self, topic: str) -> bool:
        try:
            return self.unclean(topic)
        except Exception:  # an unreadable config never makes an election unclean
            log.exception("controller %d: cannot read unclean.leader.election.enable of %s",
                          self.broker_id, topic)
            return False

    def _fresh(self, tps: Iterable[TopicPartition]) -> list[TopicPartition]:
        """The known partitions of ``tps``, their states read again: leaders change their
        ISR themselves (conditional writes), so a replica back in sync would look out of
        it in what this controller read before."""
        known = [tp for tp in tps if tp.topic in self._topics
                 and tp.partition in self._topics[tp.topic].partitions]
        if known:
            self._load_states(known)
        return known

    def elect_preferred(self, tps: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Leadership of ``tps`` back to their preferred replicas where it is live and in
        sync (Kafka's PreferredReplicaLeaderElection); the partitions written."""
        tps = self._fresh(tps)
        changes = []
        for tp in tps:
            topic = self._topics.get(tp.topic)
            replicas = topic.partitions.get(tp.partition) if topic is not None else None
            if replicas is None or tp in self._unreadable:
                continue
            new = decide_preferred(replicas, self._states.get(tp), self._live, self.epoch,
                                   self._shutting_down)
            if new is not None:
                changes.append((tp, new))
        if changes:
            self._write_states(changes)
        return [tp for tp, _ in changes]

    def elect_unclean(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """A leader for each of ``tps`` whose leader is gone: the first live ISR replica,
        else the first live replica, out of sync or not (Kafka's unclean election asked
        for with ElectLeaders); the new leaders written."""
        tps = self._fresh(tps)
        changes = []
        for tp in tps:
            current = self._states.get(tp)
            if (current is None or tp in self._unreadable
                    or (current.leader != NO_LEADER and current.leader in self._live)):
                continue
            replicas = self._topics[tp.topic].partitions[tp.partition]
            new = decide(replicas, current, self._live, self.epoch, unclean=True,
                         shutting_down=self._shutting_down)
            if new is not None and new.leader != NO_LEADER:
                if new.leader not in current.isr:
                    log.warning("controller %d: unclean election of %d for %s-%d asked for: "
                                "records only the lost ISR %s held are lost",
                                self.broker_id, new.leader, tp.topic, tp.partition,
                                list(current.isr))
                changes.append((tp, new))
        if changes:
            self._write_states(changes)
        return {tp: new.leader for tp, new in changes}

    def _check_imbalance(self) -> None:
        """auto.leader.rebalance.enable: for each broker whose share of partitions it
        prefers but does not lead passes leader.imbalance.per.broker.percentage, move those
        leaderships back (Kafka's checkAndTriggerAutoLeaderRebalance)."""
        by_preferred: dict[int, list[TopicPartition]] = {}
        for tp in self._all_partitions():
            replicas = self._topics[tp.topic].partitions[tp.partition]
            if replicas:
                by_preferred.setdefault(replicas[0], []).append(tp)
        wanted: list[TopicPartition] = []
        for broker, tps in sorted(by_preferred.items()):
            if broker not in self._live or broker in self._shutting_down:
                continue
            imbalanced = [tp for tp in tps
                          if (state := self._states.get(tp)) is not None
                          and state.leader != broker]
            if imbalanced and len(imbalanced) * 100 > self.imbalance_percentage * len(tps):
                wanted.extend(imbalanced)
        if wanted:
            moved = self.elect_preferred(wanted)
            if moved:
                log.info("controller %d: %d leaderships moved back to preferred replicas",
                         self.broker_id, len(moved))

    def _elect(self, tps: Iterable[TopicPartition]) -> None:
        changes = []
        for tp in tps:
            topic = self._topics.get(tp.topic)
            replicas = topic.partitions.get(tp.partition) if topic is not None else None
            if replicas is None or tp in self._unreadable:
                continue
            current = self._states.get(tp)
            new = decide(replicas, current, self._live, self.epoch,
                         shutting_down=self._shutting_down)
            after = new if new is not None else current
            if (current is not None and after is not None and after.leader == NO_LEADER
                    and self._unclean(tp.topic)):
                unclean = decide(replicas, current, self._live, self.epoch, unclean=True,
                                 shutting_down=self._shutting_down)
                if unclean is not None and unclean.leader != NO_LEADER:
                    new = unclean
                    log.warning("controller %d: unclean election of %d for %s-%d: records "
                                "only the lost ISR %s held are lost", self.broker_id,
                                new.leader, tp.topic, tp.partition, list(current.isr))
            if new is not None:
                changes.append((tp, new))
        if changes:
            self._write_states(changes)

    def _write_states(self, changes: Sequence[tuple[TopicPartition, LeaderAndIsr]]) -> None:
        """Write ``changes`` in transactions of bounded size, each with its notification."""
        failed: set[str] = set()
        batch: list[tuple[TopicPartition, LeaderAndIsr]] = []
        ops: list[Op] = []
        parents: set[str] = set()   # parent znodes created by the batch being built
        size = 0
        for tp, new in changes:
            more = self._state_ops(tp, new, parents)
            cost = sum(len(op.path) + len(getattr(op, "data", b"")) for op in more)
            cost += len(tp.topic) + _NOTIFICATION_ENTRY_BYTES
            # +2: the elector's fence check and the notification.
            if batch and (len(ops) + len(more) + 2 > self.max_ops_per_multi
                          or size + cost > MAX_MULTI_BYTES):
                self._flush(batch, ops, failed)
                batch, ops, parents, size = [], [], set(), 0
                more = self._state_ops(tp, new, parents)
            batch.append((tp, new))
            ops.extend(more)
            size += cost
        if batch:
            self._flush(batch, ops, failed)
        if failed:
            if self._only_stale:
                # A leader changed an ISR since we read it (a conditional write of its
                # own): read those states again now, no back-off needed.
                self._enqueue(Resync(frozenset(failed)))
            else:
                self._retry(Resync(frozenset(failed)))
        self._only_stale = True

    def _state_ops(self, tp: TopicPartition, new: LeaderAndIsr, parents: set[str]) -> list[Op]:
        if tp in self._states:
            return [SetOp(state_path(*tp), new.encode(), self._states[tp].zk_version)]
        ops: list[Op] = []
        for path, exists in (
            (partitions_path(tp.topic), tp.topic in self._has_partitions_node),
            (partition_path(*tp), tp in self._has_partition_node),
        ):
            if not exists and path not in parents:
                parents.add(path)
                ops.append(CreateOp(path, b""))
        ops.append(CreateOp(state_path(*tp), new.encode()))
        return ops

    def _flush(self, batch: Sequence[tuple[TopicPartition, LeaderAndIsr]], ops: Sequence[Op],
               failed: set[str]) -> None:
        if self._stopping.is_set():
            raise ControllerMovedError(f"controller {self.broker_id} is stopping")
        notification = CreateOp(
            f"{NOTIFICATION_PATH}/{NOTIFICATION_PREFIX}",
            notification_data(self.epoch, (tp for tp, _ in batch)),
            sequential=True,
        )
        try:
            results = self.elector.fenced_multi([*ops, notification], epoch=self.epoch)
        except ControllerMovedError:
            raise
        except StoreError as exc:
            # A topic deleted or changed under us, or an unknown outcome: re-read those.
            if not isinstance(exc, BadVersionError):
                self._only_stale = False
            topics = {tp.topic for tp, _ in batch}
            log.warning("controller %d: writing %d states failed (%s); re-reading %d topics",
                        self.broker_id, len(batch), exc, len(topics))
            failed.update(topics)
            return
        self._multis += 1
        self._written += len(batch)
        by_path = {op.path: result for op, result in zip(ops, results, strict=False)}
        for tp, new in batch:
            written = by_path[state_path(*tp)]
            assert written is not None
            self._states[tp] = replace(new, zk_version=written.version)
            self._has_partitions_node.add(tp.topic)
            self._has_partition_node.add(tp)
        created = results[-1]
        assert created is not None
        self._notifications.append((created.path, self._clock()))

    def _ensure_notification_parent(self) -> None:
        if self.store.get(NOTIFICATION_PATH) is not None:
            return
        with contextlib.suppress(NodeExistsError):
            self.elector.fenced_multi([CreateOp(NOTIFICATION_PATH, b"")], epoch=self.epoch)

    # -- purging notifications -------------------------------------------------------------
    def _maybe_purge(self) -> None:
        now = self._clock()
        expired = 0
        for _path, created in self._notifications:
            if now - created <= self.notification_retention_s:
                break
            expired += 1
        count = min(max(expired, len(self._notifications) - self.notifications_kept),
                    len(self._notifications) - 1)  # the newest stays (module doc)
        if count <= 0:
            return
        oldest = [self._notifications[i][0] for i in range(count)]
        for start in range(0, len(oldest), self.max_ops_per_multi - 1):
            chunk = oldest[start:start + self.max_ops_per_multi - 1]
            try:
                self.elector.fenced_multi([DeleteOp(p) for p in chunk], epoch=self.epoch)
            except NoNodeError:
                # Someone removed one already: delete the rest one by one.
                for p in chunk:
                    with contextlib.suppress(NoNodeError):
                        self.elector.fenced_multi([DeleteOp(p)], epoch=self.epoch)
            for _ in chunk:
                self._notifications.popleft()


def _decode_topic(name: str, data: bytes) -> _Topic:
    """TopicZNode.decode: the topic id and the assignment (``partitions``)."""
    try:
        doc: Any = json.loads(data)
        return _Topic(
            decode_topic_id(doc["topic_id"]),
            {int(p): tuple(int(b) for b in r) for p, r in doc["partitions"].items()},
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"unreadable assignment of topic {name}: {data!r}") from exc
