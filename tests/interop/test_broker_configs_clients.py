"""Every broker config key of Kafka 3.9, through real admin clients against ``odradek serve``
started with a server.properties holding keys of features Odradek lacks.

confluent-kafka's AdminClient (librdkafka), the Java client's Admin (kafka-clients 3.9.1)
and, for DescribeConfigs, kafka-python's KafkaAdminClient: DescribeConfigs of the BROKER
resource lists every KafkaConfig key with the value, type, read-only flag and sensitivity
Kafka documents; IncrementalAlterConfigs of a key of a missing feature (e.g.
``sasl.kerberos.min.time.before.relogin``) stores it as Kafka does (as server.properties
accepts it: no effect, a warning naming the feature), of a read-only key is Kafka's "Cannot
update these configs dynamically", and a served dynamic key takes effect.
"""

from __future__ import annotations

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
    ResourceType,
)

from odradek.server.kafka_config_support import KAFKA_BROKER_CONFIGS, ODRADEK_DEFAULTS

from ._broker import BrokerProcess, JavaRunner, java_client, start_broker

pytestmark = pytest.mark.interop

SERVER_PROPERTIES = """\
# keys of a Kafka broker's server.properties that Odradek does not serve
sasl.kerberos.service.name=kafka
sasl.kerberos.min.time.before.relogin=90000
process.roles=broker
remote.log.storage.system.enable=true
num.io.threads=8
# a typo
num.partitons=3
"""

# confluent-kafka's ConfigEntry has no type: Kafka's (DescribeConfigs v3+) is checked with Java.
JAVA_TYPES = {"boolean": "BOOLEAN", "string": "STRING", "int": "INT", "short": "SHORT",
              "long": "LONG", "double": "DOUBLE", "list": "LIST", "class": "CLASS",
              "password": "PASSWORD"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    tmp = tmp_path_factory.mktemp("broker-configs")
    props = tmp / "server.properties"
    props.write_text(SERVER_PROPERTIES)
    b = start_broker(tmp, extra_args=["--config", str(props)])
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def describe_broker(admin: AdminClient) -> dict[str, Any]:
    (future,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, "0")]).values()
    return dict(future.result(30))


def alter_error(admin: AdminClient, key: str, value: str | None) -> Any:
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    resource = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op)])
    (future,) = admin.incremental_alter_configs([resource]).values()
    try:
        future.result(30)
    except confluent_kafka.KafkaException as exc:
        return exc.args[0]
    return None


def test_startup_names_the_missing_features(broker: BrokerProcess) -> None:
    err = broker.stderr()
    assert ("configuration key 'sasl.kerberos.service.name' is ignored: this SASL setting is "
            "not supported by Odradek yet (it serves PLAIN and SCRAM only)") in err, \
        broker.describe()
    assert ("configuration key 'remote.log.storage.system.enable' is ignored: tiered storage "
            "(KIP-405) is not supported by Odradek yet") in err
    assert "configuration key 'process.roles' is ignored: KRaft mode" in err
    assert ("unknown configuration key 'num.partitons' is ignored (did you mean "
            "num.partitions?)") in err
    assert "unknown configuration key 'sasl" not in err


def test_confluent_describe_lists_every_kafka_key(admin: AdminClient) -> None:
    entries = describe_broker(admin)
    assert set(KAFKA_BROKER_CONFIGS) <= set(entries)
    compared = 0
    for name, k in KAFKA_BROKER_CONFIGS.items():
        e = entries[name]
        assert e.is_read_only == (k.update_mode == "read-only"), name
        assert e.is_sensitive == (k.type == "password"), name
        if k.type == "password":
            assert e.value is None, name
        elif e.source == ConfigSource.DEFAULT_CONFIG.value and name not in ODRADEK_DEFAULTS:
            assert e.value == k.default, name
            compared += 1
    assert compared > 250
    relogin = entries["sasl.kerberos.min.time.before.relogin"]
    assert relogin.value == "90000"
    assert relogin.source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert not relogin.is_read_only
    assert entries["sasl.kerberos.service.name"].value == "kafka"
    io = entries["num.io.threads"]
    assert (io.value, io.source) == ("8", ConfigSource.STATIC_BROKER_CONFIG.value)
    assert entries["ssl.truststore.location"].value is None
    assert entries["log.cleaner.io.max.bytes.per.second"].value == "1.7976931348623157E308"


