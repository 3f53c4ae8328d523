"""One consumer group of KIP-848's protocol in memory (Kafka's ``ConsumerGroup``,
``ConsumerGroupMember``, ``CurrentAssignmentBuilder`` and the heartbeat of
``GroupMetadataManager``).

Sans-I/O: no asyncio, no disk. The caller hands in each ConsumerGroupHeartbeat, the
topics of the cluster (:class:`TopicMetadata` by name) and the time; it keeps one timer
per group on :meth:`ConsumerGroup.next_deadline_ms` and calls :meth:`ConsumerGroup.expire`
when it fires.

How it works:

- **Epochs.** The *group epoch* moves when the group changes in a way that may change the
  assignment: a member joins, leaves or is fenced, a member changes its subscription, or
  the subscribed topics change (partitions added, a topic created or deleted) — the
  latter is noticed on every heartbeat by comparing the subscribed topics' metadata with
  the one the group last saw (looked up name by name, or by walking the cluster's topics
  when the group subscribes to more names than there are topics: a heartbeat costs no
  more than either, whatever one member subscribes to). The *target assignment* (each
  member's partitions) is recomputed by a server-side assignor
  (:mod:`odradek.coordinator.consumer_assignors`) whenever the group epoch is ahead of
  the *assignment epoch*, which then takes the group epoch's value. Each member has a
  *member epoch*: the assignment epoch it has converged to, and its previous one.
- **Reconciliation** (Kafka's ``CurrentAssignmentBuilder``) moves each member towards its
  target one heartbeat at a time, in three states: ``stable`` (it has what the target of
  its epoch says), ``unrevoked_partitions`` (it must first give up partitions: it keeps
  its epoch and is answered its assignment without them; it acknowledges by heartbeating
  an owned-partition list without them) and ``unreleased_partitions`` (it has reached the
  target epoch but some of its target partitions are still held, assigned or pending
  revocation, by another member; each heartbeat hands over those released since). So a
  partition is never given to its new owner before its previous owner has released it,
  and members whose partitions do not move are never paused.
- **Member epoch checks.** A heartbeat with an epoch ahead of the member's, or behind it
  (unless it is the previous epoch and the owned partitions are a subset of the current
  assignment: the answer that bumped the epoch was lost) is FENCED_MEMBER_EPOCH; the
  member gives up its partitions and rejoins with epoch 0. Epoch -1 leaves; epoch -2
  (static members, KIP-345's ``group.instance.id``) leaves temporarily: the member keeps
  its assignment until its session times out, and a new instance joining with the same
  instance id takes over its member and assignment without a rebalance. A static instance
  id still held by a member that did not leave is UNRELEASED_INSTANCE_ID.
- **Liveness.** Each heartbeat pushes the member's session deadline to now +
  ``group.consumer.session.timeout.ms``; a member asked to revoke partitions must do so
  within its rebalance timeout. :meth:`ConsumerGroup.expire` removes (fences) a member
  past either deadline, which moves the group epoch so its partitions go to others.

- **Regular-expression subscriptions** (``SubscribedTopicRegex``, Kafka 4.0's
  ``maybeUpdateRegularExpressions`` and ``handleRegularExpressionsResult``). A member
  subscribes to its names and to the topics its expression resolves to; the group holds
  one resolution per distinct expression (:class:`ResolvedRegularExpression`), shared by
  the members that subscribe to it, never one per member. A member bringing an
  expression the group already resolved moves the group epoch at once; one the group
  does not know yet is resolved by the caller (:meth:`ConsumerGroup.regex_refresh_due`
  says which expressions and when; the caller matches them against the cluster's topics
  off the event loop, :mod:`odradek.coordinator.consumer_regex`) and handed back with
  :meth:`ConsumerGroup.apply_resolved`, which moves the group epoch when a resolution
  changed. A group refreshes its expressions when one is not resolved yet or the
  topics changed since its last resolution (``topics_version``), at most once every
  ``REGEX_BATCH_REFRESH_INTERVAL_MS`` (10 s, Kafka 4.0's constant); the resolution of
  an expression no member subscribes to any more is dropped. Validating an expression
  (INVALID_REGULAR_EXPRESSION) is the caller's too, before :meth:`ConsumerGroup.heartbeat`,
  for an expression the group has no subscriber of (Kafka compiles it then).

The group's records in ``__consumer_offsets`` are the coordinator's
(:mod:`odradek.coordinator.consumer_group_persistence`): a group rebuilt from them gets
what they do not hold from :meth:`ConsumerGroup.rebuild_derived`. Classic members in a
consumer group (online migration) are :mod:`odradek.coordinator.consumer_group_migration`'s:
they are members here with their classic metadata (``ConsumerGroupMember.classic``),
reconciled when they join.
"""

