"""Partition states and the controller's leader elections, sans-I/O (Kafka's LeaderAndIsr,
TopicPartitionStateZNode in ZkData, PartitionLeaderElectionAlgorithms and Election.scala).

How it works: a partition's state is ``/brokers/topics/<t>/partitions/<p>/state`` holding
``{"version":1,"leader":L,"leader_epoch":E,"isr":[...],"controller_epoch":C}``; the znode's
version is the partition epoch (Kafka's ``zkVersion``). :func:`decide` is the controller's
whole decision for one partition, given its replicas in assignment order, its current
state (None: it has none yet) and the live brokers:

- no state yet, some replica live: leader = the first live replica, ISR = the live
  replicas (assignment order), leader epoch 0 (Kafka's NewPartition → OnlinePartition);
- no state yet, no replica live: leader -1, ISR = every replica, epoch 0 (OfflinePartition);
- leader live: nothing to write;
- leader not live (or -1) and an ISR replica live: leader = the first replica in
  assignment order that is live and in the ISR, ISR = ISR ∩ live (ISR order), leader
  epoch + 1 (``offlinePartitionLeaderElection`` with
  ``unclean.leader.election.enable=false``: an out-of-sync replica never leads);
- leader not live, no ISR replica live: leader -1, the last ISR kept (as Kafka keeps it),
  leader epoch + 1;
- leader -1, no ISR replica live: nothing to write (already offline);
- with ``unclean`` (the topic's ``unclean.leader.election.enable``) and no ISR replica
  live, the first live replica in assignment order leads alone (ISR = it), leader epoch +
  1: the partition is available again and whatever only the lost ISR held is lost, as
  Kafka documents;
- leader live but some ISR replicas are not: they leave the ISR, leader and leader epoch
  unchanged (Kafka's ``ReplicaStateMachine`` taking an offline replica out of the ISR), so
  acks=all writes do not wait ``replica.lag.time.max.ms`` for a broker known to be gone.

Brokers in controlled shutdown (``shutting_down``: registered still, but asking to leave,
Kafka's ``shuttingDownBrokerIds``) are live for nothing but the leadership they hold: they
are never elected, they leave every ISR they follow in (leader and leader epoch unchanged,
as a follower gone), and a partition they lead moves, leader epoch + 1 and without them in
the ISR, to the first replica of the assignment that is live, in the ISR and not shutting
down (Kafka's ``controlledShutdownPartitionLeaderElection``); with no such replica it
stays where it is (the partitions Kafka's ControlledShutdown answers as remaining).

:func:`decide_preferred` moves leadership back to the preferred replica (the first of the
assignment) when it is live and in the ISR (Kafka's ``PreferredReplicaPartitionLeader
Election``). The leader itself changes the ISR with :func:`isr_change`: a state write
conditional on the version it read, so the controller and a leader never overwrite each
other's decisions.

Every write carries the deciding controller's epoch. Nothing here touches the store: the
controller (:mod:`odradek.cluster.controller`) reads, calls :func:`decide` and writes.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from odradek.cluster.store import StoreError

__all__ = [
    "NO_LEADER",
    "LeaderAndIsr",
    "decide",
    "decide_preferred",
    "decode_state",
    "isr_change",
    "notification_data",
    "partition_path",
    "partitions_path",
    "state_path",
    "topic_path",
]

TOPICS_PATH = "/brokers/topics"
NO_LEADER = -1  # LeaderAndIsr.NoLeader
INITIAL_LEADER_EPOCH = 0
STATE_VERSION = 1  # TopicPartitionStateZNode's JSON version
# The controller's notifications of written states (see docs/architecture.md).
NOTIFICATION_PATH = "/partition_state_notification"
NOTIFICATION_PREFIX = "state_change_"


def topic_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}"


def partitions_path(topic: str) -> str:
    """TopicPartitionsZNode: the parent of a topic's partition znodes."""
    return f"{TOPICS_PATH}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    """TopicPartitionZNode: the parent of the state znode."""
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}"


def state_path(topic: str, partition: int) -> str:
    """TopicPartitionStateZNode."""
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}/state"


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """One partition state as stored; ``zk_version`` is the state znode's version (-1: not
    written yet), which is also the partition epoch."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = -1

    def encode(self) -> bytes:
        return json.dumps({
            "controller_epoch": self.controller_epoch, "leader": self.leader,
            "version": STATE_VERSION, "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
        }).encode()


