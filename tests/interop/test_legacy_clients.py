"""Old clients against a real broker: kafka-python pinned to ``api_version=(0, 9)`` and
``(0, 10, 1)``, librdkafka (kcat and confluent-kafka) with ``api.version.request=false``
and ``broker.version.fallback=0.9.0``. (aiokafka cannot be pinned: since 0.13 it ignores
``api_version``, deprecated, and negotiates with ApiVersions.) Each
produces in every codec message formats v0/v1 know, consumes in a group, commits and reads
the commit back; modern clients read what they wrote and they read what modern clients
wrote (headers dropped). The broker records the (API, version) pairs each client used, so
the test fails if a client quietly spoke a modern version."""

from __future__ import annotations

import collections
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from odradek.protocol.api_keys import ApiKey
from odradek.testing import RunningBroker, running_broker
from tests._deadlines import describe, expired

pytestmark = pytest.mark.interop

CODECS = ["none", "gzip", "snappy", "lz4"]
N = 20


class _Recorder:
    """Stands in for the broker's registry and notes each (API, version) served."""

    def __init__(self, registry: Any) -> None:
        self._registry = registry
        self.seen: dict[str, set[int]] = collections.defaultdict(set)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._registry, name)

    def __contains__(self, key: object) -> bool:
        return key in self._registry

    def lookup(self, api_key: int, version: int) -> Any:
        self.seen[ApiKey(api_key).name].add(version)
        return self._registry.lookup(api_key, version)


@pytest.fixture
def broker() -> Iterator[tuple[RunningBroker, _Recorder]]:
    """A broker per test: a client of an earlier test still closing (librdkafka's threads)
    must not be counted as this test's."""
    with running_broker() as b:
        recorder = _Recorder(b.broker.registry)
        for server in b.broker.servers:
            server.registry = recorder
        yield b, recorder


