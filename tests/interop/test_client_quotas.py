"""Client quotas (KIP-13, KIP-219, KIP-546) with real clients against a broker subprocess.

- A confluent-kafka producer throttled to ``producer_byte_rate`` is slowed to the quota
  (measured once the first 10-second window has filled) and loses nothing.
- A confluent-kafka consumer throttled to ``consumer_byte_rate`` likewise.
- ``odradek configs`` alters and describes client quotas (and refuses ip entities and
  unknown keys); the Java Admin's alterClientQuotas / describeClientQuotas work, with a
  user + client-id entity too; quotas survive a restart (the embedded metadata store).
  (User quotas with SASL users: tests/interop/test_user_quotas.py.)

The tests share one broker (each quota is set for a client id of the test's own, and the
quotas a test leaves are removed after it); only the restart test starts its own. Its
controller mutation bucket is 2 partitions a second for 6 windows, 12 partitions, so that
the mutation throttles are seconds, not the default window's 4-9 s.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # type: ignore[attr-defined]

from tests._deadlines import describe, expired
from tests._zygote import run as run_odradek
from tests.interop._broker import (
    BrokerProcess,
    JavaRunner,
    java_client,
    odradek_executable,
    start_broker,
)

RATE = 400_000  # bytes/s
VALUE = 1000  # bytes a record
# A batch of one such record without key or headers: the 61-byte batch header, the record's
# length (2 bytes), attributes, timestamp delta, offset delta, key length (1 each), value
# length (2), the value, the header count (1).
BATCH_BYTES = 61 + 2 + 4 + 2 + VALUE + 1
# Kafka's sampled rate lets a client that always has more to send burst once per window
# cycle (when its oldest sample expires) and crawl in between; with the default 11 samples
# of 1 s that is an 11-s sawtooth. The tests shorten the cycle to 3 s so that a 20-s run
# averages over several of them (the slope is fitted past the first cycle).
WINDOW_NUM = 3
SKIP_S = 4.0
#: controller_mutation_rate of the mutation tests, and the shared broker's
#: controller.quota.window.num: a bucket of MUTATION_RATE * MUTATION_WINDOW_NUM = 12
#: partitions (one-second windows), refilled at 2 a second
MUTATION_RATE = 2
MUTATION_WINDOW_NUM = 6


def configs(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return run_odradek(
        [str(odradek_executable()), "configs", "--bootstrap-server", broker.bootstrap, *args],
        timeout=60)


def set_quota(broker: BrokerProcess, client_id: str, key: str, value: int) -> None:
    done = configs(broker, "--entity-type", "clients", "--entity-name", client_id,
                   "--alter", "--add-config", f"{key}={value}")
    assert done.returncode == 0, done.stderr


def create_topic(broker: BrokerProcess) -> str:
    name = f"quota-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(name, 1, 1)]).values():
        f.result(30)
    return name


def steady_rate(marks: list[tuple[float, int]], skip_s: float) -> float:
    """Bytes per second: the least-squares slope of bytes done against time, past the
    first ``skip_s`` seconds (the burst a new client is allowed)."""
    t0 = marks[0][0]
    points = [(t - t0, b) for t, b in marks if t - t0 >= skip_s]
    assert len(points) > 100, f"{len(points)} points past {skip_s} s"
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_b = sum(b for _, b in points) / n
    cov = sum((t - mean_t) * (b - mean_b) for t, b in points)
    var = sum((t - mean_t) ** 2 for t, _ in points)
    return cov / var


def reset_client_quotas(broker: BrokerProcess) -> None:
    """Remove every client quota stored (in-process: a command would cost a Python start)."""
    from odradek.client.admin import Admin
    from odradek.client.connection import BrokerConnection

    async def reset() -> None:
        conn = await BrokerConnection.open(broker.bootstrap, timeout=10)
        try:
            admin = Admin(conn)
            for entity, quotas in await admin.describe_client_quotas():
                await admin.alter_client_quotas(list(entity.items()), {}, list(quotas))
            assert await admin.describe_client_quotas() == []
        finally:
            await conn.close()

    asyncio.run(asyncio.wait_for(reset(), 60))


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # num.partitions: the auto-creation quota test's topics (the other tests auto-create
    # topics only to check their names)
    with start_broker(tmp_path_factory.mktemp("quotas"), overrides={
        "quota.window.num": WINDOW_NUM, "controller.quota.window.num": MUTATION_WINDOW_NUM,
        "num.partitions": 5,
    }) as b:
        yield b


@pytest.fixture
def broker(shared_broker: BrokerProcess) -> Iterator[BrokerProcess]:
    """The shared broker, without the client quotas the test set once it is done (each
    test's quotas are for client ids of its own, so their rates never meet)."""
    yield shared_broker
    reset_client_quotas(shared_broker)


def test_producer_throttled_to_byte_rate_loses_nothing(broker: BrokerProcess) -> None:
    topic = create_topic(broker)
    set_quota(broker, "slow-producer", "producer_byte_rate", RATE)
    n = 9_000  # 9 MB: 0.8 MB at once (the first window), the rest ~20 s at the quota
    producer = confluent_kafka.Producer({
        "bootstrap.servers": broker.bootstrap, "client.id": "slow-producer",
        "batch.size": 64 * 1024, "linger.ms": 5,
    })
    marks: list[tuple[float, int]] = []
    failed: list[str] = []
    delivered = 0

    def on_delivery(err: object, msg: object) -> None:
        nonlocal delivered
        if err is not None:
            failed.append(str(err))
            return
        delivered += VALUE
        marks.append((time.monotonic(), delivered))

    payload = b"x" * (VALUE - 8)
    for i in range(n):
        while True:
            try:
                producer.produce(topic, b"%08d" % i + payload, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(180) == 0
    assert not failed, failed[:5]
    rate = steady_rate(marks, SKIP_S)
    print(f"steady rate {rate:,.0f} B/s, quota {RATE:,}")
    assert 0.9 * RATE <= rate <= 1.1 * RATE, f"steady rate {rate:,.0f} B/s, quota {RATE:,}"

    # nothing lost, nothing duplicated
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
    })
    consumer.subscribe([topic])
    seen: set[int] = set()
    started = time.monotonic()
    while len(seen) < n and not expired(started, 120):
        for msg in consumer.consume(1000, 1.0):
            assert msg.error() is None, msg.error()
            value = msg.value()
            assert value is not None
            seen.add(int(value[:8]))
    consumer.close()
    assert seen == set(range(n))