def decode_state(data: bytes, zk_version: int) -> LeaderAndIsr:
    """TopicPartitionStateZNode.decode (the fields Kafka writes in ZooKeeper mode)."""
    try:
        doc = json.loads(data)
        return LeaderAndIsr(
            int(doc["leader"]), int(doc["leader_epoch"]), tuple(int(b) for b in doc["isr"]),
            int(doc["controller_epoch"]), zk_version,
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"unreadable partition state: {data!r}") from exc


def decide(
    replicas: Sequence[int],
    current: LeaderAndIsr | None,
    live: Collection[int],
    controller_epoch: int,
    unclean: bool = False,
    shutting_down: Collection[int] = (),
) -> LeaderAndIsr | None:
    """The state to write for a partition, or None when its current one stands (see the
    table in the module docstring). The result's ``zk_version`` is the current one's."""
    # who may lead or stay in an ISR: live and not shutting down
    eligible = [r for r in replicas if r in live and r not in shutting_down]
    if current is None:
        alive = tuple(eligible)
        if alive:
            return LeaderAndIsr(alive[0], INITIAL_LEADER_EPOCH, alive, controller_epoch)
        return LeaderAndIsr(NO_LEADER, INITIAL_LEADER_EPOCH, tuple(replicas), controller_epoch)
    if current.leader != NO_LEADER and current.leader in live:
        isr = tuple(r for r in current.isr
                    if r == current.leader or (r in live and r not in shutting_down))
        if current.leader in shutting_down:
            successor = next((r for r in eligible if r in current.isr), NO_LEADER)
            if successor != NO_LEADER:
                return LeaderAndIsr(successor, current.leader_epoch + 1,
                                    tuple(r for r in isr if r != current.leader),
                                    controller_epoch, current.zk_version)
        if isr == current.isr:
            return None
        return LeaderAndIsr(current.leader, current.leader_epoch, isr, controller_epoch,
                            current.zk_version)
    leader = next((r for r in eligible if r in current.isr), NO_LEADER)
    if leader == NO_LEADER and unclean:
        leader = eligible[0] if eligible else NO_LEADER
        if leader != NO_LEADER:
            return LeaderAndIsr(leader, current.leader_epoch + 1, (leader,), controller_epoch,
                                current.zk_version)
    if leader == NO_LEADER:
        if current.leader == NO_LEADER:
            return None
        isr = current.isr  # no live ISR replica: keep the last ISR, lead with nobody
    else:
        isr = tuple(r for r in current.isr if r in live and r not in shutting_down)
    return LeaderAndIsr(
        leader, current.leader_epoch + 1, isr, controller_epoch, current.zk_version
    )


def decide_preferred(
    replicas: Sequence[int], current: LeaderAndIsr | None, live: Collection[int],
    controller_epoch: int, shutting_down: Collection[int] = (),
) -> LeaderAndIsr | None:
    """Leadership back to the preferred replica (the first of the assignment), if it is
    live, not shutting down, in the ISR and not leading already; else None."""
    if current is None or not replicas:
        return None
    preferred = replicas[0]
    if (current.leader == preferred or preferred not in live or preferred in shutting_down
            or preferred not in current.isr):
        return None
    return LeaderAndIsr(preferred, current.leader_epoch + 1, current.isr, controller_epoch,
                        current.zk_version)


def isr_change(current: LeaderAndIsr, isr: Sequence[int]) -> LeaderAndIsr:
    """The state a leader writes to change its ISR: same leader and epoch, conditional on
    ``current.zk_version``."""
    return LeaderAndIsr(current.leader, current.leader_epoch, tuple(isr),
                        current.controller_epoch, current.zk_version)


NOTIFICATION_VERSION = 1


def notification_data(controller_epoch: int, partitions: Iterable[tuple[str, int]]) -> bytes:
    """A ``state_change_<seq>`` notification naming the partitions whose state changed."""
    return json.dumps({
        "version": NOTIFICATION_VERSION, "controller_epoch": controller_epoch,
        "partitions": [{"topic": t, "partition": p} for t, p in partitions],
    }).encode()
