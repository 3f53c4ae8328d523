"""A live consumer group to its records in ``__consumer_offsets`` and back (KIP-848).

Sans-I/O glue between the state machine of :mod:`odradek.coordinator.consumer_group` and
the records of :mod:`odradek.coordinator.consumer_group_replay` (Kafka's
``GroupMetadataManager`` does both halves in place: every change of a
``ConsumerGroup`` is written as records, and ``replay`` + ``onLoaded`` rebuild it).

How it works:

- :func:`snapshot_of` reads what a group's records hold from the live
  :class:`~odradek.coordinator.consumer_group.ConsumerGroup`: group and assignment
  epochs, the subscribed topics' metadata, each member's subscription, epochs,
  reconciliation state and partitions (assigned and pending revocation), the target
  assignment. Timers and the partition owners are not in the records: they are derived.
- :func:`records_for_heartbeat` is :func:`~odradek.coordinator.consumer_group_replay.
  records_for_change` between the snapshots before and after a change: the records to
  append, in Kafka's order (see its docstring for where the coordinator calls it).
- :func:`restore` is the loader's half (Kafka's ``onLoaded``): a group from the snapshot
  a :class:`~odradek.coordinator.consumer_group_replay.ConsumerGroupReplayer` left,
  with every structure the records do not carry rebuilt: the owner of each partition
  (assigned or pending revocation), the static members (``group.instance.id`` -> member
  id), the preferred server assignor, and the timers: each member's session deadline is
  ``now + group.consumer.session.timeout.ms`` (a classic member's: its own session
  timeout, from its ClassicMemberMetadata) and a member still revoking partitions gets
  its rebalance deadline ``now + its rebalance timeout`` (:func:`restart_timers`). A group
  restored mid-reconciliation carries on as the original would have after the same
  timers restart: members in ``unrevoked_partitions`` keep their epoch until they
  acknowledge, members in ``unreleased_partitions`` get the partitions as they are
  released.

Regular-expression subscriptions: each member's ``SubscribedTopicRegex`` is in its
member record, each resolution in a ConsumerGroupRegularExpression record (topics,
version, timestamp). A restored group keeps its resolutions and their timestamps (so the
10 s between refreshes holds across a failover) but not their version, which counts the
topic changes seen by the broker that wrote it: the restored group's next due refresh
resolves its expressions again (:meth:`ConsumerGroup.regex_refresh_due`), and only a
changed resolution moves its epoch.

What the state machine cannot hold, so :func:`restore` drops it (:func:`unsupported`
names it, for the loader to log): a member whose current assignment was tombstoned
without its member record (epoch -1: a removal cut in half, which one atomic batch per
change never leaves).
"""

from __future__ import annotations

import functools
from dataclasses import replace

from odradek.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroupMember,
    MemberState,
    ResolvedRegularExpression,
    TopicMetadata,
)
from odradek.coordinator.consumer_group_records import (
    MEMBER_STATE_STABLE,
    MEMBER_STATE_UNRELEASED_PARTITIONS,
    MEMBER_STATE_UNREVOKED_PARTITIONS,
    ConsumerGroupRegularExpressionValue,
)
from odradek.coordinator.consumer_group_records import TopicMetadata as RecordTopicMetadata
from odradek.coordinator.consumer_group_replay import (
    LEAVE_GROUP_MEMBER_EPOCH,
    ConsumerGroupRecord,
    ConsumerGroupSnapshot,
    MemberSnapshot,
    records_for_change,
)

__all__ = [
    "ConsumerGroupRestoreError",
    "member_snapshot",
    "records_for_heartbeat",
    "records_for_resolution",
    "restart_timers",
    "restore",
    "snapshot_of",
    "unsupported",
]

# MemberState <-> the State int8 of ConsumerGroupCurrentMemberAssignmentValue
_STATE_CODES = {
    MemberState.STABLE: MEMBER_STATE_STABLE,
    MemberState.UNREVOKED_PARTITIONS: MEMBER_STATE_UNREVOKED_PARTITIONS,
    MemberState.UNRELEASED_PARTITIONS: MEMBER_STATE_UNRELEASED_PARTITIONS,
}
_STATES = {code: state for state, code in _STATE_CODES.items()}


