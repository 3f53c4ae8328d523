"""ClusterMetadata and replica placement (odradek.cluster.metadata).

Placement is Kafka's ``AdminUtils.assignReplicasToBrokers`` (seed 000, "Partition
Allocation"); the property tests check the invariants that algorithm guarantees, stated
in :func:`assign_replicas`. ClusterMetadata runs over a real EmbeddedStore in tmp_path.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.cluster.metadata import (
    MAX_PARTITIONS_PER_OPERATION,
    ClusterMetadata,
    MetadataError,
    TopicInfo,
    assign_replicas,
    continuing_start_index,
    decode_topic_id,
    encode_topic_id,
    rack_alternated_brokers,
)
from odradek.cluster.partition import PartitionState
from odradek.cluster.store import EmbeddedStore

SEED_BROKERS = [0, 1, 2, 3, 4, 5]
TWO_RACKS = {0: "A", 1: "A", 2: "A", 3: "B", 4: "B", 5: "B"}


def _counts(assignment: dict[int, list[int]]) -> Counter[int]:
    return Counter(b for replicas in assignment.values() for b in replicas)


def _leaders(assignment: dict[int, list[int]]) -> Counter[int]:
    return Counter(replicas[0] for replicas in assignment.values())


# -- placement: seed 000's example ---------------------------------------------------------
def test_seed_walk_through() -> None:
    """Start at broker 4: leaders 4, 5, 0, ...; partition 0's followers 5 and 0, partition
    1's 0 and 1 (the shift that puts the first follower right after the leader)."""
    assignment = assign_replicas(SEED_BROKERS, 10, 3, start_index=4, replica_shift=0)
    assert [assignment[p][0] for p in range(10)] == [4, 5, 0, 1, 2, 3, 4, 5, 0, 1]
    assert assignment[0] == [4, 5, 0]
    assert assignment[1] == [5, 0, 1]
    # Partition 6 starts the second round of leaders: the shift grows by one.
    assert assignment[6] == [4, 0, 1]


@pytest.mark.parametrize("start", range(6))
def test_seed_example_every_start_index(start: int) -> None:
    """6 brokers, 10 partitions, RF 3. Kafka's algorithm gives 30 replicas, no broker twice
    in a partition, leaders 2 or 1 per broker, and 4 to 6 replicas per broker: the seed's
    "5 per broker" is its goal, which round-robin leaders with shifted followers reach
    only when the broker count divides the partition count (next test)."""
    for shift in range(6):
        assignment = assign_replicas(
            SEED_BROKERS, 10, 3, start_index=start, replica_shift=shift
        )
        assert sorted(assignment) == list(range(10))
        assert sum(len(r) for r in assignment.values()) == 30
        assert all(len(set(r)) == 3 for r in assignment.values())
        assert sorted(_leaders(assignment).values()) == [1, 1, 2, 2, 2, 2]
        counts = _counts(assignment)
        assert set(counts) == set(SEED_BROKERS)
        assert all(4 <= c <= 6 for c in counts.values())


@pytest.mark.parametrize("start", range(6))
def test_seed_brokers_hold_exactly_their_share_when_partitions_divide(start: int) -> None:
    for shift in range(6):
        assignment = assign_replicas(
            SEED_BROKERS, 12, 3, start_index=start, replica_shift=shift
        )
        assert _counts(assignment) == dict.fromkeys(SEED_BROKERS, 6)
        assert _leaders(assignment) == dict.fromkeys(SEED_BROKERS, 2)


def test_fixed_start_index_is_the_shift_too() -> None:
    """As Kafka's fixedStartIndex: the start index also seeds the follower shift."""
    assert assign_replicas(SEED_BROKERS, 7, 3, start_index=2) == assign_replicas(
        SEED_BROKERS, 7, 3, start_index=2, replica_shift=2
    )


def test_randomness_comes_from_the_given_rng() -> None:
    first = assign_replicas(SEED_BROKERS, 20, 3, rng=random.Random(7))
    assert assign_replicas(SEED_BROKERS, 20, 3, rng=random.Random(7)) == first
    starts = {assign_replicas(SEED_BROKERS, 1, 1, rng=random.Random(s))[0][0] for s in range(60)}
    assert starts == set(SEED_BROKERS)  # the start broker is drawn, not always the first


