"""The classic group coordinator: join, sync, heartbeat, leave (Kafka's ``GroupCoordinator``).

How it works:

- **Ownership.** A group belongs to partition ``partition_for(group)`` of
  ``__consumer_offsets``; this broker coordinates it while it leads that partition
  (:class:`~odradek.coordinator.offsets_topic.OffsetsTopic` says which). Groups of a
  partition are loaded by the
  :class:`~odradek.coordinator.group_metadata_manager.GroupMetadataManager`, which holds
  them and their offsets (:meth:`GroupCoordinator.on_elected`), and dropped when
  leadership moves (:meth:`on_resigned`: waiting requests get NOT_COORDINATOR).
  Requests for a partition this broker does not lead get NOT_COORDINATOR, while it loads
  COORDINATOR_LOAD_IN_PROGRESS, and when the topic cannot be created
  COORDINATOR_NOT_AVAILABLE. This bookkeeping is
  :class:`~odradek.coordinator.internal_topic_coordinator.InternalTopicCoordinator`'s,
  shared with the transaction coordinator.
- **Rebalances** follow :mod:`odradek.coordinator.group_state`. A JoinGroup parks on an
  asyncio future until the join phase completes (Kafka's ``DelayedJoin``): when every
  member has rejoined, or when the rebalance timeout (the largest of the members') fires
  and the members that did not rejoin are removed. A group's first rebalance waits
  ``group.initial.rebalance.delay.ms`` more, extended by each new member up to the
  rebalance timeout (``InitialDelayedJoin``). SyncGroup from followers parks until the
  leader's SyncGroup brings the assignment; members that do not sync within the rebalance
  timeout are removed (``DelayedSync``).
- **Liveness.** Each member has one timer on the event loop, pushed back by every
  heartbeat, join, sync and commit; when it fires after ``session.timeout.ms`` the member
  is removed (members waiting in JoinGroup or SyncGroup are kept alive). Nothing polls.
- **Membership ids** (KIP-394): a JoinGroup without a member id (v4+) gets
  MEMBER_ID_REQUIRED and a new id ``<client.id>-<uuid>``; the member is pending (across
  join rounds) until it joins with that id, as a new member, or its session timeout
  passes. Static members (KIP-345, ``group.instance.id``) rejoining with a new member id
  replace the old id; in a Stable group whose selected protocol would not change this
  needs no rebalance: the member gets the current generation back and its old
  assignment from SyncGroup. The group record with its new id is stored as Kafka's
  ``storeGroup`` does, with acks=-1: the member is answered once the ISR of the group's
  partition has it (:attr:`GroupCoordinator.wait_replicated`), and on a timeout
  (COORDINATOR_NOT_AVAILABLE) or a lost leadership (NOT_COORDINATOR) the old id is put
  back.
- **Transactional offsets.** TxnOffsetCommit stores offsets pending under the producer
  id; :meth:`GroupCoordinator.on_txn_marker`, called when a transaction marker lands on a
  ``__consumer_offsets`` partition, commits or drops them (KIP-98, KIP-447).
- **Offsets.** The coordinator checks who may commit (a member of the current
  generation, or anyone while the group is Empty and without group management) and which
  partitions OffsetDelete may touch; the manager writes, caches and expires them.
- **Consumer groups** (KIP-848, :mod:`odradek.coordinator.consumer_group`) are stored as
  Kafka 4's coordinator runtime stores them: every change (a heartbeat that changes
  anything, a member leaving, fenced by its timer, the group deleted or forgotten) is
  appended to the group's partition as ONE batch of its records
  (:func:`~odradek.coordinator.consumer_group_persistence.records_for_heartbeat`), and a
  heartbeat is answered once the ISR has them (acks=-1 within
  ``offsets.commit.timeout.ms``, as committed offsets; a timeout is
  COORDINATOR_NOT_AVAILABLE, the records staying in the log as Kafka's do). An append
  that fails puts the group back as the log holds it and answers the append's error
  (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE). What the log holds of each group is kept
  beside it, so a heartbeat that moves neither epoch nor the member set compares one
  member, and one that changes nothing writes nothing (but is answered, as Kafka's
  runtime defers it, only once the ISR holds what the partition has appended so far:
  its answer may carry what an earlier change wrote). Loading a partition replays the
  groups' records (:meth:`GroupMetadataManager.load_partition`) and restores each group
  with its derived state and timers (Kafka's ``onLoaded``): after a failover the members
  carry on at their epochs, mid-reconciliation included.
- **Regular-expression subscriptions** are compiled (when new to a group) and resolved
  by the child process of :mod:`odradek.coordinator.regex_worker`, as Kafka resolves
  them on its executor: a heartbeat starts a refresh when the group says one is due, and
  its result, filtered by what that member may describe, is applied and written as a
  change of its own (:meth:`ConsumerGroup.apply_resolved`); ``topics_version`` counts the
  topics created or changed (a metadata listener) for the group to know when.
- **Online migration** (``group.consumer.migration.policy``,
  :mod:`odradek.coordinator.consumer_group_migration`): a ConsumerGroupHeartbeat joining
  a classic group with members converts it (the classic group's record tombstoned, the
  consumer group's records written, one batch); JoinGroup, SyncGroup, Heartbeat,
  LeaveGroup and OffsetCommit of a consumer group's classic members are served by the
  consumer group; the last consumer-protocol member leaving or fenced converts it back
  (its records tombstoned, the classic group's record written) and starts a rebalance.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Any

from odradek.clock import now_ms
from odradek.coordinator.consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroupState,
    HeartbeatRequest,
    HeartbeatResult,
    TopicMetadata,
    validate_heartbeat,
)
from odradek.coordinator.consumer_group_migration import (
    ClassicJoin,
    ClassicJoinResult,
    MigrationPolicy,
    classic_group_from_consumer,
    classic_heartbeat,
    classic_join,
    classic_leave,
    classic_sync,
    consumer_group_from_classic,
    downgrade_refusal,
    upgrade_refusal,
)
from odradek.coordinator.consumer_group_persistence import (
    ConsumerGroupRestoreError,
    member_snapshot,
    records_for_heartbeat,
    records_for_resolution,
    restore,
    snapshot_of,
    unsupported,
)
from odradek.coordinator.consumer_group_replay import (
    ConsumerGroupRecord,
    ConsumerGroupSnapshot,
    MemberSnapshot,
    encode_record,
    records_for_change,
)
from odradek.coordinator.consumer_regex import resolution_topics
from odradek.coordinator.group_config import consumer_group_config_for
from odradek.coordinator.group_metadata import (
    CommittedOffset,
    GroupMetadata,
    MemberMetadata,
    new_member_id,
)
from odradek.coordinator.group_metadata_manager import GroupMetadataManager, OffsetConfig
from odradek.coordinator.group_protocol import CONSUMER_PROTOCOL_TYPE
from odradek.coordinator.group_state import GroupState
from odradek.coordinator.internal_topic_coordinator import InternalTopicCoordinator
from odradek.coordinator.offsets_topic import OffsetsTopic
from odradek.coordinator.regex_worker import RegexTimeout, RegexWorker
from odradek.protocol.errors import ErrorCode
from odradek.text import plural

__all__ = [
    "CoordinatorConfig",
    "GroupCoordinator",
    "GroupSummary",
    "JoinResult",
    "MemberSummary",
    "SyncResult",
]

log = logging.getLogger(__name__)

# Kafka's GroupCoordinator.NewMemberJoinTimeoutMs: a new member waiting in its first
# JoinGroup is kept alive at most this long.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1
CONSUMER_GROUP_TYPE = "consumer"  # ListGroups v5's group types
# A consumer group member fenced by its timer while its records could not be written is
# fenced again this much later (Kafka's coordinator timer retries after a back-off).
CONSUMER_WRITE_RETRY_BACKOFF_MS = 500

_Partition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """The broker configs the coordinator reads (Kafka's names in the comments)."""

    initial_rebalance_delay_ms: int = 0  # group.initial.rebalance.delay.ms
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1800000  # group.max.session.timeout.ms
    max_group_size: int = 2147483647  # group.max.size
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600000  # offsets.retention.check.interval.ms
    max_metadata_size: int = 4096  # offset.metadata.max.bytes
    consumer: ConsumerGroupConfig = field(  # group.consumer.* (KIP-848)
        default_factory=ConsumerGroupConfig)

    @classmethod
    def from_broker(cls, values: Mapping[str, Any]) -> CoordinatorConfig:
        return cls(
            initial_rebalance_delay_ms=int(values["group.initial.rebalance.delay.ms"]),
            min_session_timeout_ms=int(values["group.min.session.timeout.ms"]),
            max_session_timeout_ms=int(values["group.max.session.timeout.ms"]),
            max_group_size=int(values["group.max.size"]),
            offsets_retention_ms=int(values["offsets.retention.minutes"]) * 60_000,
            offsets_retention_check_interval_ms=int(
                values["offsets.retention.check.interval.ms"]
            ),
            max_metadata_size=int(values["offset.metadata.max.bytes"]),
            consumer=consumer_group_config(values),
        )

    @property
    def offset_config(self) -> OffsetConfig:
        """The part the :class:`GroupMetadataManager` reads."""
        return OffsetConfig(
            retention_ms=self.offsets_retention_ms,
            retention_check_interval_ms=self.offsets_retention_check_interval_ms,
            max_metadata_size=self.max_metadata_size,
        )


_ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def consumer_group_config(values: Mapping[str, Any]) -> ConsumerGroupConfig:
    """The ``group.consumer.*`` broker configs (Kafka's defaults for those not given)."""
    default = ConsumerGroupConfig()
    assignors = values.get("group.consumer.assignors")
    if isinstance(assignors, str):
        assignors = [a.strip() for a in assignors.split(",") if a.strip()]
    if assignors:
        # Kafka names them by short name or by class
        assignors = [_ASSIGNOR_CLASSES.get(a, a) for a in assignors]
    return ConsumerGroupConfig(
        session_timeout_ms=int(values.get("group.consumer.session.timeout.ms",
                                          default.session_timeout_ms)),
        heartbeat_interval_ms=int(values.get("group.consumer.heartbeat.interval.ms",
                                             default.heartbeat_interval_ms)),
        max_size=int(values.get("group.consumer.max.size", default.max_size)),
        assignors=tuple(assignors) if assignors else default.assignors,
        migration_policy=MigrationPolicy.parse(str(values.get(
            "group.consumer.migration.policy", default.migration_policy))).value,
    )


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str = UNKNOWN_MEMBER_ID
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    error: ErrorCode
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberSummary, ...] = field(default=())
    group_type: str = "classic"
    message: str | None = None