from __future__ import annotations

import enum
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace

from odradek.coordinator.consumer_assignors import (
    ASSIGNORS,
    MemberSubscription,
    SubscribedTopic,
)
from odradek.coordinator.consumer_group_records import ClassicMemberMetadata
from odradek.protocol.errors import ErrorCode

__all__ = [
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "Assignment",
    "ConsumerGroup",
    "ConsumerGroupConfig",
    "ConsumerGroupMember",
    "ConsumerGroupState",
    "HeartbeatRequest",
    "HeartbeatResult",
    "MemberState",
    "ResolvedRegularExpression",
    "TopicMetadata",
    "validate_heartbeat",
]

# ConsumerGroupHeartbeatRequest.LEAVE_GROUP_MEMBER_EPOCH / LEAVE_GROUP_STATIC_MEMBER_EPOCH
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
# A member is new (no epoch yet) until its first assignment.
NEW_MEMBER_EPOCH = 0
# Kafka 4.0's GroupMetadataManager.REGEX_BATCH_REFRESH_INTERVAL_MS: the least time between
# two refreshes of a group's regular expressions.
REGEX_BATCH_REFRESH_INTERVAL_MS = 10_000

Assignment = Mapping[uuid.UUID, frozenset[int]]
"""Partitions by topic id (topics without partitions are left out)."""


class ConsumerGroupState(enum.Enum):
    """Kafka's ``ConsumerGroup.ConsumerGroupState`` (what DescribeGroups, ListGroups and
    ConsumerGroupDescribe show)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class MemberState(enum.Enum):
    """Kafka's ``MemberState``: where a member is in its reconciliation."""

    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    """The broker configs a consumer group reads (Kafka's names in the comments)."""

    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    max_size: int = 2_147_483_647  # group.consumer.max.size
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors
    # Kafka 4.0's constant (not a config there); tests lower it
    regex_refresh_interval_ms: int = REGEX_BATCH_REFRESH_INTERVAL_MS
    migration_policy: str = "bidirectional"  # group.consumer.migration.policy


@dataclass(frozen=True, slots=True)
class ResolvedRegularExpression:
    """The topics a subscribed expression matched (Kafka's ``ResolvedRegularExpression``,
    the ConsumerGroupRegularExpression record), at ``version`` of the cluster's topics
    (:meth:`ConsumerGroup.regex_refresh_due`) and ``timestamp_ms``."""

    topics: frozenset[str]
    version: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """What the group needs to know of a topic of the cluster."""

    topic_id: uuid.UUID
    name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """A ConsumerGroupHeartbeat, as :meth:`ConsumerGroup.heartbeat` reads it. ``None``
    (and -1 for the rebalance timeout) means "unchanged since the last heartbeat"."""

    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None: unchanged, not sent


