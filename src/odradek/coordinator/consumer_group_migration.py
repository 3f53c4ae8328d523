"""Classic members in a consumer group, and the conversions between classic and consumer
groups: KIP-848's online migration (Kafka's ``GroupMetadataManager``:
``validateOnlineUpgrade`` / ``convertToConsumerGroup``, ``classicGroupJoinToConsumerGroup``,
``classicGroupSyncToConsumerGroup``, ``classicGroupHeartbeatToConsumerGroup``,
``classicGroupLeaveToConsumerGroup``, ``validateOnlineDowngrade*`` /
``convertToClassicGroup``; ``ConsumerGroup.fromClassicGroup``,
``ClassicGroup.fromConsumerGroup``).

Sans-I/O, on the :class:`~odradek.coordinator.consumer_group.ConsumerGroup` state machine
and the classic :class:`~odradek.coordinator.group_metadata.GroupMetadata`; the
coordinator writes the records of each change and runs the timers.

How it works:

- **Policy** (``group.consumer.migration.policy``, :class:`MigrationPolicy`): ``upgrade``
  lets a classic group become a consumer group, ``downgrade`` the reverse,
  ``bidirectional`` (Kafka 4.0's default) both, ``disabled`` neither.
- **Upgrade.** An empty classic group gives way to a consumer group (its record is
  tombstoned). A classic group with members converts when a consumer-protocol member
  joins (ConsumerGroupHeartbeat with epoch 0) if the policy allows it, its protocol type
  is ``consumer`` and it has no more members than ``group.consumer.max.size``
  (:func:`upgrade_refusal`); in any state (members waiting in JoinGroup or SyncGroup are
  answered REBALANCE_IN_PROGRESS). :func:`consumer_group_from_classic`: the group epoch
  and the assignment epoch are the classic generation; each classic member becomes a
  Stable member at that epoch, with its subscription (from its ConsumerProtocol
  metadata), its current assignment (from its ConsumerProtocol assignment; plus the
  owned partitions a cooperative client declared) as both its assignment and its target,
  and its classic metadata (session timeout, JoinGroup protocols). The joining member's
  heartbeat then moves the group epoch and the KIP-848 reconciliation proceeds: no
  partition goes to a new owner before its old owner released it.
- **Classic members in a consumer group.** JoinGroup (:func:`classic_join`) updates the
  member (subscription parsed from the ConsumerProtocol metadata), moves the group epoch
  when the subscription or the subscribed topics changed, recomputes the target and
  reconciles the member with the partitions its metadata says it owns (none for an eager
  client, which revoked everything before rejoining); the answer's generation is the
  member epoch and it has no leader, so the client syncs as a follower. SyncGroup
  (:func:`classic_sync`) answers the member's assigned partitions as a ConsumerProtocol
  assignment, or REBALANCE_IN_PROGRESS when the group epoch moved past the member (unless
  it is still revoking). Heartbeat (:func:`classic_heartbeat`) answers
  REBALANCE_IN_PROGRESS when the member must rejoin: the group epoch is ahead of it, it
  has partitions to revoke, or partitions it waits for have been released. Each
  renews the member's classic session timeout; a member that must rejoin has its
  rebalance timeout to do so, and one that joined the same to sync (Kafka's join and
  sync timeouts; a SyncGroup lifts the latter only), else it is fenced. LeaveGroup
  (:func:`classic_leave`) removes classic members only (a consumer-protocol member
  named is UNKNOWN_MEMBER_ID).
- **Downgrade.** When a member is fenced or leaves through ConsumerGroupHeartbeat and
  every remaining member speaks the classic protocol, the group converts back if the
  policy allows it and the remaining members fit ``group.max.size``
  (:func:`downgrade_refusal`). :func:`classic_group_from_consumer`: generation = group
  epoch, protocol type ``consumer``, the protocol every member supports, each member's
  target assignment as its assignment; the coordinator then starts a rebalance, so the
  members rejoin. Also when a classic client replaces the last consumer-protocol member
  as a new instance of its static member (``group.instance.id``): it takes over that
  member's target assignment, and the classic group stays Stable (no rebalance): the
  joining member syncs and gets it.
"""

from __future__ import annotations