def test_consumer_throttled_to_byte_rate(broker: BrokerProcess) -> None:
    topic = create_topic(broker)
    n = 9_000
    # One record a batch: the bytes a fetch counts are then known on the consumer's side
    # (BATCH_BYTES a record), and the partial batch a fetch ends with, which the client
    # drops and fetches again, is small (Kafka counts every byte it sends, as here).
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                         "batch.num.messages": 1})
    payload = b"y" * (VALUE - 8)
    for i in range(n):
        while True:
            try:
                producer.produce(topic, b"%08d" % i + payload)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0
    set_quota(broker, "slow-consumer", "consumer_byte_rate", RATE)
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": broker.bootstrap, "client.id": "slow-consumer",
        "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "max.partition.fetch.bytes": 64 * 1024,
        "fetch.queue.backoff.ms": 10,
    })
    consumer.subscribe([topic])
    seen: set[int] = set()
    marks: list[tuple[float, int]] = []
    received = 0
    started = time.monotonic()
    while len(seen) < n and not expired(started, 180):
        for msg in consumer.consume(1000, 0.5):
            assert msg.error() is None, msg.error()
            value = msg.value()
            assert value is not None
            seen.add(int(value[:8]))
            assert len(value) == VALUE
            received += BATCH_BYTES
            marks.append((time.monotonic(), received))
    consumer.close()
    assert seen == set(range(n))
    rate = steady_rate(marks, SKIP_S)
    print(f"steady rate {rate:,.0f} B/s, quota {RATE:,}")
    assert 0.9 * RATE <= rate <= 1.1 * RATE, f"steady rate {rate:,.0f} B/s, quota {RATE:,}"


def test_unthrottled_client_is_not_slowed(broker: BrokerProcess) -> None:
    """A quota for one client id leaves another alone (no default set)."""
    topic = create_topic(broker)
    set_quota(broker, "someone-else", "producer_byte_rate", 10_000)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                         "client.id": "free-producer"})
    started = time.monotonic()
    for i in range(2_000):  # 2 MB: 200 s at the other client's quota
        while True:
            try:
                producer.produce(topic, b"%08d" % i + b"z" * (VALUE - 8))
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0
    assert time.monotonic() - started < 30


