"""A consumer group member over the classic group protocol, for ``odradek consume --group``.

How it works, as Kafka's ``ConsumerCoordinator`` (and its ``AbstractCoordinator``) does:

1. FindCoordinator names the group's coordinator (:meth:`ClusterAdmin.on_coordinator`,
   which follows it when it moves).
2. JoinGroup (v7) with protocol type ``consumer`` and one protocol, ``range``, whose
   metadata is a ``ConsumerProtocolSubscription`` v0 (the topics). A coordinator that
   wants a member id first (KIP-394) answers MEMBER_ID_REQUIRED with one; the member
   joins again with it. The coordinator answers once every member has joined: the
   generation, the leader, and to the leader every member's subscription.
3. SyncGroup (v5): the leader computes the assignment with Kafka's ``RangeAssignor`` (per
   topic, the subscribed members sorted by member id, each given a contiguous range of
   ``partitions // members`` partitions, the first ``partitions % members`` one more) and
   sends it; every member gets its ``ConsumerProtocolAssignment`` back.
4. The assigned partitions start at the group's committed offsets (OffsetFetch), else at
   ``auto.offset.reset`` (earliest or latest).
5. Heartbeats (v4) every ``heartbeat.interval.ms`` (3 s) from a task of their own; one
   answered REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION or
   FENCED_INSTANCE_ID (or a coordinator that moved) marks the member for rejoining, which
   the caller does between fetches (:attr:`GroupMember.needs_rejoin`), committing first.
6. Offsets are committed with the member's generation and id (OffsetCommit), and
   LeaveGroup (v4) ends the membership so the others rebalance at once.

Session timeout (``session.timeout.ms``) 45 s and rebalance timeout
(``max.poll.interval.ms``) 300 s are Kafka's consumer defaults.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import struct
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from odradek.client.admin import check
from odradek.client.connection import ClientError, request_class
from odradek.client.groups import GroupsClient
from odradek.client.routing import ClusterAdmin
from odradek.coordinator.group_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)

__all__ = ["GroupMember", "encode_subscription", "range_assign"]

T = TypeVar("T")

PROTOCOL = "range"
SESSION_TIMEOUT = datetime.timedelta(seconds=45)
REBALANCE_TIMEOUT = datetime.timedelta(seconds=300)
HEARTBEAT_INTERVAL_S = 3.0
#: errors that end this member's generation: join again
REJOIN_CODES = frozenset({
    int(ErrorCode.rebalance_in_progress.value), int(ErrorCode.unknown_member_id.value),
    int(ErrorCode.illegal_generation.value), int(ErrorCode.fenced_instance_id.value),
})
#: errors after which the member id is no longer the coordinator's: join as a new member
FORGET_MEMBER_CODES = frozenset({int(ErrorCode.unknown_member_id.value),
                                 int(ErrorCode.fenced_instance_id.value)})
MEMBER_ID_REQUIRED = int(ErrorCode.member_id_required.value)


def encode_subscription(topics: list[str]) -> bytes:
    """``ConsumerProtocolSubscription`` v0: the topics, no user data."""
    out = bytearray(struct.pack(">hi", 0, len(topics)))
    for topic in topics:
        name = topic.encode()
        out += struct.pack(">h", len(name)) + name
    out += struct.pack(">i", -1)
    return bytes(out)


def range_assign(subscriptions: dict[str, tuple[str, ...]],
                 partitions: dict[str, int]) -> dict[str, dict[str, list[int]]]:
    """Kafka's RangeAssignor: {member id: {topic: partitions}} (every member present)."""
    out: dict[str, dict[str, list[int]]] = {m: {} for m in subscriptions}
    for topic, count in sorted(partitions.items()):
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not members:
            continue
        each, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            size = each + (1 if i < extra else 0)
            if size:
                out[member][topic] = list(range(start, start + size))
            start += size
    return out


