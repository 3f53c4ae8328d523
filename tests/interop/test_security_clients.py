"""Real clients over SSL, mutual TLS, SASL_PLAINTEXT and SASL_SSL (PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512): confluent-kafka, kafka-python, aiokafka, kcat and the Java client each
produce, consume and make an admin call; each client gets the endpoints of the listener it
came in on; the principal is the authenticated user (or the certificate's mapped name)."""

from __future__ import annotations

import asyncio
import ssl
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from odradek.testing import RunningBroker
from tests._deadlines import describe, expired
from tests._zygote import run as run_odradek

from ._broker import java_client, kcat
from ._security import (
    USERS,
    Certs,
    bootstrap,
    confluent_settings,
    principals,
    secure_broker,
    server,
)

pytestmark = pytest.mark.interop

# (listener, mechanism): every way in
WAYS = [("SSL", ""), ("MTLS", ""),
        *((listener, mechanism) for listener in ("SASL_PLAINTEXT", "SASL_SSL")
          for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"))]
IDS = [f"{lst}-{m}" if m else lst for lst, m in WAYS]


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningBroker, Certs]]:
    with secure_broker(tmp_path_factory.mktemp("security")) as pair:
        yield pair


def _topic() -> str:
    return f"sec-{uuid.uuid4().hex[:10]}"


def _expected_principal(listener: str) -> str:
    return "User:alice" if listener != "SSL" else "User:ANONYMOUS"


@pytest.mark.parametrize(("listener", "mechanism"), WAYS, ids=IDS)
def test_confluent_produce_consume_in_group_and_admin(
    secure: tuple[RunningBroker, Certs], listener: str, mechanism: str
) -> None:
    broker, certs = secure
    conf = {"bootstrap.servers": bootstrap(broker, listener),
            **confluent_settings(certs, listener, mechanism or "PLAIN")}
    topic = _topic()
    producer = Producer(conf)
    for i in range(10):
        producer.produce(topic, f"m{i}".encode())
    assert producer.flush(30) == 0
    # the client is told the endpoints of its own listener
    metadata = producer.list_topics(timeout=10)
    assert [(b.host, b.port) for b in metadata.brokers.values()] == [
        ("127.0.0.1", server(broker, listener).port)]
    assert _expected_principal(listener) in principals(broker, listener)
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    started = time.monotonic()
    while len(got) < 10 and not expired(started, 30):
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert got == [f"m{i}".encode() for i in range(10)]
    admin = AdminClient(conf)
    cluster = admin.describe_cluster().result(30)
    assert [(n.host, n.port) for n in cluster.nodes] == [
        ("127.0.0.1", server(broker, listener).port)]
    groups = admin.list_consumer_groups().result(30)
    assert f"g-{topic}" in {g.group_id for g in groups.valid}


def _kafka_python_settings(certs: Certs, listener: str, mechanism: str) -> dict[str, Any]:
    out: dict[str, Any] = {"security_protocol": "SSL" if listener == "MTLS" else listener}
    if listener in ("SSL", "MTLS", "SASL_SSL"):
        out["ssl_cafile"] = str(certs.ca)
    if listener == "MTLS":
        out.update(ssl_certfile=str(certs.client_cert), ssl_keyfile=str(certs.client_key))
    if listener.startswith("SASL_"):
        out.update(sasl_mechanism=mechanism, sasl_plain_username="alice",
                   sasl_plain_password=USERS["alice"])
    return out


@pytest.mark.parametrize(("listener", "mechanism"), WAYS, ids=IDS)
def test_kafka_python(secure: tuple[RunningBroker, Certs], listener: str,
                      mechanism: str) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

    broker, certs = secure
    settings = _kafka_python_settings(certs, listener, mechanism)
    bs = bootstrap(broker, listener)
    topic = _topic()
    producer = KafkaProducer(bootstrap_servers=bs, **settings)
    for i in range(5):
        producer.send(topic, f"k{i}".encode()).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bs, group_id=f"g-{topic}",
                             auto_offset_reset="earliest", consumer_timeout_ms=15000,
                             **settings)
    got = []
    for message in consumer:
        got.append(message.value)
        if len(got) == 5:
            break
    consumer.close()
    assert got == [f"k{i}".encode() for i in range(5)]
    admin = KafkaAdminClient(bootstrap_servers=bs, **settings)
    try:
        assert topic in admin.list_topics()
    finally:
        admin.close()


