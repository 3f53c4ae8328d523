"""Every broker config key of Kafka 3.9 (server/kafka_broker_configs.py and
server/kafka_config_support.py): the table, start-up reports, and DescribeConfigs /
IncrementalAlterConfigs / AlterConfigs on the BROKER resource over a real socket, compared
with the facts Kafka documents."""

from __future__ import annotations

import asyncio
import importlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.client.connection import BrokerConnection
from odradek.server.config import BROKER_CONFIGS, BrokerConfig, ConfigError
from odradek.server.handlers.configs import CONFIG_TYPES, java_double
from odradek.server.kafka_config_support import (
    KAFKA_BROKER_CONFIGS,
    ODRADEK_DEFAULTS,
    is_not_applicable,
    kafka_key,
    unserved_reason,
)
from odradek.testing import RunningBroker, running_broker
from tests._deadlines import expired

SET, DELETE, APPEND = 0, 1, 2
DEFAULT_CONFIG, STATIC_BROKER_CONFIG, DYNAMIC_BROKER_CONFIG = 5, 4, 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3


def send(rb: RunningBroker, request: Any) -> Any:
    async def go() -> Any:
        conn = await BrokerConnection.open(rb.bootstrap)
        try:
            return await conn.send(request)
        finally:
            await conn.close()

    return asyncio.run(go())


def describe(rb: RunningBroker, name: str = "0", keys: tuple[str, ...] | None = None,
             synonyms: bool = False) -> Any:
    m = importlib.import_module("kio.schema.describe_configs.v4.request")
    (result,) = send(rb, m.DescribeConfigsRequest(
        resources=(m.DescribeConfigsResource(resource_type=4, resource_name=name,
                                             configuration_keys=keys),),
        include_synonyms=synonyms, include_documentation=True)).results
    assert result.error_code == ErrorCode.none, result
    return {c.name: c for c in result.configs}


def incremental(rb: RunningBroker, name: str, ops: list[tuple[str, int, str | None]],
                validate_only: bool = False) -> Any:
    m = importlib.import_module("kio.schema.incremental_alter_configs.v1.request")
    (r,) = send(rb, m.IncrementalAlterConfigsRequest(
        resources=(m.AlterConfigsResource(resource_type=4, resource_name=name, configs=tuple(
            m.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops)),),
        validate_only=validate_only)).responses
    return r


@pytest.fixture(scope="module")
def rb() -> Iterator[RunningBroker]:
    with running_broker({"sasl.kerberos.service.name": "kafka"}) as broker:
        yield broker


# -- the table -------------------------------------------------------------------------------
def test_the_table_holds_kafka_39s_broker_keys() -> None:
    assert len(KAFKA_BROKER_CONFIGS) == 314
    assert KAFKA_BROKER_CONFIGS["sasl.kerberos.min.time.before.relogin"] == (
        "sasl.kerberos.min.time.before.relogin", "long", "60000", "per-broker")
    assert KAFKA_BROKER_CONFIGS["auto.create.topics.enable"][1:] == ("boolean", "true",
                                                                    "read-only")
    assert KAFKA_BROKER_CONFIGS["log.cleaner.threads"][1:] == ("int", "1", "cluster-wide")
    assert KAFKA_BROKER_CONFIGS["ssl.keystore.password"][1:] == ("password", None, "per-broker")
    assert KAFKA_BROKER_CONFIGS["log.segment.bytes"].default == "1073741824"
    assert KAFKA_BROKER_CONFIGS["log.cleaner.io.max.bytes.per.second"].default == (
        "1.7976931348623157E308")


def test_every_kafka_key_is_served_or_says_why_not() -> None:
    for name in KAFKA_BROKER_CONFIGS:
        reason = unserved_reason(name)
        assert (name in BROKER_CONFIGS) != (reason is not None), name
    assert unserved_reason("sasl.kerberos.min.time.before.relogin") == (
        "this SASL setting is not supported by Odradek yet (it serves PLAIN and SCRAM only)")
    assert "KRaft" in (unserved_reason("process.roles") or "")
    assert "tiered storage" in (unserved_reason("remote.log.storage.system.enable") or "")
    assert unserved_reason("ssl.keystore.location") is None  # served
    assert "TLS" in (unserved_reason("ssl.keymanager.algorithm") or "")
    assert is_not_applicable(unserved_reason("num.io.threads") or "")
    # read at start-up, not dynamically
    assert "start-up" in (unserved_reason("listener.name.sasl_ssl.plain.sasl.jaas.config") or "")
    k = kafka_key("listener.name.sasl_ssl.plain.sasl.jaas.config")
    assert k is not None and k.type == "password"
    assert unserved_reason("no.such.key") is None and kafka_key("no.such.key") is None


