"""The controller's per-partition decision (odradek.cluster.leader_election.decide)."""

from __future__ import annotations

from odradek.cluster.leader_election import (
    NO_LEADER,
    LeaderAndIsr,
    decide,
    decide_preferred,
    decode_state,
    isr_change,
)


def state(leader: int, epoch: int, isr: tuple[int, ...], version: int = 3) -> LeaderAndIsr:
    return LeaderAndIsr(leader, epoch, isr, 1, version)


def test_first_state_leads_with_the_first_live_replica() -> None:
    assert decide((2, 0, 1), None, {0, 1, 2}, 5) == LeaderAndIsr(2, 0, (2, 0, 1), 5)
    assert decide((2, 0, 1), None, {0, 1}, 5) == LeaderAndIsr(0, 0, (0, 1), 5)


def test_first_state_with_no_live_replica_is_offline() -> None:
    assert decide((2, 0), None, {1}, 5) == LeaderAndIsr(NO_LEADER, 0, (2, 0), 5)


def test_live_leader_stands() -> None:
    assert decide((0, 1, 2), state(1, 4, (1, 2)), {1, 2}, 5) is None


def test_lost_follower_leaves_the_isr_with_leader_and_epoch_unchanged() -> None:
    assert decide((0, 1, 2), state(1, 4, (1, 2)), {1}, 5) == LeaderAndIsr(1, 4, (1,), 5, 3)
    # the leader itself always stays in its ISR
    assert decide((0, 1, 2), state(1, 4, (1, 2, 0)), {1, 0}, 5) == LeaderAndIsr(
        1, 4, (1, 0), 5, 3)


def test_unclean_election_takes_the_first_live_replica_alone() -> None:
    current = state(0, 4, (0, 1))
    assert decide((0, 1, 2), current, {2}, 5) == LeaderAndIsr(NO_LEADER, 5, (0, 1), 5, 3)
    assert decide((0, 1, 2), current, {2}, 5, unclean=True) == LeaderAndIsr(2, 5, (2,), 5, 3)
    # with a live ISR replica the election stays clean
    assert decide((0, 1, 2), current, {1, 2}, 5, unclean=True) == LeaderAndIsr(1, 5, (1,), 5, 3)


def test_preferred_replica_takes_leadership_back_when_in_sync() -> None:
    assert decide_preferred((0, 1, 2), state(1, 4, (1, 2, 0)), {0, 1, 2}, 5) == LeaderAndIsr(
        0, 5, (1, 2, 0), 5, 3)
    assert decide_preferred((0, 1, 2), state(1, 4, (1, 2)), {0, 1, 2}, 5) is None  # not in ISR
    assert decide_preferred((0, 1, 2), state(1, 4, (1, 2, 0)), {1, 2}, 5) is None  # not live
    assert decide_preferred((0, 1, 2), state(0, 4, (0, 1)), {0, 1}, 5) is None  # leads already


def test_isr_change_keeps_leader_epoch_and_version() -> None:
    assert isr_change(state(1, 4, (1, 2)), (1, 2, 0)) == LeaderAndIsr(1, 4, (1, 2, 0), 1, 3)


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


def test_a_leader_shutting_down_hands_over_to_the_first_eligible_isr_replica() -> None:
    # Kafka's controlledShutdownPartitionLeaderElection: assignment order, live, in the
    # ISR, not shutting down; the new ISR leaves the brokers shutting down out
    assert decide((0, 1, 2), state(0, 4, (0, 2, 1)), {0, 1, 2}, 5, shutting_down={0}) == (
        LeaderAndIsr(1, 5, (2, 1), 5, 3))
    assert decide((0, 1, 2), state(0, 4, (0, 1, 2)), {0, 1, 2}, 5,
                  shutting_down={0, 1}) == LeaderAndIsr(2, 5, (2,), 5, 3)


def test_a_leader_shutting_down_with_no_successor_stays_and_sheds_stopping_followers() -> None:
    assert decide((0, 1), state(0, 4, (0,)), {0, 1}, 5, shutting_down={0}) is None
    assert decide((0, 1, 2), state(0, 4, (0, 1)), {0, 1, 2}, 5, shutting_down={0, 1}) == (
        LeaderAndIsr(0, 4, (0,), 5, 3))


def test_a_follower_shutting_down_leaves_the_isr_leader_and_epoch_unchanged() -> None:
    assert decide((0, 1, 2), state(0, 4, (0, 1, 2)), {0, 1, 2}, 5, shutting_down={2}) == (
        LeaderAndIsr(0, 4, (0, 1), 5, 3))


def test_a_broker_shutting_down_is_never_elected() -> None:
    # its leader gone, the only other ISR replica stopping: offline, as Kafka's election
    # counts a broker shutting down as not online
    assert decide((0, 1), state(0, 4, (0, 1)), {1}, 5, shutting_down={1}) == (
        LeaderAndIsr(NO_LEADER, 5, (0, 1), 5, 3))
    assert decide((0, 1, 2), None, {0, 1, 2}, 5, shutting_down={0}) == (
        LeaderAndIsr(1, 0, (1, 2), 5))
    assert decide_preferred((0, 1), state(1, 4, (0, 1)), {0, 1}, 5, shutting_down={0}) is None
