"""The controller's per-partition decision (odradek.cluster.leader_election.decide)."""

from __future__ import annotations

from odradek.cluster.leader_election import NO_LEADER, LeaderAndIsr, decide, decode_state


def state(leader: int, epoch: int, isr: tuple[int, ...], version: int = 3) -> LeaderAndIsr:
    return LeaderAndIsr(leader, epoch, isr, 1, version)


def test_first_state_leads_with_the_first_live_replica() -> None:
    assert decide((2, 0, 1), None, {0, 1, 2}, 5) == LeaderAndIsr(2, 0, (2, 0, 1), 5)
    assert decide((2, 0, 1), None, {0, 1}, 5) == LeaderAndIsr(0, 0, (0, 1), 5)


def test_first_state_with_no_live_replica_is_offline() -> None:
    assert decide((2, 0), None, {1}, 5) == LeaderAndIsr(NO_LEADER, 0, (2, 0), 5)


def test_live_leader_stands() -> None:
    assert decide((0, 1, 2), state(1, 4, (1, 2)), {1}, 5) is None


def test_lost_leader_moves_to_the_first_live_isr_replica_in_assignment_order() -> None:
    # ISR order (2, 1) but assignment order (0, 1, 2): 1 comes first; 0 is not in the ISR.
    new = decide((0, 1, 2), state(0, 4, (0, 2, 1)), {1, 2}, 5)
    assert new == LeaderAndIsr(1, 5, (2, 1), 5, 3)


def test_out_of_sync_replica_never_leads() -> None:
    new = decide((0, 1, 2), state(0, 4, (0, 1)), {2}, 5)
    assert new == LeaderAndIsr(NO_LEADER, 5, (0, 1), 5, 3)  # the last ISR is kept


def test_offline_partition_stays_offline_until_an_isr_replica_returns() -> None:
    offline = state(NO_LEADER, 5, (0,))
    assert decide((0, 1), offline, {1}, 6) is None
    assert decide((0, 1), offline, {0, 1}, 6) == LeaderAndIsr(0, 6, (0,), 6, 3)


def test_state_round_trip() -> None:
    s = LeaderAndIsr(3, 7, (3, 1), 2)
    assert decode_state(s.encode(), 9) == LeaderAndIsr(3, 7, (3, 1), 2, 9)
    assert b'"version": 1' in s.encode()