def test_doubles_are_written_as_java_writes_them() -> None:
    assert java_double(1.7976931348623157e308) == "1.7976931348623157E308"
    assert java_double(0.9) == "0.9"
    assert java_double(0.05) == "0.05"
    assert java_double(100.0) == "100.0"
    assert java_double(1e7) == "1.0E7"
    assert java_double(12345678.5) == "1.23456785E7"
    assert java_double(0.001) == "0.001"
    assert java_double(0.0001) == "1.0E-4"
    assert java_double(-2.5) == "-2.5"
    assert java_double(0.0) == "0.0"


# -- start-up --------------------------------------------------------------------------------
def test_server_properties_keys_of_missing_features_are_named(caplog: Any) -> None:
    config = BrokerConfig.load(overrides=[
        "sasl.kerberos.service.name=kafka", "sasl.kerberos.min.time.before.relogin=90000",
        "num.io.threads=8", "ssl.keymanager.algorithm=SunX509",
        "num.partitons=3", "process.roles=broker",
    ])
    assert config.unknown == ["num.partitons"]
    assert set(config.unserved) == {
        "sasl.kerberos.service.name", "sasl.kerberos.min.time.before.relogin", "num.io.threads",
        "ssl.keymanager.algorithm", "process.roles"}
    with caplog.at_level(logging.INFO, logger="odradek.server.config"):
        config.report_unknown()
    by_level = {(r.levelname, r.getMessage()) for r in caplog.records}
    assert ("WARNING", "configuration key 'sasl.kerberos.service.name' is ignored: this SASL "
            "setting is not supported by Odradek yet (it serves PLAIN and SCRAM only)") in by_level
    assert ("WARNING", "configuration key 'process.roles' is ignored: KRaft mode is not "
            "supported by Odradek (it runs as one embedded node or in ZooKeeper mode)") in by_level
    # Kafka's default value, or a key that does not apply: a note, not a warning.
    assert any(level == "INFO" and "'ssl.keymanager.algorithm'" in msg
               for level, msg in by_level)
    assert any(level == "INFO" and "'num.io.threads' is ignored: does not apply to Odradek"
               in msg for level, msg in by_level)
    assert ("WARNING", "unknown configuration key 'num.partitons' is ignored (did you mean "
            "num.partitions?)") in by_level
    assert not any("unknown" in msg and "sasl" in msg for _, msg in by_level)


def test_a_bad_value_of_an_unserved_kafka_key_refuses_to_start() -> None:
    with pytest.raises(ConfigError) as caught:
        BrokerConfig.load(overrides=["sasl.kerberos.min.time.before.relogin=soon"])
    assert str(caught.value) == ("Invalid value soon for configuration "
                                 "sasl.kerberos.min.time.before.relogin: Not a number of type LONG")


# -- DescribeConfigs ---------------------------------------------------------------------------
def test_describe_lists_every_kafka_key_as_kafka_documents_it(rb: RunningBroker) -> None:
    entries = describe(rb)
    assert set(KAFKA_BROKER_CONFIGS) <= set(entries)
    compared = 0
    for name, k in KAFKA_BROKER_CONFIGS.items():
        e = entries[name]
        assert e.config_type == CONFIG_TYPES[k.type], name
        assert e.read_only == (k.update_mode == "read-only"), name
        assert e.is_sensitive == (k.type == "password"), name
        assert e.documentation, name
        if k.type == "password":
            assert e.value is None, name
        elif e.config_source == DEFAULT_CONFIG and name not in ODRADEK_DEFAULTS:
            assert e.value == k.default, name
            compared += 1
    assert compared > 250
    relogin = entries["sasl.kerberos.min.time.before.relogin"]
    assert (relogin.value, relogin.config_source, relogin.read_only) == ("60000", 5, False)
    assert "this SASL setting is not supported by Odradek yet" in relogin.documentation
    # set in server.properties: the value given, from STATIC_BROKER_CONFIG
    service = entries["sasl.kerberos.service.name"]
    assert (service.value, service.config_source) == ("kafka", STATIC_BROKER_CONFIG)


