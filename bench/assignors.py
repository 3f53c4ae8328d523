"""Cost of the consumer group protocol's server-side assignors (KIP-848, in-process).

Usage: ``.venv/bin/python bench/assignors.py [--repeat N]``

Times ``uniform`` and ``range`` from src/odradek/coordinator/consumer_assignors.py with no
broker: P partitions (in 10-partition topics) over M members, for 1,000 over 100 and
10,000 over 1,000. Cases, each the median of ``--repeat`` runs of the process's CPU time
(the machine is shared, so wall time would count other processes' turns):

- *first*: every member new (no current assignment);
- *steady*: the same group again, fed its own output (nothing moves);
- *join*: one member more, fed the steady assignment;
- *hetero*: half the members subscribe to every topic, half to the first half of the
  topics (uniform's heterogeneous builder), first assignment;
- *distinct*: every member subscribes to its own random tenth of the topics (seeded), the
  worst case for grouping members by subscription, first assignment.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from odradek.coordinator.consumer_assignors import (
    ASSIGNORS,
    Assignment,
    MemberSubscription,
    SubscribedTopic,
)

PARTITIONS_PER_TOPIC = 10


def _topics(partitions: int) -> dict[uuid.UUID, SubscribedTopic]:
    ids = [uuid.UUID(int=i + 1) for i in range(partitions // PARTITIONS_PER_TOPIC)]
    return {
        t: SubscribedTopic(t, f"topic-{i}", PARTITIONS_PER_TOPIC, {}) for i, t in enumerate(ids)
    }


def _members(
    count: int, topic_ids: list[uuid.UUID], current: Assignment | None, kind: str = "same"
) -> dict[str, MemberSubscription]:
    everything = frozenset(topic_ids)
    half = frozenset(topic_ids[: len(topic_ids) // 2])
    rng = random.Random(count)
    out = {}
    for i in range(count):
        member_id = f"member-{i:05d}"
        if kind == "distinct":
            subscribed = frozenset(rng.sample(topic_ids, max(1, len(topic_ids) // 10)))
        else:
            subscribed = half if kind == "hetero" and i % 2 else everything
        out[member_id] = MemberSubscription(
            member_id, None, None, subscribed, (current or {}).get(member_id, {})
        )
    return out


def _time(fn: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        samples.append(time.process_time() - start)
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    columns = ("first", "steady", "join", "hetero", "distinct")
    print(
        f"{'assignor':8} {'partitions':>10} {'members':>7} " + " ".join(f"{c:>9}" for c in columns)
    )
    for name in ("uniform", "range"):
        assignor = ASSIGNORS[name]
        for partitions, count in ((1_000, 100), (10_000, 1_000)):
            topics = _topics(partitions)
            ids = list(topics)
            fresh: Mapping[str, MemberSubscription] = _members(count, ids, None)
            first = _time(partial(assignor.assign, fresh, topics), args.repeat)
            current = assignor.assign(fresh, topics)
            again = _members(count, ids, current)
            steady = _time(partial(assignor.assign, again, topics), args.repeat)
            joined = _members(count + 1, ids, current)
            join = _time(partial(assignor.assign, joined, topics), args.repeat)
            mixed = _members(count, ids, None, "hetero")
            hetero = _time(partial(assignor.assign, mixed, topics), args.repeat)
            own = _members(count, ids, None, "distinct")
            distinct = _time(partial(assignor.assign, own, topics), args.repeat)
            cells = " ".join(f"{t:>7.1f}ms" for t in (first, steady, join, hetero, distinct))
            print(f"{name:8} {partitions:>10,} {count:>7,} {cells}")


if __name__ == "__main__":
    main()