class GroupMember:
    """One member of ``group_id`` subscribed to ``topics``; see the module's docstring."""

    def __init__(self, admin: ClusterAdmin, group_id: str, topics: list[str],
                 heartbeat_interval: float = HEARTBEAT_INTERVAL_S) -> None:
        self.admin = admin
        self.group_id = group_id
        self.topics = topics
        self.heartbeat_interval = heartbeat_interval
        self.member_id = ""
        self.generation = -1
        self.assignment: dict[str, tuple[int, ...]] = {}
        self.needs_rejoin = True
        self._heartbeats: asyncio.Task[None] | None = None

    async def _at_coordinator(self, call: Callable[[GroupsClient], Awaitable[T]]) -> T:
        return await self.admin.on_coordinator(self.group_id, call)

    # ---- joining
    async def join(self) -> dict[str, tuple[int, ...]]:
        """Join (or rejoin) the group; the assignment of this generation."""
        await self._stop_heartbeats()
        while True:
            joined = await self._at_coordinator(self._join_group)
            if joined is None:  # MEMBER_ID_REQUIRED, or a generation that ended: again
                continue
            leader, members = joined
            assignments: dict[str, bytes] = {}
            if leader == self.member_id:
                assignments = await self._assign(members)
            synced = await self._at_coordinator(
                functools.partial(self._sync_group, assignments=assignments))
            if synced is None:
                continue
            self.assignment = dict(decode_assignment(synced).partitions)
            self.needs_rejoin = False
            self._heartbeats = asyncio.create_task(self._heartbeat_loop())
            return self.assignment

    async def _join_group(self, client: GroupsClient
                          ) -> tuple[str, dict[str, tuple[str, ...]]] | None:
        conn = client.conn
        version = conn.version(11, (7, 7))
        cls = request_class("join_group", version, "JoinGroupRequest")
        protocol_cls = request_class("join_group", version, "JoinGroupRequestProtocol")
        response = await conn.send(cls(
            group_id=self.group_id, session_timeout=SESSION_TIMEOUT,
            rebalance_timeout=REBALANCE_TIMEOUT, member_id=self.member_id,
            group_instance_id=None, protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocols=(protocol_cls(name=PROTOCOL,
                                    metadata=encode_subscription(self.topics)),),
        ))
        code = int(ErrorCode(response.error_code).value)
        if code == MEMBER_ID_REQUIRED:
            self.member_id = str(response.member_id)
            return None
        if code in FORGET_MEMBER_CODES:
            self.member_id = ""
            return None
        check(response.error_code, f"joining group {self.group_id}")
        self.member_id = str(response.member_id)
        self.generation = int(response.generation_id)
        members = {str(m.member_id): decode_subscription(bytes(m.metadata)).topics
                   for m in response.members}
        return str(response.leader), members

    async def _assign(self, members: dict[str, tuple[str, ...]]) -> dict[str, bytes]:
        wanted = sorted({t for topics in members.values() for t in topics})
        counts = {t.name: len(t.partitions) for t in await self.admin.metadata(wanted)
                  if t.error == "none"}
        plan = range_assign(members, counts)
        return {m: encode_assignment(parts) for m, parts in plan.items()}

    async def _sync_group(self, client: GroupsClient,
                          assignments: dict[str, bytes]) -> bytes | None:
        conn = client.conn
        version = conn.version(14, (5, 5))
        cls = request_class("sync_group", version, "SyncGroupRequest")
        assignment_cls = request_class("sync_group", version, "SyncGroupRequestAssignment")
        response = await conn.send(cls(
            group_id=self.group_id, generation_id=self.generation, member_id=self.member_id,
            group_instance_id=None, protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=PROTOCOL,
            assignments=tuple(assignment_cls(member_id=m, assignment=a)
                              for m, a in sorted(assignments.items())),
        ))
        code = int(ErrorCode(response.error_code).value)
        if code in REJOIN_CODES:
            if code in FORGET_MEMBER_CODES:
                self.member_id = ""
            return None
        check(response.error_code, f"syncing group {self.group_id}")
        return bytes(response.assignment)

    # ---- while a member
    async def _heartbeat_loop(self) -> None:
        while not self.needs_rejoin:
            await asyncio.sleep(self.heartbeat_interval)
            try:
                code = await self._at_coordinator(self._heartbeat)
            except ClientError:
                code = int(ErrorCode.coordinator_not_available.value)
            if code in REJOIN_CODES or code != 0:
                if code in FORGET_MEMBER_CODES:
                    self.member_id = ""
                self.needs_rejoin = True

    async def _heartbeat(self, client: GroupsClient) -> int:
        conn = client.conn
        version = conn.version(12, (4, 4))
        cls = request_class("heartbeat", version, "HeartbeatRequest")
        response = await conn.send(cls(group_id=self.group_id, generation_id=self.generation,
                                       member_id=self.member_id, group_instance_id=None))
        code = int(ErrorCode(response.error_code).value)
        if code not in REJOIN_CODES:
            check(response.error_code, f"heartbeat of group {self.group_id}")
        return code

    async def committed(self) -> dict[tuple[str, int], int]:
        """The group's committed offsets of the assigned partitions."""
        offsets = await self._at_coordinator(lambda c: c.fetch_offsets(self.group_id))
        mine = {(t, p) for t, ps in self.assignment.items() for p in ps}
        return {(c.topic, c.partition): c.offset for c in offsets
                if (c.topic, c.partition) in mine}

    async def commit(self, offsets: dict[tuple[str, int], int]) -> None:
        """OffsetCommit as this member of this generation."""
        if offsets:
            await self._at_coordinator(lambda c: c.commit_offsets(
                self.group_id, offsets, self.generation, self.member_id))

    async def leave(self) -> None:
        """LeaveGroup (errors ignored: the session would end it anyway)."""
        await self._stop_heartbeats()
        if not self.member_id:
            return

        async def leave(client: GroupsClient) -> Any:
            conn = client.conn
            version = conn.version(13, (4, 4))
            cls = request_class("leave_group", version, "LeaveGroupRequest")
            identity_cls = request_class("leave_group", version, "MemberIdentity")
            return await conn.send(cls(group_id=self.group_id, members=(
                identity_cls(member_id=self.member_id, group_instance_id=None),)))

        with contextlib.suppress(ClientError, TimeoutError):
            await asyncio.wait_for(self._at_coordinator(leave), 10)
        self.member_id = ""
        self.generation = -1

    async def _stop_heartbeats(self) -> None:
        task, self._heartbeats = self._heartbeats, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
