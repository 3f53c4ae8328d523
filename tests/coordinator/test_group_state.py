"""The group state table (odradek.coordinator.group_state) and the group model's moves."""

from __future__ import annotations

import itertools

import pytest

from odradek.coordinator.group_metadata import GroupMetadata, MemberMetadata
from odradek.coordinator.group_state import (
    LOAD_PATHS,
    VALID_PREVIOUS_STATES,
    GroupState,
    IllegalStateTransitionError,
    can_transition,
    check_transition,
)

E, PR, CR, S, D = (GroupState.EMPTY, GroupState.PREPARING_REBALANCE,
                   GroupState.COMPLETING_REBALANCE, GroupState.STABLE, GroupState.DEAD)

ALLOWED = {
    (PR, E), (E, PR), (S, PR), (CR, PR), (PR, CR), (CR, S),
    (E, D), (PR, D), (CR, D), (S, D), (D, D),
}


@pytest.mark.parametrize(("current", "target"), list(itertools.product(GroupState, repeat=2)))
def test_transition_table_matches_kafka(current: GroupState, target: GroupState) -> None:
    assert can_transition(current, target) == ((current, target) in ALLOWED)
    if (current, target) in ALLOWED:
        check_transition("g", current, target)
    else:
        with pytest.raises(IllegalStateTransitionError):
            check_transition("g", current, target)


def test_every_state_is_in_the_table() -> None:
    assert set(VALID_PREVIOUS_STATES) == set(GroupState)


def test_state_names_are_kafkas_and_parse_case_insensitively() -> None:
    assert [s.value for s in GroupState] == [
        "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]
    assert GroupState.parse("stable") is S
    assert GroupState.parse("COMPLETINGREBALANCE") is CR
    assert GroupState.parse("nope") is None


def _member(member_id: str, protocols: list[str], instance: str | None = None) -> MemberMetadata:
    return MemberMetadata(member_id, instance, "client", "/127.0.0.1", 1000, 1000, "consumer",
                          [(p, p.encode()) for p in protocols])


def test_group_refuses_an_illegal_move() -> None:
    group = GroupMetadata("g")
    with pytest.raises(IllegalStateTransitionError):
        group.transition_to(S, 0)
    group.transition_to(PR, 1)
    assert group.state is PR and group.state_timestamp_ms == 1


def test_protocol_selection_by_votes_among_common_protocols() -> None:
    group = GroupMetadata("g")
    group.add(_member("a", ["range", "roundrobin", "sticky"]))
    group.add(_member("b", ["roundrobin", "range"]))
    group.add(_member("c", ["roundrobin", "range", "cooperative"]))
    assert group.candidate_protocols() == {"range", "roundrobin"}
    # a votes range, b and c vote roundrobin
    assert group.select_protocol() == "roundrobin"
    assert group.supports_protocols("consumer", [("range", b"")])
    assert not group.supports_protocols("consumer", [("sticky", b"")])
    assert not group.supports_protocols("connect", [("range", b"")])


def test_tied_votes_go_to_the_leaders_preference() -> None:
    group = GroupMetadata("g")
    group.add(_member("a", ["sticky", "range"]))
    group.add(_member("b", ["range", "sticky"]))
    assert group.leader_id == "a"
    assert group.select_protocol() == "sticky"


def test_next_generation_goes_to_completing_rebalance_or_empty() -> None:
    group = GroupMetadata("g")
    group.add(_member("a", ["range"]))
    group.transition_to(PR, 0)
    group.init_next_generation(5)
    assert (group.state, group.generation_id, group.protocol_name) == (CR, 1, "range")
    assert group.pending_sync_members == {"a"}
    group.transition_to(PR, 6)
    group.remove("a")
    group.init_next_generation(7)
    assert (group.state, group.generation_id, group.protocol_name) == (E, 2, None)
    assert group.leader_id is None


def test_static_member_replacement_keeps_leadership_and_assignment() -> None:
    group = GroupMetadata("g")
    member = _member("old", ["range"], instance="i1")
    member.assignment = b"assigned"
    group.add(member)
    group.add(_member("other", ["range"]))
    replaced = group.replace_static_member("i1", "old", "new")
    assert replaced.assignment == b"assigned"
    assert group.leader_id == "new"
    assert group.static_member_id("i1") == "new"
    assert "old" not in group.members and "new" in group.members
    group.remove("new")
    assert group.static_member_id("i1") is None
    assert group.leader_id == "other"


@pytest.mark.parametrize("written_in", list(LOAD_PATHS))
def test_every_load_path_is_legal_from_empty_and_ends_in_its_state(
    written_in: GroupState,
) -> None:
    state = E
    for target in LOAD_PATHS[written_in]:
        assert can_transition(state, target), (state, target)
        state = target
    assert state is written_in