@dataclass(slots=True)
class ConsumerGroupMember:
    """One member (Kafka's ``ConsumerGroupMember``)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 0
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str | None = None  # "" is no expression (Kafka keeps it)
    server_assignor: str | None = None
    member_epoch: int = NEW_MEMBER_EPOCH
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    pending_revocation: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    session_deadline_ms: int = 0
    revocation_deadline_ms: int | None = None  # set while unrevoked_partitions
    # A member speaking the classic protocol (online migration,
    # :mod:`odradek.coordinator.consumer_group_migration`): its session timeout and
    # JoinGroup protocols; None for a member of the consumer protocol.
    classic: ClassicMemberMetadata | None = None
    # a classic member's JoinGroup or SyncGroup deadline (Kafka's join and sync timeouts)
    classic_deadline_ms: int | None = None
    classic_deadline_reason: str = ""

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def held(self) -> Iterable[tuple[uuid.UUID, int]]:
        """Every partition this member holds: assigned or still pending revocation."""
        for holding in (self.assigned, self.pending_revocation):
            for topic_id, partitions in holding.items():
                for partition in partitions:
                    yield topic_id, partition


class HeartbeatError(Exception):
    """A heartbeat answered with ``code`` (Kafka's ``ApiException`` subclasses)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def validate_heartbeat(
    request: HeartbeatRequest, group_id: str, version: int, assignors: Iterable[str]
) -> tuple[ErrorCode, str] | None:
    """Kafka's ``throwIfConsumerGroupHeartbeatRequestIsInvalid``: None when valid."""
    def invalid(message: str) -> tuple[ErrorCode, str]:
        return ErrorCode.invalid_request, message

    if not group_id:
        return invalid("GroupId can't be empty.")
    if request.instance_id is not None and not request.instance_id:
        return invalid("InstanceId can't be empty.")
    if request.rack_id is not None and not request.rack_id:
        return invalid("RackId can't be empty.")
    epoch = request.member_epoch
    if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
        if not request.member_id:
            return invalid("MemberId can't be empty.")
    elif epoch == NEW_MEMBER_EPOCH:
        if version >= 1 and not request.member_id:
            return invalid("MemberId can't be empty.")
        if request.rebalance_timeout_ms == -1:
            return invalid("RebalanceTimeoutMs must be provided in first request.")
        if request.owned is None or request.owned:
            return invalid("TopicPartitions must be empty when (re-)joining.")
        # Kafka 4.0: an empty list of names or an empty regex joins, subscribed to nothing
        if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
            return invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be "
                           "non-null when (re-)joining.")
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if not request.member_id:
            return invalid("MemberId can't be empty.")
        if request.instance_id is None:
            return invalid("InstanceId can't be null.")
    else:
        return invalid("MemberEpoch is invalid.")
    names = list(assignors)
    if request.server_assignor is not None and request.server_assignor not in names:
        return (ErrorCode.unsupported_assignor,
                f"ServerAssignor {request.server_assignor} is not supported. "
                f"Supported assignors: {', '.join(names)}.")
    return None


