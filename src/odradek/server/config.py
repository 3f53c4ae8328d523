"""Broker configuration: Kafka's ``server.properties`` names, types and defaults (KafkaConfig).

How it works: values come from, in increasing precedence, Kafka's defaults (the table
below and every topic config's broker-level key from :data:`TOPIC_CONFIGS`), a properties
file, then ``--override key=value``. Every value is parsed and validated up front: an
invalid value refuses to start with a message naming the key. Unknown keys are reported
(logged once at start with the nearest known key, and kept in :attr:`BrokerConfig.unknown`),
never silently dropped. Keys of Kafka's broker that Odradek does not serve
(:mod:`odradek.server.kafka_config_support`) are accepted, their values checked against
Kafka's type, and reported with the reason: the feature Odradek lacks (a warning, e.g.
"SASL is not supported by Odradek yet") or why the key does not apply (thread pools of the
JVM broker …).

Odradek's defaults differ from Kafka's in three places for the embedded single node
(``listeners`` binds 127.0.0.1:9092, ``log.dirs`` is ./data, and
``offsets.topic.replication.factor`` is 1), and in ``fetch.max.bytes`` (8 MiB, not 55
MiB, more for a request of many partitions while left at that default: consumers read
smaller answers faster;
:data:`odradek.server.kafka_config_support.ODRADEK_DEFAULTS` says why).
``group.initial.rebalance.delay.ms`` keeps Kafka's 3000; the shipped
``config/server.properties`` that ``make serve`` uses sets it to 0 for development, as
Kafka's own does, and so do the test harnesses (``odradek.testing``) and
``odradek dev-cluster``.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NamedTuple

from odradek.security.acl import KNOWN_AUTHORIZERS
from odradek.security.password_encoder import (
    AES_KEY_LENGTHS,
    CIPHER_ALGORITHMS,
    DEFAULT_CIPHER_ALGORITHM,
    DEFAULT_ITERATIONS,
    DEFAULT_KEY_LENGTH,
    KEY_FACTORY_ALGORITHMS,
    MAX_ITERATIONS,
    MIN_ITERATIONS,
)
from odradek.security.principal import parse_mapping_rules
from odradek.server.connection_quotas import INT_MAX, parse_per_ip_overrides
from odradek.server.kafka_config_support import (
    KAFKA_BROKER_CONFIGS,
    KafkaBrokerKey,
    is_not_applicable,
    kafka_key,
    unserved_reason,
)
from odradek.storage.config import (
    LONG_MAX,
    TOPIC_CONFIGS,
    ConfigDef,
    ConfigError,
    java_float,
    java_int,
    parse_value,
)

log = logging.getLogger(__name__)

__all__ = [
    "BROKER_CONFIGS", "BrokerConfig", "ConfigError", "Listener", "MetricsListener",
    "parse_kafka_value", "parse_metrics_listener", "parse_properties",
]


def _ge(minimum: int) -> Any:
    return lambda v: None if v >= minimum else f"must be at least {minimum}"


_METRICS_LISTENER = re.compile(
    r"^(?P<scheme>https?)://(?P<host>\[[^\]]*\]|[^:/\[\]]*):(?P<port>\d+)/?$")
#: Where an empty host binds: the page names every topic, group, user and client id.
METRICS_DEFAULT_HOST: Final = "127.0.0.1"


class MetricsListener(NamedTuple):
    """``metrics.listener``, parsed: ``https`` serves the page over TLS (``metrics.ssl.*``)."""

    scheme: str
    host: str
    port: int


def parse_metrics_listener(value: str) -> MetricsListener | None:
    """``http[s]://host:port`` -> MetricsListener (an empty host: loopback); empty -> None;
    anything else: ConfigError."""
    if not value.strip():
        return None
    m = _METRICS_LISTENER.match(value.strip())
    if not m or int(m["port"]) > 65535:
        raise ConfigError(
            f"invalid value for metrics.listener: {value!r}: expected http://host:port or "
            "https://host:port (port 0-65535; an empty host is 127.0.0.1; the page is "
            "served at /metrics)"
        )
    return MetricsListener(m["scheme"], m["host"].strip("[]") or METRICS_DEFAULT_HOST,
                           int(m["port"]))


def _metrics_listener(value: str) -> str | None:
    try:
        parse_metrics_listener(value)
    except ConfigError as exc:
        return str(exc).split(": ", 2)[-1]
    return None


SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Kafka's default, in its order
DEFAULT_PROTOCOL_MAP: Final = tuple(
    f"{p}:{p}" for p in ("SASL_SSL", "PLAINTEXT", "SSL", "SASL_PLAINTEXT"))


def _protocol(value: str) -> str | None:
    if value.upper() not in SECURITY_PROTOCOLS:
        return f"must be one of {', '.join(SECURITY_PROTOCOLS)}"
    return None


def parse_protocol_map(entries: Iterable[str]) -> dict[str, str]:
    """``listener.security.protocol.map`` -> {LISTENER: PROTOCOL}; ValueError if bad."""
    out: dict[str, str] = {}
    for entry in entries:
        name, sep, protocol = entry.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name:
            raise ValueError(f"{entry!r} is not LISTENER_NAME:SECURITY_PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"{protocol!r} of listener {name} is not a security protocol "
                             f"({', '.join(SECURITY_PROTOCOLS)})")
        if name in out:
            raise ValueError(f"listener {name} is mapped twice")
        out[name] = protocol
    return out


def _protocol_map(value: tuple[str, ...]) -> str | None:
    try:
        parse_protocol_map(value)
    except ValueError as exc:
        return str(exc)
    return None


def _tls_protocols(value: tuple[str, ...]) -> str | None:
    bad = [v for v in value if v not in ("TLSv1.2", "TLSv1.3")]
    if bad or not value:
        return "must list TLSv1.2 and/or TLSv1.3"
    return None


def _choice(*choices: str) -> Any:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}"


def _choice_ignoring_case(*choices: str) -> Any:
    """Kafka's ``CaseInsensitiveValidString``."""
    return lambda v: None if str(v).strip().lower() in choices else (
        f"must be one of {', '.join(choices)} (in any case)")