import enum
import struct
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from odradek.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    TopicMetadata,
)
from odradek.coordinator.consumer_group_records import ClassicMemberMetadata, ClassicProtocol
from odradek.coordinator.group_metadata import GroupMetadata, MemberMetadata
from odradek.coordinator.group_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    RecordFormatError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from odradek.coordinator.group_state import LOAD_PATHS, GroupState
from odradek.protocol.errors import ErrorCode

__all__ = [
    "MIGRATION_POLICIES",
    "ClassicJoin",
    "ClassicJoinResult",
    "ClassicSyncResult",
    "MigrationError",
    "MigrationPolicy",
    "classic_group_from_consumer",
    "classic_heartbeat",
    "classic_join",
    "classic_leave",
    "classic_sync",
    "consumer_group_from_classic",
    "downgrade_refusal",
    "upgrade_refusal",
]

# ConsumerProtocolAssignment's latest version (a member gets the version it subscribed with)
_LATEST_ASSIGNMENT_VERSION = 3
JOIN_TIMEOUT_REASON = "the classic member failed to join within the rebalance timeout"
SYNC_TIMEOUT_REASON = "the classic member failed to sync within the rebalance timeout"


class MigrationPolicy(enum.Enum):
    """Kafka's ``ConsumerGroupMigrationPolicy`` (``group.consumer.migration.policy``)."""

    DISABLED = "disabled"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    BIDIRECTIONAL = "bidirectional"

    @classmethod
    def parse(cls, value: str) -> MigrationPolicy:
        """Case-insensitive, as Kafka's ``CaseInsensitiveValidString``."""
        try:
            return cls(value.strip().lower())
        except ValueError:
            raise ValueError(
                f"group.consumer.migration.policy must be one of "
                f"{', '.join(MIGRATION_POLICIES)}, not {value!r}") from None

    @property
    def upgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.UPGRADE, MigrationPolicy.BIDIRECTIONAL)

    @property
    def downgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.DOWNGRADE, MigrationPolicy.BIDIRECTIONAL)


MIGRATION_POLICIES = tuple(p.value for p in MigrationPolicy)


class MigrationError(ValueError):
    """A group that cannot be converted: its embedded consumer protocol is malformed."""


# ==================================================================== upgrade
def upgrade_refusal(classic: GroupMetadata, policy: MigrationPolicy,
                    consumer_max_size: int) -> str | None:
    """Why ``classic`` (with members) cannot become a consumer group; None when it can
    (Kafka's ``validateOnlineUpgrade``)."""
    if not policy.upgrade_enabled:
        return "the online upgrade is disabled"
    if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return "the group does not use the consumer embedded protocol"
    if len(classic.members) > consumer_max_size:
        return "the group size exceeds the consumer group maximum size"
    return None


def consumer_group_from_classic(
    classic: GroupMetadata, group: ConsumerGroup, topics: Mapping[str, TopicMetadata],
    now_ms: int,
) -> ConsumerGroup:
    """Fill the new, empty ``group`` with the members of ``classic`` (module docstring);
    raises :class:`MigrationError` when a member's metadata or assignment does not
    decode."""
    generation = classic.generation_id
    group.group_epoch = group.assignment_epoch = generation
    claimed: set[tuple[uuid.UUID, int]] = set()
    members: list[tuple[MemberMetadata, ConsumerGroupMember]] = []
    for member in classic.members.values():
        name = classic.protocol_name or (member.protocols[0][0] if member.protocols else "")
        try:
            subscription = decode_subscription(member.metadata_for(name))
            assignment = decode_assignment(member.assignment)
        except (RecordFormatError, UnicodeDecodeError, KeyError) as exc:
            raise MigrationError(
                f"member {member.member_id} of group {classic.group_id}: the embedded "
                f"consumer protocol is malformed ({exc})") from exc
        assigned = _by_id(assignment.partitions.items(), topics)
        claimed.update((t, p) for t, ps in assigned.items() for p in ps)
        members.append((member, ConsumerGroupMember(
            member.member_id,
            instance_id=member.group_instance_id,
            rack_id=subscription.rack_id,
            client_id=member.client_id,
            client_host=member.client_host,
            rebalance_timeout_ms=member.rebalance_timeout_ms,
            subscribed_topic_names=frozenset(subscription.topics),
            member_epoch=generation,
            previous_member_epoch=generation,
            state=MemberState.STABLE,
            assigned=assigned,
            session_deadline_ms=now_ms + member.session_timeout_ms,
            classic=_classic_metadata(member.session_timeout_ms, member.protocols),
        )))
    for member, converted in members:
        # A cooperative client keeps the partitions it declared owned through a
        # rebalance (its assignment is reset while one completes): they are its too,
        # unless another member's assignment names them.
        name = classic.protocol_name or (member.protocols[0][0] if member.protocols else "")
        owned = _by_id(decode_subscription(member.metadata_for(name)).owned_partitions,
                       topics)
        for topic_id, partitions in owned.items():
            free = frozenset(p for p in partitions if (topic_id, p) not in claimed)
            if free:
                claimed.update((topic_id, p) for p in free)
                converted.assigned[topic_id] = converted.assigned.get(
                    topic_id, frozenset()) | free
        group.members[converted.member_id] = converted
        group.target[converted.member_id] = dict(converted.assigned)
    group.rebuild_derived()
    return group


