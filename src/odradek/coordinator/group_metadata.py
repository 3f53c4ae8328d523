"""One classic group in memory: members, generation, protocol, offsets (Kafka's ``GroupMetadata``).

Sans-I/O: no asyncio, no disk. The coordinator (:mod:`odradek.coordinator.group_coordinator`)
owns the timers and the futures of waiting requests and drives these objects, and the
manager (:mod:`odradek.coordinator.group_metadata_manager`) loads and stores them; state moves
only through :meth:`GroupMetadata.transition_to`, which checks the table of
:mod:`odradek.coordinator.group_state`.

- **Members** are keyed by member id, in join order (the first is the default leader).
  Static members (KIP-345) are also indexed by ``group.instance.id``. *Pending* members
  (KIP-394) got a member id with MEMBER_ID_REQUIRED but have not joined with it yet.
- **Protocol selection** (Kafka's ``selectProtocol``): the candidates are the protocols
  every member supports; each member votes for the first candidate in its own preference
  order and the most votes win (ties go to the candidate the leader prefers).
- **Offsets** are ``(topic, partition) -> CommittedOffset``, the last committed value of
  each partition, as loaded from or written to ``__consumer_offsets``. Offsets committed
  inside a transaction (TxnOffsetCommit) wait in ``pending_txn_offsets`` under their
  producer id until the transaction's marker makes them committed or drops them.
"""

from __future__ import annotations

import collections
import uuid
from dataclasses import dataclass, field

from odradek.coordinator.group_protocol import CONSUMER_PROTOCOL_TYPE, decode_subscription
from odradek.coordinator.group_records import RecordFormatError
from odradek.coordinator.group_state import GroupState, check_transition

__all__ = ["CommittedOffset", "GroupMetadata", "MemberMetadata", "new_member_id"]


def new_member_id(client_id: str | None) -> str:
    """``<client id>-<uuid>``, as Kafka generates member ids."""
    return f"{client_id or ''}-{uuid.uuid4()}"


@dataclass(slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join: bool = False
    awaiting_sync: bool = False
    is_new: bool = False
    last_heartbeat_ms: int = 0

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1


@dataclass(slots=True)
class GroupMetadata:
    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int = -1
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    pending_members: set[str] = field(default_factory=set)
    pending_sync_members: set[str] = field(default_factory=set)
    static_members: dict[str, str] = field(default_factory=dict)
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    # TxnOffsetCommit: producer id -> offsets waiting for its transaction's marker
    pending_txn_offsets: dict[int, dict[tuple[str, int], CommittedOffset]] = field(
        default_factory=dict)
    new_member_added: bool = False

    # -- state ---------------------------------------------------------------------------
    def transition_to(self, target: GroupState, now_ms: int) -> None:
        check_transition(self.group_id, self.state, target)
        self.state = target
        self.state_timestamp_ms = now_ms

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    # -- members -------------------------------------------------------------------------
    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: MemberMetadata) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        instance_id = member.group_instance_id
        if instance_id is not None and self.static_members.get(instance_id) == member_id:
            del self.static_members[instance_id]
        self.pending_sync_members.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> MemberMetadata:
        """Give the member of ``instance_id`` a new member id (a restarted static member)."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_id)
            self.pending_sync_members.add(new_id)
        return member

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def not_yet_rejoined(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols -----------------------------------------------------------------------
    def candidate_protocols(self) -> set[str]:
        members = list(self.members.values())
        if not members:
            return set()
        common = set(members[0].protocol_names())
        for member in members[1:]:
            common &= set(member.protocol_names())
        return common

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        names = {name for name, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"group {self.group_id} has no protocol every member supports")
        votes = collections.Counter(m.vote(candidates) for m in self.members.values())
        leader = self.members.get(self.leader_id or "")
        preference = leader.protocol_names() if leader else sorted(candidates)
        best = max(votes.values())
        for name in preference:
            if votes.get(name) == best:
                return name
        return next(name for name, count in votes.items() if count == best)

    def init_next_generation(self, now_ms: int) -> None:
        """Kafka's ``initNextGeneration``: the join phase is over."""
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
            self.pending_sync_members = set(self.members)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, when the group runs the consumer protocol;
        None when that cannot be known."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for member in self.members.values():
                topics.update(decode_subscription(member.metadata_for(self.protocol_name)).topics)
        except (RecordFormatError, KeyError):
            return None
        return topics
