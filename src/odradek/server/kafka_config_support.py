"""What Odradek does with each broker config key of Kafka's KafkaConfig.

How it works: :data:`KAFKA_BROKER_CONFIGS` (generated from Kafka 3.9's broker config docs)
lists every key Kafka's broker knows, with its type, default and dynamic update mode
(Kafka's ``DynamicBrokerConfig``). A key is *served* when Odradek has its own definition
(:data:`odradek.server.config.BROKER_CONFIGS`): its value takes effect. Every other Kafka key
is *unserved*, and :func:`unserved_reason` says why, in one of two kinds:

- a feature Odradek lacks (SASL, TLS, KRaft, tiered storage, transactions, …): the key is
  accepted in server.properties with a warning naming the feature, listed by DescribeConfigs
  with Kafka's default (its documentation naming the feature), and an AlterConfigs of it
  stores it as Kafka does, with the same warning and no effect;
- a key that does not apply to Odradek's design (JVM thread pools, purgatory purge
  intervals, the inter-broker protocol version): accepted with a note, listed, and stored
  by an AlterConfigs with the same note.

Either way an AlterConfigs is checked as Kafka checks it first (a key read-only in Kafka is
refused, a value of the wrong type too). The per-listener security configs Odradek serves
from server.properties only (:data:`PER_LISTENER_STATIC`) are refused by an AlterConfigs.

A key that is neither a Kafka key nor Odradek's is unknown: server.properties reports it
with the nearest known key; AlterConfigs stores it as Kafka does (custom broker configs
are allowed) and it has no effect.

``listener.name.<listener>.<config>`` keys (Kafka's per-listener overrides) are served
for the security configs Odradek serves (``ssl.*``, ``sasl.*``, and
``listener.name.<listener>.<mechanism>.sasl.jaas.config``); any other is unserved.
"""

from __future__ import annotations

import re

from odradek.server.kafka_broker_configs import (
    KAFKA_BROKER_CONFIGS,
    KAFKA_VERSION,
    KafkaBrokerKey,
)

__all__ = [
    "KAFKA_BROKER_CONFIGS",
    "KAFKA_DYNAMIC_ONLY_BROKER_CONFIGS",
    "KAFKA_VERSION",
    "NOT_APPLICABLE_PREFIX",
    "ODRADEK_DEFAULTS",
    "PER_LISTENER_SECURITY_CONFIGS",
    "PER_LISTENER_STATIC",
    "KafkaBrokerKey",
    "is_not_applicable",
    "kafka_key",
    "unserved_reason",
]

SASL = "this SASL setting is not supported by Odradek yet (it serves PLAIN and SCRAM only)"
TLS = ("this TLS setting is not supported by Odradek yet (it serves PEM and PKCS12 stores "
       "through Python's ssl module)")
SECURITY = "this security setting is not supported by Odradek yet"
ZK_TLS = ("checking the revocation of ZooKeeper's certificate (CRL, OCSP) is not "
          "supported by Odradek yet")
KRAFT = ("KRaft mode is not supported by Odradek (it runs as one embedded node or in "
         "ZooKeeper mode)")
TIERED = "tiered storage (KIP-405) is not supported by Odradek yet"
CONSUMER_PROTOCOL = ("this part of the consumer group protocol of KIP-848 is not "
                     "supported by Odradek yet (it serves group.consumer.session.*, "
                     "heartbeat.*, max.size, assignors and migration.policy)")
SHARE = "share groups (KIP-932) are not supported by Odradek yet"
TOKENS = "delegation tokens are not supported by Odradek yet"
PLUGINS = "Java plug-in classes cannot be loaded by Odradek"
QUOTAS = "configurable quota sample windows are not supported by Odradek yet"
METRICS = "Kafka's JMX metrics and metrics reporters are not supported by Odradek"
TELEMETRY = "client telemetry (KIP-714) is not supported by Odradek yet"
LEVELS = "compression levels (KIP-390) are not supported by Odradek yet"
REPLICA_MOVES = ("moving replicas between log directories (AlterReplicaLogDirs) is not "
                 "supported by Odradek yet")
RACK_FETCH = "fetching from the closest replica (KIP-392) is not supported by Odradek yet"
DOWN_CONVERSION = ("turning down-conversion off is not supported by Odradek yet (Fetch v0-3 "
                   "are always answered down-converted, as with Kafka's default true)")
