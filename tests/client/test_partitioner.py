"""``client/partitioner.py`` against the real clients' choice of partition for a key.

The Java client (kafka-clients 3.9.1, ``BuiltInPartitioner.partitionForKey`` and
``Utils.murmur2``) is asked for the same keys and partition counts through
``java/KeyPartitions.java``, run with the JDK's source launcher; librdkafka's
``murmur2_random`` partitioner (via confluent-kafka) is asked by producing to a broker and
reading the partition from each delivery report.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from odradek.client.partitioner import murmur2, partition_for_key, to_positive
from odradek.testing import RunningBroker
from tests._deadlines import expired
from tests.interop._broker import java_lib_dir

pytestmark = pytest.mark.interop

KEY_PARTITIONS_SOURCE = Path(__file__).resolve().parent / "java" / "KeyPartitions.java"
#: jars KeyPartitions needs: the client, and slf4j which Utils logs through
JAVA_JARS = ("kafka-clients.jar", "slf4j-api.jar")
#: 2**31 - 1 is the largest count a Java int allows: the partition is then toPositive itself
PARTITION_COUNTS = (1, 2, 3, 5, 7, 10, 12, 16, 50, 100, 1000, 4096, 2**31 - 1)
JAVA_TIMEOUT_S = 120.0
DELIVERY_TIMEOUT_S = 30.0


def _keys() -> list[bytes]:
    """Keys covering every tail length of murmur2 (0-3 bytes past the last whole word),
    bytes with the high bit set (Java's bytes are signed), multibyte UTF-8 and long keys."""
    rng = random.Random(20261123)
    keys: list[bytes] = [b""]
    keys += [b"abcdefghij"[:n] for n in range(1, 11)]
    keys += [f"key-{i}".encode() for i in range(200)]
    keys += [f"user:{i:08d}".encode() for i in range(0, 1_000_000, 99_991)]
    keys += [s.encode() for s in ("ключ", "日本語のキー", "clé", "🎉", "a🎉b", "Ωμέγα", "\u0000")]
    keys += [bytes([b]) for b in (0x00, 0x7F, 0x80, 0xFF)]
    keys += [bytes([0xFF]) * n for n in range(1, 9)]
    keys += [bytes([0x80]) * n for n in range(1, 9)]
    keys += [b"x" * n for n in (63, 64, 65, 255, 256, 1000, 4097)]
    keys += [rng.randbytes(rng.randrange(1, 80)) for _ in range(300)]
    keys += [rng.randbytes(n) for n in (1023, 1024, 1025, 65_537)]
    return keys


def _java_partitions(keys: list[bytes], counts: tuple[int, ...]) -> list[list[int]]:
    """Per key: [Utils.murmur2(key), partitionForKey(key, n) for n in counts]."""
    java = shutil.which("java")
    if java is None:
        pytest.fail("java not found on PATH (need a JDK 11+): run scripts/install-java-client")
    lib = java_lib_dir()
    jars = [lib / name for name in JAVA_JARS]
    missing = [str(j) for j in jars if not j.is_file()]
    if missing:
        pytest.fail(f"kafka-clients jars missing ({', '.join(missing)}): "
                    "run scripts/install-java-client")
    result = subprocess.run(
        [java, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
         "-cp", os.pathsep.join(map(str, jars)), str(KEY_PARTITIONS_SOURCE),
         *map(str, counts)],
        input="".join(key.hex() + "\n" for key in keys),
        capture_output=True, text=True, timeout=JAVA_TIMEOUT_S, check=False,
    )
    assert result.returncode == 0, f"KeyPartitions failed:\n{result.stderr[-4000:]}"
    rows = [[int(field) for field in line.split()] for line in result.stdout.splitlines()]
    assert len(rows) == len(keys), result.stdout[-2000:]
    return rows


def test_murmur2_and_partition_match_the_java_client() -> None:
    keys = _keys()
    rows = _java_partitions(keys, PARTITION_COUNTS)
    mismatches = []
    for key, (java_hash, *java_partitions) in zip(keys, rows, strict=True):
        ours = [partition_for_key(key, n) for n in PARTITION_COUNTS]
        if murmur2(key) != java_hash or ours != java_partitions:
            mismatches.append((key.hex()[:40], len(key), murmur2(key), java_hash, ours,
                               java_partitions))
    assert not mismatches, f"{len(mismatches)} of {len(keys)} keys differ, e.g. {mismatches[:3]}"
    # The largest count leaves the hash's positive part untouched: the two agree on it too.
    assert [to_positive(murmur2(k)) for k in keys] == [row[-1] for row in rows]


def test_partition_matches_librdkafka_murmur2_random(shared_broker: RunningBroker) -> None:
    """librdkafka's ``murmur2_random`` (the Java-compatible partitioner) puts every key
    where ours does; empty keys included (only a null key goes to a random partition)."""
    from confluent_kafka import KafkaError, Message, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    partitions = 7
    topic = f"murmur2-{uuid.uuid4().hex[:8]}"
    conf = {"bootstrap.servers": shared_broker.bootstrap}
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)
    keys = [k for k in _keys() if len(k) < 2048]
    chosen: dict[int, int] = {}
    errors: list[str] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(str(err))
            return
        chosen[int(msg.value())] = msg.partition()

    producer = Producer({**conf, "partitioner": "murmur2_random", "linger.ms": 5})
    for i, key in enumerate(keys):
        producer.produce(topic, value=str(i).encode(), key=key, on_delivery=delivered)
    started = time.monotonic()
    while producer.flush(1) and not expired(started, DELIVERY_TIMEOUT_S):
        pass
    assert not errors, errors[:5]
    assert len(chosen) == len(keys), f"{len(keys) - len(chosen)} records not delivered"
    differ = [(keys[i].hex()[:40], p, partition_for_key(keys[i], partitions))
              for i, p in sorted(chosen.items()) if p != partition_for_key(keys[i], partitions)]
    assert not differ, f"{len(differ)} of {len(keys)} keys differ, e.g. {differ[:3]}"
