"""The bookkeeping both coordinators share, with a minimal coordinator over the in-memory
topic: partition states while loading and owned, the error codes of a key's check,
election and resignation as leadership moves, and the epoch rule of a coordinator whose
cache holds the coordinator epoch."""

from __future__ import annotations

from typing import cast

import pytest

from odradek.coordinator.internal_topic_coordinator import (
    APPEND_ERRORS,
    CoordinatorPartitions,
    InternalTopicCoordinator,
    append_error,
)
from odradek.coordinator.offsets_topic import OffsetsTopic, OffsetsTopicUnavailableError
from odradek.protocol.errors import ErrorCode
from tests.coordinator._offsets_topic import PARTITIONS, FakeOffsetsTopic

E = ErrorCode


class LedTopic(FakeOffsetsTopic):
    """A topic whose led partitions, leaders and epochs the test moves."""

    def __init__(self) -> None:
        super().__init__()
        self.led: set[int] = set(range(PARTITIONS))
        self.epochs: dict[int, int] = dict.fromkeys(range(PARTITIONS), 0)
        self.created = True
        self.creatable = True
        self.leaderless: set[int] = set()

    def exists(self) -> bool:
        return self.created

    def ensure(self) -> bool:
        if self.created:
            return False
        if not self.creatable:
            raise OffsetsTopicUnavailableError("cannot create the topic")
        self.created = True
        return True

    def leader_of(self, partition: int) -> int | None:  # type: ignore[override]
        return None if partition in self.leaderless else 0

    def leader_epoch(self, partition: int) -> int:
        return self.epochs[partition]

    def led_partitions(self) -> list[int]:
        return sorted(self.led) if self.created else []


class KeyCoordinator(InternalTopicCoordinator):
    """Keys "k<partition>-..." live in partition <partition>; loading caches one key."""

    LOADED_NOUN = "key"

    def __init__(self, topic: LedTopic) -> None:
        super().__init__(cast(OffsetsTopic, topic), CoordinatorPartitions())
        self.cache: dict[int, str] = {}
        self.events: list[tuple[str, int]] = []

    def partition_for(self, key: str) -> int:
        return int(key[1:].split("-")[0])

    def on_elected(self, partition: int) -> None:
        self.events.append(("elected", partition))
        self.cache[partition] = self.partitions.load(
            partition, self.topic.leader_epoch(partition), lambda p: f"k{p}-loaded")

    def on_resigned(self, partition: int) -> None:
        self.events.append(("resigned", partition))
        self.partitions.unload(partition)
        self.cache.pop(partition, None)

    def cached_count(self) -> int:
        return len(self.cache)


class EpochKeyCoordinator(KeyCoordinator):
    """As the transaction coordinator: the cache holds the coordinator epoch."""

    RELOAD_ON_NEW_EPOCH = True


def test_a_partition_is_loading_while_it_replays_then_owned_at_its_epoch() -> None:
    partitions = CoordinatorPartitions()
    seen: list[tuple[bool, bool, bool, ErrorCode]] = []

    def replay(partition: int) -> str:
        seen.append((partitions.is_loading(partition), partitions.any_loading(),
                     partitions.is_owned(partition), partitions.check(partition)))
        return "done"

    assert partitions.check(2) == E.not_coordinator
    assert partitions.load(2, 7, replay) == "done"
    assert seen == [(True, True, False, E.coordinator_load_in_progress)]
    assert partitions.check(2) == E.none and partitions.epoch_of(2) == 7
    assert partitions.owned() == [2] and not partitions.any_loading()
    partitions.unload(2)
    assert partitions.check(2) == E.not_coordinator and partitions.epoch_of(2) is None


def test_a_replay_that_raises_leaves_the_partition_neither_loading_nor_owned() -> None:
    partitions = CoordinatorPartitions()

    def replay(partition: int) -> None:
        raise ValueError("unreadable")

    with pytest.raises(ValueError):
        partitions.load(1, 0, replay)
    assert not partitions.is_loading(1) and not partitions.is_owned(1)


def test_startup_loads_the_led_partitions_and_shutdown_unloads_them() -> None:
    topic = LedTopic()
    topic.led = {0, 2}
    c = KeyCoordinator(topic)
    assert c.check_coordinator("k0-a") == E.coordinator_not_available
    assert c.check_listing() == E.coordinator_not_available
    c.startup()
    assert c.partitions.owned() == [0, 2] and c.cached_count() == 2
    assert c.check_coordinator("k0-a") == E.none
    assert c.check_coordinator("k1-a") == E.not_coordinator
    assert c.check_listing() == E.none
    c.shutdown()
    assert c.partitions.owned() == [] and c.cache == {}
    assert c.check_coordinator("k0-a") == E.coordinator_not_available


def test_refresh_leadership_resigns_what_moved_away_and_elects_what_arrived() -> None:
    topic = LedTopic()
    topic.led = {0, 1}
    c = KeyCoordinator(topic)
    c.startup()
    c.events.clear()
    topic.led = {1, 3}
    c.refresh_leadership()
    assert c.events == [("resigned", 0), ("elected", 3)]
    assert c.partitions.owned() == [1, 3]


@pytest.mark.parametrize("kind", [KeyCoordinator, EpochKeyCoordinator])
def test_a_new_leader_epoch_reloads_only_a_coordinator_that_asks_for_it(
        kind: type[KeyCoordinator]) -> None:
    reload = kind.RELOAD_ON_NEW_EPOCH
    topic = LedTopic()
    topic.led = {1}
    c = kind(topic)
    c.startup()
    c.events.clear()
    topic.epochs[1] = 5
    c.refresh_leadership()
    if reload:
        assert c.events == [("resigned", 1), ("elected", 1)]
        assert c.partitions.epoch_of(1) == 5
    else:
        assert c.events == [] and c.partitions.epoch_of(1) == 0


def test_the_topic_is_created_on_first_use_and_the_key_gets_its_leader() -> None:
    topic = LedTopic()
    topic.created = False
    c = KeyCoordinator(topic)
    c.startup()
    assert c.partitions.owned() == []
    assert c.coordinator_for("k2-a") == (E.none, 0)
    assert topic.created and c.partitions.owned() == list(range(PARTITIONS))
    topic.leaderless = {3}
    assert c.coordinator_for("k3-a") == (E.coordinator_not_available, -1)


def test_a_topic_that_cannot_be_created_is_coordinator_not_available() -> None:
    topic = LedTopic()
    topic.created, topic.creatable = False, False
    c = KeyCoordinator(topic)
    c.startup()
    assert c.coordinator_for("k0-a") == (E.coordinator_not_available, -1)
    assert c.check_coordinator("k0-a") == E.coordinator_not_available


def test_append_errors_map_to_what_coordinator_clients_understand() -> None:
    def failure(name: str) -> Exception:
        exc = RuntimeError(name)
        exc.kafka_error = name  # type: ignore[attr-defined]
        return exc

    assert append_error(failure("NOT_LEADER_OR_FOLLOWER"), APPEND_ERRORS, "t", "k") == (
        E.not_coordinator)
    assert append_error(failure("REQUEST_TIMED_OUT"), APPEND_ERRORS, "t", "k") == (
        E.coordinator_not_available)
    assert append_error(failure("CORRUPT_MESSAGE"), APPEND_ERRORS, "t", "k") == (
        E.unknown_server_error)
    assert append_error(ValueError("no code"), APPEND_ERRORS, "t", "k") == (
        E.unknown_server_error)