@pytest.mark.parametrize(("listener", "mechanism"), [
    ("SSL", ""), ("MTLS", ""), ("SASL_PLAINTEXT", "SCRAM-SHA-512"), ("SASL_SSL", "PLAIN"),
    ("SASL_SSL", "SCRAM-SHA-256"),
], ids=["SSL", "MTLS", "SASL_PLAINTEXT-SCRAM-SHA-512", "SASL_SSL-PLAIN",
        "SASL_SSL-SCRAM-SHA-256"])
def test_aiokafka(secure: tuple[RunningBroker, Certs], listener: str, mechanism: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient

    broker, certs = secure
    settings: dict[str, Any] = {"security_protocol": "SSL" if listener == "MTLS" else listener}
    if listener != "SASL_PLAINTEXT":
        context = ssl.create_default_context(cafile=str(certs.ca))
        if listener == "MTLS":
            context.load_cert_chain(str(certs.client_cert), str(certs.client_key))
        settings["ssl_context"] = context
    if mechanism:
        settings.update(sasl_mechanism=mechanism, sasl_plain_username="alice",
                        sasl_plain_password=USERS["alice"])
    bs = bootstrap(broker, listener)
    topic = _topic()

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=bs, **settings)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, f"a{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bs, group_id=f"g-{topic}",
                                    auto_offset_reset="earliest", **settings)
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                async for message in consumer:
                    got.append(message.value or b"")
                    if len(got) == 5:
                        break
        finally:
            await consumer.stop()
        admin = AIOKafkaAdminClient(bootstrap_servers=bs, **settings)
        await admin.start()
        try:
            assert topic in await admin.list_topics()
        finally:
            await admin.close()
        return got

    assert asyncio.run(run()) == [f"a{i}".encode() for i in range(5)]


@pytest.mark.parametrize(("listener", "mechanism"), [
    ("SSL", ""), ("MTLS", ""), ("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-512"),
], ids=["SSL", "MTLS", "SASL_PLAINTEXT-PLAIN", "SASL_SSL-SCRAM-SHA-512"])
def test_kcat(secure: tuple[RunningBroker, Certs], listener: str, mechanism: str) -> None:
    broker, certs = secure
    args: list[str] = ["-b", bootstrap(broker, listener)]
    for key, value in confluent_settings(certs, listener, mechanism or "PLAIN").items():
        key = "sasl.mechanisms" if key == "sasl.mechanism" else key
        args += ["-X", f"{key}={value}"]
    topic = _topic()
    kcat(*args, "-P", "-t", topic, input="one\ntwo\nthree\n")
    consumed = kcat(*args, "-C", "-t", topic, "-o", "beginning", "-e", "-q")
    assert consumed.stdout.split() == ["one", "two", "three"]
    listing = kcat(*args, "-L", "-t", topic)
    assert f"127.0.0.1:{server(broker, listener).port}" in listing.stdout


def _java_props(certs: Certs, listener: str, mechanism: str) -> dict[str, str]:
    props = {"security.protocol": "SSL" if listener == "MTLS" else listener}
    if listener != "SASL_PLAINTEXT":
        props.update({"ssl.truststore.type": "PEM",
                      "ssl.truststore.location": str(certs.ca)})
    if listener == "MTLS":
        props.update({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(
            certs.client_p12), "ssl.keystore.password": "alice-store"})
    if mechanism:
        module = ("org.apache.kafka.common.security.plain.PlainLoginModule"
                  if mechanism == "PLAIN" else
                  "org.apache.kafka.common.security.scram.ScramLoginModule")
        props.update({"sasl.mechanism": mechanism, "sasl.jaas.config":
                      f'{module} required username="alice" password="{USERS["alice"]}";'})
    return props