CONTROL_PLANE = "a separate control plane listener (KIP-291) is not supported by Odradek yet"
ID_GENERATION = ("broker id generation through ZooKeeper is not supported by Odradek yet "
                 "(set broker.id)")
TIMESTAMP_DIFF = ("the deprecated log.message.timestamp.difference.max.ms is not supported "
                  "by Odradek: set log.message.timestamp.before.max.ms and "
                  "log.message.timestamp.after.max.ms (KIP-937)")
PARALLEL_RECOVERY = ("recovering logs in parallel is not supported by Odradek yet (it recovers "
                     "them one after another)")
PER_LISTENER = ("per-listener overrides (listener.name.<listener>.<config>) of this config "
                "are not supported by Odradek yet (only of the ssl.* and sasl.* configs it "
                "serves)")

PER_LISTENER_STATIC = ("per-listener security configs are read from server.properties at "
                       "start-up: of them only the keystore and truststore configs "
                       "(ssl.keystore.*, ssl.key.password, ssl.truststore.*) can change "
                       "dynamically in Odradek yet")
_STATIC_PER_LISTENER = ("ssl.", "sasl.", "connections.max.reauth.ms")

NOT_APPLICABLE_PREFIX = "does not apply to Odradek"
_THREADS = f"{NOT_APPLICABLE_PREFIX}: it has no JVM thread pools (one asyncio event loop)"
_PURGATORY = (f"{NOT_APPLICABLE_PREFIX}: its purgatories complete requests on events and "
              "need no purge interval")
_PROTOCOL = (f"{NOT_APPLICABLE_PREFIX}: it stores RecordBatch v2 only (message formats "
             "v0/v1 are converted on produce and fetch) and needs no protocol pinning")
_OFFSETS = (f"{NOT_APPLICABLE_PREFIX}: offset commits wait for the acks the "
            "__consumer_offsets partition needs, and its loads are not buffered this way")
_CLIENT_SIDE = f"{NOT_APPLICABLE_PREFIX}: it has no such setting for its inter-broker client"
_REBALANCE_PROTOCOLS = (f"{NOT_APPLICABLE_PREFIX}: it always serves both group protocols, "
                        "classic and consumer (KIP-848)")