def test_describe_synonyms_of_an_unserved_key(rb: RunningBroker) -> None:
    entries = describe(rb, keys=("sasl.kerberos.service.name", "ssl.keymanager.algorithm"),
                       synonyms=True)
    assert [(s.name, s.value, s.source) for s in entries["sasl.kerberos.service.name"].synonyms] \
        == [("sasl.kerberos.service.name", "kafka", STATIC_BROKER_CONFIG)]
    assert [(s.name, s.value, s.source) for s in entries["ssl.keymanager.algorithm"].synonyms] \
        == [("ssl.keymanager.algorithm", "SunX509", DEFAULT_CONFIG)]


# -- alter -----------------------------------------------------------------------------------
PREFIX = "Invalid config value for resource ConfigResource(type=BROKER, name='0'): "


@pytest.mark.parametrize(("key", "value", "message"), [
    ("auto.create.topics.enable", "false",
     "Cannot update these configs dynamically: Set(auto.create.topics.enable)"),
    ("ssl.keystore.location", "/k.jks",
     "These security configs can be dynamically updated only per-listener using the listener "
     "prefix: Set(ssl.keystore.location)"),
    ("sasl.kerberos.min.time.before.relogin", "soon",
     "Invalid value soon for configuration sasl.kerberos.min.time.before.relogin: Not a "
     "number of type LONG"),
    ("listeners", "PLAINTEXT://127.0.0.1:9999",
     "listeners: Odradek applies it only at start-up yet (set it in server.properties and "
     "restart)"),
    ("log.cleaner.threads", "3",
     "Log cleaner threads cannot be increased to more than double the current value 1"),
    ("max.connections.per.ip", "0",
     "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides "
     "is set"),
    ("listener.name.plaintext.ssl.keystore.location", "/k.jks",
     "listener.name.plaintext.ssl.keystore.location: this broker has no SSL or SASL_SSL "
     "listener named PLAINTEXT"),
    ("listener.name.plaintext.ssl.client.auth", "required",
     "listener.name.plaintext.ssl.client.auth: per-listener security configs are read from "
     "server.properties at start-up: of them only the keystore and truststore configs "
     "(ssl.keystore.*, ssl.key.password, ssl.truststore.*) can change dynamically in Odradek "
     "yet"),
])
def test_alter_answers_as_kafka_then_odradek(
    rb: RunningBroker, key: str, value: str, message: str
) -> None:
    r = incremental(rb, "0", [(key, SET, value)])
    assert r.error_code == ErrorCode.invalid_config
    assert r.error_message == PREFIX + message
    assert "unknown" not in r.error_message
    assert key not in rb.broker.metadata.broker_configs("0")


def test_per_broker_keys_cannot_be_cluster_defaults(rb: RunningBroker) -> None:
    r = incremental(rb, "", [("sasl.kerberos.min.time.before.relogin", SET, "90000")])
    assert r.error_code == ErrorCode.invalid_config
    assert r.error_message == (
        "Invalid config value for resource ConfigResource(type=BROKER, name=''): Cannot "
        "update these configs at default cluster level, broker id must be specified: "
        "Set(sasl.kerberos.min.time.before.relogin)")


@pytest.mark.parametrize(("name", "key", "value", "level"), [
    ("0", "sasl.kerberos.min.time.before.relogin", "90000", logging.WARNING),
    ("0", "remote.log.manager.copy.max.bytes.per.second", "1000", logging.WARNING),
    ("", "num.io.threads", "16", logging.INFO),  # does not apply: a note
    ("", "remote.log.manager.copy.max.bytes.per.second", "1000", logging.WARNING),
])
def test_unserved_keys_are_stored_as_kafka_stores_them(
    rb: RunningBroker, caplog: Any, name: str, key: str, value: str, level: int
) -> None:
    """As in server.properties: accepted, reported once (a warning naming the missing
    feature, a note for a key that does not apply), described as not served."""
    entity = name or "<default>"
    with caplog.at_level(logging.INFO, logger="odradek.server.handlers.configs"):
        r = incremental(rb, name, [(key, SET, value)])
        assert r.error_code == ErrorCode.none, r
    try:
        reason = unserved_reason(key)
        assert [(rec.levelno, rec.getMessage()) for rec in caplog.records
                if f"config {key} " in rec.getMessage()] == [
            (level, f"broker config {key} is stored but has no effect: {reason} (dynamic "
                    f"broker configs of {entity})")]
        assert rb.broker.metadata.broker_configs(entity)[key] == value
        e = describe(rb, keys=(key,))[key]
        source = DYNAMIC_BROKER_CONFIG if name else DYNAMIC_DEFAULT_BROKER_CONFIG
        assert (e.value, e.config_source) == (value, source)
        assert e.documentation == f"Kafka 3.9 broker config, not served by Odradek: {reason}"
        # validate_only checks it too
        r = incremental(rb, name, [(key, SET, value)], validate_only=True)
        assert r.error_code == ErrorCode.none, r
    finally:
        r = incremental(rb, name, [(key, DELETE, None)])
        assert r.error_code == ErrorCode.none
    assert key not in rb.broker.metadata.broker_configs(entity)


