"""One topic partition as this broker sees it (Kafka's ``cluster.Partition``).

How it works: a :class:`Partition` joins what the cluster decided about a partition (its
:class:`PartitionState`: leader, leader epoch, ISR, replicas, and the partition epoch that
versions the state) to this broker's log of it. Every question a request handler asks of
a partition goes through here, so replication changes this class and
:class:`~odradek.cluster.replica_manager.ReplicaManager`, not the handlers:

- *Am I the leader, at which epoch?* :meth:`check_leader` answers with Kafka's error for a
  request that reached the wrong broker or carries another epoch
  (``Partition.checkCurrentLeaderEpoch``): NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH (the
  client's epoch is older), UNKNOWN_LEADER_EPOCH (newer).
- *Append.* :meth:`append_records_as_leader` refuses acks=all when the ISR is smaller than
  ``min.insync.replicas`` (NOT_ENOUGH_REPLICAS, before anything is written, as
  ``Partition.appendRecordsToLeader``), then appends stamping the batches with the leader
  epoch, which the leader-epoch cache records where it begins.
- *Followers, seen from the leader* (Kafka's ``Replica`` / ``ReplicaState``). Each
  follower's fetch tells the leader its log end offset (the fetch offset) and whether it
  is caught up: a follower that fetched at or past the leader's log end offset is caught
  up now; one that fetched at or past the leader's log end offset *of its previous
  fetch* was caught up then (``Replica.updateFetchStateOrThrow``). The time it was last
  caught up decides whether it stays in the ISR: :meth:`out_of_sync_replicas` names the
  ones behind for longer than ``replica.lag.time.max.ms`` (the ISR shrinks), and a
  follower outside the ISR that reached the high watermark and the start of the current
  leader epoch joins it (:meth:`expand_candidate`). Only a fetch the leader served counts:
  one from an offset out of range never reaches :meth:`update_follower_fetch_state`.
  The change itself is written by the replica manager's ISR writer (a conditional
  ZooKeeper write); while it is under way the high watermark counts the union of the old
  and the new ISR (Kafka's "maximal ISR"), so it never runs ahead of a replica about to
  be counted.
- *High watermark.* The smallest log end offset over the ISR
  (``Partition.maybeIncrementLeaderHW``). It never moves back on a leader. The log holds
  the value, as Kafka's ``UnifiedLog`` does; this class alone moves it, after every append
  (the log's one append listener, which tells ``on_append`` first) and when a follower's
  position is learnt. With the leader alone in the ISR it follows the log end offset at
  once: checked inline in the listener, the one case of every append on a single broker.
  Each move tells ``on_high_watermark`` the bytes appended since the previous one (what
  became visible to consumers). A follower takes the leader's value from each fetch
  response, bounded by its own log end. The replica manager checkpoints it in
  ``replication-offset-checkpoint``.
- *Read.* Consumers read below the high watermark (``read_committed`` ones below the last
  stable offset); followers (replica id >= 0) read up to the log end (Kafka's
  ``FetchIsolation``).

The state is swapped whole (:meth:`update_state`), never mutated in place, so a reader on
the event loop sees one consistent state; a state older than the one held (an older leader
epoch, or an older partition epoch at the same one) is skipped, as Kafka's
``Partition.makeLeader`` skips it: the leader's own ISR writes land here before their
notifications, which must not set them back (:meth:`is_older`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from odradek.clock import monotonic_ms
from odradek.cluster.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from odradek.storage.log import FetchDataInfo, LogAppendInfo, PartitionLog

__all__ = [
    "Partition",
    "PartitionState",
    "ReplicaState",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PartitionState:
    """What the controller decided (Kafka's ``/brokers/topics/<t>/partitions/<p>/state``
    and LeaderAndIsr): ``leader`` is -1 when no replica can lead."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    partition_epoch: int = 0
    """The state znode's version: fences a stale writer of the ISR (KIP-497)."""
    controller_epoch: int = 0