def test_confluent_alter_of_a_missing_feature_stores_it(broker: BrokerProcess,
                                                         admin: AdminClient) -> None:
    relogin = "sasl.kerberos.min.time.before.relogin"
    assert alter_error(admin, relogin, "120000") is None
    try:
        e = describe_broker(admin)[relogin]
        assert (e.value, e.source) == ("120000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        # logged before the answer was sent
        assert (f"broker config {relogin} is stored but has no effect: this SASL setting is "
                "not supported by Odradek yet") in broker.stderr(), broker.describe()
    finally:
        assert alter_error(admin, relogin, None) is None
    e = describe_broker(admin)[relogin]
    assert (e.value, e.source) == ("90000", ConfigSource.STATIC_BROKER_CONFIG.value)


def test_confluent_alter_of_a_read_only_key_is_refused_as_kafka_does(
    admin: AdminClient,
) -> None:
    error = alter_error(admin, "auto.create.topics.enable", "false")
    assert error.code() == confluent_kafka.KafkaError.INVALID_CONFIG
    assert error.str().endswith(
        "Cannot update these configs dynamically: Set(auto.create.topics.enable)")
    error = alter_error(admin, "ssl.keystore.location", "/etc/k.jks")
    assert error.code() == confluent_kafka.KafkaError.INVALID_CONFIG
    assert "only per-listener using the listener prefix: Set(ssl.keystore.location)" in (
        error.str())


def test_confluent_alter_of_a_served_dynamic_key_takes_effect(admin: AdminClient) -> None:
    assert alter_error(admin, "log.retention.bytes", "123456789") is None
    try:
        e = describe_broker(admin)["log.retention.bytes"]
        assert (e.value, e.source) == ("123456789", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        topic = f"bc-{uuid.uuid4().hex[:8]}"
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

        for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
            f.result(30)
        (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
        retention = future.result(30)["retention.bytes"]
        assert (retention.value, retention.source) == (
            "123456789", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    finally:
        assert alter_error(admin, "log.retention.bytes", None) is None
    e = describe_broker(admin)["log.retention.bytes"]
    assert (e.value, e.source) == ("-1", ConfigSource.DEFAULT_CONFIG.value)


# -- the Java client ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def java() -> JavaRunner:
    return java_client()


def test_java_describe_and_alter_broker_configs(broker: BrokerProcess,
                                                java: JavaRunner) -> None:
    res = java(broker.bootstrap, "broker-configs", "unused", "0",
               "set:sasl.kerberos.min.time.before.relogin=120000",
               "delete:sasl.kerberos.min.time.before.relogin",
               "set:auto.create.topics.enable=false",
               "set:log.cleaner.min.cleanable.ratio=0.3",
               "delete:log.cleaner.min.cleanable.ratio")
    assert res.ok, res.describe()
    configs = res.summary["configs"]
    assert set(KAFKA_BROKER_CONFIGS) <= set(configs)
    compared = 0
    for name, k in KAFKA_BROKER_CONFIGS.items():
        e = configs[name]
        assert e["type"] == JAVA_TYPES[k.type], (name, e)
        assert e["read_only"] == (k.update_mode == "read-only"), name
        assert e["sensitive"] == (k.type == "password"), name
        assert e["documented"], name
        if e["source"] == "DEFAULT_CONFIG" and k.type != "password" and (
                name not in ODRADEK_DEFAULTS):
            assert e["value"] == k.default, name
            compared += 1
    assert compared > 250
    relogin = configs["sasl.kerberos.min.time.before.relogin"]
    assert relogin["value"] == "90000" and relogin["source"] == "STATIC_BROKER_CONFIG"
    assert relogin["synonyms"] == [
        ["sasl.kerberos.min.time.before.relogin", "90000", "STATIC_BROKER_CONFIG"],
        ["sasl.kerberos.min.time.before.relogin", "60000", "DEFAULT_CONFIG"]]
    assert configs["ssl.key.password"]["value"] is None
    altered = res.summary["altered"]
    # stored as Kafka stores it, with no effect, and removed
    assert altered["set:sasl.kerberos.min.time.before.relogin=120000"]["error"] is None
    assert altered["delete:sasl.kerberos.min.time.before.relogin"]["error"] is None
    static = altered["set:auto.create.topics.enable=false"]
    assert static["error"] == "InvalidConfigurationException", static
    assert static["message"].endswith(
        "Cannot update these configs dynamically: Set(auto.create.topics.enable)")
    assert altered["set:log.cleaner.min.cleanable.ratio=0.3"]["error"] is None
    assert altered["delete:log.cleaner.min.cleanable.ratio"]["error"] is None
    # the change took effect, and was undone: describe again
    res = java(broker.bootstrap, "broker-configs", "unused", "0")
    assert res.ok, res.describe()
    ratio = res.summary["configs"]["log.cleaner.min.cleanable.ratio"]
    assert (ratio["value"], ratio["source"], ratio["type"]) == ("0.5", "DEFAULT_CONFIG", "DOUBLE")


# -- kafka-python -------------------------------------------------------------------------------
def test_kafka_python_describes_every_kafka_key(broker: BrokerProcess) -> None:
    from kafka.admin import ConfigResource as KpResource  # type: ignore[import-untyped]
    from kafka.admin import ConfigResourceType, KafkaAdminClient  # type: ignore[import-untyped]

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        described = admin.describe_configs([KpResource(ConfigResourceType.BROKER, "0")],
                                           include_synonyms=True, config_filter="all")
    finally:
        admin.close()
    configs = described["broker"]["0"]
    assert set(KAFKA_BROKER_CONFIGS) <= set(configs)
    for name, k in KAFKA_BROKER_CONFIGS.items():
        e = configs[name]
        assert e["config_type"] == JAVA_TYPES[k.type], (name, e)
        assert e["read_only"] == (k.update_mode == "read-only"), name
        assert e["is_sensitive"] == (k.type == "password"), name
    relogin = configs["sasl.kerberos.min.time.before.relogin"]
    assert (relogin["value"], relogin["config_source"]) == ("90000", "STATIC_BROKER_CONFIG")