@pytest.mark.parametrize(("listener", "mechanism"), [
    ("MTLS", ""), ("SASL_SSL", "SCRAM-SHA-256"), ("SASL_PLAINTEXT", "PLAIN"),
], ids=["MTLS", "SASL_SSL-SCRAM-SHA-256", "SASL_PLAINTEXT-PLAIN"])
def test_java_client(secure: tuple[RunningBroker, Certs], listener: str,
                     mechanism: str) -> None:
    broker, certs = secure
    run = java_client()
    props = _java_props(certs, listener, mechanism)
    topic = _topic()
    result = run(bootstrap(broker, listener), "roundtrip", topic, 5, props=props)
    assert result.ok, result.describe()
    grouped = _topic()
    produced = run(bootstrap(broker, listener), "produce", grouped, 5, props=props)
    assert produced.ok, produced.describe()
    group = run(bootstrap(broker, listener), "group-consume", grouped, f"g-{grouped}", 5,
                props=props)
    assert group.ok, group.describe()


def _read_back(conf: dict[str, Any], topic: str, count: int) -> list[bytes]:
    """Up to ``count`` values of ``topic`` from the start (large fetches), within 30 s."""
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                         "fetch.max.bytes": 10_000_000})
    consumer.subscribe([topic])
    got: list[bytes] = []
    started = time.monotonic()
    while len(got) < count and not expired(started, 30):
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message.value())
    consumer.close()
    return got


