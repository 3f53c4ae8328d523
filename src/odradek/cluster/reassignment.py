"""Partition reassignment, sans-I/O (Kafka's ZooKeeper-mode reassignment: the
``/admin/reassign_partitions`` znode, KafkaController.onPartitionReassignment, KIP-455).

How it works: an admin request (AlterPartitionReassignments, ``odradek reassign``) merges
entries into ``/admin/reassign_partitions``: ``{"version":1,"partitions":[{"topic",
"partition","replicas","original_replicas"}]}`` (``replicas`` null cancels; Kafka's format
plus ``original_replicas``, the assignment when the reassignment was asked for, which
ListPartitionReassignments reports as adding and removing replicas and a cancellation
returns to). The controller watches the znode and moves each partition in two steps:

1. *Expand*: the assignment becomes the target followed by the original replicas not in it
   (:func:`expanded`). The new replicas' brokers create the log and fetch from the leader;
   the leader adds them to the ISR once caught up.
2. *Complete*, once every target replica is in the ISR (:func:`completion`): the leader
   stays if it is a target replica, else the first target replica in the ISR leads (leader
   epoch + 1); the ISR keeps only target replicas; the assignment becomes the target, in
   the same transaction as that state (its op first: brokers learn the new replica set no
   later than the ISR without the leaving replicas, so a leader never adds one back, as
   Kafka sends the leader the new replica set before it shrinks the ISR); the entry
   leaves the znode (which is deleted when empty). Brokers no longer assigned the
   partition stop fetching it and delete its log.

The controller watches the state znodes of partitions being reassigned, so it hears when a
leader grew its ISR.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from odradek.cluster.leader_election import LeaderAndIsr
from odradek.cluster.store import StoreError

__all__ = [
    "REASSIGN_PATH",
    "Reassignment",
    "completion",
    "decode_reassignments",
    "encode_reassignments",
    "expanded",
]

REASSIGN_PATH = "/admin/reassign_partitions"


@dataclass(frozen=True, slots=True)
class Reassignment:
    topic: str
    partition: int
    target: tuple[int, ...] | None  # None: cancel (go back to ``original``)
    original: tuple[int, ...]

    @property
    def destination(self) -> tuple[int, ...]:
        return self.original if self.target is None else self.target

    @property
    def adding(self) -> tuple[int, ...]:
        return tuple(r for r in self.destination if r not in self.original)

    @property
    def removing(self) -> tuple[int, ...]:
        return tuple(r for r in self.original if r not in self.destination)


def encode_reassignments(entries: Iterable[Reassignment]) -> bytes:
    return json.dumps({"version": 1, "partitions": [
        {"topic": e.topic, "partition": e.partition,
         "replicas": None if e.target is None else list(e.target),
         "original_replicas": list(e.original)}
        for e in sorted(entries, key=lambda e: (e.topic, e.partition))
    ]}).encode()


def decode_reassignments(data: bytes) -> dict[tuple[str, int], Reassignment]:
    try:
        doc = json.loads(data)
        out = {}
        for entry in doc["partitions"]:
            target = entry.get("replicas")
            key = (str(entry["topic"]), int(entry["partition"]))
            out[key] = Reassignment(
                key[0], key[1], None if target is None else tuple(int(r) for r in target),
                tuple(int(r) for r in entry.get("original_replicas") or target or ()),
            )
        return out
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"unreadable {REASSIGN_PATH}: {data!r}") from exc


def expanded(original: Sequence[int], target: Sequence[int]) -> tuple[int, ...]:
    """The assignment while moving: the target, then the original replicas leaving."""
    return (*target, *(r for r in original if r not in target))


def completion(
    target: Sequence[int], current: LeaderAndIsr, live: Collection[int], controller_epoch: int
) -> LeaderAndIsr | None:
    """The state that completes the move once every target replica is in the ISR; None
    while one is still catching up (or no target replica can lead). Returns ``current``
    itself when it needs no change."""
    if not set(target) <= set(current.isr):
        return None
    isr = tuple(r for r in current.isr if r in target)
    if current.leader in target:
        if isr == current.isr:
            return current
        return LeaderAndIsr(current.leader, current.leader_epoch, isr, controller_epoch,
                            current.zk_version)
    leader = next((r for r in target if r in isr and r in live), -1)
    if leader < 0:
        return None
    return LeaderAndIsr(leader, current.leader_epoch + 1, isr, controller_epoch,
                        current.zk_version)