def _mapping_rules(value: str) -> str | None:
    try:
        parse_mapping_rules(value)
    except ValueError as exc:
        return str(exc)
    return None


def _per_ip_overrides(value: str) -> str | None:
    try:
        parse_per_ip_overrides(value)
    except ValueError as exc:
        return str(exc)
    return None


def _authorizer(value: str) -> str | None:
    if value and value not in KNOWN_AUTHORIZERS:
        return ("Odradek cannot load Java classes: use one of "
                + ", ".join(sorted(KNOWN_AUTHORIZERS)))
    return None


_OWN: tuple[ConfigDef, ...] = (
    ConfigDef("broker.id", "int", 0, None, "this broker's id", _ge(0)),
    ConfigDef("node.id", "int", -1, None, "alias of broker.id (KRaft name)", None),
    ConfigDef("listeners", "list", ("PLAINTEXT://127.0.0.1:9092",), None, "listen addresses"),
    ConfigDef("advertised.listeners", "list", (), None, "addresses given to clients"),
    ConfigDef("listener.security.protocol.map", "list", DEFAULT_PROTOCOL_MAP, None,
              "listener name -> security protocol (NAME:PROTOCOL,...)", _protocol_map),
    ConfigDef("inter.broker.listener.name", "string", "", None,
              "the listener brokers use to reach each other (empty: the one named after "
              "security.inter.broker.protocol)"),
    ConfigDef("security.inter.broker.protocol", "string", "PLAINTEXT", None,
              "the security protocol between brokers (when inter.broker.listener.name is "
              "not set)", _protocol),
    ConfigDef("ssl.keystore.type", "string", "JKS", None,
              "PEM or PKCS12 (Kafka's default JKS cannot be read)"),
    ConfigDef("ssl.keystore.location", "string", "", None, "the broker's key and certificate"),
    ConfigDef("ssl.keystore.password", "password", "", None, "password of the keystore"),
    ConfigDef("ssl.key.password", "password", "", None, "password of the private key"),
    ConfigDef("ssl.keystore.key", "password", "", None,
              "the private key in PEM, inline (KIP-651; ssl.keystore.type=PEM)"),
    ConfigDef("ssl.keystore.certificate.chain", "password", "", None,
              "the certificate chain in PEM, inline (KIP-651; ssl.keystore.type=PEM)"),
    ConfigDef("ssl.truststore.type", "string", "JKS", None,
              "PEM or PKCS12 (Kafka's default JKS cannot be read)"),
    ConfigDef("ssl.truststore.location", "string", "", None,
              "the CAs client certificates must chain to"),
    ConfigDef("ssl.truststore.password", "password", "", None, "password of the truststore"),
    ConfigDef("ssl.truststore.certificates", "password", "", None,
              "trusted certificates in PEM, inline (KIP-651; ssl.truststore.type=PEM)"),
    ConfigDef("ssl.enabled.protocols", "list", ("TLSv1.2", "TLSv1.3"), None,
              "TLS versions accepted", _tls_protocols),
    ConfigDef("ssl.cipher.suites", "list", (), None,
              "cipher suites of TLSv1.2 (OpenSSL or IANA names; empty: the defaults)"),
    ConfigDef("ssl.client.auth", "string", "none", None,
              "client certificates: none, requested or required",
              _choice("none", "requested", "required")),
    ConfigDef("ssl.principal.mapping.rules", "string", "DEFAULT", None,
              "certificate subject -> principal name (DEFAULT, RULE:pattern/replacement/[LU])",
              _mapping_rules),
    ConfigDef("sasl.enabled.mechanisms", "list", ("GSSAPI",), None,
              "SASL mechanisms of SASL listeners (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"),
    ConfigDef("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI", None,
              "the SASL mechanism brokers authenticate to each other with (PLAIN, "
              "SCRAM-SHA-256, SCRAM-SHA-512)"),
    ConfigDef("sasl.jaas.config", "password", "", None,
              "JAAS login module configuration (PlainLoginModule's user_<name> entries)"),
    ConfigDef("sasl.server.max.receive.size", "int", 524288, None,
              "largest SASL token before authentication", _ge(1)),
    ConfigDef("connections.max.reauth.ms", "long", 0, None,
              "SASL sessions last at most this long before re-authentication (KIP-368; "
              "0: forever)", _ge(0)),
    ConfigDef("connection.failed.authentication.delay.ms", "int", 100, None,
              "how long a failed authentication waits before its answer", _ge(0)),
    ConfigDef("log.dirs", "list", ("./data",), None, "data directories"),
    ConfigDef("log.dir", "string", "", None, "single data directory (log.dirs wins)"),
    ConfigDef("num.partitions", "int", 1, None, "partitions of auto-created topics", _ge(1)),
    ConfigDef("zookeeper.connect", "string", "", None,
              "host:port[,host:port...][/chroot] of ZooKeeper: cluster mode; empty: the "
              "embedded single node"),
    ConfigDef("zookeeper.session.timeout.ms", "int", 18000, None,
              "ZooKeeper session timeout: a broker silent this long leaves the cluster", _ge(1)),
    ConfigDef("zookeeper.connection.timeout.ms", "int", -1, None,
              "how long to wait for the first ZooKeeper connection (-1: the session timeout)"),
    ConfigDef("zookeeper.set.acl", "boolean", False, None,
              "znodes get Kafka's secure ACLs (creator all, world read except credentials); "
              "needs SASL credentials from the JAAS file of -Djava.security.auth.login.config "
              "in KAFKA_OPTS"),
    # Mutual TLS to ZooKeeper (KIP-515): each unset key falls back to the ZooKeeper client's
    # system property in KAFKA_OPTS (cluster/zk_security.py), as in Kafka.
    ConfigDef("zookeeper.ssl.client.enable", "boolean", False, None,
              "speak TLS to ZooKeeper (its secureClientPort); needs zookeeper.clientCnxnSocket="
              "org.apache.zookeeper.ClientCnxnSocketNetty"),
    ConfigDef("zookeeper.clientCnxnSocket", "string", "", None,
              "org.apache.zookeeper.ClientCnxnSocketNetty with TLS to ZooKeeper"),
    ConfigDef("zookeeper.ssl.keystore.location", "string", "", None,
              "the broker's client key and certificate for ZooKeeper (PEM or PKCS12)"),
    ConfigDef("zookeeper.ssl.keystore.password", "password", "", None,
              "password of that keystore and of its key"),
    ConfigDef("zookeeper.ssl.keystore.type", "string", "", None,
              "PEM or PKCS12 (empty: told by the file's extension)"),
    ConfigDef("zookeeper.ssl.truststore.location", "string", "", None,
              "the CAs ZooKeeper's certificate must chain to (PEM or PKCS12)"),
    ConfigDef("zookeeper.ssl.truststore.password", "password", "", None,
              "password of that truststore"),
    ConfigDef("zookeeper.ssl.truststore.type", "string", "", None,
              "PEM or PKCS12 (empty: told by the file's extension)"),
    ConfigDef("zookeeper.ssl.protocol", "string", "TLSv1.2", None,
              "the TLS version to ZooKeeper when zookeeper.ssl.enabled.protocols is empty"),
    ConfigDef("zookeeper.ssl.enabled.protocols", "list", (), None,
              "TLS versions offered to ZooKeeper (empty: zookeeper.ssl.protocol)"),
    ConfigDef("zookeeper.ssl.cipher.suites", "list", (), None,
              "TLSv1.2 cipher suites offered to ZooKeeper (empty: the defaults)"),
    ConfigDef("zookeeper.ssl.endpoint.identification.algorithm", "string", "HTTPS", None,
              "HTTPS: ZooKeeper's certificate must name the host of zookeeper.connect; "
              "empty: not checked"),
    ConfigDef("broker.rack", "string", "", None,
              "this broker's rack: replicas of a partition are spread over racks"),
    ConfigDef("replica.high.watermark.checkpoint.interval.ms", "long", 5000, None,
              "how often high watermarks are saved to replication-offset-checkpoint", _ge(1)),
    ConfigDef("max.broker.partitions", "int", 2**31 - 1, None,
              "partition replicas this broker will hold (KIP-578); the open-files limit "
              "lowers it further", _ge(1)),
    ConfigDef("default.replication.factor", "int", 1, None, "replication of auto-created topics",
              _ge(1)),
    ConfigDef("auto.create.topics.enable", "boolean", True, None, "create topics on first use"),
    ConfigDef("delete.topic.enable", "boolean", True, None, "allow DeleteTopics"),
    ConfigDef("socket.request.max.bytes", "int", 104857600, None, "largest request", _ge(1)),
    ConfigDef("socket.send.buffer.bytes", "int", 102400, None, "SO_SNDBUF, -1 = OS default"),
    ConfigDef("socket.receive.buffer.bytes", "int", 102400, None, "SO_RCVBUF, -1 = OS default"),
    ConfigDef("socket.listen.backlog.size", "int", 50, None, "listen backlog", _ge(1)),
    ConfigDef("quota.window.num", "int", 11, None,
              "samples kept to measure client quota rates (KIP-13)", _ge(1)),
    ConfigDef("quota.window.size.seconds", "int", 1, None,
              "time span of each client quota sample", _ge(1)),
    ConfigDef("controller.quota.window.num", "int", 11, None,
              "samples kept to measure controller mutation rates (KIP-599)", _ge(1)),
    ConfigDef("controller.quota.window.size.seconds", "int", 1, None,
              "time span of each controller mutation rate sample", _ge(1)),
    ConfigDef("queued.max.request.bytes", "long", 536870912, None,
              "bytes of requests being received or in flight broker-wide before reading "
              "pauses (Kafka's default -1, unbounded, is allowed; docs/operations.md)",
              lambda v: None if v == -1 or v > 0 else "must be -1 or positive"),
    ConfigDef("queued.max.requests", "int", 500, None, "in-flight requests per connection",
              _ge(1)),
    ConfigDef("connections.max.idle.ms", "long", 600000, None, "idle connection timeout"),
    ConfigDef("max.connections", "int", INT_MAX, None,
              "connections the broker holds; more wait to be accepted (KIP-402)", _ge(0)),
    ConfigDef("max.connections.per.ip", "int", INT_MAX, None,
              "connections one address holds; more are closed at once", _ge(0)),
    ConfigDef("max.connections.per.ip.overrides", "string", "", None,
              "per-host maxima, host:count,host:count", _per_ip_overrides),
    ConfigDef("max.connection.creation.rate", "int", INT_MAX, None,
              "new connections a second, broker-wide; accepting waits (KIP-612)", _ge(0)),
    ConfigDef("fetch.max.bytes", "int", 8 << 20, None,
              "cap on a fetch response (Kafka's default is 55 MiB; see ODRADEK_DEFAULTS)",
              _ge(0)),
    ConfigDef("log.retention.hours", "int", 168, None, "retention in hours"),
    ConfigDef("log.retention.minutes", "int", -2, None, "retention in minutes (wins over hours)"),
    ConfigDef("log.roll.hours", "int", 168, None, "segment age in hours", _ge(1)),
    ConfigDef("log.roll.jitter.hours", "int", 0, None,
              "segment roll jitter in hours (log.roll.jitter.ms wins)", _ge(0)),
    ConfigDef("log.retention.check.interval.ms", "long", 300000, None, "retention check period",
              _ge(1)),
    ConfigDef("log.flush.scheduler.interval.ms", "long", LONG_MAX, None, "flush check period",
              _ge(1)),
    ConfigDef("log.flush.offset.checkpoint.interval.ms", "int", 60000, None,
              "recovery point checkpoint period", _ge(1)),
    ConfigDef("log.flush.start.offset.checkpoint.interval.ms", "int", 60000, None,
              "log start offset checkpoint period", _ge(1)),
    ConfigDef("offsets.topic.num.partitions", "int", 50, None, "__consumer_offsets partitions",
              _ge(1)),
    ConfigDef("offsets.topic.replication.factor", "int", 1, None,
              "__consumer_offsets replication (Kafka default 3; 1 for a single node)", _ge(1)),
    ConfigDef("offsets.topic.segment.bytes", "int", 104857600, None,
              "__consumer_offsets segment size", _ge(1)),
    ConfigDef("offsets.retention.minutes", "int", 10080, None, "committed offset retention",
              _ge(1)),
    ConfigDef("offsets.retention.check.interval.ms", "long", 600000, None,
              "offset expiry check period", _ge(1)),
    ConfigDef("offsets.commit.timeout.ms", "int", 5000, None, "offset commit wait", _ge(1)),
    ConfigDef("offset.metadata.max.bytes", "int", 4096, None, "commit metadata size"),
    ConfigDef("group.initial.rebalance.delay.ms", "int", 3000, None,
              "delay of a new group's first rebalance (0 in config/server.properties)",
              _ge(0)),
    ConfigDef("group.min.session.timeout.ms", "int", 6000, None, "smallest session timeout"),
    ConfigDef("group.max.session.timeout.ms", "int", 1800000, None, "largest session timeout"),
    ConfigDef("group.max.size", "int", 2147483647, None, "members per group", _ge(1)),
    # the consumer group protocol (KIP-848); _check_consumer_group relates them
    ConfigDef("group.consumer.session.timeout.ms", "int", 45000, None,
              "consumer group member session timeout (KIP-848)", _ge(1)),
    ConfigDef("group.consumer.min.session.timeout.ms", "int", 45000, None,
              "smallest group.consumer.session.timeout.ms", _ge(1)),
    ConfigDef("group.consumer.max.session.timeout.ms", "int", 60000, None,
              "largest group.consumer.session.timeout.ms", _ge(1)),
    ConfigDef("group.consumer.heartbeat.interval.ms", "int", 5000, None,
              "consumer group member heartbeat interval (KIP-848)", _ge(1)),
    ConfigDef("group.consumer.min.heartbeat.interval.ms", "int", 5000, None,
              "smallest group.consumer.heartbeat.interval.ms", _ge(1)),
    ConfigDef("group.consumer.max.heartbeat.interval.ms", "int", 15000, None,
              "largest group.consumer.heartbeat.interval.ms", _ge(1)),
    ConfigDef("group.consumer.max.size", "int", 2147483647, None,
              "members per consumer group (KIP-848)", _ge(1)),
    ConfigDef("group.consumer.assignors", "list",
              ("org.apache.kafka.coordinator.group.assignor.UniformAssignor",
               "org.apache.kafka.coordinator.group.assignor.RangeAssignor"), None,
              "server-side assignors, the first the default: uniform and range, by name or "
              "by Kafka's class name"),
    ConfigDef("group.consumer.migration.policy", "string", "bidirectional", None,
              "online migration between classic and consumer groups: disabled, upgrade, "
              "downgrade or bidirectional (case-insensitive; Kafka 4.0's default)",
              _choice_ignoring_case("disabled", "upgrade", "downgrade", "bidirectional")),
    ConfigDef("producer.id.expiration.ms", "int", 86400000, None, "idle producer id expiry"),
    ConfigDef("transaction.state.log.num.partitions", "int", 50, None,
              "__transaction_state partitions", _ge(1)),
    ConfigDef("transaction.state.log.replication.factor", "int", 1, None,
              "__transaction_state replication (Kafka default 3; 1 for a single node)", _ge(1)),
    ConfigDef("transaction.state.log.min.isr", "int", 1, None,
              "__transaction_state min.insync.replicas (Kafka default 2; 1 for a single node)",
              _ge(1)),
    ConfigDef("transaction.state.log.segment.bytes", "int", 104857600, None,
              "__transaction_state segment size", _ge(1)),
    ConfigDef("transaction.state.log.load.buffer.size", "int", 5242880, None,
              "bytes read per step when loading __transaction_state", _ge(1)),
    ConfigDef("transaction.max.timeout.ms", "int", 900000, None,
              "largest transaction.timeout.ms a producer may ask for", _ge(1)),
    ConfigDef("transactional.id.expiration.ms", "int", 604800000, None,
              "an idle transactional id is removed after this long", _ge(1)),
    ConfigDef("transaction.partition.verification.enable", "boolean", True, None,
              "leaders verify a producer's first transactional append on a partition with "
              "the transaction coordinator (KIP-890)"),
    ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000,
              None, "how often transactions past their timeout are aborted", _ge(1)),
    ConfigDef("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000,
              None, "how often expired transactional ids are removed", _ge(1)),
    ConfigDef("max.incremental.fetch.session.cache.slots", "int", 1000, None,
              "fetch sessions kept (KIP-227)", _ge(0)),
    ConfigDef("min.incremental.fetch.session.eviction.ms", "int", 120000, None,
              "idle time after which a fetch session may be evicted (KIP-227)", _ge(0)),
    ConfigDef("replica.lag.time.max.ms", "long", 30000, None,
              "a follower not caught up for this long leaves the ISR", _ge(1)),
    ConfigDef("replica.fetch.max.bytes", "int", 1048576, None,
              "bytes a follower fetches per partition", _ge(0)),
    ConfigDef("replica.fetch.response.max.bytes", "int", 10485760, None,
              "bytes a follower fetches per request", _ge(0)),
    ConfigDef("replica.fetch.min.bytes", "int", 1, None,
              "bytes a follower's fetch waits for", _ge(1)),
    ConfigDef("replica.fetch.wait.max.ms", "int", 500, None,
              "how long a follower's fetch waits for data", _ge(0)),
    ConfigDef("replica.fetch.backoff.ms", "int", 1000, None,
              "pause of a follower after a fetch error", _ge(0)),
    ConfigDef("replica.socket.timeout.ms", "int", 30000, None,
              "how long a follower waits for its leader's answer", _ge(1)),
    ConfigDef("leader.replication.throttled.rate", "long", LONG_MAX, None,
              "bytes/s a leader sends to followers of throttled replicas (KIP-73)", _ge(0)),
    ConfigDef("follower.replication.throttled.rate", "long", LONG_MAX, None,
              "bytes/s a follower fetches for throttled replicas (KIP-73)", _ge(0)),
    ConfigDef("auto.leader.rebalance.enable", "boolean", True, None,
              "the controller moves leadership back to preferred replicas"),
    ConfigDef("leader.imbalance.check.interval.seconds", "long", 300, None,
              "how often the controller checks leadership imbalance", _ge(1)),
    ConfigDef("leader.imbalance.per.broker.percentage", "int", 10, None,
              "share of a broker's preferred partitions led elsewhere that triggers a "
              "rebalance", _ge(0)),
    ConfigDef("controlled.shutdown.enable", "boolean", True, None,
              "a stopping broker hands its leaderships over before it closes"),
    ConfigDef("controlled.shutdown.max.retries", "int", 3, None,
              "attempts of a controlled shutdown", _ge(0)),
    ConfigDef("controlled.shutdown.retry.backoff.ms", "long", 5000, None,
              "pause between controlled shutdown attempts", _ge(0)),
    ConfigDef("password.encoder.secret", "password", "", None,
              "the secret dynamic password configs are encrypted with in the metadata store "
              "(Kafka's; without it they are refused)"),
    ConfigDef("password.encoder.old.secret", "password", "", None,
              "the secret before password.encoder.secret: stored passwords it opens are "
              "encrypted again with the new one at start"),
    ConfigDef("password.encoder.keyfactory.algorithm", "string", "", None,
              "PBKDF2 of the secret (empty: PBKDF2WithHmacSHA512)",
              _choice("", *KEY_FACTORY_ALGORITHMS)),
    ConfigDef("password.encoder.cipher.algorithm", "string", DEFAULT_CIPHER_ALGORITHM, None,
              "the cipher of dynamic password configs", _choice(*CIPHER_ALGORITHMS)),
    ConfigDef("password.encoder.key.length", "int", DEFAULT_KEY_LENGTH, None,
              "bits of the key derived from the secret (an AES key: 128, 192, 256)",
              lambda v: None if v in AES_KEY_LENGTHS else "must be 128, 192 or 256"),
    ConfigDef("password.encoder.iterations", "int", DEFAULT_ITERATIONS, None,
              "PBKDF2 iterations of the key",
              lambda v: None if MIN_ITERATIONS <= v <= MAX_ITERATIONS
              else f"must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}"),
    ConfigDef("metrics.listener", "string", "", None,
              "http[s]://host:port of the Prometheus /metrics endpoint (empty: none; an empty "
              "host: 127.0.0.1; needs the metrics extra)", _metrics_listener),
    ConfigDef("metrics.basic.auth.file", "string", "", None,
              "file of user:password lines (mode 0600) the metrics page asks for with HTTP "
              "basic auth (empty: no login)"),
    ConfigDef("metrics.ssl.keystore.type", "string", "PEM", None,
              "the metrics page's keystore: PEM or PKCS12 (https:// metrics.listener)"),
    ConfigDef("metrics.ssl.keystore.location", "string", "", None,
              "the metrics page's key and certificate chain (https:// metrics.listener)"),
    ConfigDef("metrics.ssl.keystore.password", "password", "", None,
              "password of the metrics page's PKCS12 keystore"),
    ConfigDef("metrics.ssl.key.password", "password", "", None,
              "password of the metrics page's private key (an encrypted PEM key)"),
    ConfigDef("metrics.ssl.truststore.type", "string", "PEM", None,
              "the metrics page's truststore: PEM or PKCS12"),
    ConfigDef("metrics.ssl.truststore.location", "string", "", None,
              "the CAs scrapers' certificates must chain to (metrics.ssl.client.auth)"),
    ConfigDef("metrics.ssl.truststore.password", "password", "", None,
              "password of the metrics page's PKCS12 truststore"),
    ConfigDef("metrics.ssl.client.auth", "string", "none", None,
              "scrapers' certificates: none, requested or required (mutual TLS)",
              _choice("none", "requested", "required")),
    ConfigDef("metrics.ssl.enabled.protocols", "list", ("TLSv1.2", "TLSv1.3"), None,
              "TLS versions the metrics page accepts", _tls_protocols),
    ConfigDef("event.loop.stall.threshold.ms", "long", 1000, None,
              "the event-loop watchdog: a loop held this long logs a WARNING with its stack "
              "and request, and counts a stall (0: off)", _ge(0)),
    ConfigDef("authorizer.class.name", "string", "", None,
              "the ACL authorizer: kafka.security.authorizer.AclAuthorizer (or "
              "kafka.security.auth.SimpleAclAuthorizer, "
              "org.apache.kafka.metadata.authorizer.StandardAuthorizer, "
              "odradek.security.acl.AclAuthorizer); empty: nothing is checked",
              _authorizer),
    ConfigDef("super.users", "string", "", None,
              "principals allowed everything, separated by ';' (User:admin;User:broker)"),
    ConfigDef("allow.everyone.if.no.acl.found", "boolean", False, None,
              "a resource without any ACL is open to everyone"),
    ConfigDef("log.cleaner.enable", "boolean", True, None, "run the log cleaner"),
    ConfigDef("log.cleaner.threads", "int", 1, None, "cleaner threads", _ge(0)),
    ConfigDef("log.cleaner.backoff.ms", "long", 15000, None, "cleaner idle sleep", _ge(0)),
    ConfigDef("log.cleaner.dedupe.buffer.size", "long", 134217728, None,
              "offset map memory across cleaner threads", _ge(0)),
    ConfigDef("log.cleaner.io.buffer.size", "int", 524288, None, "cleaner I/O buffers", _ge(0)),
    ConfigDef("log.cleaner.io.max.bytes.per.second", "double", 1.7976931348623157e308, None,
              "cleaner I/O throttle"),
    ConfigDef("log.cleaner.io.buffer.load.factor", "double", 0.9, None, "offset map load factor"),
)