# ==================================================================== classic members
@dataclass(frozen=True, slots=True)
class ClassicJoin:
    """A JoinGroup, as :func:`classic_join` reads it."""

    member_id: str
    instance_id: str | None
    require_known_member_id: bool  # v4+ (KIP-394)
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class ClassicJoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_name: str | None = None
    message: str | None = None
    # the member a new instance of a static member replaced (its group.instance.id)
    replaced_member_id: str | None = None


@dataclass(frozen=True, slots=True)
class ClassicSyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""
    message: str | None = None


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def supports_classic_protocols(group: ConsumerGroup, protocol_type: str,
                               names: Iterable[str]) -> bool:
    """Kafka's ``ConsumerGroup.supportsClassicProtocols``: the ``consumer`` protocol
    type, and (when the group has classic members) a protocol every one of them
    supports."""
    wanted = set(names)
    if protocol_type != CONSUMER_PROTOCOL_TYPE or not wanted:
        return False
    for member in group.members.values():
        if member.classic is not None:
            wanted &= {p.name for p in member.classic.supported_protocols}
    return bool(wanted)


def classic_join(group: ConsumerGroup, join: ClassicJoin,
                 topics: Mapping[str, TopicMetadata], now_ms: int) -> ClassicJoinResult:
    """A classic member's JoinGroup to ``group`` (module docstring)."""
    try:
        return _classic_join(group, join, topics, now_ms)
    except _Refused as e:
        return ClassicJoinResult(e.code, join.member_id, message=e.message)


def _classic_join(group: ConsumerGroup, join: ClassicJoin,
                  topics: Mapping[str, TopicMetadata], now_ms: int) -> ClassicJoinResult:
    unknown = not join.member_id
    member_id = str(uuid.uuid4()) if unknown else join.member_id
    if len(group.members) >= group.config.max_size and member_id not in group.members:
        raise _Refused(ErrorCode.group_max_size_reached,
                       f"The consumer group has reached its maximum capacity of "
                       f"{group.config.max_size} members.")
    if not supports_classic_protocols(group, join.protocol_type,
                                      (name for name, _ in join.protocols)):
        raise _Refused(ErrorCode.inconsistent_group_protocol,
                       f"Member {member_id}'s protocols are not supported by the group.")
    if join.require_known_member_id and unknown and join.instance_id is None:
        return ClassicJoinResult(ErrorCode.member_id_required, member_id)
    try:
        subscription = decode_subscription(join.protocols[0][1])
    except (RecordFormatError, UnicodeDecodeError) as exc:
        raise _Refused(ErrorCode.inconsistent_group_protocol,
                       f"Malformed embedded consumer protocol: {exc}.") from exc

    replaced = None if join.instance_id is None or not unknown else (
        group.static_members.get(join.instance_id))
    member, is_new = _joining_member(group, member_id, join.instance_id, unknown)
    old_subscription = None if is_new else member.subscribed_topic_names
    # 1. the member; the group epoch moves when its subscription or the subscribed
    # topics' metadata changed
    member.instance_id = join.instance_id if join.instance_id is not None else (
        member.instance_id)
    if subscription.rack_id is not None:
        member.rack_id = subscription.rack_id
    if join.rebalance_timeout_ms != -1:
        member.rebalance_timeout_ms = join.rebalance_timeout_ms
    member.subscribed_topic_names = frozenset(subscription.topics)
    # a classic client subscribes by names only (its JoinGroup carries the names its own
    # pattern matched): an expression of the consumer-protocol member it replaces goes
    regex_dropped = bool(member.subscribed_topic_regex)
    member.subscribed_topic_regex = None
    member.client_id, member.client_host = join.client_id, join.client_host
    member.classic = _classic_metadata(join.session_timeout_ms, join.protocols)
    if is_new:
        group.members[member.member_id] = member
        if member.instance_id is not None:
            group.static_members[member.instance_id] = member.member_id
    # 2. the target, 3. the member reconciled with what its metadata says it owns
    group._move_and_reconcile(
        member, regex_dropped or member.subscribed_topic_names != old_subscription, False,
        topics, _by_id(subscription.owned_partitions, topics), now_ms)
    member.session_deadline_ms = now_ms + join.session_timeout_ms
    member.classic_deadline_ms = now_ms + member.rebalance_timeout_ms
    member.classic_deadline_reason = SYNC_TIMEOUT_REASON
    return ClassicJoinResult(ErrorCode.none, member.member_id, member.member_epoch,
                             join.protocols[0][0], replaced_member_id=replaced)


