"""An in-memory ``__consumer_offsets`` for the coordinator tests, and a settable clock.

Each partition is a list of the (key, value) records appended to it, so a test can check
what was written and replay it into a fresh coordinator or manager; the producer id of a
transactional append and transaction markers (:meth:`FakeOffsetsTopic.marker`) are kept
beside them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from odradek.coordinator.offsets_topic import ReplayedRecord

PARTITIONS = 4


class FakeOffsetsTopic:
    def __init__(self) -> None:
        # (key, value), or a ReplayedRecord for a transactional record or a marker
        self.records: dict[int, list[tuple[bytes, bytes | None]]] = {
            p: [] for p in range(PARTITIONS)}
        self.fail_appends = False
        self.name = "__consumer_offsets"

    partition_count = PARTITIONS

    def exists(self) -> bool:
        return True

    def ensure(self) -> bool:
        return False

    def leader_of(self, partition: int) -> int:
        return 0

    def leader_epoch(self, partition: int) -> int:
        return 0

    def led_partitions(self) -> list[int]:
        return list(range(PARTITIONS))

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]],
               timestamp: int, producer_id: int = -1, producer_epoch: int = -1) -> None:
        if self.fail_appends:
            error = RuntimeError("disk full")
            error.kafka_error = "KAFKA_STORAGE_ERROR"  # type: ignore[attr-defined]
            raise error
        if producer_id < 0:
            self.records[partition].extend(records)
        else:
            self.records[partition].extend(ReplayedRecord(k, v, producer_id) for k, v in records)

    def marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """A transaction marker of ``producer_id`` lands on ``partition``."""
        self.records[partition].append(ReplayedRecord(b"", None, producer_id, commit))

    def replay(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        for entry in self.replay_entries(partition):
            if entry.control is None:
                yield entry.key, entry.value

    def replay_entries(self, partition: int) -> Iterator[ReplayedRecord]:
        for item in self.records[partition]:
            yield item if isinstance(item, ReplayedRecord) else ReplayedRecord(*item, -1)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now
