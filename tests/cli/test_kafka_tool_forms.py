"""Scripts written for Kafka's tools run unchanged against Odradek (issue 50): the real
``odradek`` command in a subprocess, against a real broker.

``odradek topics`` takes kafka-topics.sh's flags (``--create``, ``--list``, ``--describe``,
``--alter``, ``--delete`` with ``--topic``, ``--partitions``, ``--config`` ...) beside its
sub-commands; ``odradek configs`` takes kafka-configs.sh's; ``message.format.version`` is
read as Kafka reads it (``0.10.0.0``); a broker key Odradek does not serve is stored by
``configs --alter`` as Kafka stores it.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests._deadlines import expired
from tests._zygote import run as run_odradek
from tests.interop._broker import odradek_executable

from odradek.testing import RunningBroker, running_broker

CLI_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def broker() -> Iterator[RunningBroker]:
    with running_broker() as b:
        yield b


def odradek(*args: str) -> subprocess.CompletedProcess[str]:
    return run_odradek([str(odradek_executable()), *args], timeout=CLI_TIMEOUT_S)


def ok(*args: str) -> str:
    res = odradek(*args)
    assert res.returncode == 0, (args, res.stdout, res.stderr[-3000:])
    return res.stdout


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_until(condition: object, what: str, deadline_s: float = 30.0) -> None:
    started = time.monotonic()
    while not condition():  # type: ignore[operator]
        assert not expired(started, deadline_s), f"not in time: {what}"
        time.sleep(0.05)


# -- a kafka-topics.sh script ----------------------------------------------------------------
def test_a_kafka_topics_script_runs_unchanged(broker: RunningBroker, tmp_path: Path) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    topic = new_name("kt")
    client = tmp_path / "client.properties"
    client.write_text("security.protocol=PLAINTEXT\n")
    assert ok("topics", *bs, "--command-config", str(client), "--create", "--topic", topic,
              "--partitions", "2", "--replication-factor", "1",
              "--config", "cleanup.policy=compact",
              "--config", "message.format.version=0.10.0.0") == f"Created topic {topic}.\n"
    # again: TOPIC_ALREADY_EXISTS, unless --if-not-exists
    again = odradek("topics", *bs, "--create", "--topic", topic)
    assert again.returncode == 1 and "already exists" in again.stderr, again
    assert ok("topics", *bs, "--create", "--if-not-exists", "--topic", topic) == ""

    assert topic in ok("topics", *bs, "--list").splitlines()
    assert ok("topics", *bs, "--list", "--topic", f"{topic[:5]}.*") == f"{topic}\n"
    assert ok("topics", *bs, "--list", "--topic", f"nothing,{topic}") == f"{topic}\n"

    described = ok("topics", *bs, "--describe", "--topic", topic).splitlines()
    assert described[0].startswith(f"Topic: {topic}\tTopicId: "), described
    assert "\tPartitionCount: 2\tReplicationFactor: 1\tConfigs: " in described[0]
    assert "cleanup.policy=compact" in described[0]
    assert "message.format.version=0.10.0.0" in described[0]
    assert len(described) == 3
    with_overrides = ok("topics", *bs, "--describe", "--topics-with-overrides")
    assert f"Topic: {topic}\t" in with_overrides

    assert ok("topics", *bs, "--alter", "--topic", topic, "--partitions", "4") == ""
    assert "PartitionCount: 4" in ok("topics", *bs, "--describe", "--topic", topic)

    assert ok("topics", *bs, "--delete", "--topic", topic) == ""
    wait_until(lambda: topic not in ok("topics", *bs, "--list").splitlines(),
               f"{topic} gone from --list")


def test_a_topic_that_does_not_exist(broker: RunningBroker) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    missing = new_name("missing")
    for action in ("--describe", "--delete"):
        res = odradek("topics", *bs, action, "--topic", missing)
        assert res.returncode == 1, res
        assert f"Topic '{missing}' does not exist as expected" in res.stderr
        assert ok("topics", *bs, action, "--if-exists", "--topic", missing) == ""
    res = odradek("topics", *bs, "--alter", "--topic", missing, "--partitions", "3")
    assert res.returncode == 1 and "does not exist as expected" in res.stderr, res


@pytest.mark.parametrize(("args", "message"), [
    (("--create",), 'Missing required argument "[topic]"'),
    (("--alter", "--topic", "t"), 'Missing required argument "[partitions]"'),
    (("--alter", "--topic", "t", "--replication-factor", "2"),
     'Option "[replication-factor]" can\'t be used with option "[alter]"'),
    (("--list", "--if-not-exists"), 'Option "[if-not-exists]" can\'t be used with option'),
    (("--create", "--topic", "t", "--partitions", "0"), "The partitions must be greater than 0"),
    (("--describe", "--under-replicated-partitions", "--topics-with-overrides"),
     "cannot be used together"),
    ((), "exactly one action: --list, --describe, --create, --alter or --delete"),
    (("--list", "--describe"), "not allowed with argument"),
])
def test_kafka_topics_usage_errors_are_kafkas(args: tuple[str, ...], message: str) -> None:
    """Refused before any connection (the bootstrap address is a closed port)."""
    res = odradek("topics", "--bootstrap-server", "127.0.0.1:1", *args)
    assert res.returncode == 2, res
    assert message in res.stderr, res.stderr


def test_the_sub_command_form_still_works(broker: RunningBroker) -> None:
    topic = new_name("sub")
    assert ok("topics", "create", "--topic", topic, "--partitions", "1",
              "-b", broker.bootstrap) == f"Created topic {topic}.\n"
    assert topic in ok("topics", "list", "-b", broker.bootstrap).splitlines()
    assert ok("topics", "delete", "--topic", topic,
              "-b", broker.bootstrap) == f"Deleted topic {topic}.\n"


# -- message.format.version ----------------------------------------------------------------
def test_message_format_version_as_kafka_reads_it(broker: RunningBroker) -> None:
    topic = new_name("mfv")
    assert ok("topics", "create", "--topic", topic, "--config",
              "message.format.version=0.10.0.0", "-b", broker.bootstrap) == (
        f"Created topic {topic}.\n")
    assert ok("configs", "--bootstrap-server", broker.bootstrap, "--entity-type", "topics",
              "--entity-name", topic, "--alter", "--add-config",
              "message.format.version=0.11.0.2") == (
        f"Completed updating config for topic {topic}.\n")
    res = odradek("topics", "create", "--topic", new_name("mfv"), "--config",
                  "message.format.version=0.10.3", "-b", broker.bootstrap)
    assert res.returncode == 1, res
    assert "Version 0.10.3 is not a valid version" in res.stderr


# -- kafka-configs.sh ------------------------------------------------------------------------
def test_kafka_configs_stores_an_unserved_broker_key(broker: RunningBroker) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    key = "sasl.kerberos.min.time.before.relogin"
    target = ("--entity-type", "brokers", "--entity-name", "0")
    assert ok("configs", *bs, *target, "--alter", "--add-config", f"{key}=120000") == (
        "Completed updating config for broker 0.\n")
    try:
        described = ok("configs", *bs, *target, "--describe")
        assert f"  {key}=120000 sensitive=false source=DYNAMIC_BROKER_CONFIG\n" in described
    finally:
        assert ok("configs", *bs, *target, "--alter", "--delete-config", key) == (
            "Completed updating config for broker 0.\n")
    assert key not in ok("configs", *bs, *target, "--describe")
    # a key read-only in Kafka is still refused as Kafka refuses it
    res = odradek("configs", *bs, *target, "--alter", "--add-config", "process.roles=broker")
    assert res.returncode == 1, res
    assert "Cannot update these configs dynamically: Set(process.roles)" in res.stderr


def test_kafka_configs_topic_flags(broker: RunningBroker) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    topic = new_name("kc")
    ok("topics", *bs, "--create", "--topic", topic)
    target = ("--entity-type", "topics", "--entity-name", topic)
    assert ok("configs", *bs, *target, "--alter", "--add-config",
              "retention.ms=1000,cleanup.policy=[compact,delete]") == (
        f"Completed updating config for topic {topic}.\n")
    described = ok("configs", *bs, *target, "--describe")
    assert described.splitlines()[0] == f"Dynamic configs for topic {topic} are:"
    assert "  cleanup.policy=compact,delete sensitive=false source=DYNAMIC_TOPIC_CONFIG" in (
        described)
    ok("configs", *bs, *target, "--alter", "--delete-config", "retention.ms")
    assert "retention.ms" not in ok("configs", *bs, *target, "--describe")
