"""Consumer group operations for the tools: list, describe, delete, read and set offsets.

Each call sends one request at a version both sides serve and turns error codes into
:class:`ClientError`. Offsets are committed the way Kafka's admin tools do it: generation
-1 and an empty member id, which the coordinator accepts only while the group is Empty
(a member, client/consumer.py, commits with its generation and member id instead).
On one broker the coordinator is the broker itself; :meth:`GroupsClient.find_coordinator`
still asks, so the tools fail clearly when the coordinator is not available.

A group is either a classic one (JoinGroup/SyncGroup) or a consumer group (KIP-848's
ConsumerGroupHeartbeat). ListGroups v5 names each group's type and filters by it.
:meth:`GroupsClient.describe_any` describes either, as Kafka's admin client does
(``DescribeConsumerGroupsHandler``): ConsumerGroupDescribe first, and DescribeGroups when
the coordinator answers that the group is not a consumer group (GROUP_ID_NOT_FOUND) or does
not serve the API.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.client.admin import check
from odradek.client.connection import BrokerConnection, request_class
from odradek.coordinator.group_protocol import decode_assignment

__all__ = ["CLASSIC", "CONSUMER", "CommittedOffset", "ConsumerGroupDescription",
           "ConsumerGroupMember", "GroupDescription", "GroupListing", "GroupMember",
           "GroupsClient"]

FIND_COORDINATOR = 10
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
DELETE_GROUPS = 42
CONSUMER_GROUP_DESCRIBE = 69
#: ListGroups' group types (Kafka's GroupType): a classic group, a KIP-848 consumer group
CLASSIC = "classic"
CONSUMER = "consumer"


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    #: "classic" or "consumer"; "" from a broker older than ListGroups v5
    group_type: str = ""


@dataclass(frozen=True, slots=True)
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: dict[str, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[GroupMember, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """A member of a consumer group (KIP-848): its epoch, the partitions it owns now and
    the ones the group's target assignment gives it (reached by reconciliation)."""

    member_id: str
    group_instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topics: tuple[str, ...]
    assignment: dict[str, tuple[int, ...]]
    target_assignment: dict[str, tuple[int, ...]]
    #: ConsumerGroupDescribe v1's member type: True a consumer protocol member, False a
    #: classic one in a group being migrated (Kafka's ``upgraded``), None unknown (v0)
    upgraded: bool | None = None
    #: its SubscribedTopicRegex (None or "": none)
    subscribed_topic_regex: str | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    """ConsumerGroupDescribe's answer for one group."""

    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ConsumerGroupMember, ...]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    topic: str
    partition: int
    offset: int
    metadata: str


