"""Groups and offsets kept in ``__consumer_offsets`` (Kafka's ``GroupMetadataManager``).

How it works:

- **Cache.** The manager holds every group of the partitions this broker coordinates,
  keyed by group id, with its committed offsets; the coordinator
  (:mod:`odradek.coordinator.group_coordinator`) looks groups up here and drives their
  membership. A group belongs to partition ``partition_for(group)`` of the topic.
- **Loading.** :meth:`GroupMetadataManager.load_partition` replays a partition from its
  log start: the last value of each key wins and a tombstone deletes it (what compaction
  would keep). A group is rebuilt from its last metadata record and its offsets, and is
  brought to the state the record was written in (Stable when it has members, else
  Empty) by the moves :data:`~odradek.coordinator.group_state.LOAD_PATHS` lists, each
  checked by the transition table, never by setting the state: a move the table forbids
  raises :class:`~odradek.coordinator.group_state.IllegalStateTransitionError` and the
  partition is not loaded. While a partition loads it is *loading*, then *owned*
  (:class:`~odradek.coordinator.internal_topic_coordinator.CoordinatorPartitions`, which
  the coordinator reads); :meth:`unload_partition` drops its groups. The records of
  KIP-848 consumer groups (record types 3-8 and 16, which the classic decoder skips)
  are replayed in the same pass, in log order, by a
  :class:`~odradek.coordinator.consumer_group_replay.ConsumerGroupReplayer`; the
  coordinator restores each group it leaves (Kafka's ``onLoaded``).
- **Writes** (:meth:`store_group`, :meth:`store_offsets`, tombstones) append one batch to
  the group's partition and update the cache only when the append succeeded, so nothing is
  acknowledged before it is in the log. Append failures map to errors group clients
  understand (Kafka's ``appendForGroup`` callbacks).
- **Transactional offsets** (TxnOffsetCommit, Kafka's ``storeOffsets`` with a producer
  id): written as a transactional batch of the producer, kept in the group's
  ``pending_txn_offsets`` and made committed (or dropped) when the transaction's marker
  lands on the partition (:meth:`GroupMetadataManager.complete_txn`). Loading does the
  same with the markers found in the log; a transaction without its marker yet stays
  pending.
- **Retention** (Kafka's ``cleanupGroupMetadata``, KIP-211): every
  ``offsets.retention.check.interval.ms`` offsets past their deadline are tombstoned.
  An offset committed with its own retention time (OffsetCommit v2-4) expires then;
  otherwise the offsets of an Empty group expire ``offsets.retention.minutes`` after it
  became Empty, those of a group without group management that long after each commit,
  and those of a Stable consumer group that long after their commit once no member
  subscribes to their topic. An Empty group left without offsets becomes Dead and is
  forgotten.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from odradek.clock import now_ms
from odradek.cluster.loop_owned import loop_dict
from odradek.coordinator.consumer_group_replay import (
    ConsumerGroupReplayer,
    ConsumerGroupReplayError,
    ConsumerGroupSnapshot,
)
from odradek.coordinator.group_metadata import CommittedOffset, GroupMetadata, MemberMetadata
from odradek.coordinator.group_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    decode_key,
    decode_value,
    partition_for,
)
from odradek.coordinator.group_state import LOAD_PATHS, GroupState, IllegalStateTransitionError
from odradek.coordinator.internal_topic_coordinator import (
    APPEND_ERRORS,
    CoordinatorPartitions,
    append_error,
)
from odradek.coordinator.offsets_topic import OffsetsTopic
from odradek.protocol.errors import ErrorCode
from odradek.text import plural

__all__ = ["GroupMetadataManager", "OffsetConfig"]

log = logging.getLogger(__name__)

_Partition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class OffsetConfig:
    """The broker configs the manager reads (Kafka's ``OffsetConfig``; names in comments)."""

    retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes
    retention_check_interval_ms: int = 600000  # offsets.retention.check.interval.ms
    max_metadata_size: int = 4096  # offset.metadata.max.bytes


class GroupMetadataManager:
    def __init__(
        self,
        offsets_topic: OffsetsTopic,
        config: OffsetConfig | None = None,
        time_ms: Callable[[], int] = now_ms,
    ) -> None:
        self.topic = offsets_topic
        self.config = config or OffsetConfig()
        self.time_ms = time_ms
        self.groups: dict[str, GroupMetadata] = loop_dict()  # the loop's (docs: Threads)
        # the partitions loading and owned (shared with the coordinator)
        self.partitions = CoordinatorPartitions()
        # group id -> the log end offset after its newest record appended here: what a
        # read of the group (ConsumerGroupDescribe) waits for the ISR to hold, rather
        # than every other group's appends since (bounded: cleared beyond
        # MAX_TRACKED_APPENDS, a group not here then waits for the log end offset)
        self.appended_end: dict[str, int] = {}
        # group id -> the topics its consumer group (KIP-848) subscribes to, None when it
        # is no consumer group: the holder of a consumer group's offsets keeps those
        # (set by the coordinator, which has the consumer groups)
        self.consumer_subscriptions: Callable[[str], AbstractSet[str] | None] = (
            lambda _group_id: None)
        self._active = False
        self._expiry_timer: asyncio.TimerHandle | None = None

    # ================================================================ life cycle
    def startup(self) -> None:
        """Start the offset expiry timer (on the running event loop, if any)."""
        self._active = True
        self._schedule_expiry()

    def shutdown(self) -> None:
        self._active = False
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()

    # ================================================================ partitions
    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.topic.partition_count)

    def load_partition(
        self, partition: int, on_group_loaded: Callable[[GroupMetadata], None],
        on_consumer_group_loaded: Callable[[ConsumerGroupSnapshot], None] | None = None,
    ) -> None:
        """Replay ``partition`` into the cache and own it; ``on_group_loaded`` is called
        for each group found (the coordinator starts its members' session timers), and
        ``on_consumer_group_loaded`` for each consumer group (KIP-848) its records leave,
        after the classic groups (one of the same id holds its committed offsets)."""
        started = time.monotonic()
        try:
            groups, consumer_groups = self.partitions.load(
                partition, self.topic.leader_epoch(partition), self._replay)
        except (IllegalStateTransitionError, ConsumerGroupReplayError) as exc:
            exc.add_note(f"while loading __consumer_offsets-{partition}")
            raise
        for group in groups.values():
            self.groups[group.group_id] = group
            on_group_loaded(group)
        if on_consumer_group_loaded is not None:
            for snapshot in consumer_groups.values():
                on_consumer_group_loaded(snapshot)
        if groups:
            log.debug("loaded %s from __consumer_offsets-%d in %.0f ms",
                     plural(len(groups), "group"), partition,
                     (time.monotonic() - started) * 1000)

    def unload_partition(
        self, partition: int, on_group_unloaded: Callable[[GroupMetadata], None]
    ) -> None:
        """Stop owning ``partition`` and drop its groups, calling ``on_group_unloaded``
        for each after it left the cache."""
        self.partitions.unload(partition)
        for group_id in [g for g in self.appended_end if self.partition_for(g) == partition]:
            del self.appended_end[group_id]
        for group_id in [g for g in self.groups if self.partition_for(g) == partition]:
            on_group_unloaded(self.groups.pop(group_id))

    def _replay(
        self, partition: int
    ) -> tuple[dict[str, GroupMetadata], dict[str, ConsumerGroupSnapshot]]:
        offsets: dict[str, dict[_Partition, CommittedOffset]] = {}
        consumer_groups = ConsumerGroupReplayer()
        metadata: dict[str, GroupMetadataValue | None] = {}
        # producer id -> group -> the offsets its open transaction committed
        pending: dict[int, dict[str, dict[_Partition, CommittedOffset]]] = {}
        for entry in self.topic.replay_entries(partition):
            if entry.control is not None:
                done = pending.pop(entry.producer_id, {})
                if entry.control:
                    for group_id, txn_offsets in done.items():
                        offsets.setdefault(group_id, {}).update(txn_offsets)
                continue
            raw_key, raw_value = entry.key, entry.value
            try:
                key = decode_key(raw_key)
                if key is None:
                    # a consumer group's record, else a type no coordinator here reads
                    consumer_groups.replay_bytes(raw_key, raw_value)
                    continue
                if isinstance(key, OffsetCommitKey):
                    tp = (key.topic, key.partition)
                    if raw_value is None:
                        offsets.get(key.group, {}).pop(tp, None)
                        continue
                    committed = decode_value(key, raw_value)
                    assert isinstance(committed, OffsetCommitValue)
                    target = offsets if entry.producer_id < 0 else pending.setdefault(
                        entry.producer_id, {})
                    target.setdefault(key.group, {})[tp] = CommittedOffset(
                        committed.offset, committed.leader_epoch, committed.metadata,
                        committed.commit_timestamp, committed.expire_timestamp,
                    )
                else:
                    if raw_value is None:
                        metadata[key.group] = None
                        continue
                    group_value = decode_value(key, raw_value)
                    assert isinstance(group_value, GroupMetadataValue)
                    metadata[key.group] = group_value
            except RecordFormatError as exc:
                log.warning("skipping an unreadable record of __consumer_offsets-%d: %s",
                            partition, exc)
        open_txns: dict[str, dict[int, dict[_Partition, CommittedOffset]]] = {}
        for producer_id, by_group in pending.items():
            for group_id, txn_offsets in by_group.items():
                open_txns.setdefault(group_id, {})[producer_id] = txn_offsets
        groups: dict[str, GroupMetadata] = {}
        for group_id in set(offsets) | set(metadata) | set(open_txns):
            value = metadata.get(group_id)
            group_offsets = offsets.get(group_id, {})
            if value is None and not group_offsets and group_id not in open_txns:
                continue
            group = GroupMetadata(group_id, state_timestamp_ms=self.time_ms())
            if value is not None:
                group.generation_id = value.generation
                group.protocol_type = value.protocol_type or None
                group.protocol_name = value.protocol
                if value.current_state_timestamp >= 0:
                    group.state_timestamp_ms = value.current_state_timestamp
                for m in value.members:
                    member = MemberMetadata(
                        m.member_id, m.group_instance_id, m.client_id, m.client_host,
                        m.rebalance_timeout, m.session_timeout, value.protocol_type,
                        [(value.protocol or "", m.subscription)], m.assignment,
                    )
                    group.add(member)
                leader = value.leader
                # none with members: written to rebalance (metadata_record), which the
                # coordinator starts when it loads the group
                group.leader_id = leader if leader is None or leader in group.members else (
                    next(iter(group.members), None)
                )
                written_in = GroupState.STABLE if group.members else GroupState.EMPTY
                for state in LOAD_PATHS[written_in]:
                    group.transition_to(state, group.state_timestamp_ms)
            group.offsets = dict(group_offsets)
            group.pending_txn_offsets = open_txns.get(group_id, {})
            groups[group_id] = group
        return groups, consumer_groups.groups

    # ================================================================ groups
    def get_group(self, group_id: str) -> GroupMetadata | None:
        return self.groups.get(group_id)

    def add_group(self, group: GroupMetadata) -> GroupMetadata:
        """Cache ``group`` (a new group); returns it."""
        self.groups[group.group_id] = group
        return group

    def store_group(self, group: GroupMetadata) -> ErrorCode:
        """Write the group's metadata record (members with their assignments)."""
        return self._append(group.group_id, [self.metadata_record(group)], self.time_ms())

    @staticmethod
    def metadata_record(group: GroupMetadata, rebalancing: bool = False
                        ) -> tuple[bytes, bytes | None]:
        """The group's metadata record (key, value): members with their assignments.
        ``rebalancing``: the group has members and must rebalance before any of them
        syncs (a consumer group downgraded to it): written without a leader, which the
        load reads as such (a group written after a join phase always has one)."""
        value = GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=group.protocol_name,
            leader=None if rebalancing else group.leader_id,
            current_state_timestamp=group.state_timestamp_ms,
            members=tuple(
                MemberMetadataValue(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host,
                    m.rebalance_timeout_ms, m.session_timeout_ms,
                    m.metadata_for(group.protocol_name) if group.protocol_name else b"",
                    m.assignment,
                )
                for m in group.members.values()
            ),
        )
        return GroupMetadataKey(group.group_id).encode(), value.encode()

    @staticmethod
    def metadata_tombstone(group_id: str) -> tuple[bytes, bytes | None]:
        """The tombstone of a group's metadata record (its offsets stay)."""
        return GroupMetadataKey(group_id).encode(), None

    def delete_group(self, group: GroupMetadata) -> ErrorCode:
        """Tombstone the group's offsets and metadata; once written the group is Dead and
        leaves the cache (DeleteGroups)."""
        error = self._write_tombstones(group, list(group.offsets), with_group=True)
        if error == ErrorCode.none:
            group.transition_to(GroupState.DEAD, self.time_ms())
            del self.groups[group.group_id]
            log.info("deleted group %s", group.group_id)
        return error

    # ================================================================ offsets
    def store_offsets(
        self,
        group: GroupMetadata,
        offsets: Mapping[_Partition, tuple[int, int, str | None]],
        retention_ms: int = -1,
    ) -> dict[_Partition, ErrorCode]:
        """Write (offset, leader epoch, metadata) per partition for a commit the
        coordinator accepted, and cache what was written. ``retention_ms`` (-1 for the
        broker's retention) gives these offsets their own expire timestamp."""
        now = self.time_ms()
        expire = now + retention_ms if retention_ms >= 0 else -1
        results, records, accepted = self._offset_records(group.group_id, offsets, now, expire)
        if records:
            error = self._append(group.group_id, records, now)
            for tp, value in accepted.items():
                results[tp] = error
                if error == ErrorCode.none:
                    group.offsets[tp] = value
        return results

    def store_txn_offsets(
        self,
        group: GroupMetadata,
        producer_id: int,
        producer_epoch: int,
        offsets: Mapping[_Partition, tuple[int, int, str | None]],
        verified: Callable[[], bool] | None = None,
    ) -> dict[_Partition, ErrorCode]:
        """TxnOffsetCommit: write the offsets as a transactional batch of the producer and
        keep them pending until its transaction's marker (:meth:`complete_txn`).
        ``verified`` (KIP-890) says, right before the append, whether the transaction
        coordinator's verification still holds; if not, INVALID_TXN_STATE and nothing is
        written."""
        now = self.time_ms()
        results, records, accepted = self._offset_records(group.group_id, offsets, now, -1)
        if records:
            if verified is not None and not verified():
                results.update(dict.fromkeys(accepted, ErrorCode.invalid_txn_state))
                return results
            error = self._append(group.group_id, records, now, producer_id, producer_epoch)
            for tp in accepted:
                results[tp] = error
            if error == ErrorCode.none:
                group.pending_txn_offsets.setdefault(producer_id, {}).update(accepted)
        return results

    def _offset_records(
        self, group_id: str, offsets: Mapping[_Partition, tuple[int, int, str | None]],
        now: int, expire: int,
    ) -> tuple[dict[_Partition, ErrorCode], list[tuple[bytes, bytes | None]],
               dict[_Partition, CommittedOffset]]:
        """The offset records to write for (offset, leader epoch, metadata) per partition,
        committed at ``now`` and expiring at ``expire`` (-1: by the broker's retention):
        (OFFSET_METADATA_TOO_LARGE for the partitions refused, the records, the offsets
        they commit)."""
        refused: dict[_Partition, ErrorCode] = {}
        records: list[tuple[bytes, bytes | None]] = []
        accepted: dict[_Partition, CommittedOffset] = {}
        for tp, (offset, epoch, metadata) in offsets.items():
            text = metadata or ""
            if len(text.encode("utf-8")) > self.config.max_metadata_size:
                refused[tp] = ErrorCode.offset_metadata_too_large
                continue
            accepted[tp] = CommittedOffset(offset, epoch, text, now, expire)
            records.append((
                OffsetCommitKey(group_id, tp[0], tp[1]).encode(),
                OffsetCommitValue(offset, epoch, text, now, expire).encode(),
            ))
        return refused, records, accepted

    def complete_txn(self, partition: int, producer_id: int, commit: bool) -> int:
        """The marker of ``producer_id``'s transaction reached ``partition``: its pending
        offsets become committed (or are dropped on abort). Returns the groups touched."""
        touched = 0
        for group in self.groups.values():
            pending = group.pending_txn_offsets.pop(producer_id, None)
            if pending is None or self.partition_for(group.group_id) != partition:
                if pending is not None:
                    group.pending_txn_offsets[producer_id] = pending
                continue
            touched += 1
            if commit:
                group.offsets.update(pending)
        return touched

    def get_offsets(
        self, group_id: str, partitions: Iterable[_Partition] | None
    ) -> dict[_Partition, CommittedOffset | None]:
        """The committed offset (or None) per partition; ``partitions`` None asks for every
        partition with a committed offset, sorted. A Dead or unknown group has none."""
        group = self.groups.get(group_id)
        offsets = {} if group is None or group.is_in(GroupState.DEAD) else group.offsets
        if partitions is None:
            return dict(sorted(offsets.items()))
        return {tp: offsets.get(tp) for tp in partitions}

    def delete_offsets(self, group: GroupMetadata, partitions: Sequence[_Partition]) -> ErrorCode:
        """Tombstone the group's offsets of ``partitions`` (OffsetDelete)."""
        return self._write_tombstones(group, partitions)

    def _write_tombstones(self, group: GroupMetadata, partitions: Sequence[_Partition],
                          with_group: bool = False) -> ErrorCode:
        records: list[tuple[bytes, bytes | None]] = [
            (OffsetCommitKey(group.group_id, t, p).encode(), None) for t, p in partitions
        ]
        if with_group:
            records.append((GroupMetadataKey(group.group_id).encode(), None))
        if not records:
            return ErrorCode.none
        error = self._append(group.group_id, records, self.time_ms())
        if error == ErrorCode.none:
            for tp in partitions:
                group.offsets.pop(tp, None)
        return error

    # ================================================================ expiry
    def _schedule_expiry(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._expiry_timer = loop.call_later(
            self.config.retention_check_interval_ms / 1000, self._on_expiry_timer
        )

    def _on_expiry_timer(self) -> None:
        try:
            self.expire_offsets()
        except Exception:
            log.exception("offset expiry failed")
        if self._active:
            self._schedule_expiry()

    def expire_offsets(self, now_ms: int | None = None) -> int:
        """Write tombstones for expired offsets (Kafka's ``cleanupGroupMetadata``); an
        Empty group left without offsets becomes Dead. Returns offsets removed."""
        now = self.time_ms() if now_ms is None else now_ms
        retention = self.config.retention_ms
        removed = 0
        for group in list(self.groups.values()):
            if group.is_in(GroupState.DEAD):
                continue
            if not self.partitions.is_owned(self.partition_for(group.group_id)):
                continue
            expired: list[_Partition] = []
            if group.protocol_type is None or group.is_in(GroupState.EMPTY):
                # a consumer group's offsets of the topics it subscribes to never expire
                # (Kafka's OffsetMetadataManager.cleanupExpiredOffsets skips a topic the
                # group isSubscribedToTopic), whatever their own expire timestamp
                kept = (self.consumer_subscriptions(group.group_id)
                        if group.protocol_type is None else None) or ()
                for tp, committed in group.offsets.items():
                    if tp[0] in kept:
                        continue
                    if committed.expire_timestamp >= 0:
                        deadline = committed.expire_timestamp
                    elif group.protocol_type is not None and group.state_timestamp_ms >= 0:
                        deadline = group.state_timestamp_ms + retention
                    else:
                        deadline = committed.commit_timestamp + retention
                    if now >= deadline:
                        expired.append(tp)
            elif group.is_in(GroupState.STABLE):
                subscribed = group.subscribed_topics()
                if subscribed is not None:
                    expired = [
                        tp for tp, c in group.offsets.items()
                        if tp[0] not in subscribed and now >= c.commit_timestamp + retention
                    ]
            dead = (group.is_in(GroupState.EMPTY) and not group.members
                    and len(expired) == len(group.offsets))
            if not expired and not dead:
                continue
            if self._write_tombstones(group, expired, with_group=dead) != ErrorCode.none:
                continue
            removed += len(expired)
            if dead:
                group.transition_to(GroupState.DEAD, now)
                del self.groups[group.group_id]
                log.info("group %s expired: no members and no offsets left", group.group_id)
        return removed

    # ================================================================ appends
    def append_records(
        self, group_id: str, records: Sequence[tuple[bytes, bytes | None]]
    ) -> ErrorCode:
        """Append ``records`` (key, value or None) to ``group_id``'s partition as one
        batch: the records of one change of a consumer group (KIP-848). NONE, or the
        append's error as group clients understand it (NOT_COORDINATOR,
        COORDINATOR_NOT_AVAILABLE, ...; a batch too large is UNKNOWN_SERVER_ERROR, as
        Kafka's runtime answers it)."""
        return self._append(group_id, records, self.time_ms(), errors=APPEND_ERRORS)

    def _append(
        self, group_id: str, records: Sequence[tuple[bytes, bytes | None]], now: int,
        producer_id: int = -1, producer_epoch: int = -1,
        errors: Mapping[str, ErrorCode] | None = None,
    ) -> ErrorCode:
        partition = self.partition_for(group_id)
        if not self.partitions.is_owned(partition):
            return ErrorCode.not_coordinator
        try:
            if producer_id >= 0:
                info = self.topic.append(partition, records, now, producer_id, producer_epoch)
            else:
                info = self.topic.append(partition, records, now)
        except Exception as exc:
            return append_error(exc, _APPEND_ERRORS if errors is None else errors,
                                self.topic.name, f"group {group_id}")
        if len(self.appended_end) >= MAX_TRACKED_APPENDS and group_id not in self.appended_end:
            self.appended_end.clear()  # the groups forgotten wait for the log end offset
        if info is not None:  # (a test's stand-in log may say nothing)
            self.appended_end[group_id] = info.last_offset + 1
        return ErrorCode.none


#: groups whose newest append's end offset is kept (GroupMetadataManager.appended_end)
MAX_TRACKED_APPENDS = 65536


# Kafka's GroupMetadataManager maps append errors to what a group client understands:
# those of every coordinator, an offset commit too large for the log, and a
# TxnOffsetCommit's producer refused by the partition's producer state (a fenced epoch).
_APPEND_ERRORS = {
    **APPEND_ERRORS,
    "INVALID_PRODUCER_EPOCH": ErrorCode.invalid_producer_epoch,
    "INVALID_TXN_STATE": ErrorCode.invalid_txn_state,
    "MESSAGE_TOO_LARGE": ErrorCode.invalid_commit_offset_size,
    "RECORD_LIST_TOO_LARGE": ErrorCode.invalid_commit_offset_size,
    "INVALID_FETCH_SIZE": ErrorCode.invalid_commit_offset_size,
}
