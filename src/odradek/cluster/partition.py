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
- *High watermark.* The smallest log end offset over the ISR
  (``Partition.maybeIncrementLeaderHW``). It never moves back on a leader. The log holds
  the value, as Kafka's ``UnifiedLog`` does; this class alone moves it, after every append
  (the log's append listener) and when a follower's position is learnt. With the leader
  alone in the ISR it follows the log end offset at once. The replica manager
  checkpoints it in ``replication-offset-checkpoint``.
- *Read.* Consumers read below the high watermark; followers (replica id >= 0) read up
  to the log end (Kafka's ``FetchIsolation``).

The state is swapped whole (:meth:`update_state`), never mutated in place, so a reader on
the event loop sees one consistent state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from odradek.storage.log import FetchDataInfo, LogAppendInfo, PartitionLog

__all__ = [
    "LeaderNotAvailableError",
    "NotEnoughReplicasError",
    "NotLeaderOrFollowerError",
    "Partition",
    "PartitionState",
]


class NotLeaderOrFollowerError(Exception):
    kafka_error = "NOT_LEADER_OR_FOLLOWER"


class LeaderNotAvailableError(Exception):
    kafka_error = "LEADER_NOT_AVAILABLE"


class NotEnoughReplicasError(Exception):
    kafka_error = "NOT_ENOUGH_REPLICAS"


class FencedLeaderEpochError(Exception):
    kafka_error = "FENCED_LEADER_EPOCH"


class UnknownLeaderEpochError(Exception):
    kafka_error = "UNKNOWN_LEADER_EPOCH"


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


class Partition:
    __slots__ = ("_on_high_watermark", "broker_id", "log", "partition", "state", "topic")

    def __init__(
        self,
        broker_id: int,
        log: PartitionLog,
        state: PartitionState,
        on_high_watermark: Callable[[Partition], None] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.topic = log.topic
        self.partition = log.partition
        self.log = log
        self.state = state
        self._on_high_watermark = on_high_watermark
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

    def update_state(self, state: PartitionState) -> None:
        """A new decision of the controller about this partition."""
        self.state = state
        self.maybe_increment_high_watermark()

    def check_leader(self, current_leader_epoch: int = -1) -> None:
        """Raise Kafka's error unless this broker leads at ``current_leader_epoch``."""
        state = self.state
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
            min_isr = self.log.config.min_insync_replicas
            in_sync = len(self.state.isr)
            if in_sync < min_isr:
                raise NotEnoughReplicasError(
                    f"ISR of {in_sync} is below min.insync.replicas={min_isr}"
                )
        return self.log.append_as_leader(records, leader_epoch=self.state.leader_epoch)

    def _appended(self, _log: PartitionLog, _nbytes: int) -> None:
        self.maybe_increment_high_watermark()

    # -- high watermark ----------------------------------------------------------------
    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def maybe_increment_high_watermark(self) -> bool:
        """Move the high watermark to the smallest log end offset over the ISR, never
        back; True when it moved. Only the leader's own log end offset is known until
        followers fetch, so a leader alone in its ISR follows its log end offset."""
        state = self.state
        if state.leader != self.broker_id:
            return False
        if len(state.isr) > 1:
            return False  # followers' positions come with replication
        new = self.log.log_end_offset
        if new <= self.log.high_watermark:
            return False
        self.log.high_watermark = new
        if self._on_high_watermark is not None:
            self._on_high_watermark(self)
        return True

    def restore_high_watermark(self, checkpointed: int) -> None:
        """At start: the checkpointed value, never past the log end offset."""
        log = self.log
        log.high_watermark = max(log.log_start_offset, min(checkpointed, log.log_end_offset))
        self.maybe_increment_high_watermark()

    # -- read ----------------------------------------------------------------------------
    def read(
        self, fetch_offset: int, max_bytes: int, min_one_message: bool, follower: bool = False
    ) -> FetchDataInfo:
        """Records from ``fetch_offset``: below the high watermark for consumers, up to the
        log end for a follower."""
        log = self.log
        limit = None if follower else log.high_watermark
        return log.read(fetch_offset, max_bytes, limit, min_one_message=min_one_message)
