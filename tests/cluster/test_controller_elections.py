"""Elections asked of the controller (ElectLeaders): preferred (Kafka's
PreferredReplicaLeaderElection) and unclean (KIP-460), over a real ZooKeeper, with states
changed behind the controller's back as leaders change their ISR themselves."""

from __future__ import annotations

import queue

from odradek.cluster.controller import (
    PreferredElection,
    TopicPartition,
    UncleanElection,
)
from odradek.cluster.leader_election import LeaderAndIsr, state_path
from tests.cluster.test_controller import Cluster, cluster

__all__ = ["cluster"]  # the fixture, used by name

TP = TopicPartition("t", 0)


def write_state(c: Cluster, tp: TopicPartition, state: LeaderAndIsr) -> None:
    """A state written by someone else (a leader changing its ISR, say)."""
    current = c.observer.get(state_path(*tp))
    assert current is not None
    c.observer.set(state_path(*tp), state.encode(), current.version)


def test_preferred_election_reads_isr_changes_made_by_leaders(cluster: Cluster) -> None:
    cluster.start(range(3))
    epoch = cluster.controller_epoch()
    cluster.create_topic("t", {0: [0, 1, 2], 1: [1, 2, 0]})
    cluster.wait_states("t", 2)
    # Broker 0 was lost and came back: 1 leads, and put 0 back in its ISR itself.
    write_state(cluster, TP, LeaderAndIsr(1, 1, (1, 2), epoch))
    write_state(cluster, TP, LeaderAndIsr(1, 1, (1, 2, 0), epoch))
    active = cluster.active()
    assert active is not None and active.controller is not None
    done: queue.Queue[list[TopicPartition]] = queue.Queue()
    active.controller.submit(PreferredElection((TP, TopicPartition("t", 1)), done.put))
    assert done.get(timeout=15) == [TP]  # partition 1's preferred replica leads already
    states = cluster.wait_states("t", 2, lambda s: s[0].leader == 0, "0 leading again")
    assert states[0] == LeaderAndIsr(0, 2, (1, 2, 0), epoch, 3)


def test_unclean_election_asked_for_elects_out_of_the_isr(cluster: Cluster) -> None:
    cluster.start(range(3))
    epoch = cluster.controller_epoch()
    # Broker 3 never registers: it stands for a lost ISR.
    cluster.create_topic("t", {0: [3, 0], 1: [1, 2]})
    cluster.wait_states("t", 2)
    write_state(cluster, TP, LeaderAndIsr(-1, 4, (3,), epoch))  # offline, ISR lost
    active = cluster.active()
    assert active is not None and active.controller is not None
    done: queue.Queue[dict[TopicPartition, int]] = queue.Queue()
    active.controller.submit(UncleanElection((TP, TopicPartition("t", 1)), done.put))
    assert done.get(timeout=15) == {TP: 0}  # partition 1 has a live leader
    states = cluster.wait_states("t", 2, lambda s: s[0].leader == 0, "0 leading")
    assert states[0] == LeaderAndIsr(0, 5, (0,), epoch, 2)
