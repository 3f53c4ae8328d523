"""Server-side partition assignors of the consumer group protocol (KIP-848).

With KIP-848 the group coordinator computes each member's *target assignment* itself, with
the assignor named by ``group.consumer.assignors`` (or the member's ``ServerAssignor``). An
assignor here is a pure function: members (subscriptions and current target assignments)
and topic metadata in, a new target assignment out; no I/O, no clock, no randomness, and
the same input always gives the same output (members and topics are visited in sorted
order, never in the order a mapping happens to iterate). Kafka's classes are
``org.apache.kafka.coordinator.group.assignor.UniformAssignor`` (with
``UniformHomogeneousAssignmentBuilder`` and ``UniformHeterogeneousAssignmentBuilder``) and
``RangeAssignor``; this module follows their semantics as of Kafka 4.0.

How it works
------------
Topics a member subscribes to that are missing from ``topics`` are ignored (a deleted
topic, or one not created yet); partitions of the current assignment that no longer exist,
belong to a topic the member no longer subscribes to, or were already claimed by an
earlier member (members in member-id order) are dropped. Rack information is accepted but,
as in Kafka 4.0's server-side assignors, not used.

Where a member's partitions of a topic do not change, the result holds the very frozenset
of its current assignment (copy-on-write, as Kafka's builders), so a caller can compare
``new is old`` before comparing contents.

``uniform`` (balance first, then stickiness):

* Homogeneous subscriptions (every member subscribes to the same existing topics): with
  P partitions over M members each member's quota is P // M, and P % M members get one
  more. The extra slots go to the members that keep the most partitions (ties by member
  id), so a balanced group that gains or loses a member moves the least possible: each
  member keeps its current partitions up to its quota (the lowest-numbered, topics in id
  order), and the partitions left over (new ones, those of departed members, a member's
  excess) are handed out in (topic id, partition) order to the members under quota, in
  member-id order, as contiguous runs. Counts differ by at most one.
* Heterogeneous subscriptions: every member keeps the partitions of its current assignment
  that it still subscribes to; unowned partitions are given one by one to the least loaded
  subscriber of their topic, topics taken by partitions-per-subscriber descending (then
  subscriber count ascending, then topic id), as Kafka does; then, topic by topic, a
  partition moves from the most loaded subscriber holding one of the topic's partitions to
  the least loaded subscriber while their counts differ by more than one (the partition
  moved is the one most recently given to the member, so partitions it kept move last).
  Passes over the topics repeat until one moves nothing, at most ``MAX_BALANCE_PASSES``
  times (Kafka's ``MAX_ITERATION_COUNT``). The result is balanced among the subscribers of
  each topic; with overlapping, non-identical subscriptions, counts across the whole group
  can differ by more than one, as in Kafka.

``range`` (co-partitioning): members are ordered static members first by
``group.instance.id``, then dynamic members by member id. For each topic, its subscribers
in that order take contiguous ranges: with N partitions over S subscribers the first N % S
take N // S + 1 partitions, the others N // S. Members subscribed to the same topics of
equal partition counts therefore get the same partition numbers of every topic, which a
join of co-partitioned streams needs. Kafka rewrote this assignor (KAFKA-16944, 2024) to
recompute the assignment each time instead of keeping members' current partitions, since
stickiness and co-partitioning conflict; its only stickiness is through instance ids: with
the same static members, topics and subscriptions, every member gets the same ranges
whatever member ids they rejoin with. This module does the same.

Cost: O(P log P) for P partitions, plus the input's size in (distinct subscription, topic)
pairs: members with identical subscriptions are handled as one group, so a group of a few
distinct subscriptions costs per partition, not per (member, topic). The per-partition
Python work is a few list, heap and bytearray operations; looking a ``uuid.UUID`` up in a
dict runs Python code (its ``__hash__``), so no loop does it per partition. The
heterogeneous balancing passes cost per holder and per group of each topic.
``bench/assignors.py`` measures it (bench/README.md, "Consumer group assignors").
"""

from __future__ import annotations

