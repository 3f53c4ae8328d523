"""The tools that connect to brokers outside the admin verbs, over SASL_SSL with
``--command-config client.properties`` (the Java client's keys, certificates made at test
time): ``perf produce`` and ``perf consume`` (its native batch reader and librdkafka's),
``status -b`` and the web console (``odradek console``), each as a real subprocess against
a broker whose SASL_SSL listener takes SCRAM users. No password is ever printed."""

from __future__ import annotations

import json
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from tests._zygote import run as run_odradek
from tests.interop._broker import odradek_executable
from tests.interop._security import (
    USERS,
    Certs,
    bootstrap,
    client_properties,
    confluent_settings,
    secure_broker,
)
from tests.webconsole._console import running_console

from odradek.testing import RunningBroker

CLI_TIMEOUT_S = 120.0
NUM = 2000


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[RunningBroker, Certs, Path]]:
    directory = tmp_path_factory.mktemp("security-tools")
    with secure_broker(directory) as (broker, certs):
        yield broker, certs, client_properties(directory / "client.properties", certs)


def odradek(*args: str) -> subprocess.CompletedProcess[str]:
    done = run_odradek([str(odradek_executable()), *args], timeout=CLI_TIMEOUT_S)
    assert all(p not in done.stdout + done.stderr for p in USERS.values())
    return done


def stored(broker: RunningBroker, certs: Certs, topic: str) -> int:
    consumer = ck.Consumer({"bootstrap.servers": bootstrap(broker, "SASL_SSL"),
                            "group.id": "check",
                            **confluent_settings(certs, "SASL_SSL", "SCRAM-SHA-256")})
    try:
        return sum(consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1]
                   for p in range(2))
    finally:
        consumer.close()


def test_perf_produce_and_consume_over_sasl_ssl(
        secured: tuple[RunningBroker, Certs, Path]) -> None:
    broker, certs, config = secured
    server = bootstrap(broker, "SASL_SSL")
    topic = f"perf-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": server,
                         **confluent_settings(certs, "SASL_SSL", "SCRAM-SHA-256")})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    del admin
    produced = odradek("perf", "produce", "-b", server, "--topic", topic, "--num-records",
                       str(NUM), "--record-size", "100", "--throughput", "-1",
                       "--command-config", str(config))
    assert produced.returncode == 0, produced.stderr
    assert produced.stdout.startswith(f"{NUM} records sent"), produced.stdout
    assert stored(broker, certs, topic) == NUM
    for extra in ((), ("--librdkafka-fetch",)):
        consumed = odradek("perf", "consume", "-b", server, "--topic", topic, "--messages",
                           str(NUM), "--timeout", "20000", "--command-config", str(config),
                           *extra)
        assert consumed.returncode == 0, consumed.stderr
        assert consumed.stdout.splitlines()[1].split(", ")[4] == str(NUM), consumed.stdout


def test_perf_without_the_settings_fails_and_a_bad_file_is_a_usage_error(
        secured: tuple[RunningBroker, Certs, Path], tmp_path: Path) -> None:
    broker, _certs, _config = secured
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                   f"sasl.password={USERS['alice']}\n")
    done = odradek("perf", "produce", "-b", bootstrap(broker, "SASL_SSL"), "--topic", "x",
                   "--num-records", "1", "--record-size", "1", "--throughput", "-1",
                   "--command-config", str(bad))
    assert done.returncode == 2 and "needs a user" in done.stderr, done.stderr


def test_status_over_sasl_ssl(secured: tuple[RunningBroker, Certs, Path]) -> None:
    broker, _certs, config = secured
    server = bootstrap(broker, "SASL_SSL")
    up = odradek("status", "-b", server, "--command-config", str(config), "--data-dir",
                 str(broker.broker.config.log_dirs[0]))
    assert f"broker {server}: up (controller" in up.stdout, up.stdout + up.stderr
    down = odradek("status", "-b", server, "--data-dir", str(broker.broker.config.log_dirs[0]))
    assert down.returncode == 1 and f"broker {server}: DOWN" in down.stdout, down.stdout


def test_console_over_sasl_ssl(secured: tuple[RunningBroker, Certs, Path]) -> None:
    broker, certs, config = secured
    server = bootstrap(broker, "SASL_SSL")
    topic = f"console-{uuid.uuid4().hex[:8]}"
    producer = ck.Producer({"bootstrap.servers": server,
                            **confluent_settings(certs, "SASL_SSL", "SCRAM-SHA-256")})
    producer.produce(topic, b"over-tls", partition=0)
    assert producer.flush(30) == 0
    del producer
    with running_console(server, "--command-config", str(config)) as url:
        with urllib.request.urlopen(f"{url}/topics", timeout=30) as answer:
            assert topic in answer.read().decode()
        query = f"{url}/api/topics/{topic}/messages?partition=0&offset=0"
        with urllib.request.urlopen(query, timeout=30) as answer:
            records = json.loads(answer.read())["records"]
        assert [r["value"] for r in records] == ["over-tls"]


def test_a_bad_security_file_is_a_usage_error_naming_the_option(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.properties")
    mirror = odradek("mirror", "--source-bootstrap-server", "127.0.0.1:1",
                     "--target-bootstrap-server", "127.0.0.1:1", "--include", "x",
                     "--target-command-config", missing)
    assert mirror.returncode == 2, mirror.stderr
    assert f"cannot read --target-command-config {missing}" in mirror.stderr
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    # (the console is told how its users log in, here not at all on loopback, before it
    # reads its --command-config)
    for verb in (("console", "--bootstrap-server", "127.0.0.1:1", "--no-login"),
                 ("status", "-b", "127.0.0.1:1")):
        done = odradek(*verb, "--command-config", str(bad))
        assert done.returncode == 2, done.stderr
        assert "--command-config" in done.stderr and "GSSAPI" in done.stderr, done.stderr
