"""Offset syncs and the replay fence of ``odradek mirror`` (pure: no I/O but one file).

How it works. The mirror copies source partition P of topic T to partition P of topic
``prefix + T``, in order, and it is the only writer of that target partition. So the
target partition is, record for record, the source partition's records in offset order
with its gaps (compacted or aborted offsets) closed up. Two facts follow:

* Replay fence. Before the tasks of micro-batch B run, the driver writes a *plan* into the
  checkpoint directory: for every target partition, its end offset ``t_from`` at that
  moment (the previous micro-batches are complete, so nothing of B is there yet). A replay
  of B (after kill -9, Spark re-runs the micro-batch it had planned but not committed, over
  the same source offset ranges) reuses the saved plan. A task of a replayed micro-batch,
  or a retried task (attempt > 0), then reads the target partition's end ``H``: the first
  ``H - t_from`` records of its range are already there (the idempotent producer writes a
  partition's records in order and once, so what reached the target is a prefix), and it
  writes only the rest. Hence neither lost nor doubled, even for a task killed half-way
  through its records. (Speculative execution, two attempts of one task at once, must
  stay off: Spark's default.)
* Offset translation, as MirrorMaker 2's offset syncs (KIP-382, ``OffsetSyncStore``) but
  exact: each task reports its records as *runs* ``(source start, target start, length)``
  of consecutive source offsets; a committed source offset ``c`` ("next to read is the
  first record at or after c") translates to the target offset of the first mirrored
  record at or after ``c``. With the runs before ``c`` known, that is: inside a run,
  ``t + (c - s)``; after a run (in a gap, or past what is mirrored yet), the offset after
  the run's last record. A run that was dropped (the store is bounded) makes the answer
  earlier, never later: a consumer moved to the target may read some records again but
  never skips one.

The store keeps at most :data:`MAX_RUNS` runs per partition (the oldest are dropped; an
offset before the oldest kept run is then not translated) and is saved atomically
(write, fsync, rename) with the plans of the last :data:`KEEP_PLANS` micro-batches.
"""

from __future__ import annotations

import bisect
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "KEEP_PLANS",
    "MAX_RUNS",
    "MAX_RUNS_PER_TASK",
    "MirrorState",
    "Run",
    "SyncStore",
    "runs_of",
]

#: runs kept per partition: a run per micro-batch for a compacted partition with gaps,
#: one in all for a partition without gaps (contiguous runs merge)
MAX_RUNS = 10_000
#: runs one task reports; more (a compacted range full of gaps) are thinned evenly
MAX_RUNS_PER_TASK = 1_000
#: plans kept for replays (Spark replays at most the last planned micro-batch)
KEEP_PLANS = 8

Run = tuple[int, int, int]  # (source offset, target offset, length)
TP = tuple[str, int]


def runs_of(source_offsets: list[int], target_start: int) -> list[Run]:
    """Runs of consecutive offsets in ``source_offsets`` (increasing) written from
    ``target_start`` on; thinned to :data:`MAX_RUNS_PER_TASK` (dropping runs only makes
    translations earlier)."""
    runs: list[Run] = []
    t = target_start
    for s in source_offsets:
        if runs and runs[-1][0] + runs[-1][2] == s:
            s0, t0, n = runs[-1]
            runs[-1] = (s0, t0, n + 1)
        else:
            runs.append((s, t, 1))
        t += 1
    if len(runs) > MAX_RUNS_PER_TASK:
        step = len(runs) / MAX_RUNS_PER_TASK
        runs = [runs[int(i * step)] for i in range(MAX_RUNS_PER_TASK)]
    return runs


@dataclass
class SyncStore:
    """Per source partition, the runs mirrored so far, in source order."""

    runs: dict[TP, list[Run]] = field(default_factory=dict)
    #: partitions whose oldest runs were dropped (offsets before the first kept are unknown)
    pruned: set[TP] = field(default_factory=set)

    def add(self, tp: TP, new: list[Run]) -> None:
        """Append the runs of one task; runs already known (a replayed micro-batch reports
        its runs again) are ignored."""
        have = self.runs.setdefault(tp, [])
        for s, t, n in new:
            if have:
                s0, t0, n0 = have[-1]
                if s < s0 + n0:  # already known
                    continue
                if s == s0 + n0 and t == t0 + n0:  # contiguous: merge
                    have[-1] = (s0, t0, n0 + n)
                    continue
            have.append((s, t, n))
        if len(have) > MAX_RUNS:
            del have[: len(have) - MAX_RUNS]
            self.pruned.add(tp)

    def translate(self, tp: TP, committed: int) -> int | None:
        """The target offset for the source committed offset ``committed`` of ``tp``, or
        None when it cannot be told (nothing mirrored yet, or before the kept runs)."""
        have = self.runs.get(tp)
        if not have:
            return None
        i = bisect.bisect_left(have, (committed, -1, -1))  # first run starting at >= c
        if i < len(have) and have[i][0] == committed:
            return have[i][1]
        if i == 0:
            # c is before the first mirrored record; exact only if nothing was dropped
            return None if tp in self.pruned else have[0][1]
        s, t, n = have[i - 1]
        return t + min(committed - s, n)

    def mirrored_end(self, tp: TP) -> int | None:
        """Target offset after the last mirrored record of ``tp``."""
        have = self.runs.get(tp)
        return have[-1][1] + have[-1][2] if have else None

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": [[t, p, [list(r) for r in rs]] for (t, p), rs in sorted(self.runs.items())],
            "pruned": sorted([t, p] for t, p in self.pruned),
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> SyncStore:
        store = cls()
        for t, p, rs in raw.get("runs", []):
            store.runs[(str(t), int(p))] = [(int(a), int(b), int(c)) for a, b, c in rs]
        store.pruned = {(str(t), int(p)) for t, p in raw.get("pruned", [])}
        return store


def _write_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class MirrorState:
    """The mirror's own files under ``<checkpoint>/odradek-mirror/``: the plans (replay
    fence), the offset syncs and the target topics the mirror created or adopted."""

    def __init__(self, checkpoint: Path) -> None:
        self.dir = checkpoint / "odradek-mirror"
        self.plans = self.dir / "plans"
        self.plans.mkdir(parents=True, exist_ok=True)
        self._syncs = self.dir / "syncs.json"
        self._topics = self.dir / "topics.json"

    def load_plan(self, batch: int) -> dict[TP, int] | None:
        path = self.plans / f"{batch}.json"
        if not path.exists():
            return None
        raw = json.loads(path.read_text(encoding="utf-8"))
        return {(str(t), int(p)): int(off) for t, p, off in raw}

    def save_plan(self, batch: int, plan: dict[TP, int]) -> None:
        _write_atomic(self.plans / f"{batch}.json", [[t, p, off] for (t, p), off in plan.items()])
        for old in self.plans.glob("*.json"):
            if old.stem.isdigit() and int(old.stem) <= batch - KEEP_PLANS:
                old.unlink(missing_ok=True)

    def load_syncs(self) -> SyncStore:
        if not self._syncs.exists():
            return SyncStore()
        return SyncStore.from_json(json.loads(self._syncs.read_text(encoding="utf-8")))

    def save_syncs(self, store: SyncStore) -> None:
        _write_atomic(self._syncs, store.to_json())

    def load_topics(self) -> set[str]:
        if not self._topics.exists():
            return set()
        return set(json.loads(self._topics.read_text(encoding="utf-8")))

    def save_topics(self, topics: set[str]) -> None:
        _write_atomic(self._topics, sorted(topics))
