"""Interop with kcat (Debian's kcat 1.7.1 / librdkafka 2.0.2) against a real `odradek serve`."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._deadlines import describe, expired

from ._broker import BrokerProcess, kcat, kcat_path, start_broker

pytestmark = pytest.mark.interop

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 3


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    if kcat_path() is None:
        pytest.fail("kcat is not installed: run `make test` (scripts/install-java-client)")
    with start_broker(tmp_path_factory.mktemp("kcat-broker")) as b:
        yield b


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(bootstrap: str, topic: str, partitions: int = 3) -> None:
    """Create a topic with librdkafka's admin API (kcat cannot create topics)."""
    admin_mod = pytest.importorskip("confluent_kafka.admin")
    admin = admin_mod.AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [admin_mod.NewTopic(topic, num_partitions=partitions, replication_factor=1)],
        operation_timeout=30,
        request_timeout=30,
    )
    futures[topic].result(timeout=60)
    # wait until the topic is visible in metadata with all its partitions
    started = time.monotonic()
    while True:
        md = admin.list_topics(topic=topic, timeout=10)
        t = md.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions:
            return
        if expired(started, 15):
            raise AssertionError(f"topic {topic} not in metadata {describe(started, 15)} "
                                 f"after creation: {t!r}")
        time.sleep(0.2)


def consume_json(bootstrap: str, topic: str, *extra: str) -> list[dict[str, Any]]:
    """All messages of `topic` from the beginning, as kcat -J objects."""
    res = kcat("-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-J", "-q", *extra)
    return [json.loads(line) for line in res.stdout.splitlines() if line.strip()]


def headers_of(msg: dict[str, Any]) -> list[tuple[str, str | None]]:
    # kcat -J renders headers as a flat list: [name1, value1, name2, value2, ...]
    flat = msg.get("headers") or []
    return list(zip(flat[0::2], flat[1::2], strict=True))


def test_kcat_version() -> None:
    res = kcat("-V")
    assert "librdkafka" in res.stdout + res.stderr


def test_metadata_listing(broker: BrokerProcess) -> None:
    topic = unique_topic("kcat-md")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)

    md = json.loads(kcat("-b", broker.bootstrap, "-L", "-J").stdout)
    brokers = md["brokers"]
    assert len(brokers) == 1, md
    assert brokers[0]["name"] == broker.bootstrap, md
    broker_id = brokers[0]["id"]
    topics = {t["topic"]: t for t in md["topics"]}
    assert topic in topics, md
    parts = sorted(topics[topic]["partitions"], key=lambda p: p["partition"])
    assert [p["partition"] for p in parts] == list(range(PARTITIONS))
    for p in parts:
        assert p["leader"] == broker_id, p
        assert [r["id"] for r in p["replicas"]] == [broker_id], p
        assert [r["id"] for r in p["isrs"]] == [broker_id], p

    # the human-readable listing, restricted to one topic
    text = kcat("-b", broker.bootstrap, "-L", "-t", topic).stdout
    assert "1 brokers:" in text, text
    assert f'topic "{topic}" with {PARTITIONS} partitions:' in text, text


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_produce_consume_codec(broker: BrokerProcess, codec: str, idempotent: bool) -> None:
    topic = unique_topic(f"kcat-{codec}")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    n = 50
    lines = [f"key-{i}:value-{codec}-{i}-" + "x" * (i % 13) for i in range(n)]
    lines.append("tombstone-key:")  # with -Z an empty value is produced as a NULL value
    produce_args = [
        "-b", broker.bootstrap, "-P", "-t", topic, "-K", ":", "-Z",
        "-H", f"codec={codec}", "-H", "origin=kcat",
        "-X", f"compression.codec={codec}",
        "-X", "linger.ms=20",  # let several messages share a (compressed) batch
    ]
    if idempotent:
        produce_args += ["-X", "enable.idempotence=true"]
    kcat(*produce_args, input="\n".join(lines) + "\n")

    msgs = consume_json(broker.bootstrap, topic)
    assert len(msgs) == n + 1, msgs
    by_key = {m["key"]: m for m in msgs}
    assert len(by_key) == n + 1
    for i in range(n):
        m = by_key[f"key-{i}"]
        assert m["payload"] == f"value-{codec}-{i}-" + "x" * (i % 13), m
        assert headers_of(m) == [("codec", codec), ("origin", "kcat")], m
        assert m["partition"] in range(PARTITIONS)
        assert m["tstype"] == "create", m
    assert by_key["tombstone-key"]["payload"] is None, by_key["tombstone-key"]

    # offsets are dense from 0 in every partition, and a key always maps to one partition
    per_part: dict[int, list[int]] = {}
    for m in msgs:
        per_part.setdefault(m["partition"], []).append(m["offset"])
    for offs in per_part.values():
        assert offs == list(range(len(offs))), per_part

    # the same data read with a format string (non-JSON path through kcat)
    res = kcat(
        "-b", broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
        "-f", "%k=%s|%h\n",
    )
    assert f"key-0=value-{codec}-0-|codec={codec},origin=kcat" in res.stdout.splitlines()