class GroupCoordinator(InternalTopicCoordinator):
    LOADED_NOUN = "group"

    def __init__(
        self,
        offsets_topic: OffsetsTopic,
        config: CoordinatorConfig | None = None,
        time_ms: Callable[[], int] = now_ms,
    ) -> None:
        self.config = config or CoordinatorConfig()
        self.time_ms = time_ms
        self.manager = GroupMetadataManager(offsets_topic, self.config.offset_config, time_ms)
        self.manager.consumer_subscriptions = self._consumer_subscriptions
        super().__init__(offsets_topic, self.manager.partitions)
        self._joins: dict[str, dict[str, asyncio.Future[JoinResult]]] = {}
        self._syncs: dict[str, dict[str, asyncio.Future[SyncResult]]] = {}
        self._heartbeats: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._join_timers: dict[str, asyncio.TimerHandle] = {}
        self._initial_join: dict[str, int] = {}  # group -> remaining ms of the initial delay
        self._sync_timers: dict[str, asyncio.TimerHandle] = {}
        # Set by the broker: waits until the ISR of a group's __consumer_offsets partition
        # holds everything appended to it so far (NONE, REQUEST_TIMED_OUT after
        # offsets.commit.timeout.ms, or NOT_COORDINATOR). None: nothing to wait for.
        self.wait_replicated: Callable[[str], Awaitable[ErrorCode]] | None = None
        # Set by the broker: a group's configs (KIP-848's group configs, e.g.
        # consumer.session.timeout.ms), read at each heartbeat. None: none.
        self.group_configs: Callable[[str], Mapping[str, str]] | None = None
        # KIP-848 consumer groups, beside the classic ones (whose GroupMetadata of the
        # same id holds their committed offsets), and the timer of each
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self._consumer_timers: dict[str, asyncio.TimerHandle] = {}
        # what __consumer_offsets holds of each consumer group (the records of its last
        # change written), which the next change is compared with
        self._consumer_records: dict[str, ConsumerGroupSnapshot] = {}
        # regular-expression subscriptions: the child process compiling and resolving
        # them, the refresh running per group, and a count of topic changes (the
        # version resolutions are made at)
        self.regex_worker = RegexWorker()  # validations
        # resolutions, in a child of their own: a compile never waits behind a slow one
        self.regex_resolver = RegexWorker()
        self._regex_refreshes: dict[str, asyncio.Task[None]] = {}
        self.topics_version = 0

    @property
    def groups(self) -> Mapping[str, GroupMetadata]:
        """The groups this broker coordinates now (the manager's cache)."""
        return self.manager.groups

    # ================================================================ life cycle
    def startup(self) -> None:
        """Load the partitions this broker leads (if the topic exists) and start the
        offset expiry timer. Call on the broker's event loop."""
        super().startup()
        self.manager.startup()

    async def stop_regex_workers(self) -> None:
        """Kill and reap the regex children on the loop (the broker's stop, before
        :meth:`shutdown`, which only kills what is left)."""
        await asyncio.gather(self.regex_worker.stop(), self.regex_resolver.stop())

    def shutdown(self) -> None:
        for group_id in list(self.consumer_groups):
            self._drop_consumer_group(group_id)
        for task in self._regex_refreshes.values():
            task.cancel()
        self.regex_worker.close_now()
        self.regex_resolver.close_now()
        self.manager.shutdown()
        super().shutdown()

    def cached_count(self) -> int:
        return len(self.manager.groups)

    def on_elected(self, partition: int) -> None:
        """This broker became the leader of ``partition``: load its groups and start
        their members' session timers."""
        self.manager.load_partition(partition, self._on_group_loaded,
                                    self._on_consumer_group_loaded)

    def _on_group_loaded(self, group: GroupMetadata) -> None:
        for member in group.members.values():
            self._schedule_heartbeat(group, member)
        if group.members and group.leader_id is None:
            # written by a downgrade whose rebalance had not completed: its members'
            # assignments are the consumer group's targets, some maybe still owned by
            # another member, so none is synced before the rebalance
            group.leader_id = next(iter(group.members))
            self._prepare_rebalance(group, "loaded before the rebalance of its downgrade "
                                           "from a consumer group completed")

    def on_resigned(self, partition: int) -> None:
        """Leadership of ``partition`` moved away: forget its groups, answer waiting
        requests NOT_COORDINATOR. Consumer groups are unloaded too: the new coordinator
        loads them from their records and their members carry on there."""
        self.manager.unload_partition(partition, self._on_group_unloaded)
        for group_id in [g for g in self.consumer_groups
                         if self.partition_for(g) == partition]:
            self._drop_consumer_group(group_id)

    def _on_group_unloaded(self, group: GroupMetadata) -> None:
        group_id = group.group_id
        for member_id in list(group.members):
            self._cancel_heartbeat(group_id, member_id)
        for member_id in list(group.pending_members):
            self._cancel_heartbeat(group_id, member_id)
        self._cancel_timer(self._join_timers, group_id)
        self._cancel_timer(self._sync_timers, group_id)
        self._initial_join.pop(group_id, None)
        for join in self._joins.pop(group_id, {}).values():
            if not join.done():
                join.set_result(JoinResult(ErrorCode.not_coordinator))
        for sync in self._syncs.pop(group_id, {}).values():
            if not sync.done():
                sync.set_result(SyncResult(ErrorCode.not_coordinator))

    # ================================================================ ownership checks
    def partition_for(self, group_id: str) -> int:
        return self.manager.partition_for(group_id)

    def _check(self, group_id: str | None, *, allow_empty_id: bool = False) -> ErrorCode:
        if group_id is None or (not group_id and not allow_empty_id):
            return ErrorCode.invalid_group_id
        return self.check_coordinator(group_id)

    # ================================================================ JoinGroup
    async def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        require_known_member_id: bool,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        topics: Mapping[str, TopicMetadata] | None = None,
    ) -> JoinResult:
        """JoinGroup. ``topics``: the cluster's topics by name, for a classic member
        joining a consumer group (online migration), whose subscription is resolved."""
        error = self._check(group_id)
        if error != ErrorCode.none:
            return JoinResult(error, member_id)
        if not (self.config.min_session_timeout_ms <= session_timeout_ms
                <= self.config.max_session_timeout_ms):
            return JoinResult(ErrorCode.invalid_session_timeout, member_id)
        consumer = self._live_consumer_group(group_id)
        if consumer is not None:
            # a consumer group with members: the classic member joins it (online
            # migration, coordinator/consumer_group_migration.py)
            return await self._classic_join_consumer_group(consumer, ClassicJoin(
                member_id, group_instance_id, require_known_member_id, client_id,
                client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type,
                tuple(protocols)), topics or {})
        protocol_list = list(protocols)
        group = self.manager.get_group(group_id)
        if group is None:
            if member_id != UNKNOWN_MEMBER_ID:
                return JoinResult(ErrorCode.unknown_member_id, member_id)
            group = self.manager.add_group(
                GroupMetadata(group_id, state_timestamp_ms=self.time_ms())
            )
        if group.is_in(GroupState.DEAD):
            return JoinResult(ErrorCode.coordinator_not_available, member_id)
        if not group.supports_protocols(protocol_type, protocol_list):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        spec = _JoinSpec(group_instance_id, client_id, client_host, rebalance_timeout_ms,
                         session_timeout_ms, protocol_type, protocol_list)
        if member_id == UNKNOWN_MEMBER_ID:
            return await self._new_member_join(group, spec, require_known_member_id)
        return await self._current_member_join(group, member_id, spec)

    def _group_full(self, group: GroupMetadata) -> bool:
        return len(group.members) + len(group.pending_members) >= self.config.max_group_size

    async def _new_member_join(
        self, group: GroupMetadata, spec: _JoinSpec, require_known_member_id: bool
    ) -> JoinResult:
        new_id = new_member_id(spec.client_id)
        if spec.instance_id is not None:
            old_id = group.static_member_id(spec.instance_id)
            if old_id is not None:
                return await self._replace_static_member(group, old_id, new_id, spec)
            if self._group_full(group):
                return JoinResult(ErrorCode.group_max_size_reached)
            return await self._add_member_and_rebalance(group, new_id, spec)
        if self._group_full(group):
            return JoinResult(ErrorCode.group_max_size_reached)
        if require_known_member_id:
            group.pending_members.add(new_id)
            self._schedule_timer_for(group.group_id, new_id, spec.session_timeout_ms)
            return JoinResult(ErrorCode.member_id_required, new_id)
        return await self._add_member_and_rebalance(group, new_id, spec)

    async def _current_member_join(
        self, group: GroupMetadata, member_id: str, spec: _JoinSpec
    ) -> JoinResult:
        if member_id in group.pending_members:
            return await self._add_member_and_rebalance(group, member_id, spec)
        error = self._validate_member(group, member_id, spec.instance_id)
        if error != ErrorCode.none:
            return JoinResult(error, member_id)
        member = group.members[member_id]
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return await self._update_member_and_rebalance(group, member, spec)
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            if member.matches(spec.protocols):
                return self._current_join_state(group, member_id)
            return await self._update_member_and_rebalance(group, member, spec)
        if group.is_in(GroupState.STABLE):
            if group.is_leader(member_id) or not member.matches(spec.protocols):
                return await self._update_member_and_rebalance(group, member, spec)
            self._schedule_heartbeat(group, member)
            return self._current_join_state(group, member_id, include_members=False)
        return JoinResult(ErrorCode.unknown_member_id, member_id)

    def _current_join_state(
        self, group: GroupMetadata, member_id: str, include_members: bool = True
    ) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if include_members and group.is_leader(member_id) and group.protocol_name is not None:
            members = self._member_list(group)
        return JoinResult(
            ErrorCode.none, member_id, group.generation_id, group.protocol_type,
            group.protocol_name, group.leader_id or "", members,
        )

    @staticmethod
    def _member_list(group: GroupMetadata) -> tuple[tuple[str, str | None, bytes], ...]:
        protocol = group.protocol_name or ""
        return tuple(
            (m.member_id, m.group_instance_id, m.metadata_for(protocol))
            for m in group.members.values()
        )

    def _validate_member(
        self, group: GroupMetadata, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        """Kafka's ``validateCurrentMember``: fenced static member, or unknown member."""
        if instance_id is not None:
            known = group.static_member_id(instance_id)
            if known is not None and known != member_id:
                return ErrorCode.fenced_instance_id
        if not group.has_member(member_id):
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    def _join_future(self, group_id: str, member_id: str) -> asyncio.Future[JoinResult]:
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        previous = self._joins.setdefault(group_id, {}).get(member_id)
        if previous is not None and not previous.done():
            # a retried JoinGroup replaces the older one, which Kafka answers the same way
            previous.set_result(JoinResult(ErrorCode.unknown_member_id, member_id))
        self._joins[group_id][member_id] = future
        return future

    async def _add_member_and_rebalance(
        self, group: GroupMetadata, member_id: str, spec: _JoinSpec
    ) -> JoinResult:
        member = MemberMetadata(
            member_id, spec.instance_id, spec.client_id, spec.client_host,
            spec.rebalance_timeout_ms, spec.session_timeout_ms, spec.protocol_type,
            spec.protocols, awaiting_join=True, is_new=True,
            last_heartbeat_ms=self.time_ms(),
        )
        group.add(member)
        group.new_member_added = True
        return await self._await_join(group, member, f"member {member_id} joined")

    async def _update_member_and_rebalance(
        self, group: GroupMetadata, member: MemberMetadata, spec: _JoinSpec
    ) -> JoinResult:
        _update_member(member, spec)
        member.awaiting_join = True
        return await self._await_join(group, member, f"member {member.member_id} rejoined")

    async def _await_join(
        self, group: GroupMetadata, member: MemberMetadata, reason: str
    ) -> JoinResult:
        """Park the member's JoinGroup until the join phase completes (its session timer
        running), after starting a rebalance for ``reason`` or completing the join."""
        future = self._join_future(group.group_id, member.member_id)
        self._schedule_heartbeat(group, member)
        self._maybe_prepare_rebalance(group, reason)
        self._try_complete_join(group)
        return await future

    async def _replace_static_member(
        self, group: GroupMetadata, old_id: str, new_id: str, spec: _JoinSpec
    ) -> JoinResult:
        """A static member came back with a new member id (KIP-345)."""
        assert spec.instance_id is not None
        current_leader = group.leader_id or ""
        self._cancel_heartbeat(group.group_id, old_id)
        old_join = self._joins.get(group.group_id, {}).pop(old_id, None)
        if old_join is not None and not old_join.done():
            old_join.set_result(JoinResult(ErrorCode.fenced_instance_id, old_id))
        old_sync = self._syncs.get(group.group_id, {}).pop(old_id, None)
        if old_sync is not None and not old_sync.done():
            old_sync.set_result(SyncResult(ErrorCode.fenced_instance_id))
        member = group.replace_static_member(spec.instance_id, old_id, new_id)
        old_protocols = member.protocols
        _update_member(member, spec)
        member.awaiting_sync = False
        if group.is_in(GroupState.STABLE) and group.select_protocol() == group.protocol_name:
            error = self.manager.store_group(group)
            if error == ErrorCode.none and self.wait_replicated is not None:
                self._schedule_heartbeat(group, member)
                error = await self.wait_replicated(group.group_id)
                if error == ErrorCode.request_timed_out:  # as the SyncGroup handler maps it
                    error = ErrorCode.coordinator_not_available
                if error != ErrorCode.none and (
                    self.manager.get_group(group.group_id) is not group
                    or group.static_member_id(spec.instance_id) != new_id
                ):
                    return JoinResult(error, UNKNOWN_MEMBER_ID)  # moved on meanwhile
                self._cancel_heartbeat(group.group_id, new_id)
            if error != ErrorCode.none:
                # put the old member back as it was
                member.protocols = old_protocols
                group.replace_static_member(spec.instance_id, new_id, old_id)
                self._schedule_heartbeat(group, group.members[old_id])
                return JoinResult(error, UNKNOWN_MEMBER_ID)
            self._schedule_heartbeat(group, member)
            log.info("static member %s of group %s rejoined as %s without a rebalance",
                     spec.instance_id, group.group_id, new_id)
            # The old leader id is returned on purpose: the member then syncs as a
            # follower and gets its previous assignment back, without a new assignment
            # that a Stable group would not distribute.
            return JoinResult(
                ErrorCode.none, new_id, group.generation_id, group.protocol_type,
                group.protocol_name, current_leader,
            )
        member.awaiting_join = True
        return await self._await_join(
            group, member, f"static member {spec.instance_id} rejoined")

    # ---------------------------------------------------------------- rebalance phases
    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE,
                           GroupState.EMPTY):
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        self._cancel_timer(self._sync_timers, group.group_id)
        loop = asyncio.get_running_loop()
        rebalance_timeout = group.max_rebalance_timeout_ms()
        if group.is_in(GroupState.EMPTY):
            delay = self.config.initial_rebalance_delay_ms
            self._initial_join[group.group_id] = max(rebalance_timeout - delay, 0)
            group.new_member_added = False
        else:
            delay = rebalance_timeout
            self._initial_join.pop(group.group_id, None)
        group.transition_to(GroupState.PREPARING_REBALANCE, self.time_ms())
        log.info("preparing to rebalance group %s (generation %d): %s", group.group_id,
                 group.generation_id, reason)
        self._cancel_timer(self._join_timers, group.group_id)
        self._join_timers[group.group_id] = loop.call_later(
            delay / 1000, self._on_join_timer, group.group_id, group.generation_id
        )

    def _on_join_timer(self, group_id: str, generation: int) -> None:
        self._join_timers.pop(group_id, None)
        group = self.manager.get_group(group_id)
        if (group is None or not group.is_in(GroupState.PREPARING_REBALANCE)
                or group.generation_id != generation):
            return
        remaining = self._initial_join.get(group_id)
        if remaining is not None and group.new_member_added and remaining > 0:
            # InitialDelayedJoin: a new member arrived during the delay; wait once more
            delay = min(self.config.initial_rebalance_delay_ms, remaining)
            self._initial_join[group_id] = max(remaining - delay, 0)
            group.new_member_added = False
            self._join_timers[group_id] = asyncio.get_running_loop().call_later(
                delay / 1000, self._on_join_timer, group_id, generation
            )
            return
        self._complete_join(group)

    def _try_complete_join(self, group: GroupMetadata) -> None:
        """DelayedJoin.tryComplete: finish as soon as every member has rejoined (the
        initial delayed join only finishes on its timer)."""
        if (group.is_in(GroupState.PREPARING_REBALANCE)
                and group.group_id not in self._initial_join and group.all_members_joined()):
            self._cancel_timer(self._join_timers, group.group_id)
            self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        self._initial_join.pop(group.group_id, None)
        self._cancel_timer(self._join_timers, group.group_id)
        if group.is_in(GroupState.DEAD):
            return
        for member in group.not_yet_rejoined():
            log.info("removing member %s of group %s: it did not rejoin in time",
                     member.member_id, group.group_id)
            self._remove_member(group, member.member_id)
        # Pending members (KIP-394) stay pending, as in Kafka: each joins with its id or
        # its session timeout removes it (_on_session_timeout).
        now = self.time_ms()
        group.init_next_generation(now)
        if group.is_in(GroupState.EMPTY):
            log.info("group %s is empty at generation %d", group.group_id, group.generation_id)
            self.manager.store_group(group)
            return
        log.info("group %s: generation %d with %s, protocol %s, leader %s",
                 group.group_id, group.generation_id, plural(len(group.members), "member"),
                 group.protocol_name, group.leader_id)
        joins = self._joins.get(group.group_id, {})
        members = self._member_list(group)
        for member in group.members.values():
            member.awaiting_join = False
            member.is_new = False
            member.assignment = b""
            result = JoinResult(
                ErrorCode.none, member.member_id, group.generation_id, group.protocol_type,
                group.protocol_name, group.leader_id or "",
                members if group.is_leader(member.member_id) else (),
            )
            future = joins.pop(member.member_id, None)
            if future is not None and not future.done():
                future.set_result(result)
            self._schedule_heartbeat(group, member)
        self._sync_timers[group.group_id] = asyncio.get_running_loop().call_later(
            group.max_rebalance_timeout_ms() / 1000, self._on_sync_timer, group.group_id,
            group.generation_id,
        )

    def _on_sync_timer(self, group_id: str, generation: int) -> None:
        """DelayedSync expired: members that never sent SyncGroup are removed."""
        self._sync_timers.pop(group_id, None)
        group = self.manager.get_group(group_id)
        if group is None or group.generation_id != generation:
            return
        if not group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        laggards = list(group.pending_sync_members)
        if not laggards:
            return
        for member_id in laggards:
            log.info("removing member %s of group %s: no SyncGroup within the rebalance "
                     "timeout", member_id, group_id)
            self._remove_member(group, member_id)
        self._maybe_prepare_rebalance(group, "members failed to sync")

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata,
                                              error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            member.awaiting_sync = False
        for future in self._syncs.pop(group.group_id, {}).values():
            if not future.done():
                future.set_result(SyncResult(error))

    # ================================================================ SyncGroup
    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
    ) -> SyncResult:
        error = self._check(group_id)
        if error != ErrorCode.none:
            return SyncResult(error)
        consumer = self.consumer_groups.get(group_id)
        if consumer is not None:
            synced = classic_sync(consumer, member_id, group_instance_id, generation_id,
                                  protocol_type, protocol_name, self.time_ms())
            self._schedule_consumer_expiry(consumer)
            return SyncResult(synced.error, synced.protocol_type, synced.protocol_name,
                              synced.assignment)
        group = self.manager.get_group(group_id)
        if group is None:
            return SyncResult(ErrorCode.unknown_member_id)
        if group.is_in(GroupState.DEAD):
            return SyncResult(ErrorCode.coordinator_not_available)
        error = self._validate_member(group, member_id, group_instance_id)
        if error != ErrorCode.none:
            return SyncResult(error)
        if generation_id != group.generation_id:
            return SyncResult(ErrorCode.illegal_generation)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        member = group.members[member_id]
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return SyncResult(ErrorCode.rebalance_in_progress)
        if group.is_in(GroupState.STABLE):
            group.pending_sync_members.discard(member_id)
            self._schedule_heartbeat(group, member)
            return SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name,
                              member.assignment)
        if not group.is_in(GroupState.COMPLETING_REBALANCE):
            return SyncResult(ErrorCode.unknown_member_id)
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        previous = self._syncs.setdefault(group_id, {}).get(member_id)
        if previous is not None and not previous.done():
            previous.set_result(SyncResult(ErrorCode.rebalance_in_progress))
        self._syncs[group_id][member_id] = future
        member.awaiting_sync = True
        group.pending_sync_members.discard(member_id)
        self._schedule_heartbeat(group, member)
        if group.is_leader(member_id):
            self._complete_sync(group, assignments)
        return await future

    def _complete_sync(self, group: GroupMetadata, assignments: Mapping[str, bytes]) -> None:
        full = {m: assignments.get(m, b"") for m in group.members}
        for member_id, assignment in full.items():
            group.members[member_id].assignment = assignment
        error = self.manager.store_group(group)
        if error != ErrorCode.none:
            self._reset_and_propagate_assignment_error(group, error)
            self._maybe_prepare_rebalance(group, f"storing the assignment failed: {error.name}")
            return
        group.transition_to(GroupState.STABLE, self.time_ms())
        for member_id, future in self._syncs.pop(group.group_id, {}).items():
            member = group.members.get(member_id)
            if member is not None:
                member.awaiting_sync = False
            if not future.done():
                future.set_result(SyncResult(
                    ErrorCode.none, group.protocol_type, group.protocol_name,
                    member.assignment if member is not None else b"",
                ))
        log.info("group %s is stable at generation %d", group.group_id, group.generation_id)

    # ================================================================ Heartbeat
    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        error = self._check(group_id)
        if error != ErrorCode.none:
            return error
        consumer = self.consumer_groups.get(group_id)
        if consumer is not None:
            error, _ = classic_heartbeat(consumer, member_id, group_instance_id,
                                         generation_id, self.time_ms())
            self._schedule_consumer_expiry(consumer)
            return error
        group = self.manager.get_group(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if group.is_in(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        error = self._validate_member(group, member_id, group_instance_id)
        if error != ErrorCode.none:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        self._schedule_heartbeat(group, group.members[member_id])
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # ================================================================ LeaveGroup
    def leave_group(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """(group error, one error per (member id, instance id) asked to leave)."""
        error = self._check(group_id)
        if error != ErrorCode.none:
            return error, [error] * len(members)
        if group_id in self.consumer_groups:
            return self._classic_leave_consumer_group(self.consumer_groups[group_id],
                                                      members)
        group = self.manager.get_group(group_id)
        if group is None:
            return ErrorCode.none, [ErrorCode.unknown_member_id] * len(members)
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available, [
                ErrorCode.coordinator_not_available] * len(members)
        results = []
        for member_id, instance_id in members:
            if instance_id is not None:
                known = group.static_member_id(instance_id)
                if known is None:
                    results.append(ErrorCode.unknown_member_id)
                    continue
                if member_id != UNKNOWN_MEMBER_ID and member_id != known:
                    results.append(ErrorCode.fenced_instance_id)
                    continue
                member_id = known
            elif member_id in group.pending_members:
                group.pending_members.discard(member_id)
                self._cancel_heartbeat(group_id, member_id)
                self._try_complete_join(group)
                results.append(ErrorCode.none)
                continue
            if not group.has_member(member_id):
                results.append(ErrorCode.unknown_member_id)
                continue
            log.info("member %s leaves group %s", member_id, group_id)
            self._remove_member_and_update_group(group, member_id, "member left the group")
            results.append(ErrorCode.none)
        return ErrorCode.none, results

    def _remove_member(self, group: GroupMetadata, member_id: str) -> None:
        join = self._joins.get(group.group_id, {}).pop(member_id, None)
        if join is not None and not join.done():
            join.set_result(JoinResult(ErrorCode.unknown_member_id, member_id))
        sync = self._syncs.get(group.group_id, {}).pop(member_id, None)
        if sync is not None and not sync.done():
            sync.set_result(SyncResult(ErrorCode.unknown_member_id))
        self._cancel_heartbeat(group.group_id, member_id)
        group.remove(member_id)

    def _remove_member_and_update_group(
        self, group: GroupMetadata, member_id: str, reason: str
    ) -> None:
        self._remove_member(group, member_id)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)
        elif group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"{reason} ({member_id})")

    # ---------------------------------------------------------------- session timers
    def _schedule_heartbeat(self, group: GroupMetadata, member: MemberMetadata) -> None:
        member.last_heartbeat_ms = self.time_ms()
        self._schedule_timer_for(group.group_id, member.member_id, member.session_timeout_ms)

    def _schedule_timer_for(self, group_id: str, member_id: str, timeout_ms: int) -> None:
        key = (group_id, member_id)
        old = self._heartbeats.pop(key, None)
        if old is not None:
            old.cancel()
        self._heartbeats[key] = asyncio.get_running_loop().call_later(
            timeout_ms / 1000, self._on_session_timeout, group_id, member_id
        )

    def _cancel_heartbeat(self, group_id: str, member_id: str) -> None:
        old = self._heartbeats.pop((group_id, member_id), None)
        if old is not None:
            old.cancel()

    def _on_session_timeout(self, group_id: str, member_id: str) -> None:
        self._heartbeats.pop((group_id, member_id), None)
        group = self.manager.get_group(group_id)
        if group is None:
            return
        if member_id in group.pending_members:
            log.info("pending member %s of group %s never joined", member_id, group_id)
            group.pending_members.discard(member_id)
            self._try_complete_join(group)
            return
        member = group.members.get(member_id)
        if member is None:
            return
        now = self.time_ms()
        keep_alive = (
            (not member.is_new or member.last_heartbeat_ms + NEW_MEMBER_JOIN_TIMEOUT_MS > now)
            if member.awaiting_join else member.awaiting_sync
        )
        if keep_alive:
            self._schedule_timer_for(group_id, member_id, member.session_timeout_ms)
            return
        log.info("member %s of group %s missed its session timeout (%d ms)", member_id,
                 group_id, member.session_timeout_ms)
        self._remove_member_and_update_group(group, member_id, "session timeout")

    @staticmethod
    def _cancel_timer(timers: dict[str, asyncio.TimerHandle], group_id: str) -> None:
        handle = timers.pop(group_id, None)
        if handle is not None:
            handle.cancel()


    # ================================================================ consumer groups
    async def consumer_group_heartbeat(
        self, group_id: str, request: HeartbeatRequest, api_version: int,
        topics: Mapping[str, TopicMetadata],
        authorize: Callable[[AbstractSet[str]], AbstractSet[str]] | None = None,
    ) -> HeartbeatResult:
        """ConsumerGroupHeartbeat (KIP-848; Kafka's ``consumerGroupHeartbeat``). What it
        changes is appended to the group's partition and replicated before the answer
        (module docstring: Consumer groups). ``authorize``: the topics among those given
        that the member may describe (None: all), for its expression's resolution."""
        config = self.config.consumer
        invalid = validate_heartbeat(request, group_id, api_version, config.assignors)
        if invalid is not None:
            return HeartbeatResult(*invalid)
        error = self.check_coordinator(group_id)
        if error != ErrorCode.none:
            return HeartbeatResult(error)
        regex = request.subscribed_topic_regex
        if regex and not self._regex_subscribed(group_id, regex):
            # new to the group: compiled (in the worker) as Kafka does then
            message = await self.regex_worker.validate(regex)
            if message is not None:
                return HeartbeatResult(ErrorCode.invalid_regular_expression, message)
            error = self.check_coordinator(group_id)  # (it may have moved meanwhile)
            if error != ErrorCode.none:
                return HeartbeatResult(error)
        if not request.member_id and request.member_epoch == 0:  # v0: the coordinator names it
            request = replace(request, member_id=str(uuid.uuid4()))
        group = self.consumer_groups.get(group_id)
        created = group is None
        if group is None:
            classic = self.manager.get_group(group_id)
            if classic is not None and not classic.is_in(GroupState.EMPTY, GroupState.DEAD):
                refusal = ("the member does not join (epoch "
                           f"{request.member_epoch})" if request.member_epoch != 0
                           else upgrade_refusal(classic, self._migration_policy(),
                                                config.max_size))
                if refusal is None:  # online upgrade (consumer_group_migration.py)
                    return await self._upgrade_and_heartbeat(classic, request, topics)
                log.info("classic group %s not upgraded to a consumer group: %s", group_id,
                         refusal)
                return HeartbeatResult(ErrorCode.group_id_not_found,
                                       f"Group {group_id} is not a consumer group.")
            if request.member_epoch != 0:
                return HeartbeatResult(ErrorCode.group_id_not_found,
                                       f"Group {group_id} not found.")
            group = ConsumerGroup(group_id, config)
            self.consumer_groups[group_id] = group
        elif (request.member_epoch == LEAVE_GROUP_MEMBER_EPOCH
                and request.member_id in group.members
                and (request.instance_id is None or group.static_members.get(
                    request.instance_id) == request.member_id)
                and downgrade_refusal(group, {request.member_id}, self._migration_policy(),
                                      self.config.max_group_size) is None):
            # the last consumer-protocol member leaves classic ones: online downgrade
            downgraded = self._downgrade(group, {request.member_id}, None,
                                         f"member {request.member_id} left")
            if downgraded is not None:
                if downgraded != ErrorCode.none:
                    return HeartbeatResult(downgraded, "The coordinator could not store "
                                                       f"the group: {downgraded.name}.")
                return await self._replicated_answer(group_id, HeartbeatResult(
                    ErrorCode.none, None, request.member_id, LEAVE_GROUP_MEMBER_EPOCH))
        group.config = self._consumer_config(group_id)  # its group configs, as they are now
        before = self._consumer_records.get(group_id)
        member = group.members.get(request.member_id)
        timers = None if member is None else (member.session_deadline_ms,
                                              member.revocation_deadline_ms)
        epochs = (group.group_epoch, len(group.members))
        result = group.heartbeat(request, topics, self.time_ms())
        if created and result.error != ErrorCode.none:
            self._drop_consumer_group(group_id)  # not created
            return result
        forget = self._forgettable(group)
        # An empty classic group that wrote its record gives way: its record is
        # tombstoned in the same batch (Kafka's maybeDeleteEmptyClassicGroup); its
        # offsets stay, held for the consumer group.
        replaced = self.manager.get_group(group_id) if created and not forget else None
        if replaced is not None and replaced.generation_id == 0 and (
                replaced.protocol_type is None):
            replaced = None  # only offsets, never a record of its own
        error, _ = self._write_consumer_group(
            group, before, None if forget else group, request.member_id,
            [] if replaced is None else [self.manager.metadata_tombstone(group_id)])
        if error != ErrorCode.none:
            self._revert_consumer_group(group, before, {request.member_id: timers})
            return HeartbeatResult(error, f"The coordinator could not store the group: "
                                          f"{error.name}.")
        if replaced is not None:
            self._retire_classic_group(replaced)
        if created and not forget:
            log.info("consumer group %s created%s", group_id,
                     "" if replaced is None else " (the empty classic group's record "
                                                 "tombstoned)")
        if (group.group_epoch, len(group.members)) != epochs:
            log.info("consumer group %s: epoch %d, %s (%s %s at epoch %s)", group_id,
                     group.group_epoch, plural(len(group.members), "member"),
                     request.member_id, result.error.name, request.member_epoch)
        if forget:
            self._drop_consumer_group(group_id)
        else:
            self._schedule_consumer_expiry(group)
            self._maybe_refresh_regexes(group, topics, authorize)
        return await self._replicated_answer(group_id, result)

    async def _replicated_answer(self, group_id: str,
                                 result: HeartbeatResult) -> HeartbeatResult:
        """``result``, once the ISR of the group's partition holds what it has appended."""
        if self.wait_replicated is not None:
            # Also when this heartbeat wrote nothing (Kafka's runtime defers such a write
            # until the shard's pending writes are committed): the answer may carry an
            # assignment whose records an earlier change appended and the ISR does not
            # hold yet (that change's answer timed out; the member retries), which a
            # failover would lose, giving the partitions to another member.
            error = await self.wait_replicated(group_id)
            if error != ErrorCode.none:
                # The records are in the log (not taken back, as Kafka's runtime keeps
                # them): the member is told to retry, and goes on from its epoch.
                if error == ErrorCode.request_timed_out:
                    error = ErrorCode.coordinator_not_available
                return HeartbeatResult(error, "The group's records were not replicated "
                                              f"in time: {error.name}.")
        return result

    # -- regular-expression subscriptions (Kafka 4.0: resolved on its executor)
    def on_topic_changed(self, name: str, info: object) -> None:
        """A metadata listener: a topic created or changed may match an expression
        (Kafka's ``lastMetadataImageWithNewTopics``); one deleted leaves the subscribed
        topics' metadata at the next heartbeat."""
        del name
        if info is not None:
            self.topics_version += 1

    def _regex_subscribed(self, group_id: str, regex: str) -> bool:
        group = self.consumer_groups.get(group_id)
        return group is not None and bool(group.subscribed_regexes().get(regex))

    def _maybe_refresh_regexes(
        self, group: ConsumerGroup, topics: Mapping[str, TopicMetadata],
        authorize: Callable[[AbstractSet[str]], AbstractSet[str]] | None,
    ) -> None:
        """Start a refresh of the group's expressions when one is due and none runs
        (:meth:`ConsumerGroup.regex_refresh_due`), filtered by what the member of this
        heartbeat may describe, as Kafka 4.0 does with its request context."""
        if group.group_id in self._regex_refreshes:
            return
        regexes = group.regex_refresh_due(self.time_ms(), self.topics_version)
        if regexes is None:
            return
        self._regex_refreshes[group.group_id] = asyncio.get_running_loop().create_task(
            self._refresh_regexes(group.group_id, regexes, topics, authorize))

    async def _refresh_regexes(
        self, group_id: str, regexes: frozenset[str], topics: Mapping[str, TopicMetadata],
        authorize: Callable[[AbstractSet[str]], AbstractSet[str]] | None,
    ) -> None:
        started, version = self.time_ms(), self.topics_version
        try:
            try:
                matched = await self.regex_resolver.resolve(regexes, list(topics))
            except RegexTimeout as exc:
                log.error("consumer group %s: regular expressions not resolved (%s); "
                          "the last resolution stays, tried again in %d ms", group_id, exc,
                          self.config.consumer.regex_refresh_interval_ms)
                group = self.consumer_groups.get(group_id)
                if group is not None:
                    # counted as a refresh: not started again at the next heartbeat
                    group.regex_refreshed_ms = started
                return
            group = self.consumer_groups.get(group_id)
            if group is None:
                return  # gone or unloaded meanwhile
            allowed = (None if authorize is None
                       else authorize(resolution_topics(matched)))
            resolved = {regex: frozenset(t for t in names
                                         if allowed is None or t in allowed)
                        for regex, names in matched.items()}
            before = self._consumer_records.get(group_id)
            bumped = group.apply_resolved(resolved, topics, version, started)
            if before is None:
                error, _ = self._write_consumer_group(group, before, group)
            else:  # only the resolutions, metadata and epoch: the members not walked
                records, after = records_for_resolution(before, group)
                error = self.manager.append_records(
                    group_id, [encode_record(r) for r in records])
                if error == ErrorCode.none:
                    self._consumer_records[group_id] = after
            if error != ErrorCode.none:
                log.error("consumer group %s: resolved regular expressions not stored "
                          "(%s; a resolution's record larger than %s takes is never "
                          "stored), tried again in %d ms", group_id, error.name,
                          self.manager.topic.name, group.config.regex_refresh_interval_ms)
                self._revert_consumer_group(group, before, {})
                reverted = self.consumer_groups.get(group_id)
                if reverted is not None:
                    # counted as a refresh: not started again at the next heartbeat
                    reverted.regex_refreshed_ms = started
                return
            log.info("consumer group %s: regular expressions %s resolved in %d ms%s",
                     group_id, ", ".join(sorted(regexes)), self.time_ms() - started,
                     f" (epoch now {group.group_epoch})" if bumped else "")
        finally:
            self._regex_refreshes.pop(group_id, None)

    def _forgettable(self, group: ConsumerGroup) -> bool:
        """An empty consumer group without committed offsets is forgotten (Kafka's
        offset cleanup deletes it later; kept, it would be an Empty group listed for
        nothing), and one whose offsets all expired too."""
        if not group.is_empty():
            return False
        holder = self.manager.get_group(group.group_id)
        return holder is None or not holder.offsets

    def _maybe_forget(self, group: ConsumerGroup) -> None:
        if self._forgettable(group):
            self._delete_consumer_group(group.group_id)

    def _write_consumer_group(
        self, group: ConsumerGroup, before: ConsumerGroupSnapshot | None,
        after: ConsumerGroup | None, member_id: str | None = None,
        first: Sequence[tuple[bytes, bytes | None]] = (),
    ) -> tuple[ErrorCode, bool]:
        """Append the records that take ``group`` from ``before`` (what the log holds,
        None: nothing) to ``after`` (None: deleted) as one batch, and remember what the
        log then holds. ``member_id``: the only member a heartbeat may have changed when
        the group epoch, assignment epoch and member set did not move (no snapshot of
        the whole group is built then: one member is compared). ``first``: records put
        ahead of the group's in the batch (the tombstone of a classic group it
        replaces). Returns (the append's error, whether records were appended)."""
        group_id = group.group_id
        one = None if after is None or before is None or member_id is None else (
            _member_change(before, after, member_id))
        after_snapshot: ConsumerGroupSnapshot | None = None
        if one is not None:
            records, changed = one
            if changed is None:
                return ErrorCode.none, False
        else:
            after_snapshot = None if after is None else snapshot_of(after)
            records = records_for_heartbeat(before, after_snapshot)
        if records or first:
            error = self.manager.append_records(
                group_id, [*first, *(encode_record(r) for r in records)])
            if error != ErrorCode.none:
                return error, False
        if one is not None:
            assert before is not None and changed is not None
            before.members[changed.member_id] = changed
        elif after_snapshot is None:
            self._consumer_records.pop(group_id, None)
        else:
            self._consumer_records[group_id] = after_snapshot
        return ErrorCode.none, bool(records or first)

    def _revert_consumer_group(
        self, group: ConsumerGroup, before: ConsumerGroupSnapshot | None,
        timers: Mapping[str, tuple[int, int | None] | None],
    ) -> None:
        """A change whose records could not be appended: the group goes back to what the
        log holds (Kafka's runtime reverts its timeline), each member keeping its timers
        (``timers``: those of the members the change touched, as before it). A member
        the change removed comes back with its session deadline a retry back-off away."""
        if before is None:
            self._drop_consumer_group(group.group_id)
            return
        now = self.time_ms()
        restored = restore(before, self._consumer_config(group.group_id), now)
        for member in restored.members.values():
            live = group.members.get(member.member_id)
            kept = timers.get(member.member_id)
            if kept is not None:
                member.session_deadline_ms, member.revocation_deadline_ms = kept
            elif live is not None:
                member.session_deadline_ms = live.session_deadline_ms
                member.revocation_deadline_ms = live.revocation_deadline_ms
            else:
                member.session_deadline_ms = now + CONSUMER_WRITE_RETRY_BACKOFF_MS
        self.consumer_groups[group.group_id] = restored
        self._schedule_consumer_expiry(restored)

    def _schedule_consumer_expiry(self, group: ConsumerGroup) -> None:
        handle = self._consumer_timers.pop(group.group_id, None)
        if handle is not None:
            handle.cancel()
        deadline = group.next_deadline_ms()
        if deadline is None:
            return
        delay = max(deadline - self.time_ms(), 0) / 1000
        self._consumer_timers[group.group_id] = asyncio.get_running_loop().call_later(
            delay, self._on_consumer_deadline, group.group_id)

    def _on_consumer_deadline(self, group_id: str) -> None:
        self._consumer_timers.pop(group_id, None)
        group = self.consumer_groups.get(group_id)
        if group is None:
            return
        before = self._consumer_records.get(group_id)
        epoch = group.group_epoch
        removed = group.expire(self.time_ms())
        if removed and downgrade_refusal(group, (), self._migration_policy(),
                                         self.config.max_group_size) is None:
            # only classic members are left: online downgrade
            reason = ", ".join(f"{m} fenced ({why})" for m, why in removed)
            error = self._downgrade(group, (), epoch, reason, before)
            if error == ErrorCode.none:
                return
            if error is not None:
                log.warning("consumer group %s: downgrade not stored (%s); retried",
                            group_id, error.name)
                self._revert_consumer_group(group, before, {})
                return
        if removed:
            forget = self._forgettable(group)
            error, _ = self._write_consumer_group(group, before,
                                                  None if forget else group)
            if error != ErrorCode.none:
                log.warning("consumer group %s: fencing %s not stored (%s); retried",
                            group_id, ", ".join(m for m, _ in removed), error.name)
                self._revert_consumer_group(group, before, {})
                return
            for member_id, reason in removed:
                log.info("member %s of consumer group %s fenced: %s (epoch now %d)",
                         member_id, group_id, reason, group.group_epoch)
            if forget:
                self._drop_consumer_group(group_id)
                return
        self._schedule_consumer_expiry(group)

    def _delete_consumer_group(self, group_id: str) -> ErrorCode:
        """Tombstone the consumer group's records (Kafka's
        ``createGroupTombstoneRecords``, else it comes back at the next load) and forget
        it."""
        group = self.consumer_groups.get(group_id)
        if group is None:
            return ErrorCode.none
        error, _ = self._write_consumer_group(group, self._consumer_records.get(group_id),
                                              None)
        if error == ErrorCode.none:
            self._drop_consumer_group(group_id)
        return error

    def _drop_consumer_group(self, group_id: str) -> None:
        """Forget the group here (unloaded, or deleted once its tombstones are written)."""
        self.consumer_groups.pop(group_id, None)
        self._consumer_records.pop(group_id, None)
        handle = self._consumer_timers.pop(group_id, None)
        if handle is not None:
            handle.cancel()

    def _on_consumer_group_loaded(self, snapshot: ConsumerGroupSnapshot) -> None:
        """A consumer group replayed from its partition (Kafka's ``onLoaded``): restored
        with its derived state and timers, its expiry scheduled. A group whose records
        cannot be a live group (two members holding one partition) is left out with an
        ERROR, as its members then rejoin; Kafka's load would fail."""
        dropped = unsupported(snapshot)
        if dropped:
            log.warning("consumer group %s loaded without what is not served: %s",
                        snapshot.group_id, "; ".join(dropped))
        try:
            group = restore(snapshot, self._consumer_config(snapshot.group_id),
                            self.time_ms())
        except ConsumerGroupRestoreError as exc:
            log.error("consumer group %s not loaded: %s", snapshot.group_id, exc)
            return
        self.consumer_groups[group.group_id] = group
        # what the log holds, as the change writes compare against: the restored group
        self._consumer_records[group.group_id] = snapshot_of(group)
        self._schedule_consumer_expiry(group)

    # ================================================================ online migration
    def _migration_policy(self) -> MigrationPolicy:
        return MigrationPolicy(self.config.consumer.migration_policy)

    async def _upgrade_and_heartbeat(
        self, classic: GroupMetadata, request: HeartbeatRequest,
        topics: Mapping[str, TopicMetadata],
    ) -> HeartbeatResult:
        """The first consumer-protocol member joins a classic group with members: the
        group becomes a consumer group (Kafka's ``convertToConsumerGroup``) and the member
        joins it. One batch: the classic group's tombstone, then the consumer group's
        records. Nothing changes unless it is appended."""
        group_id = classic.group_id
        now = self.time_ms()
        group = ConsumerGroup(group_id, self._consumer_config(group_id))
        try:
            consumer_group_from_classic(classic, group, topics, now)
        except ValueError as exc:
            log.warning("classic group %s not upgraded: %s", group_id, exc)
            return HeartbeatResult(
                ErrorCode.group_id_not_found,
                f"Cannot upgrade the classic group {group_id} to a consumer group because "
                "the embedded consumer protocol is malformed.")
        members = len(group.members)
        result = group.heartbeat(request, topics, now)
        if result.error != ErrorCode.none:
            return result
        snapshot = snapshot_of(group)
        records = [self.manager.metadata_tombstone(group_id)]
        records += [encode_record(r) for r in records_for_change(None, snapshot)]
        error = self.manager.append_records(group_id, records)
        if error != ErrorCode.none:
            return HeartbeatResult(error, "The coordinator could not store the group: "
                                          f"{error.name}.")
        self._retire_classic_group(classic)
        self.consumer_groups[group_id] = group
        self._consumer_records[group_id] = snapshot
        log.info("classic group %s (generation %d, %s) upgraded to a consumer group: "
                 "member %s joins with the consumer protocol (epoch now %d)", group_id,
                 classic.generation_id, plural(members, "member"), request.member_id,
                 group.group_epoch)
        self._schedule_consumer_expiry(group)
        return await self._replicated_answer(group_id, result)

    def _retire_classic_group(self, classic: GroupMetadata) -> None:
        """The classic group became a consumer group: members waiting in JoinGroup or
        SyncGroup are answered REBALANCE_IN_PROGRESS (they rejoin the consumer group),
        its timers stop, and only its offsets stay (the consumer group's holder)."""
        group_id = classic.group_id
        for member_id, join in self._joins.pop(group_id, {}).items():
            if not join.done():
                join.set_result(JoinResult(ErrorCode.rebalance_in_progress, member_id))
        for sync in self._syncs.pop(group_id, {}).values():
            if not sync.done():
                sync.set_result(SyncResult(ErrorCode.rebalance_in_progress))
        for member_id in [*classic.members, *classic.pending_members]:
            self._cancel_heartbeat(group_id, member_id)
        self._cancel_timer(self._join_timers, group_id)
        self._cancel_timer(self._sync_timers, group_id)
        self._initial_join.pop(group_id, None)
        holder = GroupMetadata(group_id, state_timestamp_ms=self.time_ms())
        holder.offsets = classic.offsets
        holder.pending_txn_offsets = classic.pending_txn_offsets
        if holder.offsets or holder.pending_txn_offsets:
            self.manager.add_group(holder)
        else:
            self.manager.groups.pop(group_id, None)

    def _downgrade(
        self, group: ConsumerGroup, leaving: set[str] | tuple[()], generation: int | None,
        reason: str, before: ConsumerGroupSnapshot | None = None, rebalance: bool = True,
    ) -> ErrorCode | None:
        """The consumer group becomes a classic group without ``leaving`` (Kafka's
        ``convertToClassicGroup``), whose members rejoin in a rebalance. One batch: the
        consumer group's tombstones, then the classic group's record. None when it
        cannot be converted (it stays a consumer group); else the append's error."""
        group_id = group.group_id
        now = self.time_ms()
        try:
            classic = classic_group_from_consumer(group, leaving, now, generation)
        except (ValueError, KeyError) as exc:
            log.warning("consumer group %s not downgraded: %s", group_id, exc)
            return None
        if before is None:
            before = self._consumer_records.get(group_id)
        records = [encode_record(r) for r in records_for_change(before, None)]
        records.append(self.manager.metadata_record(classic, rebalancing=rebalance))
        error = self.manager.append_records(group_id, records)
        if error != ErrorCode.none:
            return error
        holder = self.manager.get_group(group_id)
        if holder is not None:
            classic.offsets = holder.offsets
            classic.pending_txn_offsets = holder.pending_txn_offsets
        self._drop_consumer_group(group_id)
        self.manager.add_group(classic)
        for member in classic.members.values():
            self._schedule_heartbeat(classic, member)
        log.info("consumer group %s downgraded to a classic group (generation %d, %s): %s",
                 group_id, classic.generation_id, plural(len(classic.members), "member"),
                 reason)
        if rebalance:
            self._prepare_rebalance(classic, f"downgrade from consumer to classic ({reason})")
        return ErrorCode.none

    async def _classic_join_consumer_group(
        self, group: ConsumerGroup, join: ClassicJoin, topics: Mapping[str, TopicMetadata],
    ) -> JoinResult:
        """A classic member's JoinGroup to a consumer group (Kafka's
        ``classicGroupJoinToConsumerGroup``): stored, then answered once replicated."""
        group_id = group.group_id
        before = self._consumer_records.get(group_id)
        known = group.members.get(join.member_id)
        timers = None if known is None else (known.session_deadline_ms,
                                              known.revocation_deadline_ms)
        epoch = group.group_epoch
        result = classic_join(group, join, topics, self.time_ms())
        if result.error != ErrorCode.none:
            return JoinResult(result.error, result.member_id)
        error, _ = self._write_consumer_group(group, before, group, result.member_id)
        if error != ErrorCode.none:
            self._revert_consumer_group(group, before, {result.member_id: timers})
            return JoinResult(error, join.member_id)
        if group.group_epoch != epoch or known is None:
            log.info("consumer group %s: epoch %d, %s (classic member %s joined)", group_id,
                     group.group_epoch, plural(len(group.members), "member"),
                     result.member_id)
        if result.replaced_member_id is not None and downgrade_refusal(
                group, (), self._migration_policy(), self.config.max_group_size) is None:
            # a classic instance replaced the last consumer-protocol static member
            # (Kafka's validateOnlineDowngradeWithReplacedMemberId): classic again.
            # Stable, the joining member syncing the replaced one's assignment, when
            # every member holds its target; else the classic assignments (the
            # targets) name partitions other members still hold (an eager member that
            # has not rejoined owns all it was given), so the group rebalances and
            # this JoinGroup waits for it, as Kafka's classic protocol would have it.
            reconciled = group.state == ConsumerGroupState.STABLE
            snapshot = self._consumer_records.get(group_id)
            downgraded = self._downgrade(
                group, (), None, f"static member {join.instance_id} rejoined as classic "
                f"member {result.member_id}", snapshot, rebalance=not reconciled)
            if downgraded is not None:
                return await self._answer_downgraded_join(group_id, result, downgraded,
                                                          None if reconciled else join)
        self._schedule_consumer_expiry(group)
        if self.wait_replicated is not None:
            error = await self.wait_replicated(group_id)
            if error != ErrorCode.none:
                if error == ErrorCode.request_timed_out:
                    error = ErrorCode.coordinator_not_available
                return JoinResult(error, result.member_id)
        return JoinResult(ErrorCode.none, result.member_id, result.generation_id,
                          CONSUMER_PROTOCOL_TYPE, result.protocol_name, "", ())

    async def _answer_downgraded_join(self, group_id: str, result: ClassicJoinResult,
                                      downgraded: ErrorCode,
                                      rejoin: ClassicJoin | None = None) -> JoinResult:
        """The JoinGroup that downgraded the group: answered at once (the group is
        Stable), or, ``rejoin``, parked in the rebalance the downgrade started."""
        if downgraded != ErrorCode.none:
            return JoinResult(downgraded, result.member_id)
        classic = self.manager.get_group(group_id)
        assert classic is not None
        if self.wait_replicated is not None:
            error = await self.wait_replicated(group_id)
            if error != ErrorCode.none:
                if error == ErrorCode.request_timed_out:
                    error = ErrorCode.coordinator_not_available
                return JoinResult(error, result.member_id)
        if rejoin is not None:
            classic = self.manager.get_group(group_id)
            member = None if classic is None else classic.members.get(result.member_id)
            if classic is None or member is None:
                return JoinResult(ErrorCode.unknown_member_id, result.member_id)
            if not classic.is_in(GroupState.PREPARING_REBALANCE):
                # the group moved on while the downgrade replicated: a current member's
                # join, served as any other
                return await self._current_member_join(
                    classic, result.member_id, _spec_of(rejoin))
            return await self._update_member_and_rebalance(classic, member,
                                                           _spec_of(rejoin))
        return JoinResult(ErrorCode.none, result.member_id, classic.generation_id,
                          CONSUMER_PROTOCOL_TYPE, classic.protocol_name, "", ())

    def _classic_leave_consumer_group(
        self, group: ConsumerGroup, members: Sequence[tuple[str, str | None]],
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """A LeaveGroup to a consumer group (Kafka's ``classicGroupLeaveToConsumerGroup``)."""
        group_id = group.group_id
        before = self._consumer_records.get(group_id)
        results = classic_leave(group, members)
        if any(code == ErrorCode.none for code, _ in results):
            forget = self._forgettable(group)
            error, _ = self._write_consumer_group(group, before, None if forget else group)
            if error != ErrorCode.none:
                self._revert_consumer_group(group, before, {})
                return ErrorCode.none, [error] * len(members)
            for code, member_id in results:
                if code == ErrorCode.none:
                    log.info("classic member %s leaves consumer group %s (epoch now %d)",
                             member_id, group_id, group.group_epoch)
            if forget:
                self._drop_consumer_group(group_id)
            else:
                self._schedule_consumer_expiry(group)
        return ErrorCode.none, [code for code, _ in results]
    def _consumer_config(self, group_id: str) -> ConsumerGroupConfig:
        """The broker's consumer group configs with ``group_id``'s group configs."""
        if self.group_configs is None:
            return self.config.consumer
        return consumer_group_config_for(self.config.consumer, self.group_configs(group_id))

    def _live_consumer_group(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group of this id if it has members (an empty one gives way to a
        classic group joining, as Kafka converts it: its records are tombstoned; kept
        while they cannot be)."""
        group = self.consumer_groups.get(group_id)
        if group is not None and group.is_empty() and (
                self._delete_consumer_group(group_id) == ErrorCode.none):
            return None
        return group

    def _consumer_subscriptions(self, group_id: str) -> AbstractSet[str] | None:
        """The topics ``group_id``'s consumer group subscribes to (by name or through a
        resolved expression), None when it is none: their offsets do not expire."""
        group = self.consumer_groups.get(group_id)
        return None if group is None else group.subscribed_topics()

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        return self.consumer_groups.get(group_id)

    def _validate_consumer_commit(
        self, group: ConsumerGroup, member_id: str, member_epoch: int,
        api_version: int | None, transactional: bool = False,
    ) -> ErrorCode:
        """Kafka's ``ConsumerGroup.validateOffsetCommit``. A transactional commit at
        another epoch is ILLEGAL_GENERATION rather than Kafka's STALE_MEMBER_EPOCH: the
        producer's TxnOffsetCommit handler (3.9) takes ILLEGAL_GENERATION as a failed
        commit the transaction can abort, and any other error as fatal."""
        if member_epoch < 0 and group.is_empty():
            return ErrorCode.none  # an admin tool, or a consumer without a group
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member.uses_classic_protocol:  # a classic member commits with its generation
            return (ErrorCode.none if member_epoch == member.member_epoch
                    else ErrorCode.illegal_generation)
        if not transactional and api_version is not None and api_version < 9:
            return ErrorCode.unsupported_version
        if member_epoch != member.member_epoch:
            return (ErrorCode.illegal_generation if transactional
                    else ErrorCode.stale_member_epoch)
        return ErrorCode.none

    # ================================================================ offsets
    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[_Partition, tuple[int, int, str | None]],
        retention_ms: int = -1,
        api_version: int | None = None,
    ) -> dict[_Partition, ErrorCode]:
        """Commit (offset, leader epoch, metadata) per partition; the caller has already
        dropped partitions of unknown topics. ``retention_ms`` (OffsetCommit v2-4, -1 for
        the broker's retention) gives these offsets their own expire timestamp. For a
        consumer group (KIP-848) ``generation_id`` is the member epoch (v9+)."""
        error = self._check(group_id, allow_empty_id=True)
        if error != ErrorCode.none:
            return dict.fromkeys(offsets, error)
        consumer = self.consumer_groups.get(group_id)
        if consumer is not None:
            error = self._validate_consumer_commit(consumer, member_id, generation_id,
                                                   api_version)
            if error != ErrorCode.none:
                return dict.fromkeys(offsets, error)
            # the offsets are held by the classic group of the same id, made at the
            # first commit (an empty one, never written itself)
            holder = self.manager.get_group(group_id) or self.manager.add_group(
                GroupMetadata(group_id, state_timestamp_ms=self.time_ms()))
            return self.manager.store_offsets(holder, offsets, retention_ms)
        group = self.manager.get_group(group_id)
        if group is None:
            if generation_id >= 0:
                return dict.fromkeys(offsets, ErrorCode.illegal_generation)
            group = self.manager.add_group(
                GroupMetadata(group_id, state_timestamp_ms=self.time_ms())
            )
        error = self._validate_commit(group, member_id, group_instance_id, generation_id)
        if error != ErrorCode.none:
            return dict.fromkeys(offsets, error)
        member = group.members.get(member_id)
        if member is not None:
            self._schedule_heartbeat(group, member)
        return self.manager.store_offsets(group, offsets, retention_ms)

    def _validate_commit(
        self, group: GroupMetadata, member_id: str, instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and member_id == UNKNOWN_MEMBER_ID and instance_id is None:
            # a consumer without group management (or an admin tool): only while Empty
            return ErrorCode.none if group.is_in(GroupState.EMPTY) else (
                ErrorCode.unknown_member_id
            )
        error = self._validate_member(group, member_id, instance_id)
        if error != ErrorCode.none:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[_Partition] | None, require_stable: bool,
        member_id: str | None = None, member_epoch: int = -1,
    ) -> tuple[ErrorCode, dict[_Partition, CommittedOffset | None]]:
        """(group error, committed offset or None per partition); ``partitions`` None asks
        for every partition with a committed offset. With ``require_stable`` the handler
        asks :meth:`unstable_offsets` which partitions to answer UNSTABLE_OFFSET_COMMIT.
        A member of a consumer group (OffsetFetch v9+) is checked as Kafka's
        ``ConsumerGroup.validateOffsetFetch`` does (a classic group ignores them)."""
        del require_stable
        error = self._check(group_id, allow_empty_id=True)
        if error != ErrorCode.none:
            return error, {}
        consumer = self.consumer_groups.get(group_id)
        if consumer is not None and not (member_id is None and member_epoch < 0):
            member = consumer.members.get(member_id or "")
            if member is None:
                return ErrorCode.unknown_member_id, {}
            if member.member_epoch != member_epoch:
                return (ErrorCode.illegal_generation if member.uses_classic_protocol
                        else ErrorCode.stale_member_epoch), {}
        return ErrorCode.none, self.manager.get_offsets(group_id, partitions)

    def unstable_offsets(self, group_id: str) -> set[_Partition]:
        """Partitions with an offset committed by a transaction not completed yet (an
        OffsetFetch with ``require_stable`` answers them UNSTABLE_OFFSET_COMMIT, KIP-447)."""
        group = self.manager.get_group(group_id)
        if group is None:
            return set()
        return {tp for pending in group.pending_txn_offsets.values() for tp in pending}

    # ================================================================ transactions
    def txn_commit_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[_Partition, tuple[int, int, str | None]],
        verified: Callable[[], bool] | None = None,
    ) -> dict[_Partition, ErrorCode]:
        """TxnOffsetCommit (Kafka's ``doTxnCommitOffsets``): v3+ carry the member and
        generation (KIP-447), checked when given; the offsets stay pending until the
        transaction's marker reaches the group's partition (:meth:`on_txn_marker`).
        ``verified``: whether the transaction coordinator's verification of the group's
        partition still holds, asked right before the append (KIP-890)."""
        error = self._check(group_id)
        if error != ErrorCode.none:
            return dict.fromkeys(offsets, error)
        group = self.manager.get_group(group_id)
        if group is None:
            group = self.manager.add_group(
                GroupMetadata(group_id, state_timestamp_ms=self.time_ms()))
        consumer = self.consumer_groups.get(group_id)
        if consumer is not None and (member_id != UNKNOWN_MEMBER_ID or generation_id >= 0):
            error = self._validate_consumer_commit(consumer, member_id, generation_id, None,
                                                   transactional=True)
            if error != ErrorCode.none:
                return dict.fromkeys(offsets, error)
            return self.manager.store_txn_offsets(group, producer_id, producer_epoch,
                                                  offsets, verified)
        if group.is_in(GroupState.DEAD):
            error = ErrorCode.coordinator_not_available
        elif member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = self._validate_member(group, member_id, group_instance_id)
        if error == ErrorCode.none and generation_id >= 0 and (
                generation_id != group.generation_id):
            error = ErrorCode.illegal_generation
        if error != ErrorCode.none:
            return dict.fromkeys(offsets, error)
        return self.manager.store_txn_offsets(group, producer_id, producer_epoch, offsets,
                                              verified)

    def on_txn_marker(self, offsets_partition: int, producer_id: int, commit: bool) -> None:
        """A transaction marker of ``producer_id`` was appended to ``offsets_partition``
        of ``__consumer_offsets`` (Kafka's ``scheduleHandleTxnCompletion``): its pending
        offsets there become committed, or are dropped on abort. The WriteTxnMarkers
        handler calls this after the marker is in the log, on the event loop."""
        if not self.partitions.is_owned(offsets_partition):
            return
        self.manager.complete_txn(offsets_partition, producer_id, commit)

    def delete_offsets(
        self, group_id: str, partitions: Sequence[_Partition]
    ) -> tuple[ErrorCode, dict[_Partition, ErrorCode]]:
        """OffsetDelete: (group error, error per partition)."""
        error = self._check(group_id)
        if error != ErrorCode.none:
            return error, {}
        group = self.manager.get_group(group_id)
        consumer = self.consumer_groups.get(group_id)
        if consumer is not None and group is None:  # a consumer group without offsets
            live_topics = consumer.subscribed_topics()
            return ErrorCode.none, {
                tp: ErrorCode.group_subscribed_to_topic if tp[0] in live_topics
                else ErrorCode.none for tp in partitions}
        if group is None or group.is_in(GroupState.DEAD):
            return ErrorCode.group_id_not_found, {}
        results: dict[_Partition, ErrorCode] = {}
        deletable: list[_Partition] = []
        if consumer is not None and not consumer.is_empty():
            live_topics = consumer.subscribed_topics()
            for tp in partitions:
                if tp[0] in live_topics:
                    results[tp] = ErrorCode.group_subscribed_to_topic
                else:
                    deletable.append(tp)
        elif group.is_in(GroupState.EMPTY):
            deletable = list(partitions)
        else:
            subscribed = group.subscribed_topics()
            if subscribed is None:
                return ErrorCode.non_empty_group, {}
            for tp in partitions:
                if tp[0] in subscribed:
                    results[tp] = ErrorCode.group_subscribed_to_topic
                else:
                    deletable.append(tp)
        present = [tp for tp in deletable if tp in group.offsets]
        error = self.manager.delete_offsets(group, present)
        for tp in deletable:
            results[tp] = error
        return ErrorCode.none, results

    # ================================================================ admin
    def describe_group(self, group_id: str) -> GroupSummary:
        error = self._check(group_id, allow_empty_id=True)
        if error != ErrorCode.none:
            return GroupSummary(error, group_id, "", "", "")
        if group_id in self.consumer_groups:
            # Kafka 4 (KIP-1043): DescribeGroups describes classic groups only
            return GroupSummary(ErrorCode.group_id_not_found, group_id,
                                GroupState.DEAD.value, "", "", group_type=CONSUMER_GROUP_TYPE,
                                message=f"Group {group_id} is not a classic group.")
        group = self.manager.get_group(group_id)
        if group is None:
            return GroupSummary(ErrorCode.group_id_not_found, group_id,
                                GroupState.DEAD.value, "", "")
        stable = group.is_in(GroupState.STABLE)
        members = tuple(
            MemberSummary(
                m.member_id, m.group_instance_id, m.client_id, m.client_host,
                m.metadata_for(group.protocol_name or "") if stable else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return GroupSummary(
            ErrorCode.none, group_id, group.state.value, group.protocol_type or "",
            (group.protocol_name or "") if stable else "", members,
        )

    def list_groups(self, states: Iterable[str] = ()) -> tuple[ErrorCode, list[GroupSummary]]:
        error = self.check_listing()
        if error != ErrorCode.none:
            return error, []
        wanted = {s.lower() for s in states}
        out = []
        classic = self.manager.groups
        for emptied in list(self.consumer_groups.values()):
            self._maybe_forget(emptied)  # offsets expired since it emptied
        for group_id in sorted(classic.keys() | self.consumer_groups.keys()):
            consumer = self.consumer_groups.get(group_id)
            if consumer is not None:
                state = consumer.state.value
                if not wanted or state.lower() in wanted:
                    out.append(GroupSummary(ErrorCode.none, group_id, state,
                                            CONSUMER_PROTOCOL_TYPE, "",
                                            group_type=CONSUMER_GROUP_TYPE))
                continue
            group = classic[group_id]
            if group.is_in(GroupState.DEAD):
                continue
            if wanted and group.state.value.lower() not in wanted:
                continue
            out.append(GroupSummary(ErrorCode.none, group.group_id, group.state.value,
                                    group.protocol_type or "", group.protocol_name or ""))
        return ErrorCode.none, out

    def delete_groups(self, group_ids: Sequence[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            error = self._check(group_id, allow_empty_id=True)
            if error != ErrorCode.none:
                results[group_id] = error
                continue
            consumer = self.consumer_groups.get(group_id)
            if consumer is not None:
                if not consumer.is_empty():
                    results[group_id] = ErrorCode.non_empty_group
                    continue
                error = self._delete_consumer_group(group_id)
                if error != ErrorCode.none:
                    results[group_id] = error
                    continue
            group = self.manager.get_group(group_id)
            if group is None or group.is_in(GroupState.DEAD):
                results[group_id] = ErrorCode.group_id_not_found
                continue
            if not group.is_in(GroupState.EMPTY):
                results[group_id] = ErrorCode.non_empty_group
                continue
            results[group_id] = self.manager.delete_group(group)
        return results


def _member_change(
    before: ConsumerGroupSnapshot, group: ConsumerGroup, member_id: str
) -> tuple[list[ConsumerGroupRecord], MemberSnapshot | None] | None:
    """The records of a change of ``group`` from ``before`` when only ``member_id`` can
    have changed: neither epoch nor the member set moved (the subscribed topics' metadata
    and the target assignment move only with them). (records, the member's new snapshot;
    None and no records if it did not change); None when more than the member may have
    changed."""
    if (before.group_epoch != group.group_epoch
            or before.assignment_epoch != group.assignment_epoch
            or len(before.members) != len(group.members)
            or before.resolved_regular_expressions.keys() != group.resolved_regexes.keys()):
        return None
    was = before.members.get(member_id)
    member = group.members.get(member_id)
    if was is None or member is None:
        return None
    now = member_snapshot(member)
    if now == was:
        return [], None
    one = ConsumerGroupSnapshot(before.group_id, before.group_epoch,
                                before.subscription_metadata, {member_id: was}, {},
                                before.assignment_epoch)
    return records_for_heartbeat(one, replace(one, members={member_id: now})), now


@dataclass(frozen=True, slots=True)
class _JoinSpec:
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]


def _spec_of(join: ClassicJoin) -> _JoinSpec:
    return _JoinSpec(join.instance_id, join.client_id, join.client_host,
                     join.rebalance_timeout_ms, join.session_timeout_ms, join.protocol_type,
                     list(join.protocols))


def _update_member(member: MemberMetadata, spec: _JoinSpec) -> None:
    """A known member joins again: take its protocols, timeouts and client from the
    JoinGroup."""
    member.protocols = spec.protocols
    member.rebalance_timeout_ms = spec.rebalance_timeout_ms
    member.session_timeout_ms = spec.session_timeout_ms
    member.client_id, member.client_host = spec.client_id, spec.client_host