def new_topic(b: RunningBroker, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    b.call(b.broker.metadata.create_topic, name, 1, 1, {})
    started = time.monotonic()
    while b.broker.get_log(name, 0) is None:
        assert not expired(started, 30), f"log not created in {describe(started, 30)}"
        time.sleep(0.02)
    return name


def modern_read(bootstrap: str, topic: str, n: int) -> list[tuple[bytes, list[Any]]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"m-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[bytes, list[Any]]] = []
    started = time.monotonic()
    while len(out) < n and not expired(started, 60):
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            out.append((msg.value(), msg.headers() or []))
    consumer.close()
    return out


def modern_write(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4"})
    for i in range(n):
        producer.produce(topic, b"modern-%d" % i, key=b"k", headers=[("h", b"dropped")])
    assert producer.flush(30) == 0


# -- kafka-python -------------------------------------------------------------------------


@pytest.mark.parametrize("api_version", [(0, 9), (0, 10, 1)])
@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python(broker: tuple[RunningBroker, _Recorder], api_version: tuple[int, ...],
                      codec: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    b, recorder = broker
    recorder.seen.clear()
    topic = new_topic(b, "kp")
    producer = KafkaProducer(bootstrap_servers=b.bootstrap, api_version=api_version,
                             compression_type=None if codec == "none" else codec)
    for i in range(N):
        producer.send(topic, key=b"k%d" % i, value=b"old-%d" % i).get(timeout=30)
    producer.close()
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = KafkaConsumer(topic, bootstrap_servers=b.bootstrap, api_version=api_version,
                             group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=15000)
    got = []
    for message in consumer:
        got.append((message.offset, message.value))
        if len(got) == N:
            break
    assert got == [(i, b"old-%d" % i) for i in range(N)]
    if api_version >= (0, 10):
        assert message.timestamp > 0
    consumer.commit()
    assert consumer.committed(TopicPartition(topic, 0)) == N
    consumer.close()
    old = {api: set(versions) for api, versions in recorder.seen.items()}
    # modern clients read what the old one wrote, and the other way round
    assert [v for v, _ in modern_read(b.bootstrap, topic, N)] == [b"old-%d" % i
                                                                 for i in range(N)]
    modern_write(b.bootstrap, topic, 5)
    again = KafkaConsumer(bootstrap_servers=b.bootstrap, api_version=api_version,
                          group_id=group, auto_offset_reset="earliest",
                          enable_auto_commit=False, consumer_timeout_ms=15000)
    again.assign([TopicPartition(topic, 0)])  # resumes at the committed offset
    rest = []
    for m in again:
        rest.append((m.offset, m.value, list(m.headers or [])))
        if len(rest) == 5:
            break
    again.close()
    assert rest == [(N + i, b"modern-%d" % i, []) for i in range(5)]
    produce_version, fetch_version = (1, 1) if api_version == (0, 9) else (2, 3)
    assert old["PRODUCE"] == {produce_version}
    assert old["FETCH"] == {fetch_version}


# -- librdkafka ------------------------------------------------------------------------------


def _old_conf(fallback: str) -> dict[str, str]:
    return {"api.version.request": "false", "broker.version.fallback": fallback}


# librdkafka 2.x takes broker.version.fallback only for 0.9.0 and older: from 0.10 on it
# asks ApiVersions whatever api.version.request says (its configuration docs), so 0.10.0
# would test a modern client (kcat's librdkafka 2.0.2 does the same: checked, it sent
# ApiVersions v3 and Produce v7 with fallback 0.10.0). Old 0.10 clients are kafka-python
# (0, 10, 1) here.
@pytest.mark.parametrize("fallback", ["0.9.0"])
@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka(broker: tuple[RunningBroker, _Recorder], fallback: str,
                         codec: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    b, recorder = broker
    recorder.seen.clear()
    topic = new_topic(b, "ck")
    producer = Producer({"bootstrap.servers": b.bootstrap, "compression.type": codec,
                         **_old_conf(fallback)})
    for i in range(N):
        producer.produce(topic, b"old-%d" % i, key=b"k%d" % i)
    assert producer.flush(30) == 0
    group = f"g-{uuid.uuid4().hex[:8]}"
    conf = {"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", **_old_conf(fallback)}
    consumer = Consumer(conf)
    consumer.subscribe([topic])
    got: list[Any] = []
    started = time.monotonic()
    while len(got) < N and not expired(started, 60):
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            got.append(msg)
    assert [(m.offset(), m.value()) for m in got] == [(i, b"old-%d" % i) for i in range(N)]
    consumer.commit(asynchronous=False)
    consumer.close()
    assert max(recorder.seen["PRODUCE"]) <= 2 and max(recorder.seen["FETCH"]) <= 3
    reader = Consumer(conf)
    (committed,) = reader.committed([TopicPartition(topic, 0)], timeout=30)
    assert committed.offset == N
    modern_write(b.bootstrap, topic, 3)
    reader.assign([TopicPartition(topic, 0, N)])
    rest: list[Any] = []
    started = time.monotonic()
    while len(rest) < 3 and not expired(started, 60):
        msg = reader.poll(1.0)
        if msg is not None and msg.error() is None:
            rest.append(msg)
    reader.close()
    assert [(m.value(), m.headers()) for m in rest] == [(b"modern-%d" % i, None)
                                                        for i in range(3)]
    assert [v for v, _ in modern_read(b.bootstrap, topic, N)] == [b"old-%d" % i
                                                                 for i in range(N)]


@pytest.mark.parametrize("fallback", ["0.9.0"])
@pytest.mark.parametrize("codec", CODECS)
def test_kcat(broker: tuple[RunningBroker, _Recorder], fallback: str, codec: str) -> None:
    b, recorder = broker
    recorder.seen.clear()
    topic = new_topic(b, "kcat")
    opts = ["-X", "api.version.request=false", "-X", f"broker.version.fallback={fallback}"]
    lines = "".join(f"k{i}:v{i}\n" for i in range(N))
    subprocess.run(["kcat", "-b", b.bootstrap, "-P", "-t", topic, "-z", codec, "-K:", *opts],
                   input=lines, text=True, check=True, capture_output=True, timeout=120)
    out = subprocess.run(
        ["kcat", "-b", b.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-J", "-q",
         *opts], text=True, check=True, capture_output=True, timeout=120).stdout
    messages = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert [(m["offset"], m["key"], m["payload"]) for m in messages] == [
        (i, f"k{i}", f"v{i}") for i in range(N)]
    assert recorder.seen["PRODUCE"] == {1} and recorder.seen["FETCH"] == {1}
    assert "API_VERSIONS" not in recorder.seen


def test_kafka_python_admin_0_10_1(broker: tuple[RunningBroker, _Recorder]) -> None:
    """kafka-python's admin client pinned to 0.10.1 creates and deletes topics with
    CreateTopics v0 and DeleteTopics v0."""
    from kafka.admin import KafkaAdminClient, NewTopic

    b, recorder = broker
    recorder.seen.clear()
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, api_version=(0, 10, 1))
    name = f"kp-admin-{uuid.uuid4().hex[:8]}"
    try:
        admin.create_topics([NewTopic(name, 3, 1)], timeout_ms=30000)
        info = b.broker.metadata.get(name)
        assert info is not None and len(info.partitions) == 3
        admin.delete_topics([name], timeout_ms=30000)
        assert b.broker.metadata.get(name) is None
    finally:
        admin.close()
    assert recorder.seen["CREATE_TOPICS"] == {0}
    assert recorder.seen["DELETE_TOPICS"] == {0}


def test_a_log_dir_left_by_an_old_kafka(tmp_path: Any) -> None:
    """A partition whose segment holds v0/v1 message sets (written by kafka-python's
    legacy builder, as an old broker stored them) is served after a restart: to a modern
    consumer up-converted, to old consumers in their format, and appended to in v2."""
    from confluent_kafka import Producer
    from kafka import KafkaConsumer, TopicPartition

    from tests.storage.test_legacy_segments import EXPECTED, _entries

    with running_broker(data_dir=tmp_path) as b:
        b.call(b.broker.metadata.create_topic, "old", 1, 1, {})
        started = time.monotonic()
        while b.broker.get_log("old", 0) is None:
            assert not expired(started, 30), f"log not created in {describe(started, 30)}"
            time.sleep(0.02)
    partition_dir = tmp_path / "data" / "old-0"
    for f in partition_dir.iterdir():
        if f.suffix in (".log", ".index", ".timeindex"):
            f.unlink()
    (partition_dir / f"{0:020d}.log").write_bytes(
        _entries(0, 0, 0, [(b"a", b"v0-a"), (b"b", b"v0-b")])
        + _entries(1, 0, 2, [(b"c", b"v1-c")])
        + _entries(1, 1, 3, [(b"a", b"w-a"), (b"d", b"w-d"), (b"b", b"w-b"), (None, b"w-x")])
        + _entries(1, 2, 7, [(b"c", b"s-c"), (b"e", b"s-e")])
    )
    (tmp_path / "data" / "replication-offset-checkpoint").unlink(missing_ok=True)
    with running_broker(data_dir=tmp_path) as b:
        producer = Producer({"bootstrap.servers": b.bootstrap})
        producer.produce("old", b"new", key=b"n")
        assert producer.flush(30) == 0
        want = [v for _, _, v in EXPECTED] + [b"new"]
        assert [v for v, _ in modern_read(b.bootstrap, "old", len(want))] == want
        for api_version in ((0, 9), (0, 10, 1)):
            consumer = KafkaConsumer(bootstrap_servers=b.bootstrap, api_version=api_version,
                                     auto_offset_reset="earliest", consumer_timeout_ms=15000)
            consumer.assign([TopicPartition("old", 0)])
            got = []
            for message in consumer:
                got.append((message.offset, message.value))
                if len(got) == len(want):
                    break
            consumer.close()
            assert got == list(enumerate(want))