class ConsumerGroupRestoreError(ValueError):
    """A snapshot no live group can have (a partition held by two members, an unknown
    member state): the records are corrupt, and the load fails as Kafka's would."""


# -- live group -> snapshot -------------------------------------------------------------


def snapshot_of(group: ConsumerGroup) -> ConsumerGroupSnapshot:
    """What the records of ``group`` hold now (a copy: later changes of the group do not
    show in it). Members and the target assignment keep the group's order."""
    return ConsumerGroupSnapshot(
        group_id=group.group_id,
        group_epoch=group.group_epoch,
        subscription_metadata=_metadata_of(group),
        members={m.member_id: member_snapshot(m) for m in group.members.values()},
        target_assignment={mid: dict(t) for mid, t in group.target.items()},
        assignment_epoch=group.assignment_epoch,
        resolved_regular_expressions=_resolutions_of(group),
    )


def _metadata_of(group: ConsumerGroup) -> dict[str, RecordTopicMetadata]:
    return {name: RecordTopicMetadata(t.topic_id, t.name, t.num_partitions)
            for name, t in group.subscription_metadata.items()}


def _resolutions_of(group: ConsumerGroup) -> dict[str, ConsumerGroupRegularExpressionValue]:
    return {regex: ConsumerGroupRegularExpressionValue(
                _names_in_order(r.topics), r.version, r.timestamp_ms)
            for regex, r in group.resolved_regexes.items()}


def records_for_resolution(
    before: ConsumerGroupSnapshot, group: ConsumerGroup
) -> tuple[list[ConsumerGroupRecord], ConsumerGroupSnapshot]:
    """The records of a refresh of ``group``'s expressions
    (:meth:`ConsumerGroup.apply_resolved`, which changes only the resolutions, the
    subscribed topics' metadata and the group epoch) from ``before`` (what the log
    holds), compared without the members (a group of 10,000 members is not walked), and
    ``before`` as it then is."""
    without_members = replace(before, members={}, target_assignment={})
    after = replace(without_members, group_epoch=group.group_epoch,
                    subscription_metadata=_metadata_of(group),
                    resolved_regular_expressions=_resolutions_of(group))
    records = records_for_change(without_members, after)
    return records, replace(before, group_epoch=after.group_epoch,
                            subscription_metadata=after.subscription_metadata,
                            resolved_regular_expressions=after.resolved_regular_expressions)


def member_snapshot(member: ConsumerGroupMember) -> MemberSnapshot:
    """What the records of one member hold now (a copy)."""
    return MemberSnapshot(
        member_id=member.member_id,
        instance_id=member.instance_id,
        rack_id=member.rack_id,
        client_id=member.client_id,
        client_host=member.client_host,
        # the state machine keeps a set; the record's list is written in name order
        subscribed_topic_names=_names_in_order(member.subscribed_topic_names),
        subscribed_topic_regex=member.subscribed_topic_regex,
        rebalance_timeout_ms=member.rebalance_timeout_ms,
        server_assignor=member.server_assignor,
        member_epoch=member.member_epoch,
        previous_member_epoch=member.previous_member_epoch,
        state=_STATE_CODES[member.state],
        assigned=dict(member.assigned),
        pending_revocation=dict(member.pending_revocation),
        classic_member_metadata=member.classic,
    )


@functools.lru_cache(maxsize=64)
def _names_in_order(names: frozenset[str]) -> tuple[str, ...]:
    """A subscription's names in name order, sorted once per subscription: the same
    tuple for the same set, so a heartbeat that changed nothing compares a member's
    snapshots without a name-by-name walk (a member subscribed to 80,000 names cost
    64 ms of the loop per heartbeat, sorting and comparing them)."""
    return tuple(sorted(names))


def records_for_heartbeat(
    before: ConsumerGroupSnapshot | None, after: ConsumerGroupSnapshot | None
) -> list[ConsumerGroupRecord]:
    """The records of one change of a consumer group, in Kafka's write order
    (:func:`~odradek.coordinator.consumer_group_replay.records_for_change`).

    The coordinator (``GroupCoordinator`` in
    :mod:`odradek.coordinator.group_coordinator`, its module docstring) calls it around
    every change of a group, as Kafka's coordinator runtime does (a heartbeat, a member
    fenced by its timer, a group deleted or forgotten: ``after`` None, Kafka's
    ``createGroupTombstoneRecords``), appends the records as ONE batch to the group's
    partition and answers once the ISR has them; the loader
    (``GroupMetadataManager.load_partition``) replays them with a
    ``ConsumerGroupReplayer`` and the coordinator :func:`restore` s each group.
    """
    return records_for_change(before, after)