_QUERY_RE = re.compile(r"\[(\d+)\]\s+offset\s+(-?\d+)")


def query_offsets(bootstrap: str, topic: str, partition: int, ts: int) -> int:
    res = kcat("-b", bootstrap, "-Q", "-t", f"{topic}:{partition}:{ts}")
    found = {int(p): int(o) for p, o in _QUERY_RE.findall(res.stdout)}
    assert partition in found, res.stdout + res.stderr
    return found[partition]


def test_query_offsets_by_timestamp(broker: BrokerProcess) -> None:
    topic = unique_topic("kcat-q")
    create_topic(broker.bootstrap, topic, partitions=1)

    def produce(prefix: str, count: int) -> None:
        kcat(
            "-b", broker.bootstrap, "-P", "-t", topic, "-p", "0", "-K", ":",
            input="".join(f"{prefix}-{i}:v{i}\n" for i in range(count)),
        )

    produce("first", 5)
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    produce("second", 4)

    msgs = consume_json(broker.bootstrap, topic)
    assert [m["key"] for m in msgs] == [f"first-{i}" for i in range(5)] + [
        f"second-{i}" for i in range(4)
    ]
    assert all(m["ts"] < middle for m in msgs[:5]), msgs
    assert all(m["ts"] > middle for m in msgs[5:]), msgs

    assert query_offsets(broker.bootstrap, topic, 0, -2) == 0  # earliest
    assert query_offsets(broker.bootstrap, topic, 0, -1) == 9  # latest (end offset)
    assert query_offsets(broker.bootstrap, topic, 0, msgs[0]["ts"]) == 0
    assert query_offsets(broker.bootstrap, topic, 0, middle) == 5
    # messages produced in the same millisecond share a timestamp: the first one wins
    last_ts = msgs[-1]["ts"]
    first_with_last_ts = min(m["offset"] for m in msgs if m["ts"] >= last_ts)
    assert query_offsets(broker.bootstrap, topic, 0, last_ts) == first_with_last_ts
    # past the last record: no such offset (-1, i.e. the logical end)
    assert query_offsets(broker.bootstrap, topic, 0, int(time.time() * 1000) + 3_600_000) == -1


def test_consume_from_offset_and_count(broker: BrokerProcess) -> None:
    topic = unique_topic("kcat-off")
    create_topic(broker.bootstrap, topic, partitions=1)
    kcat(
        "-b", broker.bootstrap, "-P", "-t", topic, "-p", "0",
        input="".join(f"m{i}\n" for i in range(20)),
    )
    res = kcat("-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "12", "-e", "-q",
               "-f", "%o:%s\n")
    assert res.stdout.splitlines() == [f"{i}:m{i}" for i in range(12, 20)]
    res = kcat("-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "-3", "-e", "-q",
               "-f", "%s\n")
    assert res.stdout.splitlines() == ["m17", "m18", "m19"]
    res = kcat("-b", broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-c", "5", "-q",
               "-f", "%s\n")
    assert res.stdout.splitlines() == [f"m{i}" for i in range(5)]


def test_broker_logs_exist(broker: BrokerProcess) -> None:
    # sanity for the harness itself: the broker is alive and its output is captured
    assert broker.alive(), broker.describe()
    assert Path(broker.stderr_path).exists()