BROKER_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in _OWN}
_LISTENER_SECURITY_KEYS: frozenset[str] = frozenset(
    d.name for d in _OWN
    if d.name.startswith(("ssl.", "sasl.", "connections.max.reauth", "connection.failed"))
)
for _topic_def in TOPIC_CONFIGS.values():
    if _topic_def.broker_key and _topic_def.broker_key not in BROKER_CONFIGS:
        BROKER_CONFIGS[_topic_def.broker_key] = ConfigDef(
            _topic_def.broker_key, _topic_def.type, _topic_def.default, None,
            f"default of topic config {_topic_def.name}: {_topic_def.doc}", _topic_def.validator,
        )
# Kafka's broker default for retention is expressed in hours; the ms key has no default.
BROKER_CONFIGS["log.retention.ms"] = ConfigDef(
    "log.retention.ms", "long", None, None, "retention in ms (wins over minutes and hours)"
)
BROKER_CONFIGS["log.roll.ms"] = ConfigDef(
    "log.roll.ms", "long", None, None, "segment age in ms (wins over log.roll.hours)"
)
BROKER_CONFIGS["log.roll.jitter.ms"] = ConfigDef(
    "log.roll.jitter.ms", "long", None, None,
    "random jitter subtracted from the segment age, in ms (wins over log.roll.jitter.hours)",
    _ge(0),
)