class GroupsClient:
    def __init__(self, conn: BrokerConnection) -> None:
        self.conn = conn

    async def find_coordinator(self, group_id: str) -> tuple[int, str, int]:
        version = self.conn.version(FIND_COORDINATOR, (1, 3))
        cls = request_class("find_coordinator", version, "FindCoordinatorRequest")
        response = await self.conn.send(cls(key=group_id, key_type=0))
        check(response.error_code, f"finding the coordinator of {group_id}",
              response.error_message)
        return int(response.node_id), str(response.host), int(response.port)

    async def list_groups(self, states: list[str] | None = None,
                          types: list[str] | None = None) -> list[GroupListing]:
        """The groups this broker coordinates; ``states`` (v4+) and ``types`` (v5+) filter
        on the broker, and here too against an older one (a type it does not name is
        "classic", the only kind it has)."""
        version = self.conn.version(LIST_GROUPS, (0, 5))
        cls = request_class("list_groups", version, "ListGroupsRequest")
        kwargs: dict[str, Any] = {}
        if version >= 4:
            kwargs["states_filter"] = tuple(states or ())
        if version >= 5:
            kwargs["types_filter"] = tuple(types or ())
        response = await self.conn.send(cls(**kwargs))
        check(response.error_code, "listing groups")
        listed = [GroupListing(g.group_id, g.protocol_type, getattr(g, "group_state", ""),
                               getattr(g, "group_type", "") or CLASSIC)
                  for g in response.groups]
        wanted_states = {s.lower() for s in states or ()}
        wanted_types = {t.lower() for t in types or ()}
        return sorted(
            (g for g in listed
             if (not wanted_states or g.state.lower() in wanted_states)
             and (not wanted_types or g.group_type.lower() in wanted_types)),
            key=lambda g: g.group_id,
        )

    async def describe_consumer_group(self, group_id: str) -> ConsumerGroupDescription | None:
        """ConsumerGroupDescribe of one group; None when it is not a consumer group (a
        classic group, or no group: GROUP_ID_NOT_FOUND) or the broker does not serve it."""
        if CONSUMER_GROUP_DESCRIBE not in self.conn.api_versions:
            return None
        version = self.conn.version(CONSUMER_GROUP_DESCRIBE, (0, 1))
        cls = request_class("consumer_group_describe", version, "ConsumerGroupDescribeRequest")
        response = await self.conn.send(cls(group_ids=(group_id,),
                                            include_authorized_operations=False))
        g = response.groups[0]
        if g.error_code == ErrorCode.group_id_not_found:
            return None
        check(g.error_code, f"describing group {group_id}", g.error_message)

        def partitions(assignment: Any) -> dict[str, tuple[int, ...]]:
            return {t.topic_name: tuple(sorted(t.partitions))
                    for t in assignment.topic_partitions if t.partitions}

        members = tuple(
            ConsumerGroupMember(m.member_id, m.instance_id, m.rack_id, int(m.member_epoch),
                                m.client_id, m.client_host, tuple(m.subscribed_topic_names),
                                partitions(m.assignment), partitions(m.target_assignment),
                                _upgraded(getattr(m, "member_type", -1)),
                                m.subscribed_topic_regex)
            for m in g.members)
        return ConsumerGroupDescription(g.group_id, g.group_state, int(g.group_epoch),
                                        int(g.assignment_epoch), g.assignor_name,
                                        tuple(sorted(members, key=lambda m: m.member_id)))

    async def describe_any(self, group_id: str
                           ) -> ConsumerGroupDescription | GroupDescription:
        """The group described by the API of its type: ConsumerGroupDescribe, else
        DescribeGroups (a classic group, or none: state Dead)."""
        consumer = await self.describe_consumer_group(group_id)
        return consumer if consumer is not None else await self.describe_group(group_id)

    async def describe_group(self, group_id: str) -> GroupDescription:
        version = self.conn.version(DESCRIBE_GROUPS, (0, 5))
        cls = request_class("describe_groups", version, "DescribeGroupsRequest")
        kwargs: dict[str, Any] = {"groups": (group_id,)}
        if version >= 3:
            kwargs["include_authorized_operations"] = False
        response = await self.conn.send(cls(**kwargs))
        g = response.groups[0]
        check(g.error_code, f"describing group {group_id}")
        members = []
        for m in g.members:
            try:
                assignment = dict(decode_assignment(bytes(m.member_assignment)).partitions)
            except ValueError:
                assignment = {}
            members.append(GroupMember(m.member_id, getattr(m, "group_instance_id", None),
                                       m.client_id, m.client_host, assignment))
        return GroupDescription(g.group_id, g.group_state, g.protocol_type, g.protocol_data,
                                tuple(members))

    async def delete_groups(self, group_ids: list[str]) -> dict[str, str]:
        """{group: error name} ("none" when deleted)."""
        version = self.conn.version(DELETE_GROUPS, (0, 2))
        cls = request_class("delete_groups", version, "DeleteGroupsRequest")
        response = await self.conn.send(cls(groups_names=tuple(group_ids)))
        return {r.group_id: ErrorCode(r.error_code).name for r in response.results}

    async def fetch_offsets(self, group_id: str) -> list[CommittedOffset]:
        """Every committed offset of the group."""
        version = self.conn.version(OFFSET_FETCH, (2, 7))
        cls = request_class("offset_fetch", version, "OffsetFetchRequest")
        kwargs: dict[str, Any] = {"group_id": group_id, "topics": None}
        if version >= 7:
            kwargs["require_stable"] = False
        response = await self.conn.send(cls(**kwargs))
        check(response.error_code, f"fetching offsets of {group_id}")
        out = []
        for t in response.topics:
            for p in t.partitions:
                check(p.error_code, f"fetching the offset of {t.name}-{p.partition_index}")
                if p.committed_offset >= 0:
                    out.append(CommittedOffset(t.name, p.partition_index,
                                               int(p.committed_offset), p.metadata or ""))
        return sorted(out, key=lambda c: (c.topic, c.partition))

    async def commit_offsets(self, group_id: str, offsets: dict[tuple[str, int], int],
                             generation: int = -1, member_id: str = "") -> None:
        """Commit as an admin tool does (generation -1, no member id), or as the member
        ``member_id`` of generation ``generation``."""
        version = self.conn.version(OFFSET_COMMIT, (2, 8))
        cls = request_class("offset_commit", version, "OffsetCommitRequest")
        topic_cls = request_class("offset_commit", version, "OffsetCommitRequestTopic")
        part_cls = request_class("offset_commit", version, "OffsetCommitRequestPartition")
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            kwargs: dict[str, Any] = {"partition_index": partition, "committed_offset": offset,
                                      "committed_metadata": ""}
            if version >= 6:
                kwargs["committed_leader_epoch"] = -1
            by_topic.setdefault(topic, []).append(part_cls(**kwargs))
        request_kwargs: dict[str, Any] = {
            "group_id": group_id, "generation_id_or_member_epoch": generation,
            "member_id": member_id,
            "topics": tuple(topic_cls(name=t, partitions=tuple(ps))
                            for t, ps in by_topic.items()),
        }
        if version <= 4:
            request_kwargs["retention_time"] = datetime.timedelta(milliseconds=-1)
        if version >= 7:
            request_kwargs["group_instance_id"] = None
        response = await self.conn.send(cls(**request_kwargs))
        for t in response.topics:
            for p in t.partitions:
                check(p.error_code, f"committing the offset of {t.name}-{p.partition_index} "
                                    f"for group {group_id}")


def _upgraded(member_type: int) -> bool | None:
    """ConsumerGroupDescribe v1's MemberType: 1 consumer, 0 classic, -1 unknown."""
    return {1: True, 0: False}.get(int(member_type))