class ConsumerGroup:
    """A consumer group's members, epochs and assignments; see the module docstring."""

    def __init__(self, group_id: str, config: ConsumerGroupConfig | None = None) -> None:
        self.group_id = group_id
        self.config = config or ConsumerGroupConfig()
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, dict[uuid.UUID, frozenset[int]]] = {}
        self.assignor_name = self.config.assignors[0]
        # the subscribed topics as last seen: name -> metadata
        self.subscription_metadata: dict[str, TopicMetadata] = {}
        # (topic id, partition) -> id of the member holding it (assigned or pending revocation)
        self._owners: dict[tuple[uuid.UUID, int], str] = {}
        # subscribed_topics(), None when a subscription changed since
        self._subscribed: frozenset[str] | None = None
        # one resolution per distinct expression members subscribe to
        self.resolved_regexes: dict[str, ResolvedRegularExpression] = {}
        # the topics version and the time of the last refresh (-1: unknown, as after a
        # load: the version is the count of this broker's topic changes; None: never)
        self.regex_version = -1
        self.regex_refreshed_ms: int | None = None
        # subscribed_regexes(), None when a subscription changed since
        self._regexes: Counter[str] | None = None

    # ================================================================ views
    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for member in self.members.values():
            if (member.member_epoch != self.assignment_epoch
                    or member.state != MemberState.STABLE):
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def is_empty(self) -> bool:
        return not self.members

    def owner_of(self, topic_id: uuid.UUID, partition: int) -> str | None:
        return self._owners.get((topic_id, partition))

    def subscribed_topics(self) -> frozenset[str]:
        """The topic names the members subscribe to, by name or through a resolved
        expression, kept until a subscription or a resolution changes (a heartbeat must
        not cost per name every member subscribes to)."""
        if self._subscribed is None:
            names = {t for m in self.members.values() for t in m.subscribed_topic_names}
            for regex in self.subscribed_regexes():
                resolved = self.resolved_regexes.get(regex)
                if resolved is not None:
                    names |= resolved.topics
            self._subscribed = frozenset(names)
        return self._subscribed

    def subscribed_regexes(self) -> Counter[str]:
        """How many members subscribe to each expression (Kafka's
        ``subscribedRegularExpressions``)."""
        if self._regexes is None:
            self._regexes = Counter(m.subscribed_topic_regex for m in self.members.values()
                                    if m.subscribed_topic_regex)
        return self._regexes

    def member_topics(self, member: ConsumerGroupMember) -> AbstractSet[str]:
        """The topic names one member subscribes to: its names and what its expression
        resolved to (nothing until it is resolved)."""
        regex = member.subscribed_topic_regex
        resolved = self.resolved_regexes.get(regex) if regex else None
        if resolved is None or not resolved.topics:
            return member.subscribed_topic_names
        return member.subscribed_topic_names | resolved.topics

    def _subscriptions_changed(self) -> None:
        self._subscribed = None
        self._regexes = None

    def next_deadline_ms(self) -> int | None:
        """The earliest session or revocation deadline of a member, None without members."""
        deadlines = [m.session_deadline_ms for m in self.members.values()]
        deadlines += [m.revocation_deadline_ms for m in self.members.values()
                      if m.revocation_deadline_ms is not None]
        deadlines += [m.classic_deadline_ms for m in self.members.values()
                      if m.classic_deadline_ms is not None]
        return min(deadlines, default=None)

    # ================================================================ liveness
    def expire(self, now_ms: int) -> list[tuple[str, str]]:
        """Fence every member past its session (or revocation) deadline: [(member id,
        reason)]."""
        removed = []
        for member in list(self.members.values()):
            if member.session_deadline_ms <= now_ms:
                reason = "session timeout"
            elif member.revocation_deadline_ms is not None and (
                    member.revocation_deadline_ms <= now_ms):
                reason = "rebalance timeout (partitions not revoked)"
            elif member.classic_deadline_ms is not None and (
                    member.classic_deadline_ms <= now_ms):
                reason = member.classic_deadline_reason
            else:
                continue
            self.remove_member(member.member_id)
            removed.append((member.member_id, reason))
        return removed

    def rebuild_derived(self) -> None:
        """Derive what the records of a group do not hold from its members (Kafka's
        replay of each member record, then ``onLoaded``): the owner of each partition
        (assigned or pending revocation), the static members (``group.instance.id`` ->
        member id) and the preferred assignor. For a group rebuilt from its records;
        raises ``ValueError`` when two members hold the same partition."""
        owners: dict[tuple[uuid.UUID, int], str] = {}
        static_members: dict[str, str] = {}
        for member in self.members.values():
            for key in member.held():
                holder = owners.setdefault(key, member.member_id)
                if holder != member.member_id:
                    raise ValueError(
                        f"partition {key[1]} of topic {key[0]} is held by members "
                        f"{holder!r} and {member.member_id!r} of consumer group "
                        f"{self.group_id!r}")
            if member.instance_id is not None:
                # the member written last wins, as a put per member record
                static_members[member.instance_id] = member.member_id
        self._owners = owners
        self.static_members = static_members
        self._subscriptions_changed()
        # Not in the records (nor Kafka's): recomputed from the members' ServerAssignor
        # as Kafka's ConsumerGroupDescribe does.
        self.assignor_name = self._preferred_assignor()

    def _forget_instance(self, member: ConsumerGroupMember) -> None:
        if member.instance_id is not None and (
                self.static_members.get(member.instance_id) == member.member_id):
            del self.static_members[member.instance_id]

    def remove_member(self, member_id: str) -> None:
        """Fence a member (Kafka's ``consumerGroupFenceMember``): its partitions are
        free at once and the group epoch moves."""
        member = self.members.pop(member_id, None)
        if member is None:
            return
        self._release(member)
        self._subscriptions_changed()
        regex = member.subscribed_topic_regex
        if regex and not self.subscribed_regexes().get(regex):
            # its last subscriber: the resolution goes (Kafka's tombstone of it)
            self.resolved_regexes.pop(regex, None)
            self._subscriptions_changed()
        self.target.pop(member_id, None)
        self._forget_instance(member)
        self.group_epoch += 1

    # ================================================================ heartbeat
    def heartbeat(
        self, request: HeartbeatRequest, topics: Mapping[str, TopicMetadata], now_ms: int
    ) -> HeartbeatResult:
        """Handle one validated ConsumerGroupHeartbeat (:func:`validate_heartbeat`)."""
        try:
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH,
                                        LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(request)
            return self._heartbeat(request, topics, now_ms)
        except HeartbeatError as e:
            return HeartbeatResult(e.code, e.message)

    def _leave(self, request: HeartbeatRequest) -> HeartbeatResult:
        if request.instance_id is None:
            member = self._member(request.member_id)
        else:
            member = self._static_member(request.instance_id, request.member_id)
            if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                # It will be back: keep its assignment until its session times out; what
                # it was revoking is released now.
                for key in _pairs(member.pending_revocation):
                    self._owners.pop(key, None)
                member.pending_revocation = {}
                member.revocation_deadline_ms = None
                member.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
                return HeartbeatResult(ErrorCode.none, None, member.member_id,
                                       LEAVE_GROUP_STATIC_MEMBER_EPOCH)
        self.remove_member(member.member_id)
        return HeartbeatResult(ErrorCode.none, None, request.member_id, request.member_epoch)

    def _member(self, member_id: str) -> ConsumerGroupMember:
        member = self.members.get(member_id)
        if member is None:
            raise HeartbeatError(
                ErrorCode.unknown_member_id,
                f"Member {member_id} is not a member of group {self.group_id}.")
        return member

    def _static_member(self, instance_id: str, member_id: str) -> ConsumerGroupMember:
        known = self.static_members.get(instance_id)
        if known is None:
            raise HeartbeatError(ErrorCode.unknown_member_id,
                                 f"Instance id {instance_id} is unknown.")
        if known != member_id:
            raise HeartbeatError(
                ErrorCode.fenced_instance_id,
                f"Static member {member_id} with instance id {instance_id} was fenced by "
                f"member {known}.")
        return self.members[known]

    def _check_not_full(self, member_id: str) -> None:
        if len(self.members) >= self.config.max_size and member_id not in self.members:
            raise HeartbeatError(
                ErrorCode.group_max_size_reached,
                f"The consumer group has reached its maximum capacity of "
                f"{self.config.max_size} members.")

    def _check_epoch(self, member: ConsumerGroupMember, request: HeartbeatRequest) -> None:
        """Kafka's ``throwIfConsumerGroupMemberEpochIsInvalid``."""
        received = request.member_epoch
        if received > member.member_epoch:
            raise HeartbeatError(
                ErrorCode.fenced_member_epoch,
                f"The consumer group member has a greater member epoch ({received}) than "
                f"the one known by the group coordinator ({member.member_epoch}). The "
                f"member must abandon all its partitions and rejoin.")
        if received < member.member_epoch and (
                received != member.previous_member_epoch
                or not _is_subset(request.owned, member.assigned)):
            raise HeartbeatError(
                ErrorCode.fenced_member_epoch,
                f"The consumer group member has a smaller member epoch ({received}) than "
                f"the one known by the group coordinator ({member.member_epoch}). The "
                f"member must abandon all its partitions and rejoin.")

    def _joining_member(self, request: HeartbeatRequest) -> tuple[ConsumerGroupMember, bool]:
        """(the member a heartbeat is for, whether it is new). Epoch 0 creates it, or
        takes over a static member that left, or restarts a known member (which joins
        with nothing: what it held is free)."""
        member_id = request.member_id
        instance_id = request.instance_id
        if request.member_epoch != NEW_MEMBER_EPOCH:
            if instance_id is None:
                member = self._member(member_id)
            else:
                member = self._static_member(instance_id, member_id)
            self._check_epoch(member, request)
            return member, False
        existing_static = (None if instance_id is None
                           else self.static_members.get(instance_id))
        if existing_static is not None and existing_static != member_id:
            old = self.members[existing_static]
            # (a classic member's instance is taken over at once, as Kafka's
            # getOrMaybeSubscribeStaticConsumerGroupMember: its client switched protocol)
            if old.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH and old.classic is None:
                raise HeartbeatError(
                    ErrorCode.unreleased_instance_id,
                    f"Static member {member_id} with instance id {instance_id} cannot join "
                    f"the group because the instance id is owned by {old.member_id} member.")
            return self._replace_static_member(old, member_id), False
        known = self.members.get(member_id)
        if known is None:
            self._check_not_full(member_id)
            return ConsumerGroupMember(member_id, instance_id=instance_id), True
        member = known
        # a known member rejoining with epoch 0 (after being fenced, or restarted with
        # the same id): it owns nothing now (the request says so), so it starts over
        self._release(member)
        member.assigned, member.pending_revocation = {}, {}
        member.member_epoch, member.previous_member_epoch = NEW_MEMBER_EPOCH, -1
        member.state, member.revocation_deadline_ms = MemberState.STABLE, None
        return member, False

    def _replace_static_member(
        self, old: ConsumerGroupMember, new_id: str
    ) -> ConsumerGroupMember:
        """A new instance of a static member that left (epoch -2) takes over its member:
        the same assignment and target, under the new member id, without a rebalance."""
        assert old.instance_id is not None
        # the new id may name another member already (one restarting as this instance,
        # a client reusing ids): it is fenced first, so what it holds is free and the
        # group epoch moves to reassign it
        self.remove_member(new_id)
        self._release(old)
        del self.members[old.member_id]
        member = replace(old, member_id=new_id, member_epoch=NEW_MEMBER_EPOCH,
                         previous_member_epoch=NEW_MEMBER_EPOCH,
                         assigned=dict(old.assigned), pending_revocation={},
                         state=MemberState.STABLE, revocation_deadline_ms=None)
        self.members[new_id] = member
        self.static_members[old.instance_id] = new_id
        target = self.target.pop(old.member_id, None)
        if target is not None:
            self.target[new_id] = target
        self._hold(member)
        return member

    def _heartbeat(
        self, request: HeartbeatRequest, topics: Mapping[str, TopicMetadata], now_ms: int
    ) -> HeartbeatResult:
        member, is_new = self._joining_member(request)
        old_assigned = dict(member.assigned)
        old_subscription = None if is_new else member.subscribed_topic_names

        # 1. update the member; the group epoch moves when a subscription changed
        if request.instance_id is not None and request.instance_id != member.instance_id:
            # a known member rejoining (epoch 0) under another instance id: the new id
            # maps to it (Kafka's updateMember puts it), and the old one no longer does,
            # as a group loaded from the member's record would have it
            if not is_new:
                self._forget_instance(member)
                self.static_members[request.instance_id] = member.member_id
            member.instance_id = request.instance_id
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        if request.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        assignor_moved = False
        if request.server_assignor is not None and (
                request.server_assignor != member.server_assignor):
            # the group epoch moves when the group's preferred assignor changes with it
            # (Kafka's hasPreferredServerAssignorChanged, KAFKA-20434): the target is
            # then computed again by the assignor most members now ask for
            preferred = self._preferred_assignor()
            member.server_assignor = request.server_assignor
            assignor_moved = not is_new and self._preferred_assignor() != preferred
        if request.subscribed_topic_names is not None:
            member.subscribed_topic_names = frozenset(request.subscribed_topic_names)
        regex_bump = self._update_regex(member, request.subscribed_topic_regex)
        member.client_id, member.client_host = request.client_id, request.client_host
        # a ConsumerGroupHeartbeat speaks the consumer protocol (Kafka's
        # setClassicMemberMetadata(null)), whatever the member was
        member.classic, member.classic_deadline_ms = None, None
        if is_new:
            self.members[member.member_id] = member
            if member.instance_id is not None:
                self.static_members[member.instance_id] = member.member_id
        # (the same frozenset when not sent: not compared name by name)
        subscription_moved = member.subscribed_topic_names is not old_subscription and (
            member.subscribed_topic_names != old_subscription)
        self._move_and_reconcile(member, subscription_moved or regex_bump, assignor_moved,
                                 topics, request.owned, now_ms)
        member.session_deadline_ms = now_ms + self.config.session_timeout_ms

        full_request = request.member_epoch == NEW_MEMBER_EPOCH or (
            request.rebalance_timeout_ms != -1 and request.owned is not None and (
                request.subscribed_topic_names is not None
                or request.subscribed_topic_regex is not None))
        assignment = (dict(member.assigned)
                      if full_request or member.assigned != old_assigned else None)
        return HeartbeatResult(
            ErrorCode.none, None, member.member_id, member.member_epoch,
            self.config.heartbeat_interval_ms, assignment,
        )

    # ================================================================ regular expressions
    def _update_regex(self, member: ConsumerGroupMember, regex: str | None) -> bool:
        """A member's SubscribedTopicRegex (None: unchanged), as Kafka's
        ``maybeUpdateRegularExpressions``; whether the group epoch must move. Called
        before a new member is in the group."""
        old = member.subscribed_topic_regex
        if regex is None or regex == old:
            return False
        counts = self.subscribed_regexes()  # before this change
        bump = False
        if old:
            if self.member_topics(member) != member.subscribed_topic_names:
                bump = True  # its expression's topics leave its subscription
            if counts.get(old, 0) == 1 and self.members.get(member.member_id) is member:
                self.resolved_regexes.pop(old, None)  # its last subscriber
        member.subscribed_topic_regex = regex
        self._subscriptions_changed()
        if regex and regex in self.resolved_regexes:
            bump = True  # resolved for others already: the member gets it now
        return bump

    def regex_refresh_due(self, now_ms: int, topics_version: int) -> frozenset[str] | None:
        """The expressions to resolve now, None when no refresh is due (Kafka 4.0's
        conditions): the group subscribes to some, its last refresh is older than
        ``REGEX_BATCH_REFRESH_INTERVAL_MS``, and one is not resolved yet or the cluster's
        topics changed since (``topics_version``, a count the caller moves on every topic
        created or changed). The caller runs at most one refresh of a group at a time."""
        counts = self.subscribed_regexes()
        if not counts:
            return None
        last = self.regex_refreshed_ms
        if last is not None and now_ms <= last + self.config.regex_refresh_interval_ms:
            return None
        regexes = frozenset(counts)
        if regexes != self.resolved_regexes.keys() or self.regex_version < topics_version:
            return regexes
        return None

    def apply_resolved(
        self, resolved: Mapping[str, AbstractSet[str]], topics: Mapping[str, TopicMetadata],
        topics_version: int, started_ms: int,
    ) -> bool:
        """A refresh's result (Kafka's ``handleRegularExpressionsResult``): the topics each
        expression matched among ``topics`` when the refresh started (``started_ms``, at
        ``topics_version``), those the member it was made for may describe. An
        expression no member subscribes to any more is skipped. The group epoch moves
        when a resolution or the subscribed topics' metadata changed; returns whether."""
        counts = self.subscribed_regexes()
        bump = False
        for regex, names in resolved.items():
            if not counts.get(regex):
                continue
            new = frozenset(names)
            old = self.resolved_regexes.get(regex)
            if new != (frozenset() if old is None else old.topics):
                bump = True
            self.resolved_regexes[regex] = ResolvedRegularExpression(
                new, topics_version, started_ms)
        self.regex_version = topics_version
        self.regex_refreshed_ms = started_ms
        self._subscriptions_changed()
        metadata = _lookup(self.subscribed_topics(), topics)
        if metadata != self.subscription_metadata:
            self.subscription_metadata = metadata
            bump = True
        if bump:
            self.group_epoch += 1
        return bump

    # ================================================================ target assignment
    def _move_and_reconcile(
        self, member: ConsumerGroupMember, subscription_moved: bool, bump: bool,
        topics: Mapping[str, TopicMetadata], owned: Assignment | None, now_ms: int,
    ) -> None:
        """The rest of a member's heartbeat (or a classic member's JoinGroup) once the
        member is updated: the group epoch moves when a subscription, ``bump`` or the
        subscribed topics' metadata changed (one move for all); 2. a new target when the
        epoch moved past it; 3. the member reconciled towards its target."""
        if subscription_moved:
            self._subscriptions_changed()
        metadata = _lookup(self.subscribed_topics(), topics)
        if metadata != self.subscription_metadata:
            self.subscription_metadata = metadata
            bump = True
        if bump or subscription_moved:
            self.group_epoch += 1
        if self.group_epoch > self.assignment_epoch:
            self._compute_target()
        self._reconcile(member, owned, now_ms)

    def _preferred_assignor(self) -> str:
        """The assignor most members ask for (``ServerAssignor``), else the first of
        ``group.consumer.assignors`` (Kafka's ``computePreferredServerAssignor``)."""
        votes = Counter(m.server_assignor for m in self.members.values()
                        if m.server_assignor is not None)
        if votes:
            best = max(votes.values())
            return min(name for name, count in votes.items() if count == best)
        return self.config.assignors[0]

    def _compute_target(self) -> None:
        by_name = self.subscription_metadata
        subscriptions = {
            m.member_id: MemberSubscription(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                subscribed_topic_ids=frozenset(
                    t.topic_id for t in _lookup(self.member_topics(m), by_name).values()),
                assignment=self.target.get(m.member_id, {}),
            )
            for m in self.members.values()
        }
        subscribed = {
            t.topic_id: SubscribedTopic(topic_id=t.topic_id, name=t.name,
                                        num_partitions=t.num_partitions, partition_racks={})
            for t in by_name.values()
        }
        self.assignor_name = self._preferred_assignor()
        result = ASSIGNORS[self.assignor_name].assign(subscriptions, subscribed)
        self.target = {
            member_id: {tid: frozenset(ps) for tid, ps in result.get(member_id, {}).items() if ps}
            for member_id in self.members
        }
        self.assignment_epoch = self.group_epoch

    # ================================================================ reconciliation
    def _reconcile(
        self, member: ConsumerGroupMember, owned: Assignment | None, now_ms: int
    ) -> None:
        """Kafka's ``CurrentAssignmentBuilder.build``: one step of ``member`` towards its
        target; the partition owners are kept in step."""
        if member.state == MemberState.STABLE:
            if member.member_epoch == self.assignment_epoch:
                return
        elif member.state == MemberState.UNREVOKED_PARTITIONS and _owns_any(
                owned, member.pending_revocation):
            return
        self._release(member)
        self._next_assignment(member, owned)
        self._hold(member)
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if member.revocation_deadline_ms is None:
                member.revocation_deadline_ms = now_ms + member.rebalance_timeout_ms
        else:
            member.revocation_deadline_ms = None

    def _next_assignment(self, member: ConsumerGroupMember, owned: Assignment | None) -> None:
        """Kafka's ``computeNextAssignment`` (called with the member's partitions not
        counted in the owners)."""
        target = self.target.get(member.member_id, {})
        subscribed_ids = {t.topic_id for t in _lookup(self.member_topics(member),
                                                      self.subscription_metadata).values()}
        keep: dict[uuid.UUID, frozenset[int]] = {}
        revoke: dict[uuid.UUID, frozenset[int]] = {}
        gain: dict[uuid.UUID, frozenset[int]] = {}
        unreleased = False
        for topic_id in set(target) | set(member.assigned):
            wanted = target.get(topic_id, frozenset()) if topic_id in subscribed_ids else (
                frozenset())
            current = member.assigned.get(topic_id, frozenset())
            kept = current & wanted
            free = {p for p in wanted - kept if (topic_id, p) not in self._owners}
            unreleased = unreleased or len(free) < len(wanted - kept)
            if kept:
                keep[topic_id] = kept
            if current - kept:
                revoke[topic_id] = current - kept
            if free:
                gain[topic_id] = frozenset(free)
        if revoke and _owns_any(owned, revoke):
            # give up first, in the same epoch
            member.state = MemberState.UNREVOKED_PARTITIONS
            member.assigned, member.pending_revocation = keep, revoke
            return
        for topic_id, partitions in gain.items():
            keep[topic_id] = keep.get(topic_id, frozenset()) | partitions
        member.assigned, member.pending_revocation = keep, {}
        member.state = (MemberState.UNRELEASED_PARTITIONS if unreleased
                        else MemberState.STABLE)
        if member.member_epoch != self.assignment_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = self.assignment_epoch

    def _release(self, member: ConsumerGroupMember) -> None:
        for key in member.held():
            if self._owners.get(key) == member.member_id:
                del self._owners[key]

    def _hold(self, member: ConsumerGroupMember) -> None:
        for key in member.held():
            holder = self._owners.setdefault(key, member.member_id)
            if holder != member.member_id:
                raise RuntimeError(
                    f"group {self.group_id}: partition {key} given to {member.member_id} "
                    f"while {holder} holds it")


def _lookup(names: AbstractSet[str], topics: Mapping[str, TopicMetadata]
            ) -> dict[str, TopicMetadata]:
    """The topics of ``topics`` that ``names`` names, at the cost of the smaller of the
    two: names by the million (a hostile subscription, most of them not topics) cost per
    topic of the cluster, not per name."""
    if len(names) > len(topics):
        return {name: topics[name] for name in topics if name in names}
    return {name: topics[name] for name in names if name in topics}


def _pairs(assignment: Assignment) -> Iterable[tuple[uuid.UUID, int]]:
    for topic_id, partitions in assignment.items():
        for partition in partitions:
            yield topic_id, partition


def _owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the member (by its owned list; None: not told, so assume so) still owns
    any of ``partitions``."""
    if owned is None:
        return True
    return any(owned.get(topic_id, frozenset()) & ps for topic_id, ps in partitions.items())


def _is_subset(owned: Assignment | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    return all(ps <= assigned.get(topic_id, frozenset()) for topic_id, ps in owned.items()
               if ps)