_LISTENER = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)://(?P<host>\[[^\]]*\]|[^:]*):(?P<port>\d+)$")


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Listener:
        m = _LISTENER.match(text.strip())
        if not m:
            raise ConfigError(f"invalid listener {text!r}: expected NAME://host:port")
        host = m["host"].strip("[]")
        port = int(m["port"])
        if not 0 <= port <= 65535:
            raise ConfigError(f"invalid listener {text!r}: port out of range")
        return cls(m["name"].upper(), host, port)


_SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_UNSERVED_MECHANISMS: Final = ("GSSAPI", "OAUTHBEARER")
_PER_LISTENER = re.compile(r"^listener\.name\.[A-Za-z0-9_]+\.(?:(?P<mech>[a-z0-9-]+)\.)?"
                           r"(?P<key>(?:ssl|sasl|connections)\..+)$")


def per_listener_base(key: str) -> str | None:
    """The served security config a ``listener.name.<listener>.<config>`` key overrides,
    else None (``listener.name.<listener>.<mechanism>.sasl.jaas.config`` included)."""
    m = _PER_LISTENER.match(key)
    if m is None:
        return None
    base = m["key"]
    if m["mech"] is not None and base != "sasl.jaas.config":
        return None
    return base if base in _LISTENER_SECURITY_KEYS else None