def test_broker_ids_not_contiguous() -> None:
    brokers = [3, 7, 11]
    assignment = assign_replicas(brokers, 3, 2, start_index=0, replica_shift=0)
    assert assignment == {0: [3, 7], 1: [7, 11], 2: [11, 3]}


def test_replication_factor_one() -> None:
    assignment = assign_replicas(SEED_BROKERS, 8, 1, start_index=3)
    assert assignment == {p: [SEED_BROKERS[(p + 3) % 6]] for p in range(8)}
    assert assign_replicas([9], 4, 1) == {p: [9] for p in range(4)}


@pytest.mark.parametrize(("brokers", "partitions", "rf", "error"), [
    ([0, 1, 2], 3, 4, "INVALID_REPLICATION_FACTOR"),
    ([], 1, 1, "INVALID_REPLICATION_FACTOR"),
    ([0, 1], 3, 0, "INVALID_REPLICATION_FACTOR"),
    ([0, 1], 0, 1, "INVALID_PARTITIONS"),
])
def test_refused(brokers: list[int], partitions: int, rf: int, error: str) -> None:
    with pytest.raises(MetadataError) as caught:
        assign_replicas(brokers, partitions, rf)
    assert caught.value.kafka_error == error


def test_start_partition_continues_the_leader_pattern() -> None:
    """Adding partitions to an existing topic (Kafka's startPartitionId): ids continue
    after the existing ones and their leaders continue the round-robin."""
    existing = assign_replicas(SEED_BROKERS, 4, 3, start_index=2)
    more = assign_replicas(SEED_BROKERS, 5, 3, 4, start_index=2)
    assert sorted(more) == [4, 5, 6, 7, 8]
    leaders = [r[0] for _, r in sorted({**existing, **more}.items())]
    assert leaders == [SEED_BROKERS[(p + 2) % 6] for p in range(9)]
    assert all(len(set(r)) == 3 for r in more.values())


def test_continuing_start_index() -> None:
    assert continuing_start_index([0, 1, 2, 3], 2) == 2
    assert continuing_start_index([0, 3, 1, 4, 2, 5], 4) == 3
    assert continuing_start_index([0, 1, 3, 4], 2) == 2  # broker 2 left: the next id
    assert continuing_start_index([0, 1], 9) == 0


# -- placement: racks --------------------------------------------------------------------
def test_rack_alternated_order_of_the_seed() -> None:
    assert rack_alternated_brokers(TWO_RACKS) == [0, 3, 1, 4, 2, 5]


def test_rack_alternated_order_with_uneven_racks() -> None:
    racks = {0: "A", 1: "A", 2: "A", 3: "A", 4: "B", 5: "C", 6: "C"}
    # One of each rack in turn (racks by name, brokers by id), exhausted racks skipped.
    assert rack_alternated_brokers(racks) == [0, 4, 5, 1, 6, 2, 3]


def test_seed_rack_example() -> None:
    """The seed: with the leader of partition 0 on broker 4, its first follower is broker
    2, on the other rack."""
    assignment = assign_replicas(
        SEED_BROKERS, 6, 2, racks=TWO_RACKS, start_index=3, replica_shift=0
    )
    assert assignment[0] == [4, 2]


@pytest.mark.parametrize("start", range(6))
def test_two_racks_every_partition_in_both(start: int) -> None:
    for shift in range(6):
        for rf in (2, 3, 4):
            assignment = assign_replicas(
                SEED_BROKERS, 10, rf, racks=TWO_RACKS, start_index=start, replica_shift=shift
            )
            for replicas in assignment.values():
                assert len(set(replicas)) == rf
                assert {TWO_RACKS[b] for b in replicas} == {"A", "B"}
            order = [0, 3, 1, 4, 2, 5]
            assert [assignment[p][0] for p in range(10)] == [
                order[(p + start) % 6] for p in range(10)
            ]