def test_configs_cli_client_quotas(tmp_path: Path) -> None:
    with start_broker(tmp_path) as broker:
        set_quota(broker, "app-1", "producer_byte_rate", 1_048_576)
        done = configs(broker, "--entity-type", "clients", "--entity-default", "--alter",
                       "--add-config", "consumer_byte_rate=2097152,controller_mutation_rate=10")
        assert done.returncode == 0, done.stderr
        assert "default client-id" in done.stdout
        described = configs(broker, "--entity-type", "clients", "--describe")
        assert described.returncode == 0, described.stderr
        assert described.stdout.splitlines() == [
            "Quota configs for the default client-id are consumer_byte_rate=2097152.0, "
            "controller_mutation_rate=10.0",
            "Quota configs for client-id 'app-1' are producer_byte_rate=1048576.0",
        ]
        one = configs(broker, "--entity-type", "clients", "--entity-name", "app-1", "--describe")
        assert one.stdout.splitlines() == [
            "Quota configs for client-id 'app-1' are producer_byte_rate=1048576.0"]
        bad = configs(broker, "--entity-type", "clients", "--entity-name", "app-1", "--alter",
                      "--add-config", "produce_byte_rate=50")  # a typo
        assert bad.returncode == 1
        assert "INVALID_REQUEST" in bad.stderr and "produce_byte_rate" in bad.stderr
        fraction = configs(broker, "--entity-type", "clients", "--entity-name", "app-1",
                           "--alter", "--add-config", "producer_byte_rate=10.5")
        assert fraction.returncode == 1 and "whole number" in fraction.stderr
        reserved = configs(broker, "--entity-type", "clients", "--entity-name", "<default>",
                           "--alter", "--add-config", "producer_byte_rate=1")
        assert reserved.returncode == 1 and "reserved" in reserved.stderr
        ips = configs(broker, "--entity-type", "ips", "--entity-name", "10.0.0.1", "--alter",
                      "--add-config", "connection_creation_rate=1")
        assert ips.returncode == 2 and "ip quotas are not supported" in ips.stderr
        removed = configs(broker, "--entity-type", "clients", "--entity-name", "app-1",
                          "--alter", "--delete-config", "producer_byte_rate")
        assert removed.returncode == 0, removed.stderr
        port, data_dir = broker.port, broker.data_dir
    # persisted: the embedded metadata store keeps them across a restart
    with start_broker(tmp_path, port=port, data_dir=data_dir) as again:
        described = configs(again, "--entity-type", "clients", "--describe")
        assert described.stdout.splitlines() == [
            "Quota configs for the default client-id are consumer_byte_rate=2097152.0, "
            "controller_mutation_rate=10.0",
        ]


def test_configs_cli_brokers_and_topics(broker: BrokerProcess) -> None:
    topic = create_topic(broker)
    done = configs(broker, "--entity-type", "topics", "--entity-name", topic, "--alter",
                   "--add-config", "retention.ms=3600000,cleanup.policy=[compact,delete]")
    assert done.returncode == 0, done.stderr
    described = configs(broker, "--entity-type", "topics", "--entity-name", topic, "--describe")
    assert f"Dynamic configs for topic {topic} are:" in described.stdout
    assert "  retention.ms=3600000 sensitive=false source=DYNAMIC_TOPIC_CONFIG" in \
        described.stdout
    assert "  cleanup.policy=compact,delete sensitive=false source=DYNAMIC_TOPIC_CONFIG" in \
        described.stdout
    done = configs(broker, "--entity-type", "brokers", "--entity-name", "0", "--alter",
                   "--add-config", "log.retention.ms=7200000")
    assert done.returncode == 0, done.stderr
    dynamic = configs(broker, "--entity-type", "brokers", "--entity-name", "0", "--describe")
    assert dynamic.stdout.splitlines() == [
        "Dynamic configs for broker 0 are:",
        "  log.retention.ms=7200000 sensitive=false source=DYNAMIC_BROKER_CONFIG",
    ]
    everything = configs(broker, "--entity-type", "brokers", "--entity-name", "0",
                         "--describe", "--all")
    assert everything.stdout.startswith("All configs for broker 0 are:\n")
    assert "  log.retention.ms=7200000 sensitive=false source=DYNAMIC_BROKER_CONFIG" in \
        everything.stdout
    assert f"  quota.window.num={WINDOW_NUM} sensitive=false source=STATIC_BROKER_CONFIG" in \
        everything.stdout
    assert "  quota.window.size.seconds=1 sensitive=false source=DEFAULT_CONFIG" in \
        everything.stdout
    # the broker is shared: its dynamic config back as it was
    done = configs(broker, "--entity-type", "brokers", "--entity-name", "0", "--alter",
                   "--delete-config", "log.retention.ms")
    assert done.returncode == 0, done.stderr