_CONSUMER_ASSIGNORS: Final = {
    "uniform": "uniform", "range": "range",
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def _check_consumer_group(v: Mapping[str, Any]) -> None:
    """The group.consumer.* configs against each other, as Kafka's GroupCoordinatorConfig."""
    prefix = "group.consumer."
    for what in ("session.timeout.ms", "heartbeat.interval.ms"):
        key, low, high = prefix + what, prefix + "min." + what, prefix + "max." + what
        if v[low] > v[high]:
            raise ConfigError(f"{high} must be greater than or equal to {low}")
        if not v[low] <= v[key] <= v[high]:
            raise ConfigError(f"{key} must be between {low} ({v[low]}) and {high} "
                              f"({v[high]}), got {v[key]}")
    if v[prefix + "heartbeat.interval.ms"] >= v[prefix + "session.timeout.ms"]:
        raise ConfigError(f"{prefix}heartbeat.interval.ms must be less than "
                          f"{prefix}session.timeout.ms")
    assignors = v[prefix + "assignors"]
    unknown = [a for a in assignors if a not in _CONSUMER_ASSIGNORS]
    if unknown or not assignors:
        raise ConfigError(f"invalid value for {prefix}assignors: {','.join(unknown)}: the "
                          f"assignors are {', '.join(sorted(set(_CONSUMER_ASSIGNORS.values())))}")


def _check_mechanisms(listener: str, enabled: Iterable[str]) -> None:
    enabled = [m.upper() for m in enabled]
    unserved = [m for m in enabled if m in _UNSERVED_MECHANISMS]
    unknown = [m for m in enabled if m not in _SASL_MECHANISMS and m not in unserved]
    if unknown:
        raise ConfigError(f"invalid value for sasl.enabled.mechanisms of listener {listener}: "
                          f"unknown mechanism {', '.join(unknown)}")
    if unserved:
        raise ConfigError(
            f"SASL mechanism {', '.join(unserved)} (sasl.enabled.mechanisms of listener "
            f"{listener}) is not supported by Odradek yet: enable PLAIN, SCRAM-SHA-256 or "
            "SCRAM-SHA-512")


def parse_properties(text: str) -> dict[str, str]:
    """Java ``.properties``: ``key=value`` or ``key: value``, ``#``/``!`` comments,
    backslash line continuations."""
    props: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        m = re.match(r"^([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if m:
            props[m[1]] = m[2]
        else:
            props[line] = ""
    return props


def suggest_key(key: str) -> str:
    """``" (did you mean num.partitions?)"`` for a key close to a known one, else ``""``."""
    known = list(BROKER_CONFIGS) + [k for k in KAFKA_BROKER_CONFIGS if k not in BROKER_CONFIGS]
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
    return f" (did you mean {close[0]}?)" if close else ""


_KAFKA_NUMBER_RANGES = {"short": 16, "int": 32, "long": 64}


def parse_kafka_value(k: KafkaBrokerKey, name: str, text: str) -> None:
    """Check ``text`` against Kafka's type of a config Odradek does not serve, as Kafka's
    ConfigDef parses it: ConfigError (Kafka's words) if it is not of that type."""
    value = text.strip()
    problem = None
    if k.type in _KAFKA_NUMBER_RANGES:
        bits = _KAFKA_NUMBER_RANGES[k.type]
        try:
            number = java_int(value)
        except ValueError:
            problem = f"Not a number of type {k.type.upper()}"
        else:
            if not -(1 << (bits - 1)) <= number < (1 << (bits - 1)):
                problem = f"Not a number of type {k.type.upper()}"
    elif k.type == "double":
        try:
            java_float(value)
        except ValueError:
            problem = "Not a number of type DOUBLE"
    elif k.type == "boolean" and value.lower() not in ("true", "false"):
        problem = "Expected value to be either true or false"
    if problem:
        raise ConfigError(f"Invalid value {text} for configuration {name}: {problem}")


@dataclass(slots=True)
class BrokerConfig:
    values: dict[str, Any]
    unknown: list[str] = field(default_factory=list)
    raw: dict[str, str] = field(default_factory=dict)
    unserved: dict[str, str] = field(default_factory=dict)
    """Kafka keys Odradek does not serve, set in the config: key -> why."""

    @classmethod
    def load(
        cls, path: Path | None = None, overrides: Iterable[str] | Mapping[str, str] = ()
    ) -> BrokerConfig:
        raw: dict[str, str] = {}
        if path is not None:
            try:
                raw.update(parse_properties(Path(path).read_text()))
            except OSError as exc:
                raise ConfigError(f"cannot read config file {path}: "
                                  f"{exc.strerror or exc}") from exc
            except UnicodeDecodeError as exc:
                raise ConfigError(f"cannot read config file {path}: not UTF-8 text "
                                  f"(byte {exc.start})") from exc
        if isinstance(overrides, Mapping):
            raw.update(overrides)
        else:
            for item in overrides:
                key, sep, value = item.partition("=")
                if not sep or not key.strip():
                    raise ConfigError(f"invalid override {item!r}: expected key=value")
                raw[key.strip()] = value.strip()
        return cls.from_raw(raw)

    @classmethod
    def from_raw(cls, raw: Mapping[str, str]) -> BrokerConfig:
        """Parse and validate ``raw``; a ConfigError names the key and what it expects."""
        values: dict[str, Any] = {name: d.default for name, d in BROKER_CONFIGS.items()}
        unknown: list[str] = []
        unserved: dict[str, str] = {}
        for key, value in raw.items():
            d = BROKER_CONFIGS.get(key)
            if d is None and (base := per_listener_base(key)) is not None:
                parse_value(BROKER_CONFIGS[base], value)  # checked, read per listener
                continue
            if d is None:
                reason = unserved_reason(key)
                if reason is None:
                    unknown.append(key)
                    continue
                k = kafka_key(key)
                if k is not None:  # a bad value refuses to start, as in Kafka
                    parse_kafka_value(k, key, value)
                unserved[key] = reason
                continue
            values[key] = parse_value(d, value)
        config = cls(values, sorted(unknown), dict(raw), dict(sorted(unserved.items())))
        config._derive()
        return config

    def _derive(self) -> None:
        v = self.values
        if v["node.id"] >= 0 and "broker.id" not in self.raw:
            v["broker.id"] = v["node.id"]
        if "log.dirs" not in self.raw and v["log.dir"]:
            v["log.dirs"] = (v["log.dir"],)
        if v["log.retention.ms"] is None:
            if v["log.retention.minutes"] != -2:
                v["log.retention.ms"] = v["log.retention.minutes"] * 60000
            else:
                v["log.retention.ms"] = v["log.retention.hours"] * 3600000
        if v["log.retention.ms"] < -1:
            raise ConfigError("invalid value for log.retention.ms: must be -1 or more")
        if v["log.roll.ms"] is None:
            v["log.roll.ms"] = v["log.roll.hours"] * 3600000
        if v["log.roll.jitter.ms"] is None:
            v["log.roll.jitter.ms"] = v["log.roll.jitter.hours"] * 3600000
        if v["max.connections.per.ip"] == 0 and not v["max.connections.per.ip.overrides"]:
            # KafkaConfig's rule: a zero default only makes sense with exceptions to it.
            raise ConfigError(
                "max.connections.per.ip can be set to zero only if "
                "max.connections.per.ip.overrides is set"
            )
        _check_consumer_group(v)
        self._derive_listeners()

    def _derive_listeners(self) -> None:
        """Listeners, their security protocols and the inter-broker listener, checked as
        KafkaConfig checks them (its messages)."""
        v = self.values
        listeners = [Listener.parse(x) for x in v["listeners"]]
        if not listeners:
            raise ConfigError("listeners must name at least one address")
        advertised = [Listener.parse(x) for x in v["advertised.listeners"]] or listeners
        names = [lst.name for lst in listeners]
        if len(set(names)) != len(names):
            raise ConfigError(f"Each listener must have a different name, listeners: "
                              f"{','.join(v['listeners'])}")
        ports = [lst.port for lst in listeners if lst.port != 0]
        if len(set(ports)) != len(ports):
            raise ConfigError(f"Each listener must have a different port, listeners: "
                              f"{','.join(v['listeners'])}")
        protocols = parse_protocol_map(v["listener.security.protocol.map"])
        for lst in [*listeners, *advertised]:
            if lst.name not in protocols:
                raise ConfigError(
                    f"No security protocol defined for listener {lst.name} (set it in "
                    "listener.security.protocol.map)")
        unknown = [a.name for a in advertised if a.name not in names]
        if unknown:
            raise ConfigError(
                "advertised.listeners listener names must be equal to or a subset of the ones "
                f"defined in listeners. Found {','.join(unknown)}. The valid options based "
                f"on the current configuration are {','.join(names)}")
        inter_name = v["inter.broker.listener.name"].strip().upper()
        if inter_name:
            if "security.inter.broker.protocol" in self.raw:
                raise ConfigError("Only one of inter.broker.listener.name and "
                                  "security.inter.broker.protocol should be set.")
            if inter_name not in protocols:
                raise ConfigError(
                    f"Listener with name {inter_name} defined in inter.broker.listener.name "
                    "not found in listener.security.protocol.map.")
        else:
            inter_name = v["security.inter.broker.protocol"].strip().upper()
        advertised_names = [a.name for a in advertised]
        if inter_name not in advertised_names:
            raise ConfigError(
                "inter.broker.listener.name must be a listener name defined in "
                "advertised.listeners. The valid options based on currently configured "
                f"listeners are {','.join(advertised_names)}")
        self.listeners = listeners
        self.advertised_listeners = advertised
        self.listener_protocols = {n: protocols[n] for n in names}
        self.inter_broker_listener = inter_name
        mechanisms = v["sasl.enabled.mechanisms"]
        if any(p.startswith("SASL_") for p in self.listener_protocols.values()):
            for name in names:
                if self.listener_protocols[name].startswith("SASL_"):
                    enabled = self.listener_value(name, "sasl.enabled.mechanisms") or mechanisms
                    _check_mechanisms(name, enabled)

    def listener_value(self, listener: str, key: str, mechanism: str | None = None) -> Any:
        """A security config of ``listener`` as Kafka resolves it: the
        ``listener.name.<listener>.`` override (``listener.name.<listener>.<mechanism>.``
        for a SASL mechanism's ``sasl.jaas.config``), else the broker-wide value."""
        prefix = f"listener.name.{listener.lower()}."
        keys = [f"{prefix}{mechanism.lower()}.{key}"] if mechanism else []
        keys.append(prefix + key)
        for full in keys:
            if full in self.raw:
                return parse_value(BROKER_CONFIGS[key], self.raw[full])
        return self.values[key]

    def report_unknown(self) -> None:
        for key in self.unknown:
            log.warning("unknown configuration key %r is ignored%s", key, suggest_key(key))
        for key, reason in self.unserved.items():
            k = KAFKA_BROKER_CONFIGS.get(key)
            harmless = k is not None and self.raw[key].strip() == (k.default or "")
            if is_not_applicable(reason) or harmless:
                log.info("configuration key %r is ignored: %s", key, reason)
            else:
                log.warning("configuration key %r is ignored: %s", key, reason)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    @property
    def broker_id(self) -> int:
        return int(self.values["broker.id"])

    @property
    def log_dirs(self) -> list[Path]:
        return [Path(d) for d in self.values["log.dirs"]]

    def log_defaults(self) -> dict[str, Any]:
        """The broker-level defaults of topic configs, for :class:`LogConfig`."""
        return {d.broker_key: self.values[d.broker_key]
                for d in TOPIC_CONFIGS.values() if d.broker_key}

    listeners: list[Listener] = field(default_factory=list)
    advertised_listeners: list[Listener] = field(default_factory=list)
    listener_protocols: dict[str, str] = field(default_factory=dict)
    """Listener name -> its security protocol (``listener.security.protocol.map``)."""
    inter_broker_listener: str = "PLAINTEXT"
    """The listener other brokers are reached on (``inter.broker.listener.name``)."""