def test_uneven_racks_still_span_every_rack_they_can() -> None:
    racks = {0: "A", 1: "A", 2: "A", 3: "A", 4: "B", 5: "C"}
    brokers = sorted(racks)
    for start in range(6):
        for shift in range(6):
            for rf in (1, 2, 3, 4, 6):
                assignment = assign_replicas(
                    brokers, 13, rf, racks=racks, start_index=start, replica_shift=shift
                )
                for replicas in assignment.values():
                    assert len(set(replicas)) == rf
                    assert len({racks[b] for b in replicas}) == min(rf, 3)


def test_racks_of_some_brokers_only_refused() -> None:
    """Kafka's AdminOperationException("Not all brokers have rack information..."),
    which its brokers answer as UNKNOWN_SERVER_ERROR."""
    with pytest.raises(MetadataError, match="Not all brokers have rack information") as c:
        assign_replicas([0, 1, 2], 3, 2, racks={0: "A", 1: "B"})
    assert c.value.kafka_error == "UNKNOWN_SERVER_ERROR"


def test_no_racks_is_rack_unaware() -> None:
    plain = assign_replicas(SEED_BROKERS, 9, 3, start_index=1)
    assert assign_replicas(SEED_BROKERS, 9, 3, racks={}, start_index=1) == plain
    # Racks of brokers not taking part are ignored.
    assert assign_replicas([0, 1], 2, 1, racks={7: "A"}, start_index=0) == {0: [0], 1: [1]}


def test_one_rack_is_the_plain_order() -> None:
    racks = dict.fromkeys(SEED_BROKERS, "A")
    assert assign_replicas(SEED_BROKERS, 9, 3, racks=racks, start_index=1) == assign_replicas(
        SEED_BROKERS, 9, 3, start_index=1
    )


# -- placement: properties ---------------------------------------------------------------
@st.composite
def _placements(draw: st.DrawFn) -> tuple[list[int], int, int, int, int]:
    brokers = sorted(draw(st.sets(st.integers(0, 1000), min_size=1, max_size=12)))
    rf = draw(st.integers(1, len(brokers)))
    partitions = draw(st.integers(1, 60))
    start = draw(st.integers(0, len(brokers) - 1))
    shift = draw(st.integers(0, 3 * len(brokers)))
    return brokers, partitions, rf, start, shift


@settings(max_examples=300, deadline=None)
@given(_placements())
def test_property_spread(case: tuple[list[int], int, int, int, int]) -> None:
    """From partition 0, with ``partitions = q * n + r``: no broker twice in a partition;
    each broker leads q or q + 1 partitions and holds every replica position q or q + 1
    times; so it holds rf*q + max(0, rf - (n - r)) .. rf*q + min(rf, r) replicas."""
    brokers, partitions, rf, start, shift = case
    n = len(brokers)
    assignment = assign_replicas(brokers, partitions, rf, start_index=start, replica_shift=shift)
    assert sorted(assignment) == list(range(partitions))
    assert all(len(r) == rf and len(set(r)) == rf for r in assignment.values())
    assert all(set(r) <= set(brokers) for r in assignment.values())
    q, r = divmod(partitions, n)
    for position in range(rf):
        held = Counter(replicas[position] for replicas in assignment.values())
        assert all(q <= held[b] <= q + 1 for b in brokers)
    counts = _counts(assignment)
    low, high = rf * q + max(0, rf - (n - r)), rf * q + min(rf, r)
    assert all(low <= counts[b] <= high for b in brokers)
    if r == 0:
        assert all(counts[b] == rf * q for b in brokers)


@settings(max_examples=200, deadline=None)
@given(_placements(), st.integers(1, 40))
def test_property_added_partitions(
    case: tuple[list[int], int, int, int, int], more: int
) -> None:
    """Partitions added later keep no duplicates and the leaders of the whole topic stay
    round-robin (each broker leads q or q + 1 of them)."""
    brokers, partitions, rf, start, shift = case
    existing = assign_replicas(brokers, partitions, rf, start_index=start, replica_shift=shift)
    added = assign_replicas(brokers, more, rf, partitions, start_index=start)
    assert sorted(added) == list(range(partitions, partitions + more))
    assert all(len(set(r)) == rf for r in added.values())
    leaders = _leaders({**existing, **added})
    q = (partitions + more) // len(brokers)
    assert all(q <= leaders[b] <= q + 1 for b in brokers)


