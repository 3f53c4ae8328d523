"""The partitions this broker hosts, and the one door handlers use to reach them
(Kafka's ``ReplicaManager``).

How it works:

- *Hosting.* The replica manager listens to topic changes in the metadata. For every
  partition that names this broker among its replicas it makes sure a log exists and wraps
  it in a :class:`~odradek.cluster.partition.Partition` carrying the partition's state
  (leader, leader epoch, ISR: :meth:`ClusterMetadata.partition_state`). Partitions of a
  deleted topic lose their logs, and so do partitions reassigned away from this broker.
  Logs asked for by an admin request are created in a
  worker thread (:meth:`change_topics`); until one lands, its partition answers
  LEADER_NOT_AVAILABLE, as Kafka answers for a partition whose leader has not taken it yet.
- *The door.* Handlers ask :meth:`leader_partition` for a partition they want to append
  to or read from as leader; it raises Kafka's error otherwise (UNKNOWN_TOPIC_OR_PARTITION,
  LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
  UNKNOWN_LEADER_EPOCH). :meth:`wait_for_replication` parks an acks=all Produce until the
  high watermark passes the records of every partition it appended to, each at the
  leader epoch it was appended at (Kafka's ``DelayedProduce``).
- *Events.* Each append tells the followers' fetches waiting in the fetch purgatory how
  many bytes arrived; each high-watermark move tells the consumers' fetches (the bytes
  appended since the previous move: what became visible) and the produce purgatory
  (acks=all waiters re-check their offset): events, never polling. A purgatory is told
  only when something waits on the key (``Purgatory.watched``): an append nobody waits for
  costs a dict lookup, not a call.
- *Roles* (Kafka's ``becomeLeaderOrFollower``). A partition this broker leads takes no
  fetcher and tracks its followers (:class:`~odradek.cluster.partition.Partition`); one it
  follows is handed to the :class:`~odradek.cluster.replica_fetcher.ReplicaFetcherManager`
  with its leader and leader epoch, which truncates it to the leader's log and fetches.
  Every new controller decision re-applies the role.
- *Followers' fetches* reach the leader through :meth:`record_follower_fetch`: the
  follower's position moves the high watermark, and a follower outside the ISR that caught
  up is added to it. Every ``replica.lag.time.max.ms`` / 2, followers of the ISR not caught
  up for longer than ``replica.lag.time.max.ms`` are removed (:meth:`shrink_isrs`, Kafka's
  ``maybeShrinkIsr``). Both changes go through ``isr_writer``, a write conditional on the
  version of the state read (the partition epoch): a concurrent decision of the controller
  wins and this broker takes it from the next notification. One change per partition is
  under way at a time, and until its outcome is known (a write that timed out is resolved
  by reading the state again) the high watermark counts the old and the new ISR alike.
- *High watermarks* are checkpointed in each log dir's ``replication-offset-checkpoint``
  (Kafka's ``ReplicaManager.checkpointHighWatermarks``), every
  ``replica.high.watermark.checkpoint.interval.ms`` and at shutdown, and restored when a
  partition is created at start. Like every checkpoint it is a cache of the logs: a
  missing or damaged file means starting from the log start offset, and a leader alone
  in its ISR moves it to its log end at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import logging
import time
from collections.abc import Callable, Container, Hashable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeVar

from odradek.clock import monotonic_ms
from odradek.cluster.errors import (
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)
from odradek.cluster.leader_election import LeaderAndIsr, isr_change
from odradek.cluster.loop_owned import loop_dict, on_loop
from odradek.cluster.partition import Partition, PartitionState
from odradek.cluster.replication_quota import UNLIMITED, ReplicationQuota, is_throttled
from odradek.cluster.store import BadVersionError
from odradek.storage import LogManager, PartitionLog, TopicPartition, checkpoint, files
from odradek.storage.checkpoint import CheckpointError
from odradek.storage.config import LogConfig
from odradek.text import plural

if TYPE_CHECKING:
    from odradek.cluster.metadata import ClusterMetadata, TopicInfo
    from odradek.cluster.replica_fetcher import ReplicaFetcherManager

__all__ = [
    "FollowerKey",
    "IsrWriter",
    "PendingAppend",
    "ReplicaManager",
    "Replication",
    "Watchers",
]

log = logging.getLogger(__name__)
T = TypeVar("T")
# The most one step of the shutdown (the fetchers, the ISR writes under way, the logs
# being created) is waited for.
SHUTDOWN_STEP_S = 5.0


class FollowerKey(NamedTuple):
    """The fetch purgatory key followers of ``tp`` wait on (appends, not the high
    watermark)."""

    tp: TopicPartition


IsrWriter = Callable[[str, int, LeaderAndIsr], int]
"""Writes a leader's ISR change conditionally (blocking; run in a worker thread) and
returns the state's new version; raises the store's error otherwise."""
IsrReader = Callable[[str, int], PartitionState | None]
"""Reads a partition's state as stored now (blocking), or None when it has none."""