def test_append_to_an_unserved_list_key_starts_from_kafkas_default(rb: RunningBroker) -> None:
    r = incremental(rb, "0", [("sasl.kerberos.principal.to.local.rules", APPEND, "RULE:x")])
    assert r.error_code == ErrorCode.none, r
    try:
        assert rb.broker.metadata.broker_configs("0")[
            "sasl.kerberos.principal.to.local.rules"] == "DEFAULT,RULE:x"
    finally:
        r = incremental(rb, "0", [("sasl.kerberos.principal.to.local.rules", DELETE, None)])
        assert r.error_code == ErrorCode.none


def test_served_dynamic_key_takes_effect(rb: RunningBroker) -> None:
    r = incremental(rb, "0", [("log.cleaner.min.cleanable.ratio", SET, "0.25")])
    assert r.error_code == ErrorCode.none, r
    try:
        e = describe(rb, keys=("log.cleaner.min.cleanable.ratio",))[
            "log.cleaner.min.cleanable.ratio"]
        assert (e.value, e.config_source, e.config_type) == ("0.25", DYNAMIC_BROKER_CONFIG, 6)
        assert rb.broker.metadata.broker_defaults["log.cleaner.min.cleanable.ratio"] == 0.25
    finally:
        r = incremental(rb, "0", [("log.cleaner.min.cleanable.ratio", DELETE, None)])
        assert r.error_code == ErrorCode.none


def test_custom_keys_are_stored_as_kafka_stores_them(rb: RunningBroker) -> None:
    """Kafka allows keys that are not its own in a broker's dynamic configs (custom
    configs, e.g. for plug-ins): stored, described as sensitive with no value, no effect."""
    r = incremental(rb, "0", [("my.plugin.setting", SET, "42")])
    assert r.error_code == ErrorCode.none, r
    try:
        assert rb.broker.metadata.broker_configs("0")["my.plugin.setting"] == "42"
        e = describe(rb, keys=("my.plugin.setting",))["my.plugin.setting"]
        assert (e.value, e.is_sensitive, e.config_source, e.config_type) == (
            None, True, DYNAMIC_BROKER_CONFIG, 0)
    finally:
        r = incremental(rb, "0", [("my.plugin.setting", DELETE, None)])
        assert r.error_code == ErrorCode.none
    assert "my.plugin.setting" not in describe(rb)


# -- served dynamic keys take effect ------------------------------------------------------------
def wait_until(condition: Any, what: str, deadline_s: float = 30.0) -> None:
    started = time.monotonic()
    while not condition():
        assert not expired(started, deadline_s), f"not in time: {what}"
        time.sleep(0.02)


