"""Client quotas by user and by user + client id (KIP-55) with real clients over SASL.

- ``odradek configs --entity-type users`` sets a user's quota (its SCRAM credentials in the
  same node kept), a user's client id's, the default user's; describes them as
  kafka-configs.sh does.
- A confluent-kafka producer authenticated as alice is throttled by alice's
  ``producer_byte_rate`` (the broker's throttle time reaches librdkafka's ``throttle_cb``),
  bob's identical producer is not; a kafka-python producer on PLAINTEXT is user
  ``ANONYMOUS`` and is throttled by that user's quota (its ``throttle-time-max`` metric).
"""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from odradek.testing import RunningBroker
from tests._deadlines import describe, expired
from tests._zygote import run as run_odradek

from ._broker import odradek_executable
from ._security import Certs, bootstrap, confluent_settings, secure_broker

pytestmark = pytest.mark.interop

RATE = 20_000  # bytes/s: 10 s at the quota is 200 KB
RECORDS = 400  # of 1 KB: twice what the first window allows
VALUE = b"q" * 1000


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningBroker, Certs]]:
    with secure_broker(tmp_path_factory.mktemp("user-quotas")) as pair:
        yield pair


def configs(broker: RunningBroker, *args: str) -> subprocess.CompletedProcess[str]:
    return run_odradek(
        [str(odradek_executable()), "configs", "--bootstrap-server",
         bootstrap(broker, "PLAINTEXT"), *args], timeout=60,
    )


