"""A consumer group's state from its records in ``__consumer_offsets``, and back (KIP-848).

Sans-I/O. Kafka 4 writes every change of a consumer group as the records of
:mod:`odradek.coordinator.consumer_group_records` and rebuilds the group on a coordinator
failover by replaying them in log order (``GroupMetadataManager.replay`` per record type,
then ``onLoaded``). This module does both halves on a plain :class:`ConsumerGroupSnapshot`
(group epoch, subscribed topics' metadata, members, target assignment and its epoch,
each member's current assignment, resolved regular expressions):

- :class:`ConsumerGroupReplayer` applies records one at a time, as a loader reads them
  (:func:`replay` for a whole sequence). Each record sets the one piece its key names; a
  tombstone clears it. As in Kafka, a record of any type creates its group (and a member
  record its member) when missing, a tombstone of something absent is ignored, and the
  tombstones of a deletion must come in order — a group tombstone while it still has
  members or a target assignment, a target-assignment-metadata tombstone while the target
  still has members, or a member tombstone before its current-assignment and
  target-assignment tombstones is :class:`ConsumerGroupReplayError` (Kafka's
  ``IllegalStateException``, which fails the load). A current-assignment tombstone leaves
  the member with epochs -1 and no partitions until its member tombstone.
- :func:`records_for_change` is the inverse: the records that turn ``before`` into
  ``after`` (``None`` for a group that does not exist), in the order Kafka writes them
  (``GroupMetadataManager.consumerGroupHeartbeat``, ``removeMember``,
  ``ConsumerGroup.createGroupTombstoneRecords``)::

      1. each departed member: current assignment, target assignment and member metadata
         tombstones (removeMember / a fenced member);
      2. each new or changed member: ConsumerGroupMemberMetadata;
      3. each new, changed or dropped resolved regular expression;
      4. ConsumerGroupPartitionMetadata, when the subscribed topics' metadata changed;
      5. ConsumerGroupMetadata, when the group epoch moved (always for a new group);
      6. each new or changed member of the target assignment (a tombstone for a member
         left out of it), then
      7. ConsumerGroupTargetAssignmentMetadata, when the assignment epoch moved
         (TargetAssignmentBuilder: members first, then the epoch);
      8. each new or changed current member assignment (the reconciliation).

  A deleted group (``after`` None) is Kafka's ``createGroupTombstoneRecords``: current
  assignment tombstones of every member, target assignment tombstones, the target
  assignment metadata tombstone, member metadata tombstones, regular expression
  tombstones, the partition metadata tombstone, the group metadata tombstone.

So ``replay(records_for_change(None, s)) == {s.group_id: s}``, and replaying the records of
every change in turn gives the last snapshot (tests check both on random changes).

What replay does not do (the caller's, as Kafka's ``onLoaded``): start each member's
session timer (``group.consumer.session.timeout.ms`` from the load) and, for a member in
``unrevoked_partitions``, its rebalance timer; a member loaded is otherwise exactly as
the records left it, mid-reconciliation included.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from odradek.coordinator.consumer_group_records import (
    MEMBER_STATE_STABLE,
    ClassicMemberMetadata,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupValue,
    TopicMetadata,
    TopicPartitions,
    decode_key,
    decode_value,
)

__all__ = [
    "LEAVE_GROUP_MEMBER_EPOCH",
    "Assignment",
    "ConsumerGroupRecord",
    "ConsumerGroupReplayError",
    "ConsumerGroupReplayer",
    "ConsumerGroupSnapshot",
    "MemberSnapshot",
    "assignment_from_record",
    "assignment_to_record",
    "encode_record",
    "records_for_change",
    "replay",
]

LEAVE_GROUP_MEMBER_EPOCH = -1  # what a current-assignment tombstone leaves (Kafka's)

Assignment = Mapping[uuid.UUID, frozenset[int]]
"""Partitions by topic id; topics without partitions are left out."""

ConsumerGroupRecord = tuple[ConsumerGroupKey, ConsumerGroupValue | None]
"""A key and its value, None for a tombstone."""


class ConsumerGroupReplayError(ValueError):
    """Records out of the order Kafka writes them (Kafka's load fails the same way)."""


@dataclass(slots=True)
class MemberSnapshot:
    """A member: its subscription (ConsumerGroupMemberMetadata) and where it is in its
    reconciliation (ConsumerGroupCurrentMemberAssignment). Defaults are Kafka's
    ``ConsumerGroupMember.Builder``'s, what a member has before either record."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic_member_metadata: ClassicMemberMetadata | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = MEMBER_STATE_STABLE  # consumer_group_records.MEMBER_STATE_*
    assigned: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    pending_revocation: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)

    def metadata_value(self) -> ConsumerGroupMemberMetadataValue:
        return ConsumerGroupMemberMetadataValue(
            instance_id=self.instance_id,
            rack_id=self.rack_id,
            client_id=self.client_id,
            client_host=self.client_host,
            subscribed_topic_names=self.subscribed_topic_names,
            subscribed_topic_regex=self.subscribed_topic_regex,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            server_assignor=self.server_assignor,
            classic_member_metadata=self.classic_member_metadata,
        )

    def assignment_value(self) -> ConsumerGroupCurrentMemberAssignmentValue:
        return ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=self.member_epoch,
            previous_member_epoch=self.previous_member_epoch,
            state=self.state,
            assigned_partitions=assignment_to_record(self.assigned),
            partitions_pending_revocation=assignment_to_record(self.pending_revocation),
        )


@dataclass(slots=True)
class ConsumerGroupSnapshot:
    """A consumer group as its records describe it. ``assignment_epoch`` -1 means its
    target assignment metadata was deleted (the group is being deleted)."""

    group_id: str
    group_epoch: int = 0
    subscription_metadata: dict[str, TopicMetadata] = field(default_factory=dict)
    members: dict[str, MemberSnapshot] = field(default_factory=dict)
    target_assignment: dict[str, dict[uuid.UUID, frozenset[int]]] = field(default_factory=dict)
    assignment_epoch: int = 0
    resolved_regular_expressions: dict[str, ConsumerGroupRegularExpressionValue] = field(
        default_factory=dict
    )


def assignment_to_record(assignment: Assignment) -> tuple[TopicPartitions, ...]:
    """An assignment as records carry it: topics by id, partitions ascending (Kafka's
    order is its hash map's; any order reads back the same)."""
    return tuple(
        TopicPartitions(topic_id, tuple(sorted(partitions)))
        for topic_id, partitions in sorted(assignment.items(), key=lambda kv: kv[0].bytes)
        if partitions
    )


def assignment_from_record(
    topic_partitions: Iterable[TopicPartitions],
) -> dict[uuid.UUID, frozenset[int]]:
    out: dict[uuid.UUID, frozenset[int]] = {}
    for tp in topic_partitions:
        if tp.partitions:
            out[tp.topic_id] = out.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    return out


def encode_record(record: ConsumerGroupRecord) -> tuple[bytes, bytes | None]:
    """The key and value bytes of a record (value None: a tombstone)."""
    key, value = record
    return key.encode(), None if value is None else value.encode()


# -- replay -----------------------------------------------------------------------------


class ConsumerGroupReplayer:
    """Consumer groups rebuilt from their records, one :meth:`replay` per record in log
    order (Kafka's ``GroupMetadataManager.replay``)."""

    def __init__(self) -> None:
        self.groups: dict[str, ConsumerGroupSnapshot] = {}

    def replay_bytes(self, key: bytes, value: bytes | None) -> bool:
        """Decode and apply one record of ``__consumer_offsets``; False (nothing done)
        when it is not a consumer group record. Raises ``RecordFormatError`` on bytes
        that do not decode, :class:`ConsumerGroupReplayError` on records out of order."""
        decoded = decode_key(key)
        if decoded is None:
            return False
        self.replay(decoded, decode_value(decoded, value))
        return True

    def replay(self, key: ConsumerGroupKey, value: ConsumerGroupValue | None) -> None:
        group_id = key.group_id
        group = self.groups.get(group_id)
        if value is None and group is None:
            return  # a tombstone of a group that is not there
        if group is None:
            group = self.groups[group_id] = ConsumerGroupSnapshot(group_id)
        match key:
            case ConsumerGroupMetadataKey():
                if value is None:
                    self._delete_group(group)
                else:
                    assert isinstance(value, ConsumerGroupMetadataValue)
                    group.group_epoch = value.epoch
            case ConsumerGroupPartitionMetadataKey():
                if value is None:
                    group.subscription_metadata = {}
                else:
                    assert isinstance(value, ConsumerGroupPartitionMetadataValue)
                    group.subscription_metadata = {t.topic_name: t for t in value.topics}
            case ConsumerGroupMemberMetadataKey():
                self._replay_member_metadata(group, key.member_id, value)
            case ConsumerGroupTargetAssignmentMetadataKey():
                if value is None:
                    if group.target_assignment:
                        raise ConsumerGroupReplayError(
                            f"tombstone of the target assignment of group {group_id!r} while "
                            f"it still has {len(group.target_assignment)} members"
                        )
                    group.assignment_epoch = -1
                else:
                    assert isinstance(value, ConsumerGroupTargetAssignmentMetadataValue)
                    group.assignment_epoch = value.assignment_epoch
            case ConsumerGroupTargetAssignmentMemberKey():
                if value is None:
                    group.target_assignment.pop(key.member_id, None)
                else:
                    assert isinstance(value, ConsumerGroupTargetAssignmentMemberValue)
                    group.target_assignment[key.member_id] = assignment_from_record(
                        value.topic_partitions
                    )
            case ConsumerGroupCurrentMemberAssignmentKey():
                self._replay_current_assignment(group, key.member_id, value)
            case ConsumerGroupRegularExpressionKey():
                if value is None:
                    group.resolved_regular_expressions.pop(key.regular_expression, None)
                else:
                    assert isinstance(value, ConsumerGroupRegularExpressionValue)
                    group.resolved_regular_expressions[key.regular_expression] = value

    def _delete_group(self, group: ConsumerGroupSnapshot) -> None:
        gid = group.group_id
        if group.members:
            raise ConsumerGroupReplayError(
                f"tombstone of group {gid!r} while it still has {len(group.members)} members"
            )
        if group.target_assignment:
            raise ConsumerGroupReplayError(
                f"tombstone of group {gid!r} while its target assignment still has "
                f"{len(group.target_assignment)} members"
            )
        if group.assignment_epoch != -1:
            raise ConsumerGroupReplayError(
                f"tombstone of group {gid!r} before the tombstone of its target assignment "
                "metadata"
            )
        del self.groups[gid]

    @staticmethod
    def _replay_member_metadata(
        group: ConsumerGroupSnapshot, member_id: str, value: ConsumerGroupValue | None
    ) -> None:
        member = group.members.get(member_id)
        if value is None:
            if member is None:
                return
            if member.member_epoch != LEAVE_GROUP_MEMBER_EPOCH:
                raise ConsumerGroupReplayError(
                    f"tombstone of member {member_id!r} of group {group.group_id!r} before "
                    "the tombstone of its current assignment"
                )
            if member_id in group.target_assignment:
                raise ConsumerGroupReplayError(
                    f"tombstone of member {member_id!r} of group {group.group_id!r} before "
                    "the tombstone of its target assignment"
                )
            del group.members[member_id]
            return
        assert isinstance(value, ConsumerGroupMemberMetadataValue)
        if member is None:
            member = group.members[member_id] = MemberSnapshot(member_id)
        member.instance_id = value.instance_id
        member.rack_id = value.rack_id
        member.client_id = value.client_id
        member.client_host = value.client_host
        member.subscribed_topic_names = value.subscribed_topic_names
        member.subscribed_topic_regex = value.subscribed_topic_regex
        member.rebalance_timeout_ms = value.rebalance_timeout_ms
        member.server_assignor = value.server_assignor
        member.classic_member_metadata = value.classic_member_metadata

    @staticmethod
    def _replay_current_assignment(
        group: ConsumerGroupSnapshot, member_id: str, value: ConsumerGroupValue | None
    ) -> None:
        member = group.members.get(member_id)
        if value is None:
            if member is None:
                return
            member.member_epoch = LEAVE_GROUP_MEMBER_EPOCH
            member.previous_member_epoch = LEAVE_GROUP_MEMBER_EPOCH
            member.assigned = {}
            member.pending_revocation = {}
            return
        assert isinstance(value, ConsumerGroupCurrentMemberAssignmentValue)
        if member is None:
            member = group.members[member_id] = MemberSnapshot(member_id)
        member.member_epoch = value.member_epoch
        member.previous_member_epoch = value.previous_member_epoch
        member.state = value.state
        member.assigned = assignment_from_record(value.assigned_partitions)
        member.pending_revocation = assignment_from_record(value.partitions_pending_revocation)


def replay(records: Iterable[ConsumerGroupRecord]) -> dict[str, ConsumerGroupSnapshot]:
    """The consumer groups that ``records`` (in log order) leave, by group id."""
    replayer = ConsumerGroupReplayer()
    for key, value in records:
        replayer.replay(key, value)
    return replayer.groups


# -- the inverse: records of a change ---------------------------------------------------


def records_for_change(
    before: ConsumerGroupSnapshot | None, after: ConsumerGroupSnapshot | None
) -> list[ConsumerGroupRecord]:
    """The records, in Kafka's order (module docstring), that take a group from
    ``before`` to ``after``; None for a group that does not exist (before it is created,
    after it is deleted). Empty when nothing the records hold changed."""
    if after is None:
        return [] if before is None else list(_group_tombstones(before))
    if before is not None and before.group_id != after.group_id:
        raise ValueError(f"a change from group {before.group_id!r} to {after.group_id!r}")
    gid = after.group_id
    old = before if before is not None else ConsumerGroupSnapshot(gid)
    out: list[ConsumerGroupRecord] = []

    # 1. departed members
    departed = [m for m in old.members if m not in after.members]
    for member_id in departed:
        out += _member_tombstones(gid, member_id)
    # 2. member subscriptions
    for member_id, member in after.members.items():
        was = old.members.get(member_id)
        if was == member:
            continue  # unchanged (compared before building its records' values)
        if was is None or was.metadata_value() != member.metadata_value():
            out.append((ConsumerGroupMemberMetadataKey(gid, member_id), member.metadata_value()))
    # 3. resolved regular expressions
    for regex in old.resolved_regular_expressions:
        if regex not in after.resolved_regular_expressions:
            out.append((ConsumerGroupRegularExpressionKey(gid, regex), None))
    for regex, resolved in after.resolved_regular_expressions.items():
        if old.resolved_regular_expressions.get(regex) != resolved:
            out.append((ConsumerGroupRegularExpressionKey(gid, regex), resolved))
    # 4. subscription metadata, 5. group epoch
    if old.subscription_metadata != after.subscription_metadata:
        out.append((
            ConsumerGroupPartitionMetadataKey(gid),
            ConsumerGroupPartitionMetadataValue(tuple(after.subscription_metadata.values())),
        ))
    if before is None or old.group_epoch != after.group_epoch:
        out.append((ConsumerGroupMetadataKey(gid), ConsumerGroupMetadataValue(after.group_epoch)))
    # 6. target assignment members, 7. its epoch
    for member_id in old.target_assignment:
        if member_id not in after.target_assignment and member_id not in departed:
            out.append((ConsumerGroupTargetAssignmentMemberKey(gid, member_id), None))
    for member_id, target in after.target_assignment.items():
        # a departed member's target was deleted in 1: one kept is written again
        if old.target_assignment.get(member_id) != target or member_id in departed:
            out.append((
                ConsumerGroupTargetAssignmentMemberKey(gid, member_id),
                ConsumerGroupTargetAssignmentMemberValue(assignment_to_record(target)),
            ))
    if old.assignment_epoch != after.assignment_epoch:
        out.append((
            ConsumerGroupTargetAssignmentMetadataKey(gid),
            ConsumerGroupTargetAssignmentMetadataValue(after.assignment_epoch),
        ))
    # 8. current assignments
    for member_id, member in after.members.items():
        was = old.members.get(member_id)
        if was == member:
            continue
        if was is None or was.assignment_value() != member.assignment_value():
            out.append((
                ConsumerGroupCurrentMemberAssignmentKey(gid, member_id),
                member.assignment_value(),
            ))
    return out


def _member_tombstones(group_id: str, member_id: str) -> list[ConsumerGroupRecord]:
    return [
        (ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id), None),
        (ConsumerGroupTargetAssignmentMemberKey(group_id, member_id), None),
        (ConsumerGroupMemberMetadataKey(group_id, member_id), None),
    ]


def _group_tombstones(group: ConsumerGroupSnapshot) -> Iterator[ConsumerGroupRecord]:
    gid = group.group_id
    for member_id in group.members:
        yield ConsumerGroupCurrentMemberAssignmentKey(gid, member_id), None
    for member_id in {**group.members, **group.target_assignment}:
        yield ConsumerGroupTargetAssignmentMemberKey(gid, member_id), None
    yield ConsumerGroupTargetAssignmentMetadataKey(gid), None
    for member_id in group.members:
        yield ConsumerGroupMemberMetadataKey(gid, member_id), None
    for regex in group.resolved_regular_expressions:
        yield ConsumerGroupRegularExpressionKey(gid, regex), None
    yield ConsumerGroupPartitionMetadataKey(gid), None
    yield ConsumerGroupMetadataKey(gid), None
