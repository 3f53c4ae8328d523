"""Listeners and their security settings, validated as KafkaConfig validates them."""

from __future__ import annotations

import pytest

from odradek.server.config import BrokerConfig, ConfigError
from odradek.server.listener_security import listener_security

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret";')


def config(**raw: str) -> BrokerConfig:
    return BrokerConfig.from_raw({k.replace("_", "."): v for k, v in raw.items()})


def test_default_map_and_inter_broker_listener() -> None:
    c = config(listeners="PLAINTEXT://:9092,SSL://:9093,SASL_SSL://:9094",
               sasl_enabled_mechanisms="SCRAM-SHA-256")
    assert c.listener_protocols == {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL",
                                    "SASL_SSL": "SASL_SSL"}
    assert c.inter_broker_listener == "PLAINTEXT"


def test_custom_listener_names() -> None:
    c = BrokerConfig.from_raw({
        "listeners": "INTERNAL://:9092,EXTERNAL://:9093",
        "advertised.listeners": "INTERNAL://broker1:9092,EXTERNAL://kafka.example.com:443",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL",
        "inter.broker.listener.name": "internal",
        "sasl.enabled.mechanisms": "PLAIN",
    })
    assert c.listener_protocols == {"INTERNAL": "PLAINTEXT", "EXTERNAL": "SASL_SSL"}
    assert c.inter_broker_listener == "INTERNAL"


@pytest.mark.parametrize(("raw", "message"), [
    ({"listeners": "CLIENT://:9092"},
     "No security protocol defined for listener CLIENT"),
    ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"},
     "Each listener must have a different name"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9092"},
     "Each listener must have a different port"),
    ({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "SSL://h:9093"},
     "advertised.listeners listener names must be equal to or a subset of the ones defined "
     "in listeners. Found SSL"),
    ({"listeners": "SSL://:9093"},
     "inter.broker.listener.name must be a listener name defined in advertised.listeners"),
    ({"listeners": "PLAINTEXT://:9092", "inter.broker.listener.name": "PLAINTEXT",
      "security.inter.broker.protocol": "PLAINTEXT"},
     "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set."),
    ({"listeners": "PLAINTEXT://:9092", "inter.broker.listener.name": "REPLICATION"},
     "Listener with name REPLICATION defined in inter.broker.listener.name not found in "
     "listener.security.protocol.map."),
    ({"security.inter.broker.protocol": "TLS"}, "must be one of PLAINTEXT, SSL"),
    ({"listener.security.protocol.map": "A:KERBEROS"}, "is not a security protocol"),
    ({"listeners": "SASL_PLAINTEXT://:9092,PLAINTEXT://:9093"},
     "SASL mechanism GSSAPI (sasl.enabled.mechanisms of listener SASL_PLAINTEXT) is not "
     "supported by Odradek yet"),
    ({"ssl.client.auth": "sometimes"}, "must be one of none, requested, required"),
    ({"ssl.enabled.protocols": "TLSv1"}, "must list TLSv1.2 and/or TLSv1.3"),
    ({"ssl.principal.mapping.rules": "RULE:x"}, "Invalid rule"),
])
def test_invalid_listener_settings(raw: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        BrokerConfig.from_raw(raw)
    assert message in str(caught.value)


def test_per_listener_overrides_are_served() -> None:
    c = BrokerConfig.from_raw({
        "listeners": "PLAINTEXT://:9092,SASL_PLAINTEXT://:9093",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_plaintext.connections.max.reauth.ms": "60000",
    })
    assert not c.unserved and not c.unknown
    assert c.listener_value("SASL_PLAINTEXT", "sasl.enabled.mechanisms") == (
        "SCRAM-SHA-512", "PLAIN")
    assert c.listener_value("PLAINTEXT", "sasl.enabled.mechanisms") == ("PLAIN",)
    assert c.listener_value("SASL_PLAINTEXT", "sasl.jaas.config", mechanism="PLAIN") == JAAS
    assert c.listener_value("SASL_PLAINTEXT", "sasl.jaas.config") == ""
    security = listener_security(c, "SASL_PLAINTEXT")
    assert security.sasl is not None
    assert security.sasl.mechanisms == ("SCRAM-SHA-512", "PLAIN")
    assert security.sasl.plain_users == {"alice": "alice-secret"}
    assert security.sasl.max_reauth_ms == 60000
    assert security.sasl.failed_authentication_delay_ms == 100
    assert listener_security(c, "PLAINTEXT").sasl is None


def test_a_bad_per_listener_value_refuses_to_start() -> None:
    with pytest.raises(ConfigError, match=r"ssl\.client\.auth"):
        BrokerConfig.from_raw({"listener.name.ssl.ssl.client.auth": "sometimes"})


def test_plain_without_jaas_refuses_to_start() -> None:
    c = config(listeners="SASL_PLAINTEXT://:9092,PLAINTEXT://:9093",
               sasl_enabled_mechanisms="PLAIN")
    with pytest.raises(ConfigError, match=r"listener\.name\.sasl_plaintext\.plain\.sasl\.jaas"):
        listener_security(c, "SASL_PLAINTEXT")


def test_tls_listener_without_keystore_refuses_to_start() -> None:
    c = config(listeners="SSL://:9093,PLAINTEXT://:9092")
    with pytest.raises(ConfigError, match="needs a keystore"):
        listener_security(c, "SSL")
