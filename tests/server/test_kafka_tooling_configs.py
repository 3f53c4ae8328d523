"""Config details a Kafka user's tooling meets (issue 50), through confluent-kafka's
AdminClient over a real socket.

``message.format.version`` is read as Kafka's ``MetadataVersion.fromVersionString`` reads
it (``0.10.0.0`` is ``0.10.0``), on CreateTopics, AlterConfigs and IncrementalAlterConfigs.
A broker key Odradek does not serve (``sasl.kerberos.min.time.before.relogin``) is stored
by an alter as Kafka stores it, as it is accepted in server.properties, with a warning, and
DescribeConfigs says it is not served; a key that is read-only in Kafka is still refused
as Kafka refuses it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from odradek.testing import RunningBroker, running_broker

TIMEOUT_S = 30
RELOGIN = "sasl.kerberos.min.time.before.relogin"


@pytest.fixture(scope="module")
def broker() -> Iterator[RunningBroker]:
    with running_broker() as b:
        yield b


@pytest.fixture
def admin(broker: RunningBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _error(future: Any) -> Any:
    try:
        future.result(TIMEOUT_S)
    except confluent_kafka.KafkaException as exc:
        return exc.args[0]
    return None


def create(admin: AdminClient, topic: str, configs: dict[str, str]) -> Any:
    (future,) = admin.create_topics([NewTopic(topic, 1, 1, config=configs)]).values()
    return _error(future)


def incremental(admin: AdminClient, rtype: Any, name: str, key: str, value: str | None) -> Any:
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    resource = ConfigResource(rtype, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op)])
    (future,) = admin.incremental_alter_configs([resource]).values()
    return _error(future)


def describe(admin: AdminClient, rtype: Any, name: str) -> dict[str, Any]:
    (future,) = admin.describe_configs([ConfigResource(rtype, name)]).values()
    return dict(future.result(TIMEOUT_S))


# -- message.format.version ---------------------------------------------------------------
@pytest.mark.parametrize("version", ["0.10.0.0", "0.11.0.2", "0.10.0-IV1", "2.8.1"])
def test_create_topics_reads_message_format_version_as_kafka(admin: AdminClient,
                                                             version: str) -> None:
    topic = f"mfv-{uuid.uuid4().hex[:8]}"
    assert create(admin, topic, {"message.format.version": version}) is None
    entry = describe(admin, ResourceType.TOPIC, topic)["message.format.version"]
    assert (entry.value, entry.source) == (version, ConfigSource.DYNAMIC_TOPIC_CONFIG.value)


def test_create_topics_refuses_what_kafka_refuses(admin: AdminClient) -> None:
    error = create(admin, f"mfv-{uuid.uuid4().hex[:8]}", {"message.format.version": "0.10.3"})
    assert error is not None and error.code() == confluent_kafka.KafkaError.INVALID_CONFIG, error
    assert "Version 0.10.3 is not a valid version" in error.str()


def test_alter_configs_take_a_four_segment_version(admin: AdminClient) -> None:
    topic = f"mfv-{uuid.uuid4().hex[:8]}"
    assert create(admin, topic, {}) is None
    assert incremental(admin, ResourceType.TOPIC, topic, "message.format.version",
                       "0.10.0.0") is None
    (future,) = admin.alter_configs([ConfigResource(
        ResourceType.TOPIC, topic, set_config={"message.format.version": "0.11.0.2"})]).values()
    assert _error(future) is None
    assert describe(admin, ResourceType.TOPIC, topic)["message.format.version"].value == (
        "0.11.0.2")
    error = incremental(admin, ResourceType.TOPIC, topic, "message.format.version", "0.12.0")
    assert error.code() == confluent_kafka.KafkaError.INVALID_CONFIG, error


# -- broker keys Odradek does not serve ------------------------------------------------------
def test_alter_of_an_unserved_broker_key_stores_it_and_warns(
    admin: AdminClient, caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="odradek.server.handlers.configs"):
        assert incremental(admin, ResourceType.BROKER, "0", RELOGIN, "120000") is None
    try:
        # the handler logs on the broker's thread: the records naming the key
        warnings = [r.getMessage() for r in caplog.records
                    if r.levelno == logging.WARNING and RELOGIN in r.getMessage()]
        assert any(
            f"broker config {RELOGIN} is stored but has no effect: this SASL setting is not "
            "supported by Odradek yet" in w for w in warnings), caplog.records
        entry = describe(admin, ResourceType.BROKER, "0")[RELOGIN]
        assert (entry.value, entry.source, entry.is_read_only) == (
            "120000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
    finally:
        assert incremental(admin, ResourceType.BROKER, "0", RELOGIN, None) is None
    entry = describe(admin, ResourceType.BROKER, "0")[RELOGIN]
    assert (entry.value, entry.source) == ("60000", ConfigSource.DEFAULT_CONFIG.value)


def test_legacy_alter_configs_of_an_unserved_key(admin: AdminClient) -> None:
    """``num.io.threads`` (does not apply to Odradek) through the legacy AlterConfigs,
    which replaces the resource's whole set."""
    (future,) = admin.alter_configs([ConfigResource(
        ResourceType.BROKER, "0", set_config={"num.io.threads": "16"})]).values()
    assert _error(future) is None
    try:
        entry = describe(admin, ResourceType.BROKER, "0")["num.io.threads"]
        assert (entry.value, entry.source) == ("16", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    finally:
        (future,) = admin.alter_configs([ConfigResource(ResourceType.BROKER, "0")]).values()
        assert _error(future) is None
    entry = describe(admin, ResourceType.BROKER, "0")["num.io.threads"]
    assert (entry.value, entry.source) == ("8", ConfigSource.DEFAULT_CONFIG.value)


def test_unserved_keys_that_kafka_refuses_are_still_refused(admin: AdminClient) -> None:
    # read-only in Kafka (as the cluster default: tests/server/test_kafka_broker_configs.py)
    error = incremental(admin, ResourceType.BROKER, "0", "process.roles", "broker")
    assert error.code() == confluent_kafka.KafkaError.INVALID_CONFIG, error
    assert error.str().endswith("Cannot update these configs dynamically: Set(process.roles)")
    # a bad value for Kafka's type
    error = incremental(admin, ResourceType.BROKER, "0", RELOGIN, "soon")
    assert error.code() == confluent_kafka.KafkaError.INVALID_CONFIG, error
    assert f"{RELOGIN}: Not a number of type LONG" in error.str()
    # a per-listener security key Odradek reads only at start-up
    error = incremental(admin, ResourceType.BROKER, "0",
                        "listener.name.plaintext.sasl.enabled.mechanisms", "PLAIN")
    assert error.code() == confluent_kafka.KafkaError.INVALID_CONFIG, error
    assert "read from server.properties at start-up" in error.str()