def test_tls_fetch_of_large_batches_is_chunked(secure: tuple[RunningBroker, Certs],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Fetch responses over TLS whose file regions exceed the copy threshold go through
    the chunked writer, byte for byte."""
    from odradek.server.network import writer

    regions: list[int] = []
    chunked = writer.TlsResponseWriter._write_region

    async def counted(self: Any, part: Any, buffered: Any) -> bool:
        regions.append(part.size)
        return await chunked(self, part, buffered)

    monkeypatch.setattr(writer.TlsResponseWriter, "_write_region", counted)
    broker, certs = secure
    conf = {"bootstrap.servers": bootstrap(broker, "SSL"), **confluent_settings(certs, "SSL")}
    topic = _topic()
    producer = Producer({**conf, "linger.ms": 50, "batch.size": 1_000_000,
                         "message.max.bytes": 2_000_000, "compression.type": "none"})
    payloads = [bytes([i]) * 300_000 for i in range(12)]
    for payload in payloads:
        producer.produce(topic, payload)
    assert producer.flush(30) == 0
    assert _read_back(conf, topic, len(payloads)) == payloads
    assert regions and max(regions) > writer.TLS_CHUNK_BYTES  # read in several chunks


@pytest.mark.parametrize(("listener", "mechanism"),
                         [("SSL", ""), ("MTLS", ""), ("SASL_SSL", "SCRAM-SHA-512")],
                         ids=["SSL", "MTLS", "SASL_SSL-SCRAM-SHA-512"])
def test_large_tls_produce_comes_back_byte_for_byte(
        secure: tuple[RunningBroker, Certs], listener: str, mechanism: str) -> None:
    """librdkafka's 1 MB produce requests over TLS (and SASL_SSL, after its handshake):
    reads of many TLS records each, and the records come back byte for byte."""
    broker, certs = secure
    conf = {"bootstrap.servers": bootstrap(broker, listener),
            **confluent_settings(certs, listener, mechanism or "PLAIN")}
    topic = _topic()
    producer = Producer({**conf, "linger.ms": 50, "batch.size": 1_000_000,
                         "message.max.bytes": 2_000_000, "compression.type": "none"})
    payloads = [bytes([i]) * 250_000 for i in range(16)]
    for payload in payloads:
        producer.produce(topic, payload)
    assert producer.flush(30) == 0
    assert _read_back(conf, topic, len(payloads)) == payloads


def test_tls_connections_queue_little_in_the_tls_layer(
        secure: tuple[RunningBroker, Certs]) -> None:
    """A TLS connection's transport pauses the writer past TLS_WRITE_BUFFER_BYTES (what
    asyncio's TLS layer holds is re-copied at every partial send); a plaintext one keeps
    the broker's 4 MiB high-water mark."""
    import socket

    from odradek.server.network.writer import TLS_WRITE_BUFFER_BYTES

    broker, certs = secure
    context = ssl.create_default_context(cafile=str(certs.ca))

    def limits(listener: str, local: tuple[str, int]) -> tuple[int, int]:
        started = time.monotonic()
        while not expired(started, 10):
            for connection in list(server(broker, listener).connections):
                transport = connection._transport  # the limits are what the test checks
                if connection.peer == local and transport is not None:
                    low, high = transport.get_write_buffer_limits()
                    return low, high
            time.sleep(0.02)
        raise AssertionError(f"no {listener} connection from {local} "
                             f"in {describe(started, 10)}")

    host, port = bootstrap(broker, "SSL").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        assert limits("SSL", tls.getsockname()) == (TLS_WRITE_BUFFER_BYTES // 4,
                                                    TLS_WRITE_BUFFER_BYTES)
    host, port = bootstrap(broker, "PLAINTEXT").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as plain:
        high = 4 * 1024 * 1024  # write_buffer_high_water_bytes' default
        assert limits("PLAINTEXT", plain.getsockname()) == (high // 4, high)


# -- Odradek's own client and tools ---------------------------------------------------------
@pytest.mark.parametrize(("listener", "lines"), [
    ("SASL_SSL", ["security.protocol=SASL_SSL", "sasl.mechanism=SCRAM-SHA-512",
                  "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
                  'required username="alice" password="alice-secret";',
                  "ssl.truststore.type=PEM", "ssl.truststore.location={ca}"]),
    ("SASL_PLAINTEXT", ["security.protocol=SASL_PLAINTEXT", "sasl.mechanism=PLAIN",
                        "sasl.username=alice", "sasl.password=alice-secret"]),
    ("MTLS", ["security.protocol=SSL", "ssl.ca.location={ca}",
              "ssl.certificate.location={cert}", "ssl.key.location={key}"]),
], ids=["SASL_SSL-SCRAM-java-style", "SASL_PLAINTEXT-PLAIN-librdkafka-style", "MTLS"])
def test_cli_command_config(secure: tuple[RunningBroker, Certs], tmp_path: Path,
                            listener: str, lines: list[str]) -> None:
    import subprocess

    from ._broker import odradek_executable

    broker, certs = secure
    config = tmp_path / "client.properties"
    config.write_text("\n".join(lines).format(ca=certs.ca, cert=certs.client_cert,
                                              key=certs.client_key) + "\n")
    topic = _topic()

    def odradek(*args: str) -> subprocess.CompletedProcess[str]:
        return run_odradek(
            [str(odradek_executable()), *args, "--bootstrap-server",
             bootstrap(broker, listener), "--command-config", str(config)], timeout=60)

    created = odradek("topics", "create", "--topic", topic, "--partitions", "2")
    assert created.returncode == 0, created.stderr
    listed = odradek("topics", "list")
    assert topic in listed.stdout.split(), listed.stderr
    users = odradek("configs", "--entity-type", "users", "--describe")
    assert "SCRAM credential configs for user-principal 'alice' are" in users.stdout, users
    assert "password" not in users.stdout
    # a wrong password: the broker's message, exit 1
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                   "sasl.username=alice\nsasl.password=nope\n")
    failed = run_odradek(
        [str(odradek_executable()), "topics", "list", "--bootstrap-server",
         bootstrap(broker, "SASL_PLAINTEXT"), "--command-config", str(bad)], timeout=60)
    assert failed.returncode == 1
    assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in failed.stderr
    assert "nope" not in failed.stderr