@st.composite
def _racked(draw: st.DrawFn) -> tuple[dict[int, str], int, int, int, int]:
    n = draw(st.integers(1, 12))
    racks = {b: draw(st.sampled_from("ABCD")) for b in range(n)}
    rf = draw(st.integers(1, n))
    return (racks, draw(st.integers(1, 40)), rf, draw(st.integers(0, n - 1)),
            draw(st.integers(0, 3 * n)))


@settings(max_examples=300, deadline=None)
@given(_racked())
def test_property_racks(case: tuple[dict[int, str], int, int, int, int]) -> None:
    """With racks: no duplicates, every partition spans min(rf, racks) racks, and leaders
    are round-robin over the rack-alternated order."""
    racks, partitions, rf, start, shift = case
    assignment = assign_replicas(
        sorted(racks), partitions, rf, racks=racks, start_index=start, replica_shift=shift
    )
    num_racks = len(set(racks.values()))
    order = rack_alternated_brokers(racks)
    for p, replicas in assignment.items():
        assert len(set(replicas)) == rf
        assert len({racks[b] for b in replicas}) == min(rf, num_racks)
        assert replicas[0] == order[(p + start) % len(order)]


# -- ClusterMetadata -----------------------------------------------------------------------
DEFAULTS: dict[str, Any] = {"num.partitions": 1, "default.replication.factor": 1}


def _metadata(
    tmp_path: Path, brokers: list[int] | None = None, **kwargs: Any
) -> ClusterMetadata:
    ids = brokers if brokers is not None else [0]
    return ClusterMetadata(
        EmbeddedStore(tmp_path / "meta.json"), lambda: list(ids), DEFAULTS, **kwargs
    )


