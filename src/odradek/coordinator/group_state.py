"""The classic consumer group state machine as data (Kafka's ``GroupState`` / ``GroupMetadata``).

Everything that decides whether a group may move from one state to another lives in this
file; the coordinator asks :func:`check_transition` before every move and never changes a
state any other way. The rules, as in Kafka's classic group coordinator (KIP-62, KIP-345,
KIP-394):

- **Empty** — no members. A group with committed offsets but no members (or a group used
  only by "simple" consumers committing with generation -1) sits here. A JoinGroup moves
  it to PreparingRebalance; expiring the last offsets or DeleteGroups moves it to Dead.
- **PreparingRebalance** — a rebalance was triggered (a member joined, left, died, or
  changed its protocols). The coordinator waits until every known member has sent a
  JoinGroup (or the rebalance timeout, the largest of the members', passes; members that
  did not rejoin are then removed). Heartbeats answer REBALANCE_IN_PROGRESS so members
  know to rejoin. When the join completes the generation id is incremented: with members
  left the group goes to CompletingRebalance, without any to Empty.
- **CompletingRebalance** — JoinGroup responses went out (the leader got every member's
  subscription); the coordinator waits for the leader's SyncGroup with the assignment.
  A member joining or leaving now sends the group back to PreparingRebalance (followers
  waiting in SyncGroup get REBALANCE_IN_PROGRESS). The leader's SyncGroup moves it to Stable.
- **Stable** — every member has its assignment; heartbeats keep members alive. A member
  joining (or the leader rejoining, or a member changing its protocols), leaving, or
  missing its session timeout starts a new rebalance.
- **Dead** — the group has no members and no offsets, or its coordinator partition moved
  away; it is about to be removed from memory. Requests for it are answered
  COORDINATOR_NOT_AVAILABLE so clients look the coordinator up again.

The table gives, for each target state, the states it may be entered from (Kafka's
``validPreviousStates``); Dead can be entered from anywhere.

A group loaded from ``__consumer_offsets`` is not put in its state directly either (as
Kafka's ``GroupMetadata.loadGroup`` does): it starts Empty like any new group and walks
the path :data:`LOAD_PATHS` gives for the state its last metadata record was written in,
every step checked against the table. Records with members are written by Stable groups
(the leader's SyncGroup, a static member rejoining), so such a group replays the
rebalance that made it Stable; records without members come from Empty groups.
"""

from __future__ import annotations

import enum

__all__ = [
    "LOAD_PATHS",
    "VALID_PREVIOUS_STATES",
    "GroupState",
    "IllegalStateTransitionError",
    "can_transition",
    "check_transition",
]


class GroupState(enum.Enum):
    """A classic group's state; the value is the name Kafka reports (DescribeGroups,
    ListGroups)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    @classmethod
    def parse(cls, text: str) -> GroupState | None:
        """The state named ``text`` (case-insensitive, as ListGroups' filter), or None."""
        lowered = text.lower()
        for state in cls:
            if state.value.lower() == lowered:
                return state
        return None


_E, _PR, _CR, _S, _D = (
    GroupState.EMPTY,
    GroupState.PREPARING_REBALANCE,
    GroupState.COMPLETING_REBALANCE,
    GroupState.STABLE,
    GroupState.DEAD,
)

#: target state -> the states it may be entered from
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    _E: frozenset({_PR}),
    _PR: frozenset({_S, _CR, _E}),
    _CR: frozenset({_PR}),
    _S: frozenset({_CR}),
    _D: frozenset({_S, _PR, _CR, _E, _D}),
}


#: state a loaded group was written in -> the moves that bring a new (Empty) group there
LOAD_PATHS: dict[GroupState, tuple[GroupState, ...]] = {
    _E: (),
    _S: (_PR, _CR, _S),
}


class IllegalStateTransitionError(RuntimeError):
    """The coordinator tried a move the table does not allow (a programming error)."""


def can_transition(current: GroupState, target: GroupState) -> bool:
    return current in VALID_PREVIOUS_STATES[target]


def check_transition(group_id: str, current: GroupState, target: GroupState) -> None:
    if not can_transition(current, target):
        raise IllegalStateTransitionError(
            f"group {group_id!r} cannot move from {current.value} to {target.value}"
        )