class Watchers(Protocol):
    """What the replica manager tells a purgatory (server.purgatory.Purgatory)."""

    @property
    def watched(self) -> Container[Hashable]:
        """The keys something waits on: notify reaches no one for the others."""

    def notify(self, key: Hashable, nbytes: int = 0) -> None: ...

    def wake_all(self, key: Hashable) -> None: ...

    async def wait_until(
        self, keys: list[Hashable], condition: Callable[[], bool], timeout_s: float
    ) -> bool: ...


@dataclasses.dataclass(frozen=True, slots=True)
class PendingAppend:
    """An acks=all append waiting for its ISR (Kafka's ``ProducePartitionStatus``): taken
    when the records are appended, with the leader epoch they were written at and the
    log end offset after them, which the high watermark must reach."""

    partition: Partition
    leader_epoch: int
    required_offset: int


class Replication(enum.Enum):
    """Where an acks=all append stands (:meth:`ReplicaManager.replication_of`)."""

    PENDING = "pending"
    REPLICATED = "replicated"  # the high watermark reached it, at its epoch
    LEADERSHIP_MOVED = "leadership moved"  # led elsewhere or at another epoch since
    GONE = "gone"  # the partition is no longer hosted here (deleted, reassigned)


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        log_manager: LogManager,
        metadata: ClusterMetadata,
        fetch_watchers: Watchers,
        produce_watchers: Watchers,
    ) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.metadata = metadata
        self.fetch_watchers = fetch_watchers
        self.produce_watchers = produce_watchers
        # Loop-owned (docs/architecture.md, "Threads"); a worker asks the loop for a copy.
        self.partitions: dict[TopicPartition, Partition] = loop_dict()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._checkpointed: dict[Path, dict[tuple[str, int], int]] = {}
        # Logs created off the loop (see change_topics).
        self._pending: set[TopicPartition] = set()
        self._change_lock = asyncio.Lock()
        self._deferred: list[tuple[TopicPartition, LogConfig]] | None = None
        self._log_creation: asyncio.Task[None] | None = None
        # Told which partitions started or stopped being led here (the group
        # coordinator follows its __consumer_offsets partitions).
        self.on_leadership_change: Callable[[list[TopicPartition]], None] | None = None
        # Cluster mode: logs of topics created or grown through another broker are made
        # in the worker thread too (on one broker, implicit creations such as
        # auto-created topics keep creating theirs at once).
        self.create_logs_off_loop = False
        # Cluster mode: the followers' fetchers, and the ISR writer of the leader side.
        self.fetchers: ReplicaFetcherManager | None = None
        self.isr_writer: IsrWriter | None = None
        # Cluster mode: whether a broker is registered (alive). A follower that is not
        # (it left, or is shutting down) does not join an ISR, as Kafka's
        # isReplicaIsrEligible (KIP-841) refuses fenced and shutting-down brokers.
        self.broker_alive: Callable[[int], bool] | None = None
        self.isr_reader: IsrReader | None = None
        self.replica_lag_time_max_ms = 30000
        # leader.replication.throttled.rate over the followers named in their topic's
        # leader.replication.throttled.replicas (KIP-73)
        self.leader_quota = ReplicationQuota(
            lambda: int(metadata.broker_defaults.get("leader.replication.throttled.rate",
                                                     UNLIMITED)))
        self.isr_shrinks = 0
        self.isr_expands = 0
        self._isr_tasks: set[asyncio.Task[None]] = set()
        # Set whenever the controller's decisions were applied (controlled shutdown waits
        # on it).
        self.states_changed = asyncio.Event()

    # -- life cycle ----------------------------------------------------------------------
    def startup(self) -> None:
        """Host every partition of every known topic; drop logs of deleted topics."""
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:  # a synchronous test: everything on this thread
            self._loop = None
        for log_dir in self.log_manager.online_dirs:
            path = log_dir / files.REPLICATION_OFFSET_CHECKPOINT
            try:
                self._checkpointed[log_dir] = checkpoint.read_offsets(path)
            except (CheckpointError, OSError) as exc:
                log.warning("ignoring %s (%s): high watermarks start from the logs", path, exc)
                self._checkpointed[log_dir] = {}
        for info in self.metadata.topics.values():
            self._host(info)
        for tp in list(self.log_manager.logs):
            found = self.metadata.get(tp.topic)
            if found is None or tp.partition not in found.partitions:
                log.info("removing log %s of a topic that no longer exists", tp)
                self.log_manager.delete_log(tp)
        self._checkpointed.clear()
        self.metadata.add_listener(self._on_topic_change)
        self.metadata.add_state_listener(self._on_partition_states)

    async def shutdown(self) -> None:
        """Stop fetching, wait for logs being created and ISR writes under way; then write
        the high-watermark checkpoints."""
        if self.fetchers is not None:
            log.info("shutdown: stopping the replica fetchers (waiting at most %.0f s)",
                     SHUTDOWN_STEP_S)
            try:
                await asyncio.wait_for(self.fetchers.shutdown(), SHUTDOWN_STEP_S)
            except TimeoutError:
                log.warning("shutdown: the replica fetchers did not stop in %.0f s; going on",
                            SHUTDOWN_STEP_S)
        creating = {self._log_creation} if self._log_creation is not None else set()
        for what, tasks in (("ISR writes under way", set(self._isr_tasks)),
                            ("log creations", creating)):
            if not tasks:
                continue
            log.info("shutdown: waiting at most %.0f s for %d %s", SHUTDOWN_STEP_S, len(tasks),
                     what)
            _done, pending = await asyncio.wait(tasks, timeout=SHUTDOWN_STEP_S)
            if pending:
                log.warning("shutdown: %d %s did not finish in %.0f s; going on",
                            len(pending), what, SHUTDOWN_STEP_S)
        self.checkpoint_high_watermarks()

    def checkpoint_high_watermarks(self) -> None:
        """``replication-offset-checkpoint`` of every online log dir (from a worker, the
        high watermarks are read on the loop, which owns the partitions, the worker
        waiting for them)."""
        self._write_high_watermarks(on_loop(self._loop, self._high_watermarks))

    async def checkpoint_high_watermarks_off_loop(self) -> None:
        """:meth:`checkpoint_high_watermarks` as the broker runs it every interval: the
        high watermarks read here, on the loop, and only the files written in a worker
        (no worker waits on a busy loop: it could time out and skip a checkpoint)."""
        by_dir = self._high_watermarks()
        await asyncio.to_thread(self._write_high_watermarks, by_dir)

    def _write_high_watermarks(self, by_dir: dict[Path, dict[tuple[str, int], int]]) -> None:
        for log_dir, offsets in by_dir.items():
            with self.log_manager.failure_channel.guard(log_dir, "writing high watermarks"):
                checkpoint.write_offsets(log_dir / files.REPLICATION_OFFSET_CHECKPOINT, offsets)

    def _high_watermarks(self) -> dict[Path, dict[tuple[str, int], int]]:
        """Each online log dir's partitions and their high watermarks (on the loop)."""
        by_dir: dict[Path, dict[tuple[str, int], int]] = {
            d: {} for d in self.log_manager.online_dirs
        }
        for tp, partition in self.partitions.items():
            found = by_dir.get(partition.log.log_dir)
            if found is not None:
                found[(tp.topic, tp.partition)] = partition.high_watermark
        return by_dir

    # -- the door for handlers -----------------------------------------------------------
    def get_partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get(TopicPartition(topic, index))

    def leader_partition(
        self, topic: str, index: int, current_leader_epoch: int = -1
    ) -> Partition:
        """The partition, if this broker leads it at ``current_leader_epoch`` (-1: any);
        else Kafka's error for the request."""
        tp = TopicPartition(topic, index)
        partition = self.partitions.get(tp)
        if partition is not None:
            state = partition.state
            if state.leader == self.broker_id and (current_leader_epoch == -1 or
                                                   current_leader_epoch == state.leader_epoch):
                return partition  # check_leader's answer for every request, without its call
            partition.check_leader(current_leader_epoch)  # raises Kafka's error
            return partition
        if tp in self._pending:
            raise LeaderNotAvailableError(f"the log of {tp} is still being created")
        info = self.metadata.get(topic)
        if info is not None and index in info.partitions:
            state = self.metadata.partition_state(topic, index)
            if state.leader != self.broker_id:
                raise NotLeaderOrFollowerError(
                    f"broker {self.broker_id} does not lead {tp} (leader: {state.leader})"
                )
            raise LeaderNotAvailableError(f"{tp} has no log on this broker")
        raise UnknownTopicOrPartitionError(f"{tp} does not exist")

    def is_pending(self, topic: str, index: int) -> bool:
        """True while the log of ``topic``-``index`` is being created off the loop."""
        return TopicPartition(topic, index) in self._pending

    def topic_pending(self, topic: str) -> bool:
        """True while any log of ``topic`` is being created off the loop."""
        return any(tp.topic == topic for tp in self._pending)

    def replication_of(self, append: PendingAppend) -> Replication:
        """Where an acks=all append stands (Kafka's
        ``Partition.checkEnoughReplicasReachOffset``, judged at the append's epoch)."""
        partition = append.partition
        if self.partitions.get(TopicPartition(partition.topic, partition.partition)) \
                is not partition:
            return Replication.GONE
        if not partition.is_leader or partition.leader_epoch != append.leader_epoch:
            return Replication.LEADERSHIP_MOVED
        if partition.high_watermark >= append.required_offset:
            return Replication.REPLICATED
        return Replication.PENDING

    async def wait_for_replication(
        self, appends: Sequence[PendingAppend], timeout_s: float
    ) -> list[Replication]:
        """acks=all: wait until no append is PENDING (every one replicated by its ISR, or
        its partition led elsewhere, at another epoch, or gone) or ``timeout_s`` passes;
        where each stands then. All are waited on at once, each judged at the epoch it
        was appended at, as Kafka's ``DelayedProduce`` holds every partition's status
        from the append: judged later, a partition that lost its leadership and won it
        back while another was awaited would count records truncated meanwhile."""
        deadline = time.monotonic() + timeout_s

        def pending() -> list[PendingAppend]:
            return [a for a in appends if self.replication_of(a) is Replication.PENDING]

        waiting = pending()
        while waiting and (remaining := deadline - time.monotonic()) > 0:
            keys: list[Hashable] = [TopicPartition(a.partition.topic, a.partition.partition)
                                    for a in waiting]
            await self.produce_watchers.wait_until(keys, lambda: not pending(), remaining)
            still = pending()
            if len(still) == len(waiting):
                break  # timed out (or the purgatory is full): no wait again
            waiting = still  # a partition woken by a leadership change: wait for the others
        return [self.replication_of(a) for a in appends]

    # -- followers and the ISR (the leader's side) ---------------------------------------
    def record_follower_fetch(self, partition: Partition, replica_id: int,
                              fetch_offset: int) -> bool:
        """A follower's fetch of ``partition`` from ``fetch_offset`` was served (Kafka's
        ``updateFollowerFetchState``; the caller read first, so that an offset out of
        range never counts): the high watermark may move (returns whether it did), the
        ISR may grow."""
        moved = partition.update_follower_fetch_state(replica_id, fetch_offset, monotonic_ms())
        if (self.isr_writer is not None and partition.pending_isr is None
                and partition.expand_candidate(replica_id)
                and (self.broker_alive is None or self.broker_alive(replica_id))):
            isr = [*partition.state.isr, replica_id]
            self._change_isr(partition, tuple(r for r in partition.state.replicas if r in isr))
        return moved

    def leader_throttled(self, partition: Partition, replica_id: int) -> bool:
        """Is this follower's fetch of ``partition`` throttled (KIP-73)?"""
        return is_throttled(partition.log.config["leader.replication.throttled.replicas"],
                            partition.partition, replica_id)

    def shrink_isrs(self) -> None:
        """Take followers not caught up for ``replica.lag.time.max.ms`` out of the ISRs
        of the partitions led here (on the event loop)."""
        if self.isr_writer is None:
            return
        now = monotonic_ms()
        for partition in list(self.partitions.values()):
            if not partition.is_leader or partition.pending_isr is not None:
                continue
            out = partition.out_of_sync_replicas(now, self.replica_lag_time_max_ms)
            if out:
                isr = tuple(r for r in partition.state.isr if r not in out)
                self._change_isr(partition, isr)

    def _change_isr(self, partition: Partition, isr: tuple[int, ...]) -> None:
        writer = self.isr_writer
        assert writer is not None
        state = partition.state
        current = LeaderAndIsr(state.leader, state.leader_epoch, state.isr,
                               state.controller_epoch, state.partition_epoch)
        new = isr_change(current, isr)
        partition.pending_isr = isr
        topic, index = partition.topic, partition.partition

        async def write() -> None:
            try:
                version = await asyncio.to_thread(writer, topic, index, new)
            except BadVersionError:
                # Someone wrote a newer state (the controller): it arrives with its
                # notification; until then the high watermark keeps counting both ISRs.
                log.info("ISR change of %s-%d to %s not written: a newer state stands",
                         topic, index, list(isr))
                return
            except Exception as exc:
                # The write may or may not have been applied (a timeout, a lost session):
                # treating it as failed could let the high watermark pass a replica that
                # ZooKeeper now lists in the ISR. Keep counting both until the state is
                # read again.
                log.warning("ISR change of %s-%d to %s: outcome unknown (%s); reading the "
                            "state again", topic, index, list(isr), exc)
                await self._resolve_isr_change(partition, state)
                return
            grew = len(isr) > len(state.isr)
            if grew:
                self.isr_expands += 1
            else:
                self.isr_shrinks += 1
            log.info("ISR of %s-%d %s from %s to %s", topic, index,
                     "expanded" if grew else "shrank", list(state.isr), list(isr))
            if partition.state is state:
                partition.update_state(PartitionState(
                    state.leader, state.leader_epoch, isr, state.replicas, version,
                    state.controller_epoch,
                ))
                self.produce_watchers.notify(TopicPartition(topic, index), 0)

        task = asyncio.get_running_loop().create_task(write())
        self._isr_tasks.add(task)
        task.add_done_callback(self._isr_tasks.discard)

    async def _resolve_isr_change(self, partition: Partition, state: PartitionState) -> None:
        """After an ISR write of unknown outcome: read the state until the store answers,
        then take it (written: a newer version) or drop the change (not written)."""
        reader = self.isr_reader
        topic, index = partition.topic, partition.partition
        delay = 0.2
        while partition.state is state and reader is not None:
            try:
                fresh = await asyncio.to_thread(reader, topic, index)
            except Exception as exc:
                log.info("reading the state of %s-%d failed (%s); retrying", topic, index, exc)
                await asyncio.sleep(delay)
                delay = min(2.0, delay * 2)
                continue
            if partition.state is not state:
                return  # a newer state arrived meanwhile
            if fresh is None or fresh.partition_epoch == state.partition_epoch:
                partition.pending_isr = None  # not written
                partition.maybe_increment_high_watermark()
            else:
                self.metadata.apply_partition_states({(topic, index): dataclasses.replace(
                    fresh, replicas=state.replicas)})
            return

    def _apply_role(self, tp: TopicPartition, partition: Partition) -> None:
        """Lead (no fetcher) or follow (a fetcher from the leader) as the state says."""
        fetchers = self.fetchers
        if fetchers is None:
            return
        state = partition.state
        if state.leader != self.broker_id and state.leader >= 0 and (
            self.broker_id in state.replicas
        ):
            fetchers.add(tp, partition, state.leader, state.leader_epoch)
        else:
            fetchers.remove(tp)

    # -- topic changes -------------------------------------------------------------------
    async def change_topics(
        self, change: Callable[[], T], wait: datetime.timedelta = datetime.timedelta(0)
    ) -> tuple[T, bool]:
        """Apply ``change`` (synchronous calls on the metadata) and create the logs it
        calls for in a worker thread, waiting for them up to ``wait``. Returns the result
        of ``change`` and whether that wait ran out with logs still being created (never
        with a zero ``wait``: the caller then answers without waiting, as Kafka does).

        Creating a log is a directory and five files: a 1,000-partition topic held the
        event loop for seconds, every connection waiting. The admin handler waits up to
        the request's timeout, as Kafka's DelayedCreatePartitions does. Changes are
        applied one at a time, each after the previous one's logs are in place, as
        Kafka's controller handles its events in order: a topic deleted or grown while
        its logs are being created cannot race with their creation."""
        async with self._change_lock:
            while (previous := self._log_creation) is not None and not previous.done():
                await asyncio.wait((previous,))
            self._deferred = []
            try:
                if self.metadata.remote:
                    # Cluster mode: the ZooKeeper round trips in a worker thread. The
                    # local view is changed on the loop (metadata.defer_local), by
                    # callbacks queued before this wait ends: the logs they call for are
                    # in _deferred when it does. The worker reads a copy of the metadata
                    # taken here (off_loop), never the loop's own dicts.
                    result = await asyncio.to_thread(self.metadata.off_loop(change))
                else:
                    result = change()
            finally:
                deferred, self._deferred = self._deferred, None
            if not deferred:
                return result, False
            task = asyncio.get_running_loop().create_task(self._create_logs(deferred))
            self._log_creation = task
        if wait <= datetime.timedelta(0):
            return result, False
        await asyncio.wait((task,), timeout=wait.total_seconds())
        return result, not task.done()

    def _on_partition_states(self, keys: list[tuple[str, int]]) -> None:
        """The controller decided new states (cluster mode): partitions hosted here take
        them (Kafka's becomeLeaderOrFollower). Requests parked on a partition whose
        leader changed are woken, to answer from the new state."""
        self.states_changed.set()
        moved: list[TopicPartition] = []
        for topic, index in keys:
            tp = TopicPartition(topic, index)
            partition = self.partitions.get(tp)
            if partition is None:
                continue
            state = self.metadata.partition_state(topic, index)
            if state == partition.state:
                continue
            was_leader = partition.is_leader
            epoch = partition.leader_epoch
            partition.update_state(state)
            self._apply_role(tp, partition)
            if partition.leader_epoch != epoch and was_leader and partition.is_leader:
                self.produce_watchers.wake_all(tp)
            if partition.is_leader != was_leader:
                moved.append(tp)
                self.fetch_watchers.wake_all(tp)
                self.produce_watchers.wake_all(tp)
        if moved:
            log.info("leadership changed for %s hosted here", plural(len(moved), "partition"))
        if moved and self.on_leadership_change is not None:
            self.on_leadership_change(moved)

    def _on_topic_change(self, name: str, info: TopicInfo | None) -> None:
        if info is not None:
            if self._deferred is None and self.create_logs_off_loop:
                # A change made elsewhere (cluster mode: through another broker): its
                # logs are created off the loop too, after any creation under way.
                self._deferred = []
                try:
                    self._host(info)
                finally:
                    wanted, self._deferred = self._deferred, None
                if wanted:
                    self._schedule_creation(wanted)
                return
            self._host(info)
            return
        deleted = [tp for tp in list(self.log_manager.logs) if tp.topic == name]
        for tp in deleted:
            self.partitions.pop(tp, None)
            if self.fetchers is not None:
                self.fetchers.remove(tp)
        self.log_manager.delete_logs(deleted)  # their dirs synced once, not per partition
        for tp in deleted:
            self.fetch_watchers.wake_all(tp)
            self.produce_watchers.wake_all(tp)

    def _host(self, info: TopicInfo) -> None:
        config = self.metadata.log_config(info.name)
        for index, replicas in info.partitions.items():
            if self.broker_id not in replicas:
                self._drop_replica(TopicPartition(info.name, index))
                continue
            tp = TopicPartition(info.name, index)
            existing = self.log_manager.get_log(tp)
            if existing is not None:
                existing.update_config(config)
                self._adopt(existing)
            elif tp in self._pending:
                continue  # being created off the loop; configured when it lands
            elif self._deferred is not None:
                self._deferred.append((tp, config))
                self._pending.add(tp)
            else:
                self._adopt(self.log_manager.get_or_create_log(tp, config))

    def _drop_replica(self, tp: TopicPartition) -> None:
        """A partition reassigned away from this broker: stop fetching it, delete its log
        (Kafka's StopReplica with deletion)."""
        if self.log_manager.get_log(tp) is None:
            return
        partition = self.partitions.pop(tp, None)
        if self.fetchers is not None:
            self.fetchers.remove(tp)
        self.log_manager.delete_log(tp)
        self.fetch_watchers.wake_all(tp)
        self.produce_watchers.wake_all(tp)
        log.info("%s was reassigned away from broker %d: its log is deleted", tp,
                 self.broker_id)
        if partition is not None and partition.is_leader and self.on_leadership_change:
            self.on_leadership_change([tp])

    def _adopt(self, partition_log: PartitionLog) -> Partition:
        """The Partition of ``partition_log``, made on first sight; its state refreshed."""
        tp = TopicPartition(partition_log.topic, partition_log.partition)
        state = self.metadata.partition_state(tp.topic, tp.partition)
        partition = self.partitions.get(tp)
        if partition is not None and partition.log is partition_log:
            if partition.state != state:
                partition.update_state(state)
                self._apply_role(tp, partition)
            return partition
        partition = self._new_partition(partition_log, state)
        # Kafka's Partition.createLogIfNotExists: the checkpointed high watermark, else 0
        # (clamped to the log start). A loaded log starts with its high watermark at its
        # log end, right for a log alone but past what followers in the ISR may hold.
        checkpointed = self._checkpointed.get(partition_log.log_dir, {}).get(tp)
        partition.restore_high_watermark(checkpointed if checkpointed is not None else 0)
        self.partitions[tp] = partition
        self._apply_role(tp, partition)
        if self.on_leadership_change is not None and partition.is_leader:
            self.on_leadership_change([tp])
        return partition

    def _new_partition(self, partition_log: PartitionLog, state: PartitionState) -> Partition:
        tp = TopicPartition(partition_log.topic, partition_log.partition)
        fetch_notify, fetch_watched = self.fetch_watchers.notify, self.fetch_watchers.watched
        produce_notify = self.produce_watchers.notify
        produce_watched = self.produce_watchers.watched
        follower_key = FollowerKey(tp)

        # A purgatory is told only when something waits on the key (a dict lookup, no
        # call, on every append nobody waits for).
        def on_append(nbytes: int) -> None:
            if follower_key in fetch_watched:
                fetch_notify(follower_key, nbytes)

        def on_high_watermark(_p: Partition, nbytes: int) -> None:
            # nbytes: appended since the previous move, what became visible to consumers
            if tp in fetch_watched:
                fetch_notify(tp, nbytes)
            if tp in produce_watched:
                produce_notify(tp, 0)

        return Partition(self.broker_id, partition_log, state,
                         on_high_watermark=on_high_watermark, on_append=on_append)

    def _schedule_creation(self, wanted: list[tuple[TopicPartition, LogConfig]]) -> None:
        previous = self._log_creation

        async def after_previous() -> None:
            if previous is not None and not previous.done():
                await asyncio.wait((previous,))
            await self._create_logs(wanted)

        self._log_creation = asyncio.get_running_loop().create_task(after_previous())

    async def _create_logs(self, wanted: list[tuple[TopicPartition, LogConfig]]) -> None:
        try:
            await asyncio.to_thread(self._create_logs_now, wanted)
        finally:
            configs: dict[str, LogConfig] = {}
            for tp, used in wanted:
                self._pending.discard(tp)
                created = self.log_manager.get_log(tp)
                if created is None:
                    continue
                if tp.topic not in configs:
                    configs[tp.topic] = self.metadata.log_config(tp.topic)
                if configs[tp.topic] != used:  # altered while the log was being created
                    created.update_config(configs[tp.topic])
                info = self.metadata.get(tp.topic)
                if info is not None and tp.partition in info.partitions:
                    self._adopt(created)
                else:  # deleted (through another broker) while its log was being made
                    self.log_manager.delete_log(tp)

    def _create_logs_now(self, wanted: list[tuple[TopicPartition, LogConfig]]) -> None:
        """In a worker thread; each log is published to the loop by _create_logs."""
        for tp, config in wanted:
            try:
                self.log_manager.get_or_create_log(tp, config)
            except Exception:  # e.g. the log dir failed: the partition stays unavailable
                log.exception("cannot create the log of %s", tp)