def test_log_cleaner_threads_change_at_runtime(rb: RunningBroker) -> None:
    cleaner = rb.broker.log_cleaner
    assert cleaner is not None and cleaner.num_threads == 1

    def alive() -> list[str]:  # this broker's cleaner threads (other brokers may run here)
        return sorted(t["name"] for t in cleaner.status()["threads"] if t["alive"])

    r = incremental(rb, "0", [("log.cleaner.threads", SET, "2"),
                              ("log.cleaner.backoff.ms", SET, "500")])
    assert r.error_code == ErrorCode.none, r
    try:
        wait_until(lambda: cleaner.num_threads == 2 and alive() == [
            "kafka-log-cleaner-thread-0", "kafka-log-cleaner-thread-1"], "two cleaner threads")
        assert cleaner.backoff_ms == 500
        e = describe(rb, keys=("log.cleaner.threads",))["log.cleaner.threads"]
        assert (e.value, e.config_source) == ("2", DYNAMIC_BROKER_CONFIG)
    finally:
        r = incremental(rb, "0", [("log.cleaner.threads", DELETE, None),
                                  ("log.cleaner.backoff.ms", DELETE, None)])
        assert r.error_code == ErrorCode.none, r
    wait_until(lambda: cleaner.num_threads == 1 and cleaner.backoff_ms == 15000,
               "the cleaner back to its static config")
    wait_until(lambda: alive() == ["kafka-log-cleaner-thread-0"], "one cleaner thread")
    # the threads that were stopped are gone, not just forgotten
    wait_until(lambda: sum(t.name == "log-cleaner-reconfigure" for t in threading.enumerate())
               == 0, "the reconfiguration finished")


def test_connection_limits_change_at_runtime(rb: RunningBroker) -> None:
    from tests.server.test_connection_quotas import _answers
    from tests.server.test_network import Client

    r = incremental(rb, "0", [("max.connections.per.ip", SET, "1")])
    assert r.error_code == ErrorCode.none, r

    async def limited() -> None:
        first = await Client.connect(rb.port)
        assert await _answers(first, 1)
        second = await Client.connect(rb.port)
        assert await second.closed_by_server()
        for client in (first, second):
            await client.close()

    quotas = rb.broker.servers[0].quotas
    try:
        assert quotas.limits.max_connections_per_ip == 1
        wait_until(lambda: quotas.get("127.0.0.1") == 0, "the alter's connection released")
        asyncio.run(limited())
    finally:
        # the next request needs the one slot: wait until the closed ones are released
        wait_until(lambda: quotas.get("127.0.0.1") == 0, "the test's connections released")
        r = incremental(rb, "0", [("max.connections.per.ip", DELETE, None)])
        assert r.error_code == ErrorCode.none, r
    assert rb.broker.servers[0].quotas.limits.max_connections_per_ip == 2**31 - 1

    async def unlimited() -> None:
        clients = [await Client.connect(rb.port) for _ in range(3)]
        for i, client in enumerate(clients):
            assert await _answers(client, i)
        for client in clients:
            await client.close()

    asyncio.run(unlimited())


def test_update_limits_wakes_a_waiting_acceptor_and_restarts_the_rate() -> None:
    from odradek.server.connection_quotas import ConnectionLimits, ConnectionQuotas

    quotas = ConnectionQuotas(ConnectionLimits(max_connections=1), clock=lambda: 0.0)
    woken: list[int] = []
    quotas.add_release_listener(lambda: woken.append(1))
    assert quotas.inc("127.0.0.1") is None and not quotas.slot_available()
    quotas.update_limits(ConnectionLimits(max_connections=2, max_connection_creation_rate=1))
    assert woken == [1] and quotas.slot_available()
    assert quotas.accept_delay() == 0.0 and quotas.accept_delay() > 0.0
    quotas.update_limits(ConnectionLimits(max_connections_per_ip_overrides={"127.0.0.1": 1}))
    assert quotas.inc("127.0.0.1") == 1 and quotas.accept_delay() == 0.0


def test_log_roll_jitter_hours_is_a_synonym_of_the_ms_key() -> None:
    assert BrokerConfig.load().log_defaults()["log.roll.jitter.ms"] == 0
    hours = BrokerConfig.load(overrides=["log.roll.jitter.hours=2"])
    assert hours.log_defaults()["log.roll.jitter.ms"] == 2 * 3600000
    assert hours.unserved == {} and hours.unknown == []
    both = BrokerConfig.load(overrides=["log.roll.jitter.hours=2", "log.roll.jitter.ms=5"])
    assert both.log_defaults()["log.roll.jitter.ms"] == 5
    with running_broker({"log.roll.jitter.hours": "1"}) as rb:
        e = describe(rb, keys=("log.roll.jitter.ms",), synonyms=True)["log.roll.jitter.ms"]
        assert (e.value, e.config_source) == ("3600000", STATIC_BROKER_CONFIG)
        assert [(s.name, s.value, s.source) for s in e.synonyms] == [
            ("log.roll.jitter.hours", "1", STATIC_BROKER_CONFIG),
            ("log.roll.jitter.hours", "0", DEFAULT_CONFIG)]