def ok(broker: RunningBroker, *args: str) -> str:
    done = configs(broker, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def create_topic(broker: RunningBroker) -> str:
    name = f"uq-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap(broker, "PLAINTEXT")})
    for f in admin.create_topics([NewTopic(name, 1, 1)]).values():
        f.result(30)
    return name


def wait_for(check: Any, timeout: float, what: str) -> None:
    started = time.monotonic()
    while not check():
        assert not expired(started, timeout), f"timed out waiting for {what}"
        time.sleep(0.05)


def produce_as(broker: RunningBroker, certs: Certs, user: str, topic: str,
               client_id: str) -> list[int]:
    """Send :data:`RECORDS` as ``user`` over SASL_PLAINTEXT (SCRAM-SHA-256); the throttle
    times the broker's answers carried (librdkafka's throttle_cb)."""
    throttles: list[int] = []
    producer = Producer({
        **confluent_settings(certs, "SASL_PLAINTEXT", "SCRAM-SHA-256", user=user),
        "bootstrap.servers": bootstrap(broker, "SASL_PLAINTEXT"), "client.id": client_id,
        "linger.ms": 5, "batch.size": 16 * 1024,
        "throttle_cb": lambda event: throttles.append(event.throttle_time),
    })
    for _ in range(RECORDS):
        while True:
            try:
                producer.produce(topic, VALUE)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    # Every record sent and answered, or (throttled) the first throttle time back.
    started = time.monotonic()
    while len(producer) and not throttles:
        assert not expired(started, 60), \
            f"the producer neither finished nor was throttled in {describe(started, 60)}"
        producer.poll(0.05)
    producer.purge()
    producer.flush(0)
    return throttles


def test_configs_cli_user_and_user_client_quotas(secure: tuple[RunningBroker, Certs]) -> None:
    broker, _ = secure
    ok(broker, "--entity-type", "users", "--entity-name", "carol", "--alter", "--add-config",
       "SCRAM-SHA-256=[iterations=4096,password=carol-secret],producer_byte_rate=1024")
    ok(broker, "--entity-type", "users", "--entity-name", "carol", "--entity-type", "clients",
       "--entity-name", "app", "--alter", "--add-config", "consumer_byte_rate=2048")
    ok(broker, "--entity-type", "users", "--entity-default", "--entity-type", "clients",
       "--entity-default", "--alter", "--add-config", "request_percentage=50")
    out = ok(broker, "--entity-type", "users", "--entity-name", "carol", "--describe")
    assert out.splitlines() == [
        "Quota configs for user-principal 'carol' are producer_byte_rate=1024.0",
        "SCRAM credential configs for user-principal 'carol' are SCRAM-SHA-256=iterations=4096",
    ]
    out = ok(broker, "--entity-type", "users", "--entity-type", "clients", "--describe")
    assert out.splitlines() == [
        "Quota configs for the default user-principal, the default client-id are "
        "request_percentage=50.0",
        "Quota configs for user-principal 'carol', client-id 'app' are "
        "consumer_byte_rate=2048.0",
    ]
    # the user's quota removed: its credential stays, and carol still authenticates
    ok(broker, "--entity-type", "users", "--entity-name", "carol", "--alter",
       "--delete-config", "producer_byte_rate")
    out = ok(broker, "--entity-type", "users", "--entity-name", "carol", "--describe")
    assert out.splitlines() == [
        "SCRAM credential configs for user-principal 'carol' are SCRAM-SHA-256=iterations=4096"]
    bad = configs(broker, "--entity-type", "users", "--entity-name", "carol", "--alter",
                  "--add-config", "produce_byte_rate=5")
    assert bad.returncode == 2 and "produce_byte_rate" in bad.stderr
    for args in (("--entity-type", "users", "--entity-name", "carol", "--entity-type",
                  "clients", "--entity-name", "app", "--alter", "--delete-config",
                  "consumer_byte_rate"),
                 ("--entity-type", "users", "--entity-default", "--entity-type", "clients",
                  "--entity-default", "--alter", "--delete-config", "request_percentage")):
        ok(broker, *args)
    assert ok(broker, "--entity-type", "users", "--entity-type", "clients", "--describe") == ""


def test_a_users_quota_throttles_that_user_only(secure: tuple[RunningBroker, Certs]) -> None:
    broker, certs = secure
    topic = create_topic(broker)
    ok(broker, "--entity-type", "users", "--entity-name", "alice", "--alter", "--add-config",
       f"producer_byte_rate={RATE}")
    # a generous client-id default: the user's quota is more specific and wins for alice
    ok(broker, "--entity-type", "clients", "--entity-default", "--alter", "--add-config",
       "producer_byte_rate=100000000")
    quotas = broker.broker.services.client_quotas.produce
    try:
        wait_for(lambda: quotas.quota("x", "alice") == RATE, 10, "the quota to apply")
        alice = produce_as(broker, certs, "alice", topic, "shared-app")
        bob = produce_as(broker, certs, "bob", topic, "shared-app")  # the same client id
        assert alice and max(alice) > 0, "alice's producer was never throttled"
        assert bob == [], f"bob was throttled by alice's quota: {bob[:5]}"
        # alice measured as herself across client ids; bob by the client-id default
        assert ("alice", None) in quotas.measured()
        assert (None, "shared-app") in quotas.measured()
    finally:
        ok(broker, "--entity-type", "users", "--entity-name", "alice", "--alter",
           "--delete-config", "producer_byte_rate")
        ok(broker, "--entity-type", "clients", "--entity-default", "--alter",
           "--delete-config", "producer_byte_rate")


def test_plaintext_clients_are_user_anonymous(secure: tuple[RunningBroker, Certs]) -> None:
    from kafka import KafkaProducer

    broker, _ = secure
    topic = create_topic(broker)
    ok(broker, "--entity-type", "users", "--entity-name", "ANONYMOUS", "--alter",
       "--add-config", f"producer_byte_rate={RATE}")
    quotas = broker.broker.services.client_quotas.produce
    producer = KafkaProducer(bootstrap_servers=bootstrap(broker, "PLAINTEXT"),
                             linger_ms=5, batch_size=16 * 1024)
    try:
        wait_for(lambda: quotas.quota("x", "ANONYMOUS") == RATE, 10, "the quota to apply")
        futures = [producer.send(topic, VALUE) for _ in range(RECORDS)]

        def throttled() -> bool:  # the connection's throttle-time-max, in any group
            return any(float(values.get(name) or 0) > 0
                       for values in producer.metrics().values()
                       for name in ("throttle-time-max", "produce-throttle-time-max"))

        # kafka-python records a response's throttle time before it completes the
        # response's batches (on its network thread): wait for the first batch's answer too
        wait_for(lambda: throttled() and futures[0].is_done, 60,
                 "kafka-python to see a throttle time and the first batch's answer")
        assert futures[0].succeeded()  # throttled, not refused: the first batch was written
    finally:
        from kafka.errors import KafkaTimeoutError

        # The quota lifted first, so that the records left unsent go out and the producer
        # closes: kafka-python's close(timeout) raises from its flush when records are
        # left and never stops its sender thread, which then retries this broker after
        # it is gone and logs errors into whatever test the worker runs next.
        ok(broker, "--entity-type", "users", "--entity-name", "ANONYMOUS", "--alter",
           "--delete-config", "producer_byte_rate")
        with contextlib.suppress(KafkaTimeoutError):
            producer.close(timeout=30)