def test_java_admin_client_quotas(broker: BrokerProcess) -> None:
    java: JavaRunner = java_client()
    res = java(broker.bootstrap, "client-quotas", "unused-topic", "java-app")
    assert res.ok, res.describe()
    s = res.summary
    assert s["exact"] == {"java-app": {"consumer_byte_rate": 2097152.0,
                                       "producer_byte_rate": 1048576.0}}
    assert s["default"] == {"<default>": {"controller_mutation_rate": 5.0}}
    assert s["all"] == {**s["exact"], **s["default"]}
    assert s["user_error"] == "none"
    assert s["user"] == {"java-app": {"producer_byte_rate": 1024.0}}
    assert s["after_removal"] == s["default"]


def test_quota_applies_while_client_is_connected(broker: BrokerProcess) -> None:
    """A quota set while a producer is connected slows it from then on (the managers
    follow the metadata store at once)."""
    topic = create_topic(broker)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                         "client.id": "late-quota", "linger.ms": 5,
                                         "batch.size": 16 * 1024})
    producer.produce(topic, b"warm-up")
    assert producer.flush(30) == 0
    set_quota(broker, "late-quota", "producer_byte_rate", 50_000)
    started = time.monotonic()
    for i in range(350):  # 0.35 MB: 0.1 MB in the first window, the rest ~5 s at 50 kB/s
        while True:
            try:
                producer.produce(topic, b"%08d" % i + b"q" * (VALUE - 8))
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(120) == 0
    assert time.monotonic() - started >= 2.5


def test_controller_mutation_quota_java_strict(broker: BrokerProcess) -> None:
    """KIP-599 at CreateTopics v7 / DeleteTopics v6 (the Java Admin's): a token bucket of
    rate x controller.quota.window.num x size = 2 x 6 x 1 = 12 partitions. In one request,
    topics are created while the bucket is not below zero (the one that takes it below
    may), the rest are THROTTLING_QUOTA_EXCEEDED with the time to wait; the client then
    waits that long (the broker mutes the connection meanwhile), so its next request gets
    through."""
    set_quota(broker, "mutator", "controller_mutation_rate", MUTATION_RATE)
    java: JavaRunner = java_client()
    topic = f"mq-{uuid.uuid4().hex[:6]}"
    res = java(broker.bootstrap, "mutation-quota", topic, 5, 5, props={"client.id": "mutator"})
    assert res.ok, res.describe()
    s = res.summary
    refused = "ThrottlingQuotaExceededException"
    # 12 -> 7 -> 2 -> -3: the third overdraws, the fourth and fifth are refused, for
    # 3 / 2 = 1.5 s
    assert s["created"] == {f"{topic}-0": "ok", f"{topic}-1": "ok", f"{topic}-2": "ok",
                            f"{topic}-3": refused, f"{topic}-4": refused}, s
    assert 1_000 <= s["throttle_time_ms"] <= 1_500, s
    assert s["retried_ms"] >= 1_000, s  # the throttle was waited out, then created (-> -5)
    # after waiting that throttle out too, the first deletion passes (-> -5), the next not
    assert s["deleted"] == {f"{topic}-0": "ok", f"{topic}-1": refused}, s


def test_controller_mutation_quota_permissive(broker: BrokerProcess) -> None:
    """At versions below KIP-599's error (librdkafka's CreateTopics) every topic is created
    and the client is throttled: its next request waits for the throttle time."""
    set_quota(broker, "old-admin", "controller_mutation_rate", MUTATION_RATE)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "client.id": "old-admin"})
    prefix = f"mqp-{uuid.uuid4().hex[:6]}"
    topics = [NewTopic(f"{prefix}-{i}", 5, 1) for i in range(4)]  # 20 partitions: 12 - 20
    for f in admin.create_topics(topics, request_timeout=30).values():
        f.result(60)
    started = time.monotonic()
    for f in admin.create_topics([NewTopic(f"{prefix}-late", 1, 1)],
                                 request_timeout=60).values():
        f.result(90)
    waited = time.monotonic() - started
    assert waited >= 2.5, f"the next creation took {waited:.1f} s (throttle: 8 / 2 = ~4 s)"
    names = set(admin.list_topics(timeout=30).topics)
    assert {t.topic for t in topics} | {f"{prefix}-late"} <= names