# Exact keys first, then prefixes, in order.
_EXACT: dict[str, str] = {
    "background.threads": _THREADS,
    "num.io.threads": _THREADS,
    "num.network.threads": _THREADS,
    "num.replica.fetchers": _THREADS,
    "group.coordinator.threads": _THREADS,
    "group.coordinator.append.linger.ms": _THREADS,
    "delete.records.purgatory.purge.interval.requests": _PURGATORY,
    "fetch.purgatory.purge.interval.requests": _PURGATORY,
    "producer.purgatory.purge.interval.requests": _PURGATORY,
    "inter.broker.protocol.version": _PROTOCOL,
    "log.message.format.version": _PROTOCOL,
    "offsets.commit.required.acks": _OFFSETS,
    "offsets.load.buffer.size": _OFFSETS,
    "offsets.topic.compression.codec": _OFFSETS,
    "replica.socket.receive.buffer.bytes": _CLIENT_SIDE,
    "request.timeout.ms": _CLIENT_SIDE,
    "socket.connection.setup.timeout.ms": _CLIENT_SIDE,
    "socket.connection.setup.timeout.max.ms": _CLIENT_SIDE,
    "controller.socket.timeout.ms": _CLIENT_SIDE,
    "zookeeper.max.in.flight.requests": _CLIENT_SIDE,
    "zookeeper.metadata.migration.enable": KRAFT,
    "process.roles": KRAFT,
    "broker.heartbeat.interval.ms": KRAFT,
    "broker.session.timeout.ms": KRAFT,
    "initial.broker.registration.timeout.ms": KRAFT,
    "early.start.listeners": KRAFT,
    "eligible.leader.replicas.enable": KRAFT,
    "log.dir.failure.timeout.ms": KRAFT,
    "metadata.log.dir": KRAFT,
    "metadata.max.idle.interval.ms": KRAFT,
    "sasl.mechanism.controller.protocol": KRAFT,
    "control.plane.listener.name": CONTROL_PLANE,
    "broker.id.generation.enable": ID_GENERATION,
    "reserved.broker.max.id": ID_GENERATION,
    "principal.builder.class": SECURITY,
    "security.providers": SECURITY,
    "alter.config.policy.class.name": PLUGINS,
    "create.topic.policy.class.name": PLUGINS,
    "client.quota.callback.class": PLUGINS,
    "replica.selector.class": RACK_FETCH,
    "log.local.retention.bytes": TIERED,
    "log.local.retention.ms": TIERED,
    "telemetry.max.bytes": TELEMETRY,
    "auto.include.jmx.reporter": METRICS,
    "metric.reporters": METRICS,
    "log.message.downconversion.enable": DOWN_CONVERSION,
    "log.message.timestamp.difference.max.ms": TIMESTAMP_DIFF,
    "num.replica.alter.log.dirs.threads": REPLICA_MOVES,
    "num.recovery.threads.per.data.dir": PARALLEL_RECOVERY,
    "max.request.partition.size.limit": SHARE,
    # Kafka 4.0 keys of its shipped server.properties, not in 3.9's KafkaConfig.
    "share.coordinator.state.topic.replication.factor": SHARE,
    "share.coordinator.state.topic.min.isr": SHARE,
    # Dynamic-only broker configs of Kafka (DynamicConfig.Broker's quota configs).
    "replica.alter.log.dirs.io.max.bytes.per.second": REPLICA_MOVES,
}
# Served keys whose prefix below names a missing feature: KIP-599's controller mutation
# quota windows are served, though "controller." keys are otherwise KRaft's.
_SERVED_UNDER_AN_UNSERVED_PREFIX = frozenset({
    "controller.quota.window.num", "controller.quota.window.size.seconds",
    # the TLS and SASL settings Odradek serves (server/config.py)
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates",
    "ssl.enabled.protocols", "ssl.cipher.suites", "ssl.client.auth",
    "ssl.principal.mapping.rules", "sasl.enabled.mechanisms", "sasl.jaas.config",
    "sasl.server.max.receive.size", "sasl.mechanism.inter.broker.protocol",
    # the consumer group protocol (KIP-848)
    "group.consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms",
    "group.consumer.max.session.timeout.ms", "group.consumer.heartbeat.interval.ms",
    "group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms",
    "group.consumer.max.size", "group.consumer.assignors", "group.consumer.migration.policy",
    # mutual TLS to ZooKeeper (all zookeeper.ssl.* but CRL and OCSP)
    "zookeeper.ssl.client.enable", "zookeeper.ssl.keystore.location",
    "zookeeper.ssl.keystore.password", "zookeeper.ssl.keystore.type",
    "zookeeper.ssl.truststore.location", "zookeeper.ssl.truststore.password",
    "zookeeper.ssl.truststore.type", "zookeeper.ssl.protocol",
    "zookeeper.ssl.enabled.protocols", "zookeeper.ssl.cipher.suites",
    "zookeeper.ssl.endpoint.identification.algorithm",
})
_PREFIXES: tuple[tuple[str, str], ...] = (
    ("listener.name.", PER_LISTENER),
    ("sasl.", SASL),
    ("ssl.", TLS),
    ("zookeeper.ssl.", ZK_TLS),
    ("controller.", KRAFT),
    ("metadata.", KRAFT),
    ("remote.", TIERED),
    ("group.consumer.", CONSUMER_PROTOCOL),
    ("group.share.", SHARE),
    ("share.", SHARE),
    ("group.coordinator.rebalance.protocols", _REBALANCE_PROTOCOLS),
    ("delegation.token.", TOKENS),
    ("kafka.metrics.", METRICS),
    ("metrics.", METRICS),
    ("compression.gzip.", LEVELS),
    ("compression.lz4.", LEVELS),
    ("compression.zstd.", LEVELS),
    ("alter.log.dirs.replication.quota.", REPLICA_MOVES),
    ("replication.quota.window.", QUOTAS),
)