def _joining_member(group: ConsumerGroup, member_id: str, instance_id: str | None,
                    unknown: bool) -> tuple[ConsumerGroupMember, bool]:
    """Kafka's ``getOrMaybeSubscribe{Dynamic,Static}ConsumerGroupMember`` for a classic
    member: (member, whether new)."""
    if instance_id is None:
        known = group.members.get(member_id)
        if known is None:
            return ConsumerGroupMember(member_id), True
        return known, False
    existing = group.static_members.get(instance_id)
    if unknown:
        if existing is None:
            return ConsumerGroupMember(member_id, instance_id=instance_id), True
        # a new instance of the static member takes over its member and assignment
        old = group.members[existing]
        return group._replace_static_member(old, member_id), False
    if existing is None:
        raise _Refused(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
    if existing != member_id:
        raise _Refused(ErrorCode.fenced_instance_id,
                       f"Static member {member_id} with instance id {instance_id} was "
                       f"fenced by member {existing}.")
    return group.members[existing], False


def _classic_member(group: ConsumerGroup, member_id: str,
                    instance_id: str | None) -> ConsumerGroupMember:
    """Kafka's ``validateConsumerGroupMember`` + ``throwIfMemberDoesNotUseClassicProtocol``."""
    if instance_id is not None:
        known = group.static_members.get(instance_id)
        if known is None:
            raise _Refused(ErrorCode.unknown_member_id,
                           f"Instance id {instance_id} is unknown.")
        if known != member_id:
            raise _Refused(ErrorCode.fenced_instance_id,
                           f"Static member {member_id} with instance id {instance_id} was "
                           f"fenced by member {known}.")
    member = group.members.get(member_id)
    if member is None:
        raise _Refused(ErrorCode.unknown_member_id,
                       f"Member {member_id} is not a member of group {group.group_id}.")
    if member.classic is None:
        raise _Refused(ErrorCode.unknown_member_id,
                       f"Member {member_id} does not use the classic protocol.")
    return member


def _check_generation(member: ConsumerGroupMember, generation_id: int) -> None:
    if generation_id != member.member_epoch:
        raise _Refused(ErrorCode.illegal_generation,
                       f"The request generation id {generation_id} is not equal to the "
                       f"member epoch {member.member_epoch} of member {member.member_id}.")


def _rejoin_by(member: ConsumerGroupMember, now_ms: int) -> None:
    """Kafka's ``scheduleConsumerGroupJoinTimeoutIfAbsent``."""
    if member.classic_deadline_ms is None:
        member.classic_deadline_ms = now_ms + member.rebalance_timeout_ms
        member.classic_deadline_reason = JOIN_TIMEOUT_REASON


def classic_sync(group: ConsumerGroup, member_id: str, instance_id: str | None,
                 generation_id: int, protocol_type: str | None, protocol_name: str | None,
                 now_ms: int) -> ClassicSyncResult:
    """A classic member's SyncGroup: its assigned partitions (module docstring)."""
    try:
        member = _classic_member(group, member_id, instance_id)
        _check_generation(member, generation_id)
        assert member.classic is not None
        name = member.classic.supported_protocols[0].name
        if protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE:
            raise _Refused(ErrorCode.inconsistent_group_protocol,
                           f"The protocol type {protocol_type} is not the group's "
                           f"{CONSUMER_PROTOCOL_TYPE}.")
        if protocol_name is not None and protocol_name != name:
            raise _Refused(ErrorCode.inconsistent_group_protocol,
                           f"The protocol name {protocol_name} is not {name}, returned in "
                           f"the join response.")
        if (group.group_epoch > member.member_epoch
                and member.state != MemberState.UNREVOKED_PARTITIONS):
            _rejoin_by(member, now_ms)
            raise _Refused(ErrorCode.rebalance_in_progress,
                           f"A new rebalance is triggered in group {group.group_id} and "
                           f"member {member_id} should rejoin to catch up.")
    except _Refused as e:
        return ClassicSyncResult(e.code, message=e.message)
    if member.classic_deadline_reason == SYNC_TIMEOUT_REASON:
        # the sync timeout only: a rejoin a Heartbeat asked for is still due (Kafka
        # cancels the join timeout at the JoinGroup alone)
        member.classic_deadline_ms = None
    member.session_deadline_ms = now_ms + member.classic.session_timeout_ms
    return ClassicSyncResult(ErrorCode.none, protocol_type or CONSUMER_PROTOCOL_TYPE,
                             protocol_name or name, assignment_bytes(group, member))


def assignment_bytes(group: ConsumerGroup, member: ConsumerGroupMember) -> bytes:
    """The member's assigned partitions as a ConsumerProtocol assignment, at the version
    of its subscription (Kafka's ``prepareAssignment``)."""
    names = {t.topic_id: t.name for t in group.subscription_metadata.values()}
    partitions = {names[tid]: sorted(ps) for tid, ps in member.assigned.items()
                  if tid in names}
    return encode_assignment(dict(sorted(partitions.items())),
                             _subscription_version(member.classic))


def _subscription_version(classic: ClassicMemberMetadata | None) -> int:
    if classic is None or not classic.supported_protocols:
        return 0
    metadata = classic.supported_protocols[0].metadata
    if len(metadata) < 2:
        return 0
    version = int(struct.unpack_from(">h", metadata)[0])
    return min(max(version, 0), _LATEST_ASSIGNMENT_VERSION)


def classic_heartbeat(group: ConsumerGroup, member_id: str, instance_id: str | None,
                      generation_id: int, now_ms: int) -> tuple[ErrorCode, str | None]:
    """A classic member's Heartbeat: NONE, or REBALANCE_IN_PROGRESS when it must rejoin
    (module docstring)."""
    try:
        member = _classic_member(group, member_id, instance_id)
        _check_generation(member, generation_id)
    except _Refused as e:
        return e.code, e.message
    assert member.classic is not None
    member.session_deadline_ms = now_ms + member.classic.session_timeout_ms
    if (member.member_epoch < group.group_epoch
            or member.state == MemberState.UNREVOKED_PARTITIONS
            or (member.state == MemberState.UNRELEASED_PARTITIONS
                and not waiting_on_unreleased(group, member))):
        _rejoin_by(member, now_ms)
        return ErrorCode.rebalance_in_progress, None
    return ErrorCode.none, None


def waiting_on_unreleased(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
    """Whether a partition of the member's target it does not have yet is still held by
    another member (Kafka's ``waitingOnUnreleasedPartition``)."""
    for topic_id, partitions in group.target.get(member.member_id, {}).items():
        have = member.assigned.get(topic_id, frozenset())
        for partition in partitions - have:
            holder = group.owner_of(topic_id, partition)
            if holder is not None and holder != member.member_id:
                return True
    return False


def classic_leave(group: ConsumerGroup, members: Sequence[tuple[str, str | None]]
                  ) -> list[tuple[ErrorCode, str]]:
    """A LeaveGroup: (error, member id) per member asked to leave; the classic members
    among them are removed (Kafka's ``classicGroupLeaveToConsumerGroup``)."""
    out: list[tuple[ErrorCode, str]] = []
    for member_id, instance_id in members:
        try:
            if instance_id is None:
                member = _classic_member(group, member_id, None)
            else:
                known = group.static_members.get(instance_id)
                if known is None:
                    raise _Refused(ErrorCode.unknown_member_id,
                                   f"Instance id {instance_id} is unknown.")
                # an admin removal names the instance only
                member = _classic_member(group, member_id or known, instance_id)
        except _Refused as e:
            out.append((e.code, member_id))
            continue
        group.remove_member(member.member_id)
        out.append((ErrorCode.none, member.member_id))
    return out


# ==================================================================== downgrade
def downgrade_refusal(group: ConsumerGroup, leaving: Iterable[str], policy: MigrationPolicy,
                      classic_max_size: int) -> str | None:
    """Why ``group`` does not become a classic group when ``leaving`` leave it; None when
    it does (Kafka's ``validateOnlineDowngradeWithFencedMember``)."""
    gone = set(leaving)
    remaining = [m for m in group.members.values() if m.member_id not in gone]
    if any(m.classic is None for m in remaining):
        return "a member uses the consumer protocol"
    if not remaining:
        return "it is empty"
    if not policy.downgrade_enabled:
        return "the online downgrade is disabled"
    if len(remaining) > classic_max_size:
        return "its group size is greater than the classic group max size"
    return None


def classic_group_from_consumer(group: ConsumerGroup, leaving: Iterable[str],
                                now_ms: int, generation: int | None = None) -> GroupMetadata:
    """The classic group ``group`` becomes without ``leaving`` (module docstring): Stable
    at generation = group epoch (``generation``: the epoch before the leaving members
    were removed, when they already are), for the coordinator to start a rebalance in."""
    gone = set(leaving)
    classic = GroupMetadata(group.group_id, state_timestamp_ms=now_ms,
                            generation_id=group.group_epoch if generation is None
                            else generation)
    names = {t.topic_id: t.name for t in group.subscription_metadata.values()}
    for member in group.members.values():
        if member.member_id in gone or member.classic is None:
            continue
        classic.add(MemberMetadata(
            member.member_id, member.instance_id, member.client_id, member.client_host,
            member.rebalance_timeout_ms, member.classic.session_timeout_ms,
            CONSUMER_PROTOCOL_TYPE,
            [(p.name, p.metadata) for p in member.classic.supported_protocols],
            last_heartbeat_ms=now_ms,
        ))
    classic.protocol_name = classic.select_protocol()
    for member_id, classic_member in classic.members.items():
        target = group.target.get(member_id, {})
        partitions = {names[tid]: sorted(ps) for tid, ps in target.items() if tid in names}
        version = _subscription_version(ClassicMemberMetadata(0, (ClassicProtocol(
            classic.protocol_name, classic_member.metadata_for(classic.protocol_name)),)))
        classic_member.assignment = encode_assignment(dict(sorted(partitions.items())),
                                                      version)
    for state in LOAD_PATHS[GroupState.STABLE]:
        classic.transition_to(state, now_ms)
    return classic


# ==================================================================== helpers
def _classic_metadata(session_timeout_ms: int,
                      protocols: Iterable[tuple[str, bytes]]) -> ClassicMemberMetadata:
    return ClassicMemberMetadata(
        session_timeout_ms, tuple(ClassicProtocol(name, bytes(md)) for name, md in protocols))


def _by_id(partitions: Iterable[tuple[str, Iterable[int]]],
           topics: Mapping[str, TopicMetadata]) -> dict[uuid.UUID, frozenset[int]]:
    """Partitions named by topic name, by topic id (topics not in ``topics`` and
    partitions out of their range left out)."""
    out: dict[uuid.UUID, frozenset[int]] = {}
    for name, ps in partitions:
        topic = topics.get(name)
        if topic is None:
            continue
        valid = frozenset(p for p in ps if 0 <= p < topic.num_partitions)
        if valid:
            out[topic.topic_id] = out.get(topic.topic_id, frozenset()) | valid
    return out
