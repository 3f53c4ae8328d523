"""Partition reassignment's decisions, sans-I/O (odradek.cluster.reassignment); the moves
themselves run against real brokers in tests/interop/test_replication.py."""

from __future__ import annotations

import pytest

from odradek.cluster.leader_election import LeaderAndIsr
from odradek.cluster.reassignment import (
    Reassignment,
    completion,
    decode_reassignments,
    encode_reassignments,
    expanded,
)
from odradek.cluster.store import StoreError


def test_the_document_round_trips_with_cancellations() -> None:
    entries = [Reassignment("t", 1, (3, 2), (1, 2)), Reassignment("a", 0, None, (1,))]
    decoded = decode_reassignments(encode_reassignments(entries))
    assert decoded == {("t", 1): entries[0], ("a", 0): entries[1]}
    assert entries[0].adding == (3,) and entries[0].removing == (1,)
    assert entries[1].destination == (1,) and entries[1].adding == ()


def test_kafkas_own_document_reads_without_original_replicas() -> None:
    doc = b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3]}]}'
    assert decode_reassignments(doc)[("t", 0)] == Reassignment("t", 0, (2, 3), (2, 3))
    with pytest.raises(StoreError):
        decode_reassignments(b"{}")


def test_the_expanded_assignment_puts_the_target_first() -> None:
    assert expanded((1, 2, 3), (4, 2, 5)) == (4, 2, 5, 1, 3)
    assert expanded((1, 2), (1, 2)) == (1, 2)


def test_completion_waits_for_every_target_replica_in_the_isr() -> None:
    state = LeaderAndIsr(1, 4, (1, 2), 7, 9)
    assert completion((3, 2), state, {1, 2, 3}, 8) is None
    grown = LeaderAndIsr(1, 4, (1, 2, 3), 7, 10)
    # the leader is leaving: the first target replica in the ISR leads, epoch + 1
    assert completion((3, 2), grown, {1, 2, 3}, 8) == LeaderAndIsr(3, 5, (2, 3), 8, 10)
    # the leader stays: only the ISR narrows, same epoch
    assert completion((1, 3), grown, {1, 2, 3}, 8) == LeaderAndIsr(1, 4, (1, 3), 8, 10)
    # nothing to change
    assert completion((1, 2, 3), grown, {1, 2, 3}, 8) is grown
    # no target replica live to lead
    assert completion((3, 2), grown, {1}, 8) is None