def leader_epoch_error(requested: int, current: int) -> str | None:
    """A request's ``current_leader_epoch`` against the partition's: -1 skips the check, an
    older epoch is FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH (Kafka's
    ``Partition.checkCurrentLeaderEpoch``). Returns the Kafka error name, or None."""
    if requested == -1 or requested == current:
        return None
    return "FENCED_LEADER_EPOCH" if requested < current else "UNKNOWN_LEADER_EPOCH"


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one follower (Kafka's ``ReplicaState``)."""

    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_leader_log_end_offset: int = -1
    last_fetch_ms: int = 0


class Partition:
    __slots__ = ("_on_append", "_on_high_watermark", "_unreplicated_bytes", "broker_id",
                 "follower_states", "leader_epoch_start_offset", "log", "partition",
                 "pending_isr", "state", "topic")

    def __init__(
        self,
        broker_id: int,
        log: PartitionLog,
        state: PartitionState,
        on_high_watermark: Callable[[Partition, int], None] | None = None,
        on_append: Callable[[int], None] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.topic = log.topic
        self.partition = log.partition
        self.log = log
        self.state = state
        # Told (this partition, the bytes appended since the previous move) when the high
        # watermark moves; and (the bytes) after every append, before the move.
        self._on_high_watermark = on_high_watermark
        self._on_append = on_append
        self._unreplicated_bytes = 0  # appended since the high watermark last moved
        # What this leader knows of each follower, by broker id (Kafka's remote replicas,
        # ``remoteReplicasMap``); kept while this broker leads (reset by make_leader). Not
        # to be confused with ``state.replicas``, the assigned broker ids.
        self.follower_states: dict[int, ReplicaState] = {}
        # An ISR change written but not yet confirmed (Kafka's PendingExpandIsr/ShrinkIsr).
        self.pending_isr: tuple[int, ...] | None = None
        # Where this broker's leadership began (Kafka's leaderEpochStartOffsetOpt): the
        # log end offset when it became leader; None while it does not lead.
        self.leader_epoch_start_offset: int | None = None
        if state.leader == broker_id:
            self.make_leader(monotonic_ms())
        log.high_watermark_managed = True
        log.add_append_listener(self._appended)
        self.maybe_increment_high_watermark()

    def __repr__(self) -> str:
        s = self.state
        return (f"Partition({self.topic}-{self.partition}, leader={s.leader}, "
                f"leader_epoch={s.leader_epoch}, isr={list(s.isr)})")

    # -- who leads ---------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.broker_id

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    def update_state(self, state: PartitionState, now: int | None = None) -> bool:
        """A new decision of the controller (or a confirmed ISR change) about this
        partition; False, and nothing changed, when it is older than the state held (see
        :meth:`is_older`). Becoming leader, or leading at a new epoch, starts the
        followers' tracking afresh (Kafka's ``Partition.makeLeader``)."""
        previous = self.state
        if self.is_older(state, previous):
            log.info("%s-%d: skipping a state older than the one held (leader epoch %d, "
                     "partition epoch %d, ISR %s; held: %d, %d, %s)", self.topic,
                     self.partition, state.leader_epoch, state.partition_epoch,
                     list(state.isr), previous.leader_epoch, previous.partition_epoch,
                     list(previous.isr))
            return False
        self.state = state
        if self.pending_isr is not None and state.partition_epoch != previous.partition_epoch:
            self.pending_isr = None  # written, or overtaken by another writer
        if state.leader == self.broker_id and (
            previous.leader != self.broker_id or previous.leader_epoch != state.leader_epoch
        ):
            self.make_leader(monotonic_ms() if now is None else now)
        elif state.leader != self.broker_id:
            self.follower_states = {}
            self.leader_epoch_start_offset = None
        elif state.replicas != previous.replicas:
            # reassigned: a replica added is tracked from its first fetch, one removed is
            # forgotten
            self.follower_states = {
                r: self.follower_states.get(r) or ReplicaState()
                for r in state.replicas if r != self.broker_id
            }
        self.maybe_increment_high_watermark()
        return True

    @staticmethod
    def is_older(state: PartitionState, held: PartitionState) -> bool:
        """Is ``state`` older than ``held``: an older leader epoch, or the same one at an
        older partition epoch (the state znode's version)? The leader's own ISR writes
        reach its state at once and their notifications later, each carrying the state
        read when it was handled: one read between two writes of the leader and applied
        after the second would take back the replica the second added, while ZooKeeper,
        and the controller electing from it, lists it; the high watermark could then
        pass that replica's log end (Q38, issue 48). Kafka skips such a state
        (``Partition.makeLeader``/``makeFollower`` on the leader and partition epochs)."""
        return state.leader_epoch < held.leader_epoch or (
            state.leader_epoch == held.leader_epoch
            and state.partition_epoch < held.partition_epoch)

    def make_leader(self, now: int) -> None:
        """Lead at ``state.leader_epoch``: followers' positions are unknown until they
        fetch; those in the ISR count as caught up now (Kafka resets them so that a
        new leader does not shrink its ISR at once). The epoch is recorded at the log end
        offset, where this leader's first batch will go: a follower asking
        OffsetForLeaderEpoch for the previous epoch is told where it ended."""
        state = self.state
        self.follower_states = {
            r: ReplicaState(last_caught_up_ms=now if r in state.isr else 0)
            for r in state.replicas if r != self.broker_id
        }
        self.pending_isr = None
        self.leader_epoch_start_offset = self.log.log_end_offset
        self.log.leader_epoch_cache.assign(state.leader_epoch, self.log.log_end_offset)

    def check_leader(self, current_leader_epoch: int = -1) -> None:
        """Raise Kafka's error unless this broker leads at ``current_leader_epoch``."""
        state = self.state
        if state.leader == self.broker_id and (current_leader_epoch == -1
                                               or current_leader_epoch == state.leader_epoch):
            return  # the answer for every produce: checked without a call
        error = leader_epoch_error(current_leader_epoch, state.leader_epoch)
        if error == "FENCED_LEADER_EPOCH":
            raise FencedLeaderEpochError(
                f"leader epoch {current_leader_epoch} of {self.topic}-{self.partition} is "
                f"older than the current {state.leader_epoch}"
            )
        if error == "UNKNOWN_LEADER_EPOCH":
            raise UnknownLeaderEpochError(
                f"leader epoch {current_leader_epoch} of {self.topic}-{self.partition} is "
                f"newer than the current {state.leader_epoch}"
            )
        if state.leader != self.broker_id:  # Kafka answers the same with no leader at all
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} does not lead {self.topic}-{self.partition} "
                f"(leader: {state.leader})"
            )

    # -- append --------------------------------------------------------------------------
    def append_records_as_leader(
        self, records: bytes | bytearray | memoryview, acks: int = 1
    ) -> LogAppendInfo:
        """Validate and append a producer's batches (the caller checked leadership)."""
        if acks == -1:
            self._check_min_isr()
        return self.log.append_as_leader(records, leader_epoch=self.state.leader_epoch)

    def _check_min_isr(self) -> None:
        """An acks=-1 write needs ``min.insync.replicas`` in the ISR (NOT_ENOUGH_REPLICAS)."""
        min_isr = self.log.config.min_insync_replicas
        in_sync = len(self.state.isr)
        if in_sync < min_isr:
            raise NotEnoughReplicasError(
                f"ISR of {in_sync} is below min.insync.replicas={min_isr}"
            )

    def append_coordinator_records(self, batch: bytes | bytearray) -> LogAppendInfo:
        """Append a batch a coordinator of this broker built (its acks=-1 write: refused
        with NOT_ENOUGH_REPLICAS when the ISR is below ``min.insync.replicas``; the caller
        checked leadership)."""
        self._check_min_isr()
        return self.log.append_as_coordinator(batch, leader_epoch=self.state.leader_epoch)

    def append_control_as_leader(
        self, producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int
    ) -> LogAppendInfo:
        """Append a transaction marker (WriteTxnMarkers; the caller checked leadership).
        Kafka appends markers with acks=-1: refused with NOT_ENOUGH_REPLICAS when the ISR
        is below ``min.insync.replicas``, as any acks=-1 append."""
        min_isr = self.log.config.min_insync_replicas
        in_sync = len(self.state.isr)
        if in_sync < min_isr:
            raise NotEnoughReplicasError(
                f"ISR of {in_sync} is below min.insync.replicas={min_isr}"
            )
        return self.log.append_control_as_leader(
            producer_id, producer_epoch, committed, coordinator_epoch,
            leader_epoch=self.state.leader_epoch,
        )

    def under_min_isr(self) -> bool:
        return len(self.state.isr) < self.log.config.min_insync_replicas

    # -- followers (on the leader) -------------------------------------------------------
    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, now: int) -> bool:
        """A follower fetched from ``fetch_offset``: its log end offset. Returns whether
        the high watermark moved."""
        replica = self.follower_states.get(replica_id)
        if replica is None:
            return False
        leader_end = self.log.log_end_offset
        if fetch_offset >= leader_end:
            replica.last_caught_up_ms = max(replica.last_caught_up_ms, now)
        elif fetch_offset >= replica.last_fetch_leader_log_end_offset >= 0:
            replica.last_caught_up_ms = max(replica.last_caught_up_ms, replica.last_fetch_ms)
        replica.log_end_offset = fetch_offset
        replica.last_fetch_leader_log_end_offset = leader_end
        replica.last_fetch_ms = now
        return self.maybe_increment_high_watermark()

    def out_of_sync_replicas(self, now: int, max_lag_ms: int) -> list[int]:
        """Followers of the ISR not caught up for longer than ``max_lag_ms``
        (Kafka's ``Partition.getOutOfSyncReplicas``)."""
        out = []
        for r in self.state.isr:
            if r == self.broker_id:
                continue
            replica = self.follower_states.get(r)
            if replica is None or now - replica.last_caught_up_ms > max_lag_ms:
                out.append(r)
        return out

    def expand_candidate(self, replica_id: int) -> bool:
        """May ``replica_id`` join the ISR? Kafka's ``isFollowerInSync``: it reached the
        high watermark and the offset where this leadership began, which must be known
        (``leader_epoch_start_offset``, the one place that value is kept: the epoch
        cache's entry for it may be rewritten by a log start offset moving past it)."""
        state = self.state
        if replica_id in state.isr or replica_id not in state.replicas:
            return False
        replica = self.follower_states.get(replica_id)
        epoch_start = self.leader_epoch_start_offset
        if replica is None or epoch_start is None:
            return False
        return (replica.log_end_offset >= self.log.high_watermark
                and replica.log_end_offset >= epoch_start)

    def _appended(self, log: PartitionLog, nbytes: int) -> None:
        """The log's append listener (every append, leader or follower)."""
        self._unreplicated_bytes += nbytes
        if self._on_append is not None:
            self._on_append(nbytes)
        state = self.state
        if len(state.isr) == 1 and self.pending_isr is None and state.leader == self.broker_id:
            # The leader alone in its ISR: maybe_increment_high_watermark's answer without
            # its call (the log end offset, never back), on every append of one broker.
            end = log.log_end_offset
            if end > log.high_watermark:
                log.update_high_watermark(end)
                moved, self._unreplicated_bytes = self._unreplicated_bytes, 0
                if self._on_high_watermark is not None:
                    self._on_high_watermark(self, moved)
        else:
            self.maybe_increment_high_watermark()

    # -- high watermark ----------------------------------------------------------------
    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def maybe_increment_high_watermark(self) -> bool:
        """Move the high watermark to the smallest log end offset over the ISR (and any
        ISR change under way), never back; True when it moved. A follower whose position
        is not known yet holds it where it is."""
        state = self.state
        if state.leader != self.broker_id:
            return False
        new = self.log.log_end_offset
        isr = state.isr
        if len(isr) > 1 or self.pending_isr is not None:
            followers = self.follower_states
            for r in (isr if self.pending_isr is None else set(isr) | set(self.pending_isr)):
                if r != self.broker_id:
                    replica = followers.get(r)
                    if replica is None:
                        return False
                    if replica.log_end_offset < new:
                        new = replica.log_end_offset
        if new <= self.log.high_watermark:
            return False
        self.log.update_high_watermark(new)
        moved, self._unreplicated_bytes = self._unreplicated_bytes, 0
        if self._on_high_watermark is not None:
            self._on_high_watermark(self, moved)
        return True

    def high_watermark_lags_epoch_start(self) -> bool:
        """A new leader whose high watermark has not yet reached the offset where its
        leadership began: it learnt the old leader's high watermark late (followers hear
        it one fetch behind), and until the ISR's followers fetch from it, offsets below
        its log end offset may be committed without its knowing. Kafka answers a client's
        ListOffsets OFFSET_NOT_AVAILABLE meanwhile (KIP-207), so that no client takes the
        stale value for the end of the partition."""
        start = self.leader_epoch_start_offset
        return start is not None and start > self.log.high_watermark

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        """On a follower: the leader's high watermark, bounded by this log's end."""
        log = self.log
        log.update_high_watermark(max(log.log_start_offset,
                                      min(leader_high_watermark, log.log_end_offset)))

    def restore_high_watermark(self, checkpointed: int) -> None:
        """At start: the checkpointed value, never past the log end offset."""
        log = self.log
        log.update_high_watermark(
            max(log.log_start_offset, min(checkpointed, log.log_end_offset)))
        self.maybe_increment_high_watermark()

    # -- read ----------------------------------------------------------------------------
    def read(
        self, fetch_offset: int, max_bytes: int, min_one_message: bool, follower: bool = False,
        read_committed: bool = False,
    ) -> FetchDataInfo:
        """Records from ``fetch_offset``: below the high watermark for consumers (below
        the last stable offset for ``read_committed`` ones, with the aborted transactions
        the region may hold records of), up to the log end for a follower (Kafka's
        FetchIsolation)."""
        log = self.log
        if follower:
            limit = None
        elif read_committed:
            limit = log.last_stable_offset
        else:
            limit = log.high_watermark
        return log.read(fetch_offset, max_bytes, limit, min_one_message=min_one_message,
                        include_aborted_txns=read_committed)
