"""An in-memory ``__consumer_offsets`` for the coordinator tests, and a settable clock.

Each partition is a list of the (key, value) records appended to it, so a test can check
what was written and replay it into a fresh coordinator or manager.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

PARTITIONS = 4


class FakeOffsetsTopic:
    def __init__(self) -> None:
        self.records: dict[int, list[tuple[bytes, bytes | None]]] = {
            p: [] for p in range(PARTITIONS)}
        self.fail_appends = False

    partition_count = PARTITIONS

    def exists(self) -> bool:
        return True

    def ensure(self) -> bool:
        return False

    def leader_of(self, partition: int) -> int:
        return 0

    def led_partitions(self) -> list[int]:
        return list(range(PARTITIONS))

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]],
               timestamp: int) -> None:
        if self.fail_appends:
            error = RuntimeError("disk full")
            error.kafka_error = "KAFKA_STORAGE_ERROR"  # type: ignore[attr-defined]
            raise error
        self.records[partition].extend(records)

    def replay(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        yield from self.records[partition]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now