# -- snapshot -> live group -------------------------------------------------------------


def unsupported(snapshot: ConsumerGroupSnapshot) -> list[str]:
    """What :func:`restore` drops from ``snapshot`` because the state machine cannot hold
    it (module docstring); empty when the group is restored whole."""
    out = []
    for m in snapshot.members.values():
        if m.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            out.append(f"member {m.member_id!r} (current assignment deleted, epoch -1)")
    return out


def restore(
    snapshot: ConsumerGroupSnapshot, config: ConsumerGroupConfig, now_ms: int
) -> ConsumerGroup:
    """The live group ``snapshot`` describes, loaded at ``now_ms`` with the broker's
    ``group.consumer.*`` configs (module docstring). Raises
    :class:`ConsumerGroupRestoreError` for a snapshot no group can be in."""
    group = ConsumerGroup(snapshot.group_id, config)
    group.group_epoch = snapshot.group_epoch
    group.assignment_epoch = snapshot.assignment_epoch
    group.subscription_metadata = {
        name: TopicMetadata(t.topic_id, t.topic_name, t.num_partitions)
        for name, t in snapshot.subscription_metadata.items()
    }
    for m in snapshot.members.values():
        if m.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            continue  # being removed (see unsupported)
        group.members[m.member_id] = _member_of(group.group_id, m)
    group.target = {
        member_id: dict(target)
        for member_id, target in snapshot.target_assignment.items()
        if member_id in group.members or member_id not in snapshot.members
    }
    group.resolved_regexes = {
        regex: ResolvedRegularExpression(frozenset(r.topics), r.version, r.timestamp)
        for regex, r in snapshot.resolved_regular_expressions.items()
    }
    # the version is the writing broker's count: resolve again when next due
    group.regex_version = -1
    group.regex_refreshed_ms = max(
        (r.timestamp for r in snapshot.resolved_regular_expressions.values()), default=None)
    _rebuild_derived(group)
    restart_timers(group, now_ms)
    return group


def _member_of(group_id: str, m: MemberSnapshot) -> ConsumerGroupMember:
    state = _STATES.get(m.state)
    if state is None:
        raise ConsumerGroupRestoreError(
            f"member {m.member_id!r} of consumer group {group_id!r} is in an unknown "
            f"state {m.state}")
    return ConsumerGroupMember(
        member_id=m.member_id,
        instance_id=m.instance_id,
        rack_id=m.rack_id,
        client_id=m.client_id,
        client_host=m.client_host,
        rebalance_timeout_ms=m.rebalance_timeout_ms,
        subscribed_topic_names=frozenset(m.subscribed_topic_names),
        subscribed_topic_regex=m.subscribed_topic_regex,
        server_assignor=m.server_assignor,
        member_epoch=m.member_epoch,
        previous_member_epoch=m.previous_member_epoch,
        state=state,
        assigned=dict(m.assigned),
        pending_revocation=dict(m.pending_revocation),
        classic=m.classic_member_metadata,
    )


def _rebuild_derived(group: ConsumerGroup) -> None:
    """The partition owners, the static members and the preferred assignor, derived from
    the members by the state machine (:meth:`ConsumerGroup.rebuild_derived`)."""
    try:
        group.rebuild_derived()
    except ValueError as exc:
        raise ConsumerGroupRestoreError(str(exc)) from exc


def restart_timers(group: ConsumerGroup, now_ms: int) -> None:
    """Start every member's timers as a load does (Kafka's ``onLoaded``): the session
    deadline ``now + group.consumer.session.timeout.ms``, and for a member that still has
    partitions to revoke (``unrevoked_partitions``; a static member that left with epoch
    -2 has none left) the rebalance deadline ``now + its rebalance timeout``."""
    for member in group.members.values():
        session_timeout_ms = (group.config.session_timeout_ms if member.classic is None
                              else member.classic.session_timeout_ms)
        member.session_deadline_ms = now_ms + session_timeout_ms
        member.revocation_deadline_ms = (
            now_ms + member.rebalance_timeout_ms if member.pending_revocation else None)