def _error(call: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(MetadataError) as caught:
        call(*args, **kwargs)
    return caught.value.kafka_error


def test_topic_id_encoding_is_kafkas() -> None:
    topic_id = uuid.UUID("7f1c1a9e-3b2d-4c5e-8f90-a1b2c3d4e5f6")
    text = encode_topic_id(topic_id)
    assert len(text) == 22 and "=" not in text  # url-safe base64, unpadded
    assert decode_topic_id(text) == topic_id


def test_cluster_id_kept_across_restarts(tmp_path: Path) -> None:
    first = _metadata(tmp_path)
    first.store.close()
    assert _metadata(tmp_path).cluster_id == first.cluster_id


def test_create_topic_writes_kafkas_layout(tmp_path: Path) -> None:
    md = _metadata(tmp_path, [0, 1, 2], rng=random.Random(1))
    info = md.create_topic("orders", 4, 2, {"retention.ms": "1000", "cleanup.policy": None})
    assert info.configs == {"retention.ms": "1000"}  # None: the default, not stored
    assert sorted(info.partitions) == [0, 1, 2, 3]
    assert all(len(set(r)) == 2 for r in info.partitions.values())
    found = md.store.get_json("/brokers/topics/orders")
    assert found is not None
    doc, version = found
    assert version == 0
    assert doc == {
        "version": 3,
        "topic_id": encode_topic_id(info.topic_id),
        "partitions": {str(p): r for p, r in info.partitions.items()},
    }
    assert md.store.get_json("/config/topics/orders") == (
        {"version": 1, "config": {"retention.ms": "1000"}}, 0
    )
    assert md.get("orders") is info and md.by_id(info.topic_id) is info
    assert md.log_config("orders").retention_ms == 1000


def test_create_topic_defaults(tmp_path: Path) -> None:
    md = _metadata(tmp_path)
    info = md.create_topic("t")
    assert info.partitions == {0: [0]}
    assert md.store.get("/config/topics/t") is None  # no overrides, no config node


def test_create_topic_with_assignment(tmp_path: Path) -> None:
    md = _metadata(tmp_path, [0, 1])
    info = md.create_topic("t", 2, 2, assignment={0: [1, 0], 1: [0, 1]})
    assert info.partitions == {0: [1, 0], 1: [0, 1]}


def test_create_topic_with_racks(tmp_path: Path) -> None:
    md = _metadata(tmp_path, SEED_BROKERS, broker_racks=lambda: TWO_RACKS)
    info = md.create_topic("t", 12, 2)
    for replicas in info.partitions.values():
        assert {TWO_RACKS[b] for b in replicas} == {"A", "B"}


@pytest.mark.parametrize(("name", "partitions", "rf", "configs", "error"), [
    ("bad name", 1, 1, {}, "INVALID_TOPIC_EXCEPTION"),
    ("", 1, 1, {}, "INVALID_TOPIC_EXCEPTION"),
    ("orders\n", 1, 1, {}, "INVALID_TOPIC_EXCEPTION"),
    ("t", 0, 1, {}, "INVALID_PARTITIONS"),
    ("t", 100_001, 1, {}, "INVALID_PARTITIONS"),
    ("t", 1, 0, {}, "INVALID_REPLICATION_FACTOR"),
    ("t", 1, 2, {}, "INVALID_REPLICATION_FACTOR"),  # one broker
    ("t", 1, 1, {"retention.ms": "soon"}, "INVALID_CONFIG"),
    ("t", 1, 1, {"no.such.config": "1"}, "INVALID_CONFIG"),
])
def test_create_topic_refused(
    tmp_path: Path, name: str, partitions: int, rf: int, configs: dict[str, str], error: str
) -> None:
    md = _metadata(tmp_path)
    assert _error(md.create_topic, name, partitions, rf, configs) == error
    assert md.topics == {}
    assert md.store.children("/brokers/topics") == []


def test_create_existing_or_colliding_topic_refused(tmp_path: Path) -> None:
    md = _metadata(tmp_path)
    md.create_topic("a.b")
    assert _error(md.create_topic, "a.b") == "TOPIC_ALREADY_EXISTS"
    assert _error(md.create_topic, "a_b") == "INVALID_TOPIC_EXCEPTION"  # metric names collide


def test_listeners_told_of_every_change(tmp_path: Path) -> None:
    md = _metadata(tmp_path)
    seen: list[tuple[str, TopicInfo | None]] = []
    md.add_listener(lambda name, info: seen.append((name, info)))
    created = md.create_topic("t", 1, 1)
    grown = md.create_partitions("t", 3)
    md.set_topic_configs("t", {"retention.ms": "5"}, validate_only=False)
    md.delete_topic("t")
    assert [(n, i is None) for n, i in seen] == [("t", False)] * 3 + [("t", True)]
    assert seen[0][1] is created and seen[1][1] is grown
    assert seen[2][1] is not None and seen[2][1].configs == {"retention.ms": "5"}


def test_delete_topic(tmp_path: Path) -> None:
    md = _metadata(tmp_path)
    md.create_topic("t", 1, 1, {"retention.ms": "10"})
    info = md.delete_topic("t")
    assert info.name == "t" and md.get("t") is None
    assert md.store.get("/brokers/topics/t") is None
    assert md.store.get("/config/topics/t") is None
    assert _error(md.delete_topic, "t") == "UNKNOWN_TOPIC_OR_PARTITION"
    md.create_topic("t", 2, 1)  # the name is free again
    assert len(md.get("t").partitions) == 2  # type: ignore[union-attr]


class _StateWrittenDuringDelete(EmbeddedStore):
    """A store on which the controller writes a partition state while a topic's node is
    deleted recursively, after its children went and before the node itself (ZooKeeper
    lets it: a recursive delete is one request per node)."""

    writes = 1

    def delete(self, path: str, expected_version: int = -1, recursive: bool = False) -> None:
        if recursive and self.writes and path.startswith("/brokers/topics/"):
            self.writes -= 1
            for child in self.children(path):
                super().delete(f"{path}/{child}", recursive=True)
            self.create(f"{path}/partitions", b"")  # the controller, meanwhile
            super().delete(path)  # NotEmptyError, as ZooKeeper answers
        super().delete(path, expected_version, recursive)


def test_delete_topic_while_the_controller_writes_its_states(tmp_path: Path) -> None:
    """Issue 52's stress test: a topic deleted just after its creation, while the
    controller wrote its partition states, was answered UNKNOWN_SERVER_ERROR (the
    recursive delete's NotEmptyError): it is deleted again."""
    md = ClusterMetadata(_StateWrittenDuringDelete(tmp_path / "meta.json"), lambda: [0],
                         DEFAULTS)
    md.create_topic("t", 1, 1)
    md.delete_topic("t")
    assert md.store.get("/brokers/topics/t") is None and md.get("t") is None


def test_topic_configs(tmp_path: Path) -> None:
    md = _metadata(tmp_path)
    md.create_topic("t")
    md.set_topic_configs("t", {"retention.ms": "7"}, validate_only=True)
    assert md.get("t").configs == {}  # type: ignore[union-attr]
    md.set_topic_configs("t", {"retention.ms": "7"}, validate_only=False)
    assert md.store.get_json("/config/topics/t") == (
        {"version": 1, "config": {"retention.ms": "7"}}, 0
    )
    md.set_topic_configs("t", {"segment.ms": "60000"}, validate_only=False)  # replaces
    assert md.get("t").configs == {"segment.ms": "60000"}  # type: ignore[union-attr]
    assert md.log_config("t").retention_ms == md.log_config("unknown").retention_ms
    assert _error(md.set_topic_configs, "t", {"retention.ms": "x"}, False) == "INVALID_CONFIG"
    assert _error(md.set_topic_configs, "u", {}, False) == "UNKNOWN_TOPIC_OR_PARTITION"


def test_broker_configs(tmp_path: Path) -> None:
    md = _metadata(tmp_path)
    assert md.broker_configs("0") == {}
    md.set_broker_configs("<default>", {"log.retention.ms": "9"})
    md.set_broker_configs("<default>", {"log.retention.ms": "10"})
    assert md.broker_configs("<default>") == {"log.retention.ms": "10"}
    assert md.store.get_json("/config/brokers/<default>") == (
        {"version": 1, "config": {"log.retention.ms": "10"}}, 1
    )


def test_create_partitions(tmp_path: Path) -> None:
    md = _metadata(tmp_path, [0, 1, 2])
    md.create_topic("t", 2, 2, assignment={0: [1, 2], 1: [2, 0]})
    assert md.create_partitions("t", 4, validate_only=True).partitions == {0: [1, 2], 1: [2, 0]}
    grown = md.create_partitions("t", 5)
    assert sorted(grown.partitions) == [0, 1, 2, 3, 4]
    # The leader pattern continues from partition 0's leader (broker 1).
    assert [grown.partitions[p][0] for p in range(2, 5)] == [0, 1, 2]
    assert all(len(set(r)) == 2 for r in grown.partitions.values())
    found = md.store.get_json("/brokers/topics/t")
    assert found is not None and found[1] == 1
    assert found[0]["partitions"]["4"] == grown.partitions[4]  # type: ignore[index]
    assert grown.topic_id == md.get("t").topic_id  # type: ignore[union-attr]


def test_create_partitions_with_assignment(tmp_path: Path) -> None:
    md = _metadata(tmp_path, [0, 1])
    md.create_topic("t", 1, 2)
    grown = md.create_partitions("t", 2, assignment={1: [1, 0]})
    assert grown.partitions[1] == [1, 0]


def test_create_partitions_refused(tmp_path: Path) -> None:
    md = _metadata(tmp_path)
    md.create_topic("t", 3, 1)
    assert _error(md.create_partitions, "u", 4) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert _error(md.create_partitions, "t", 3) == "INVALID_PARTITIONS"
    assert _error(md.create_partitions, "t", 2) == "INVALID_PARTITIONS"
    assert _error(md.create_partitions, "t", 100_001) == "INVALID_PARTITIONS"
    assert len(md.get("t").partitions) == 3  # type: ignore[union-attr]


def _second_broker(md: ClusterMetadata, brokers: list[int]) -> ClusterMetadata:
    """Another broker's metadata over the same store, with the topics loaded now: its
    view hears nothing of the first one's changes until told (a watch notification)."""
    other = ClusterMetadata(md.store, lambda: list(brokers), DEFAULTS)
    other.reload()
    return other


def test_a_write_applied_after_a_newer_notification_does_not_set_the_view_back(
        tmp_path: Path) -> None:
    """Issue 51's concurrent alters: broker 1 writes its change (config version 1), broker
    2 then writes on top of it (version 2), and broker 1 hears of version 2 through its
    watch before its own write reaches its view (a write applies through the event loop
    after the worker's await, the watch through the loop as well: either may come
    first). The view must end at version 2, not go back to its own older write."""
    md = _metadata(tmp_path)
    md.create_topic("t", 1, 1)
    other = _second_broker(md, [0])
    md.update_topic_configs("t", lambda c: {**c, "segment.ms": "3600000"}, False)  # v0
    other.update_topic_configs("t", lambda c: {**c, "retention.ms": "7200000"}, False)  # v1
    newer = other.read_topic("t")
    assert newer is not None and newer.config_version == 1
    own_write = md.get("t")
    assert own_write is not None and own_write.configs == {"segment.ms": "3600000"}
    md.apply_topic("t", newer)  # the notification
    md.apply_topic("t", own_write)  # its own older write, late
    assert md.get("t").configs == {  # type: ignore[union-attr]
        "segment.ms": "3600000", "retention.ms": "7200000"}
    # the assignment half likewise: a late copy with fewer partitions does not shrink it
    grown = other.create_partitions("t", 3)
    md.apply_topic("t", grown)
    md.apply_topic("t", own_write)
    assert sorted(md.get("t").partitions) == [0, 1, 2]  # type: ignore[union-attr]
    assert md.get("t").configs["retention.ms"] == "7200000"  # type: ignore[union-attr,index]


def test_create_partitions_through_a_broker_whose_view_is_behind_keeps_the_others(
        tmp_path: Path) -> None:
    """Two brokers grow a topic one after the other, the second not having heard of the
    first's growth: the count is judged against the store and no partition is lost."""
    md = _metadata(tmp_path, [0, 1])
    md.create_topic("t", 1, 1)
    other = _second_broker(md, [0, 1])
    md.create_partitions("t", 3)
    assert _error(other.create_partitions, "t", 3) == "INVALID_PARTITIONS"
    grown = other.create_partitions("t", 4)
    assert sorted(grown.partitions) == [0, 1, 2, 3]
    stored = md.read_topic("t")
    assert stored is not None and sorted(stored.partitions) == [0, 1, 2, 3]
    assert stored.partitions[1] == md.get("t").partitions[1]  # type: ignore[union-attr]


def test_partition_state_without_a_controller(tmp_path: Path) -> None:
    md = _metadata(tmp_path, [0, 1, 2])
    md.create_topic("t", 2, 3, assignment={0: [2, 0, 1], 1: [0, 1, 2]})
    assert md.partition_state("t", 0) == PartitionState(2, 0, (2, 0, 1), (2, 0, 1))
    assert md.partition_state("t", 1) == PartitionState(0, 0, (0, 1, 2), (0, 1, 2))
    assert md.partition_state("t", 5) == PartitionState(-1, -1, (), ())
    assert md.partition_state("u", 0) == PartitionState(-1, -1, (), ())


def test_reload_after_restart(tmp_path: Path) -> None:
    md = _metadata(tmp_path, [0, 1])
    a = md.create_topic("a", 3, 2, {"retention.ms": "100"})
    md.create_topic("b", 1, 1)
    md.create_partitions("b", 2)
    md.delete_topic("b")
    md.create_topic("c", 1, 1)
    md.store.close()
    again = _metadata(tmp_path, [0, 1])
    assert sorted(again.topics) == ["a", "c"]
    assert again.topics["a"] == a
    assert again.cluster_id == md.cluster_id


def test_at_most_ten_thousand_partitions_an_operation(tmp_path: Path) -> None:
    md = _metadata(tmp_path)
    md.check_partition_limits(MAX_PARTITIONS_PER_OPERATION, 1, 1)
    assert _error(
        md.check_partition_limits, MAX_PARTITIONS_PER_OPERATION + 1, 1, 1
    ) == "POLICY_VIOLATION"
    assert _error(md.create_topic, "t", MAX_PARTITIONS_PER_OPERATION + 1, 1) == "POLICY_VIOLATION"
    md.create_topic("t", 1, 1)
    assert _error(
        md.create_partitions, "t", MAX_PARTITIONS_PER_OPERATION + 2
    ) == "POLICY_VIOLATION"
    assert md.topics.keys() == {"t"}


def test_max_broker_partitions(tmp_path: Path) -> None:
    """The replicas of every topic count against max_broker_partitions times the brokers."""
    md = _metadata(tmp_path, [0, 1])
    md.max_broker_partitions = 5  # 10 replicas over the two brokers
    md.create_topic("a", 3, 2)  # 6 replicas
    md.create_topic("b", 2, 1)  # 8
    assert _error(md.create_topic, "c", 2, 2) == "POLICY_VIOLATION"  # 12
    assert _error(md.create_partitions, "b", 5) == "POLICY_VIOLATION"  # 11
    assert "c" not in md.topics and len(md.topics["b"].partitions) == 2
    md.create_partitions("b", 4)  # exactly 10
    assert _error(md.create_topic, "d", 1, 1) == "POLICY_VIOLATION"
    md.delete_topic("a")
    md.create_topic("d", 3, 2)  # the deleted topic's replicas are free again


def test_consumer_offsets_of_offset_commit_v0(tmp_path: Path) -> None:
    """Kafka 0.8's /consumers/<group>/offsets/<topic>/<partition>: -1 until written, then
    the last offset written (the node is made on the first write, set after)."""
    metadata = _metadata(tmp_path)
    assert metadata.consumer_offset("g", "t", 0) == -1
    metadata.set_consumer_offset("g", "t", 0, 42)
    metadata.set_consumer_offset("g", "t", 0, 43)
    assert metadata.consumer_offset("g", "t", 0) == 43
    node = metadata.store.get("/consumers/g/offsets/t/0")
    assert node is not None and (node.data, node.version) == (b"43", 1)


def test_client_quota_entities_in_kafkas_layout(tmp_path: Path) -> None:
    """KIP-55's entities under /config/clients and /config/users; a user's quotas share
    its node with its SCRAM credentials, which neither a quota write nor the quota view
    touch; nodes left empty go."""
    from odradek.cluster.user_credentials import scram_credential, set_scram_credential

    metadata = _metadata(tmp_path)
    store = metadata.store
    seen: list[dict[Any, Any]] = []
    metadata.add_client_quota_listener(lambda quotas: seen.append(dict(quotas)))
    set_scram_credential(store, "alice", "SCRAM-SHA-256", "salt=x,stored_key=y")
    metadata.set_client_quotas(("alice", None), {"producer_byte_rate": "100"})
    metadata.set_client_quotas(("alice", "app/1"), {"consumer_byte_rate": "200"})
    metadata.set_client_quotas(("<default>", "<default>"), {"request_percentage": "50.0"})
    metadata.set_client_quotas((None, "app/1"), {"producer_byte_rate": "300"})
    assert store.get_json("/config/users/alice") is not None
    assert store.get_json("/config/users/alice/clients/app%2F1") == (
        {"version": 1, "config": {"consumer_byte_rate": "200"}}, 0)
    assert store.get("/config/users/<default>/clients/<default>") is not None
    assert store.get("/config/clients/app%2F1") is not None
    expected = {
        ("alice", None): {"producer_byte_rate": "100"},
        ("alice", "app/1"): {"consumer_byte_rate": "200"},
        ("<default>", "<default>"): {"request_percentage": "50.0"},
        (None, "app/1"): {"producer_byte_rate": "300"},
    }
    assert metadata.client_quotas == expected == seen[-1]
    assert metadata.read_client_quotas() == expected  # read back from the store
    assert scram_credential(store, "SCRAM-SHA-256", "alice") == "salt=x,stored_key=y"

    metadata.set_client_quotas(("alice", None), {})
    metadata.set_client_quotas(("alice", "app/1"), {})
    metadata.set_client_quotas(("<default>", "<default>"), {})
    assert scram_credential(store, "SCRAM-SHA-256", "alice") == "salt=x,stored_key=y"
    assert store.children("/config/users/alice") == []
    assert store.get("/config/users/<default>") is None
    assert metadata.client_quotas == {(None, "app/1"): {"producer_byte_rate": "300"}}