import heapq
import itertools
import operator
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "ASSIGNORS",
    "MAX_BALANCE_PASSES",
    "Assignment",
    "MemberSubscription",
    "PartitionAssignor",
    "PartitionAssignorError",
    "RangeAssignor",
    "SubscribedTopic",
    "UniformAssignor",
]

# Kafka's UniformHeterogeneousAssignmentBuilder.MAX_ITERATION_COUNT: each balancing pass
# roughly halves the imbalance of overlapping subscriptions; identical subscriptions settle
# in one pass and need a second to see that nothing moves.
MAX_BALANCE_PASSES = 16

# Topics sort by id; comparing UUIDs runs Python code, comparing their ints does not.
_TOPIC_ORDER = operator.attrgetter("int")


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    subscribed_topic_ids: frozenset[uuid.UUID]
    # The member's current target assignment (the stickiness input); empty for a new member.
    assignment: Mapping[uuid.UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class SubscribedTopic:
    topic_id: uuid.UUID
    name: str
    num_partitions: int
    # partition -> racks of its replicas; may be empty (no rack information).
    partition_racks: Mapping[int, frozenset[str]]


# member_id -> topic_id -> partitions; every member is present, possibly with no topics.
Assignment = dict[str, dict[uuid.UUID, frozenset[int]]]


class PartitionAssignorError(Exception):
    """The assignor cannot compute an assignment (Kafka's PartitionAssignorException)."""


class PartitionAssignor(Protocol):
    name: str

    def assign(
        self, members: Mapping[str, MemberSubscription], topics: Mapping[uuid.UUID, SubscribedTopic]
    ) -> Assignment: ...


@dataclass(slots=True)
class _Subscriptions:
    """Members in member-id order, their subscriptions restricted to known topics, and
    the members grouped by identical subscription (one group when it is homogeneous).

    Grouping keeps the work per distinct subscription rather than per member: hashing a
    ``uuid.UUID`` runs Python code, so nothing here touches every (member, topic) pair.
    """

    member_ids: list[str]
    subs: list[frozenset[uuid.UUID]]
    # (subscription, member indices ascending), in order of first appearance.
    groups: list[tuple[frozenset[uuid.UUID], list[int]]]


def _subscriptions(
    members: Mapping[str, MemberSubscription], topics: Mapping[uuid.UUID, SubscribedTopic]
) -> _Subscriptions:
    member_ids = sorted(members)
    known = frozenset(topics)
    canonical: dict[frozenset[uuid.UUID], int] = {}
    subs: list[frozenset[uuid.UUID]] = []
    groups: list[tuple[frozenset[uuid.UUID], list[int]]] = []
    for i, member_id in enumerate(member_ids):
        subscribed = members[member_id].subscribed_topic_ids
        g = canonical.get(subscribed)
        if g is None:
            filtered = subscribed if subscribed.issubset(known) else subscribed & known
            g = canonical.get(filtered)
            if g is None:
                g = len(groups)
                groups.append((filtered, []))
                canonical[filtered] = g
            canonical[subscribed] = g
        groups[g][1].append(i)
        subs.append(groups[g][0])
    return _Subscriptions(member_ids, subs, groups)


def _topic_groups(
    groups: list[tuple[frozenset[uuid.UUID], list[int]]],
) -> dict[uuid.UUID, list[int]]:
    """topic id -> indices into ``groups`` of the groups subscribing to it."""
    out: dict[uuid.UUID, list[int]] = {}
    for g, (subscribed, _) in enumerate(groups):
        for topic_id in subscribed:
            out.setdefault(topic_id, []).append(g)
    return out


def _retained(
    current: Mapping[uuid.UUID, frozenset[int]],
    subscribed: frozenset[uuid.UUID],
    topics: Mapping[uuid.UUID, SubscribedTopic],
    owned: dict[uuid.UUID, bytearray],
) -> list[tuple[uuid.UUID, list[int]]]:
    """The partitions of ``current`` a member may keep, marked in ``owned``.

    Topics in id order, partitions ascending; a partition that no longer exists, belongs to
    a topic not subscribed to, or is already owned by another member is left out.
    """
    kept: list[tuple[uuid.UUID, list[int]]] = []
    for topic_id in sorted(current, key=_TOPIC_ORDER):
        if topic_id not in subscribed:
            continue
        flags = owned[topic_id]
        n = topics[topic_id].num_partitions
        keep = []
        for p in sorted(current[topic_id]):
            if 0 <= p < n and not flags[p]:
                flags[p] = 1
                keep.append(p)
        if keep:
            kept.append((topic_id, keep))
    return kept


def _unowned(
    topic_ids: list[uuid.UUID], owned: dict[uuid.UUID, bytearray]
) -> list[tuple[uuid.UUID, int]]:
    """The partitions not marked in ``owned``, in (topic id, partition) order."""
    free: list[tuple[uuid.UUID, int]] = []
    for topic_id in topic_ids:
        flags = owned[topic_id]
        p = flags.find(0)
        while p != -1:
            free.append((topic_id, p))
            p = flags.find(0, p + 1)
    return free


def _freeze(
    partitions: Mapping[uuid.UUID, list[int]], current: Mapping[uuid.UUID, frozenset[int]]
) -> dict[uuid.UUID, frozenset[int]]:
    """A member's assignment as frozensets, reusing the current ones that did not change."""
    if not current:  # a lookup hashes the topic id, which runs Python code for a UUID
        return {topic_id: frozenset(parts) for topic_id, parts in partitions.items() if parts}
    out: dict[uuid.UUID, frozenset[int]] = {}
    for topic_id, parts in partitions.items():
        if not parts:
            continue
        old = current.get(topic_id)
        if old is not None and len(old) == len(parts) and old.issuperset(parts):
            out[topic_id] = old
        else:
            out[topic_id] = frozenset(parts)
    return out


class UniformAssignor:
    """Kafka's ``uniform`` assignor: balanced, then sticky (see the module docstring)."""

    name = "uniform"

    def assign(
        self, members: Mapping[str, MemberSubscription], topics: Mapping[uuid.UUID, SubscribedTopic]
    ) -> Assignment:
        if not members:
            return {}
        subs = _subscriptions(members, topics)
        if len(subs.groups) == 1:
            return _homogeneous(members, topics, subs.member_ids, subs.groups[0][0])
        return _heterogeneous(members, topics, subs)


def _homogeneous(
    members: Mapping[str, MemberSubscription],
    topics: Mapping[uuid.UUID, SubscribedTopic],
    member_ids: list[str],
    subscribed: frozenset[uuid.UUID],
) -> Assignment:
    if not subscribed:
        return {m: {} for m in member_ids}
    topic_ids = sorted(subscribed, key=_TOPIC_ORDER)
    owned = {t: bytearray(topics[t].num_partitions) for t in topic_ids}
    total = sum(len(f) for f in owned.values())
    quota, extra = divmod(total, len(member_ids))

    kept = [_retained(members[m].assignment, subscribed, topics, owned) for m in member_ids]
    counts = [sum(len(parts) for _, parts in k) for k in kept]
    # The extra slots go to the members keeping the most, so the fewest partitions move.
    by_kept = sorted(range(len(member_ids)), key=lambda i: (-counts[i], member_ids[i]))
    quotas = [quota] * len(member_ids)
    for i in by_kept[:extra]:
        quotas[i] = quota + 1

    # Members over quota give up their highest partitions (last topics first).
    for i, k in enumerate(kept):
        excess = counts[i] - quotas[i]
        while excess > 0:
            topic_id, parts = k[-1]
            flags = owned[topic_id]
            drop = min(excess, len(parts))
            for p in parts[len(parts) - drop :]:
                flags[p] = 0
            del parts[len(parts) - drop :]
            if not parts:
                k.pop()
            excess -= drop
            counts[i] -= drop

    free = _unowned(topic_ids, owned)
    result: Assignment = {}
    next_free = 0
    for i, member_id in enumerate(member_ids):
        parts_by_topic: dict[uuid.UUID, list[int]] = dict(kept[i])
        need = quotas[i] - counts[i]
        if need > 0:
            last: uuid.UUID | None = None
            run: list[int] = []
            for topic_id, p in free[next_free : next_free + need]:
                if topic_id is not last:  # identity: hashing a UUID runs Python code
                    run = parts_by_topic.setdefault(topic_id, [])
                    last = topic_id
                run.append(p)
            next_free += need
        result[member_id] = _freeze(parts_by_topic, members[member_id].assignment)
    if next_free != len(free):
        raise PartitionAssignorError(f"{len(free) - next_free} partitions were left unassigned")
    return result


class _LeastLoaded:
    """The least loaded member of each subscription group: a min-heap of (size, member) per
    group, with an entry pushed on every size change and stale entries skipped lazily."""

    __slots__ = ("group_of", "heaps", "sizes")

    def __init__(
        self, groups: list[tuple[frozenset[uuid.UUID], list[int]]], sizes: list[int]
    ) -> None:
        self.sizes = sizes
        self.group_of = [0] * len(sizes)
        self.heaps: list[list[tuple[int, int]]] = []
        for g, (_, indices) in enumerate(groups):
            heap = []
            for i in indices:
                self.group_of[i] = g
                heap.append((sizes[i], i))
            heapq.heapify(heap)
            self.heaps.append(heap)

    def top(self, g: int) -> tuple[int, int, int]:
        heap, sizes = self.heaps[g], self.sizes
        while True:
            size, i = heap[0]
            if sizes[i] == size:
                return size, i, g
            heapq.heappop(heap)

    def resized(self, i: int) -> None:
        heapq.heappush(self.heaps[self.group_of[i]], (self.sizes[i], i))

    def across(self, group_ids: list[int]) -> list[tuple[int, int, int]]:
        """A min-heap of the groups' least loaded members, for ``least``."""
        heap = [self.top(g) for g in group_ids]
        heapq.heapify(heap)
        return heap

    def least(self, heap: list[tuple[int, int, int]]) -> tuple[int, int, int]:
        """The least loaded member among ``across``'s groups; entries are refreshed lazily."""
        while True:
            entry = heap[0]
            current = self.top(entry[2])
            if current == entry:
                return entry
            heapq.heapreplace(heap, current)


def _heterogeneous(
    members: Mapping[str, MemberSubscription],
    topics: Mapping[uuid.UUID, SubscribedTopic],
    subs: _Subscriptions,
) -> Assignment:
    member_ids, groups = subs.member_ids, subs.groups
    topic_groups = _topic_groups(groups)
    group_size = [len(indices) for _, indices in groups]
    subscriber_count = {t: sum(map(group_size.__getitem__, gs)) for t, gs in topic_groups.items()}
    owned = {t: bytearray(topics[t].num_partitions) for t in topic_groups}
    sizes = [0] * len(member_ids)
    # held[topic][member index] -> partitions, in the order the member got them.
    held: dict[uuid.UUID, dict[int, list[int]]] = {t: {} for t in topic_groups}
    for i, member_id in enumerate(member_ids):
        for topic_id, parts in _retained(
            members[member_id].assignment, subs.subs[i], topics, owned
        ):
            held[topic_id][i] = parts
            sizes[i] += len(parts)
    loads = _LeastLoaded(groups, sizes)

    def topic_order(topic_id: uuid.UUID) -> tuple[float, int, int]:
        # Partitions per subscriber as a float, as Kafka compares them: only an ordering
        # heuristic, and ties still fall to the subscriber count and the topic id.
        n = subscriber_count[topic_id]
        return (-topics[topic_id].num_partitions / n, n, topic_id.int)

    ordered = sorted(topic_groups, key=topic_order)

    # Unowned partitions to the least loaded subscriber of their topic.
    for topic_id in ordered:
        free = _unowned([topic_id], owned)
        if not free:
            continue
        heap = loads.across(topic_groups[topic_id])
        topic_held = held[topic_id]
        for _, p in free:
            _, i, g = loads.least(heap)
            topic_held.setdefault(i, []).append(p)
            sizes[i] += 1
            loads.resized(i)
            heapq.heapreplace(heap, loads.top(g))

    movable = [t for t in ordered if subscriber_count[t] >= 2]
    for _ in range(MAX_BALANCE_PASSES):
        moved = 0
        # Balancing never lowers the smallest count (a partition leaves a member at least
        # two above it), so the pass's starting minimum is a lower bound throughout.
        floor = min(sizes)
        for topic_id in movable:
            moved += _balance_topic(held[topic_id], loads, topic_groups[topic_id], floor)
        if not moved:
            break

    by_member: list[dict[uuid.UUID, list[int]]] = [{} for _ in member_ids]
    for topic_id, topic_held in held.items():
        for i, parts in topic_held.items():
            by_member[i][topic_id] = parts
    return {m: _freeze(by_member[i], members[m].assignment) for i, m in enumerate(member_ids)}


def _balance_topic(
    topic_held: dict[int, list[int]], loads: _LeastLoaded, group_ids: list[int], floor: int
) -> int:
    """Move one topic's partitions from its most to its least loaded subscribers while
    their counts differ by more than one; returns how many moved.

    The most loaded holder comes from a max-heap of the topic's holders (lazy: an entry
    whose size is stale is refreshed when it surfaces), the least loaded subscriber from
    ``loads``. The cost is per holder and per group, not per subscriber; and a topic whose
    holders are all within one of ``floor`` (no member has fewer) costs only the holders.
    """
    sizes = loads.sizes
    most = [(-sizes[i], i) for i, parts in topic_held.items() if parts]
    if not most or -min(most)[0] - floor <= 1:
        return 0
    heapq.heapify(most)
    least = loads.across(group_ids)
    moved = 0
    while most:
        neg, src = most[0]
        if not topic_held[src]:
            heapq.heappop(most)
            continue
        if -neg != sizes[src]:
            heapq.heapreplace(most, (-sizes[src], src))
            continue
        size, dst, g = loads.least(least)
        if sizes[src] - size <= 1:
            break
        topic_held.setdefault(dst, []).append(topic_held[src].pop())
        sizes[src] -= 1
        sizes[dst] += 1
        loads.resized(src)
        loads.resized(dst)
        moved += 1
        heapq.heapreplace(most, (-sizes[src], src))
        heapq.heappush(most, (-sizes[dst], dst))
        heapq.heapreplace(least, loads.top(g))
        heapq.heappush(least, loads.top(loads.group_of[src]))
    return moved


class RangeAssignor:
    """Kafka's ``range`` assignor: contiguous, co-partitioned ranges (see the module docstring)."""

    name = "range"

    def assign(
        self, members: Mapping[str, MemberSubscription], topics: Mapping[uuid.UUID, SubscribedTopic]
    ) -> Assignment:
        if not members:
            return {}
        subs = _subscriptions(members, topics)
        member_ids, groups = subs.member_ids, subs.groups

        def order(i: int) -> tuple[int, str]:
            instance_id = members[member_ids[i]].instance_id
            return (0, instance_id) if instance_id is not None else (1, member_ids[i])

        ordered = sorted(range(len(member_ids)), key=order)
        position = [0] * len(member_ids)
        for pos, i in enumerate(ordered):
            position[i] = pos
        # Each group's members in assignment order, as positions.
        group_positions = [sorted(position[i] for i in indices) for _, indices in groups]

        parts_by_member: list[dict[uuid.UUID, list[int]]] = [{} for _ in member_ids]
        for topic_id, group_ids in _topic_groups(groups).items():
            num_partitions = topics[topic_id].num_partitions
            count = sum(len(group_positions[g]) for g in group_ids)
            quota, extra = divmod(num_partitions, count)
            # Only the first min(count, partitions) subscribers can get anything.
            if len(group_ids) == 1:
                first = group_positions[group_ids[0]][:num_partitions]
            else:
                chained = itertools.chain.from_iterable(group_positions[g] for g in group_ids)
                first = sorted(chained)[:num_partitions]
            start = 0
            for k, pos in enumerate(first):
                end = start + quota + (1 if k < extra else 0)
                if end > start:
                    parts_by_member[ordered[pos]][topic_id] = list(range(start, end))
                start = end
        return {
            m: _freeze(parts_by_member[i], members[m].assignment) for i, m in enumerate(member_ids)
        }


ASSIGNORS: Mapping[str, PartitionAssignor] = {
    UniformAssignor.name: UniformAssignor(),
    RangeAssignor.name: RangeAssignor(),
}