def _produce_to(
    bootstrap: str, client_id: str, topics: list[str], throttles: list[float] | None = None
) -> dict[str, int | None]:
    """One record to each topic (auto-created); the error code of each delivery. The
    throttle times the client reports (librdkafka's throttle_cb) go to ``throttles``."""
    outcome: dict[str, int | None] = {}
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "client.id": client_id,
                              "message.timeout.ms": 60_000}
    if throttles is not None:
        config["throttle_cb"] = lambda event: throttles.append(event.throttle_time)
    producer = confluent_kafka.Producer(config)

    def on_delivery(err: Any, msg: Any) -> None:
        outcome[msg.topic()] = None if err is None else err.code()

    for topic in topics:
        producer.produce(topic, b"v", on_delivery=on_delivery)
    assert producer.flush(90) == 0
    producer.poll(0.5)  # serve the throttle callbacks of the last responses
    return outcome


def test_auto_creation_validates_names(broker: BrokerProcess) -> None:
    """Names auto-creation would make follow the rules of explicit creation: legal
    characters, at most 249 of them, no '.'/'_' collision (INVALID_TOPIC_EXCEPTION)."""
    suffix = uuid.uuid4().hex[:6]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(f"dots_{suffix}", 1, 1)]).values():
        f.result(30)
    bad = ["bad name!", "x" * 250, f"dots.{suffix}"]
    good = ["y" * 249, f"fine-{suffix}"]
    outcome = _produce_to(broker.bootstrap, "namer", bad + good)
    invalid_topic = confluent_kafka.KafkaError.TOPIC_EXCEPTION
    assert outcome == {**{name: invalid_topic for name in bad}, **{name: None for name in good}}
    names = set(admin.list_topics(timeout=30).topics)
    assert not set(bad) & names
    assert set(good) <= names


def test_auto_creation_counts_against_the_mutation_quota(broker: BrokerProcess) -> None:
    """Auto-created partitions count against the client's controller_mutation_rate
    permissively (Kafka's auto-creation): the topics are created and the client is
    throttled (the client is told how long to wait, and that connection is muted for it).
    4 topics x 5 partitions (num.partitions) from a bucket of 12 at 2/s."""
    set_quota(broker, "auto-maker", "controller_mutation_rate", MUTATION_RATE)
    topics = [f"auto-{uuid.uuid4().hex[:6]}-{i}" for i in range(4)]
    throttles: list[float] = []
    outcome = _produce_to(broker.bootstrap, "auto-maker", topics, throttles)
    assert outcome == {t: None for t in topics}
    # the Metadata answer that created the last topics told the client to wait
    # (-tokens / rate: 1.5 to 4 s, as librdkafka may ask for the topics one by one)
    assert throttles and 1.0 <= max(throttles) <= 4.5, throttles
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.list_topics(timeout=30).topics
    assert all(len(described[t].partitions) == 5 for t in topics)


def test_request_percentage_throttles_a_busy_client(broker: BrokerProcess) -> None:
    """request_percentage (KIP-124): a client whose requests keep the broker busy longer
    than its share is throttled, at most one quota window (1 s) at a time; the answer says
    so (librdkafka's throttle_cb) and the next request waits. Another client is not.

    The busy client describes until an answer carries a throttle at the cap (a whole
    window: the share was overrun by more than a window's worth), then once more, which
    waits that throttle out."""
    topic = create_topic(broker)
    set_quota(broker, "busy", "request_percentage", 1)  # 1 % of a thread: 10 ms a second
    set_quota(broker, "idle", "request_percentage", 1_000)

    def describe_repeatedly(client_id: str, times: int | None) -> tuple[list[float], float]:
        """``times`` DescribeConfigs, or (None) until a throttle at the cap and one more."""
        throttles: list[float] = []
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "client.id": client_id,
                             "throttle_cb": lambda e: throttles.append(e.throttle_time)})
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)  # type: ignore[attr-defined]
        started = time.monotonic()
        done = 0
        capped = False  # an answer at the cap seen: one more request waits it out
        while (done < times) if times is not None else not capped:
            capped = any(t >= 0.99 for t in throttles)
            for f in admin.describe_configs([resource]).values():
                f.result(30)
            done += 1
            admin.poll(0)  # serve the throttle callbacks of the answers so far
            assert not expired(started, 120), \
                f"no throttle at the cap in {describe(started, 120)}: {throttles}"
        admin.poll(0.5)
        return throttles, time.monotonic() - started

    throttles, took = describe_repeatedly("busy", None)
    assert throttles, f"no throttle reported in {took:.1f} s"
    assert max(throttles) <= 1.0, throttles  # capped at quota.window.size.seconds
    assert took >= 1.0
    free, _ = describe_repeatedly("idle", 20)
    assert not [t for t in free if t > 0], free
