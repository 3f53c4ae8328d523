"""Interop with the official Apache Kafka Java client (kafka-clients 3.9.1).

Needs scripts/install-java-client (jars from PyPI) and a JDK; skipped otherwise.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from ._broker import BrokerProcess, JavaRunner, compile_java_client, java_client, start_broker

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def java() -> JavaRunner:
    return java_client()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, java: JavaRunner) -> Iterator[BrokerProcess]:
    with start_broker(tmp_path_factory.mktemp("java-broker")) as b:
        yield b


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def test_java_client_compiles(java: JavaRunner) -> None:
    classes, jars = compile_java_client()
    assert (classes / "OdradekInterop.class").is_file()
    assert all(j.is_file() for j in jars)


def test_java_roundtrip(broker: BrokerProcess, java: JavaRunner) -> None:
    n = 40
    res = java(broker.bootstrap, "roundtrip", unique_topic("java-rt"), n)
    assert res.ok, res.describe()
    s = res.summary
    codecs = ["none", "gzip", "snappy", "lz4", "zstd"]
    assert s["produced"] == {c: n for c in codecs}, res.describe()
    assert s["produced_total"] == s["consumed_total"] == n * len(codecs), res.describe()
    assert s["mismatched_records"] == s["missing_records"] == s["duplicate_records"] == 0
    assert s["described_partitions"] == 3
    assert sum(s["partition_end_offsets"].values()) == n * len(codecs)
    lo = s["list_offsets"]
    assert lo["earliest"] == {"0": 0, "1": 0, "2": 0}
    assert lo["latest"] == s["partition_end_offsets"] | {
        p: 0 for p in ("0", "1", "2") if p not in s["partition_end_offsets"]
    }
    assert len(lo["by_timestamp"]) == 4
    # a timestamp after every record matches nothing
    assert lo["by_timestamp"][-1]["offsets"] == {"0": -1, "1": -1, "2": -1}
    assert s["config_count"] > 0
    assert s["configs"].get("cleanup.policy") == "delete", s["configs"]
    assert s["deleted"] is True


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_java_produce_then_consume_count(
    broker: BrokerProcess, java: JavaRunner, codec: str
) -> None:
    topic = unique_topic(f"java-pc-{codec}")
    res = java(broker.bootstrap, "create", topic, 2, 1)
    assert res.ok, res.describe()
    res = java(broker.bootstrap, "produce", topic, 200, codec)
    assert res.ok, res.describe()
    assert res.summary["produced"] == 200
    res = java(broker.bootstrap, "consume-count", topic, 200)
    assert res.ok, res.describe()
    assert res.summary["count"] == 200
    assert sum(res.summary["end_offsets"].values()) == 200
    res = java(broker.bootstrap, "delete", topic)
    assert res.ok, res.describe()


def test_java_consumer_group(broker: BrokerProcess, java: JavaRunner) -> None:
    topic = unique_topic("java-grp")
    assert java(broker.bootstrap, "create", topic, 3, 1).ok
    assert java(broker.bootstrap, "produce", topic, 90).ok
    group = unique_topic("grp")
    res = java(broker.bootstrap, "group-consume", topic, group, 90)
    assert res.ok, res.describe()
    assert sum(v for v in res.summary["committed"].values() if v is not None) == 90
    # a second member of the same group starts at the committed offsets: nothing left to read
    res = java(broker.bootstrap, "group-consume", topic, group, 0)
    assert res.ok, res.describe()
    assert res.summary["count"] == 0


def test_java_transactions(broker: BrokerProcess, java: JavaRunner) -> None:
    """initTransactions, beginTransaction, send, sendOffsetsToTransaction, commitTransaction
    and abortTransaction over three partitions: read_committed consumers see each
    committed record once, in order, and no aborted one; read_uncommitted see all."""
    topic = unique_topic("java-txn")
    res = java(broker.bootstrap, "create", topic, 3, 1)
    assert res.ok, res.describe()
    n = 30
    res = java(broker.bootstrap, "transactions", topic, f"java-{uuid.uuid4().hex[:6]}", n)
    assert res.ok, res.describe()
    committed = [f"{i % 3}:c1-{i}" for i in range(n)] + [f"{i}:c3-{i}" for i in range(3)]
    aborted = [f"{i % 3}:a2-{i}" for i in range(n)]

    def per_partition(values: list[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for v in values:
            out.setdefault(v.split(":", 1)[0], []).append(v)
        return out

    s = res.summary
    assert per_partition(s["read_committed"]) == per_partition(committed), res.describe()
    assert sorted(s["read_uncommitted"]) == sorted(committed + aborted), res.describe()
    assert s["group_offset"] == 5


def test_java_admin_describe_producers(broker: BrokerProcess, java: JavaRunner) -> None:
    """Admin.describeProducers (KIP-664) sees the transactional producer's open
    transaction on partition 0, then no open transaction once it aborted."""
    topic = unique_topic("java-dp")
    res = java(broker.bootstrap, "create", topic, 1, 1)
    assert res.ok, res.describe()
    res = java(broker.bootstrap, "describe-producers", topic, f"java-{uuid.uuid4().hex[:6]}")
    assert res.ok, res.describe()
    [open_state] = res.summary["producers"]
    assert open_state["txn_start_offset"] == 0 and open_state["last_sequence"] == 2
    assert open_state["producer_epoch"] == 0 and open_state["last_timestamp"] > 0
    [after] = res.summary["after_abort"]
    assert after["producer_id"] == open_state["producer_id"]
    assert after["txn_start_offset"] == -1 and after["coordinator_epoch"] >= 0