# Broker configs Kafka accepts only dynamically (DynamicConfig.Broker's quota configs): not
# in KafkaConfig, so not in the generated table. Type and default as Kafka's; settable per
# broker and as the cluster default.
KAFKA_DYNAMIC_ONLY_BROKER_CONFIGS: dict[str, KafkaBrokerKey] = {
    k.name: k for k in (
        KafkaBrokerKey("leader.replication.throttled.rate", "long", "9223372036854775807",
                       "cluster-wide"),
        KafkaBrokerKey("follower.replication.throttled.rate", "long", "9223372036854775807",
                       "cluster-wide"),
        KafkaBrokerKey("replica.alter.log.dirs.io.max.bytes.per.second", "long",
                       "9223372036854775807", "cluster-wide"),
    )
}

# Served keys whose default (as DescribeConfigs shows it) is not Kafka 3.9's, and why.
ODRADEK_DEFAULTS: dict[str, str] = {
    "broker.id": "0: the embedded single node needs no generated id",
    "listeners": "PLAINTEXT://127.0.0.1:9092: a development broker listens on loopback",
    "log.dirs": "./data",
    "log.dir": "empty: log.dirs (./data) is the data directory",
    "offsets.topic.replication.factor": "1, for the embedded single node",
    "transaction.state.log.replication.factor": "1, for the embedded single node",
    "transaction.state.log.min.isr": "1, for the embedded single node",
    "log.message.timestamp.after.max.ms": "one hour, Kafka 4.0's default (KIP-1030)",
    "log.retention.ms": "the value in effect (from log.retention.hours), where Kafka says null",
    "log.roll.ms": "the value in effect (from log.roll.hours), where Kafka says null",
    "log.roll.jitter.ms": "the value in effect (0), where Kafka says null",
    "log.flush.interval.ms": "the value in effect (Long.MAX_VALUE), where Kafka says null",
    "fetch.max.bytes": ("8 MiB, not 55 MiB: a response of tens of MB costs the client more "
                        "than the round trips it saves (a fresh buffer and its page faults "
                        "for every answer, data that no longer fits the CPU's cache); "
                        "librdkafka reads 8 partitions about a third faster with 8 MiB "
                        "answers; left at this default, a request naming more than 32 "
                        "partitions may get 256 KiB a partition, up to 30 MiB "
                        "(docs/architecture.md, 'Fetch response size')"),
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3, Kafka's own default on a JVM with TLSv1.3",
    "queued.max.request.bytes": ("512 MiB, not -1 (unbounded): no number of connections "
                                 "may make the broker hold more request bytes than this "
                                 "plus one request (docs/operations.md, 'Requests in "
                                 "flight')"),
}

# Kafka's SslConfigs.RECONFIGURABLE_CONFIGS: dynamic only with a listener prefix.
PER_LISTENER_SECURITY_CONFIGS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.certificates",
})

_LISTENER_KEY = re.compile(r"^listener\.name\.[^.]*\.(.+)$")


def kafka_key(name: str) -> KafkaBrokerKey | None:
    """Kafka's facts about broker config ``name`` (a per-listener key: its base config's)."""
    found = KAFKA_BROKER_CONFIGS.get(name) or KAFKA_DYNAMIC_ONLY_BROKER_CONFIGS.get(name)
    if found is None:
        m = _LISTENER_KEY.match(name)
        if m:
            # listener.name.<listener>.<config>, or .<mechanism>.<config> for SASL's
            base = m[1].split(".", 1)[-1]
            found = KAFKA_BROKER_CONFIGS.get(m[1]) or KAFKA_BROKER_CONFIGS.get(base)
    return found


def unserved_reason(name: str) -> str | None:
    """Why Odradek does not serve Kafka broker config ``name``: a missing feature, or why the
    key does not apply. None for a key that is not Kafka's (or that Odradek serves: callers
    ask only about keys they do not serve)."""
    if name in _EXACT:
        return _EXACT[name]
    if name in _SERVED_UNDER_AN_UNSERVED_PREFIX:
        return None
    if name.startswith("listener.name."):
        if kafka_key(name) is None:
            return None
        m = _LISTENER_KEY.match(name)
        if m and (m[1].startswith(_STATIC_PER_LISTENER)
                  or m[1].split(".", 1)[-1].startswith(_STATIC_PER_LISTENER)):
            return PER_LISTENER_STATIC
        return PER_LISTENER
    if kafka_key(name) is None:
        return None
    for prefix, reason in _PREFIXES:
        if name.startswith(prefix):
            return reason
    return None


def is_not_applicable(reason: str) -> bool:
    return reason.startswith(NOT_APPLICABLE_PREFIX)
