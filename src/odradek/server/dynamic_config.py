"""Dynamic broker configs layered over the static ones (Kafka's ``DynamicBrokerConfig``).

How it works: ``/config/brokers/<default>`` (the cluster-wide default) and
``/config/brokers/<id>`` (this broker) hold configs changed at runtime through
AlterConfigs / IncrementalAlterConfigs. The keys that can change this way
(:data:`DYNAMIC_BROKER_KEYS`) are the broker-level defaults of topic configs (Kafka's
DynamicLogConfig), the replication throttles, the log cleaner's, the connection limits and
producer.id.expiration.ms. The values in
effect are, by increasing precedence: the static config (defaults, server.properties,
overrides), the cluster default, this broker's own. :meth:`DynamicBrokerConfig.apply`
layers them into the topic defaults of the metadata and of the log manager, so every log
without a topic override follows at once, and tells the reconfigurables (the log cleaner,
the connection limits of the listeners) the values now in effect. A stored value that no
longer parses is ignored with a warning, never fatal at start. Kafka allows custom keys
(not Kafka's) in a broker's dynamic configs; they are stored, described, and have no
effect.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from odradek.cluster.metadata import ClusterMetadata
from odradek.server.config import BROKER_CONFIGS, BrokerConfig
from odradek.storage import LogManager
from odradek.storage.config import TOPIC_CONFIGS, ConfigError, parse_value

__all__ = [
    "CLEANER_KEYS", "CONNECTION_KEYS", "DYNAMIC_BROKER_KEYS", "DynamicBrokerConfig",
    "Reconfigurable", "parse_dynamic",
]

log = logging.getLogger(__name__)

# Told the effective broker configs (static, then dynamic) each time they are layered.
Reconfigurable = Callable[[Mapping[str, Any]], None]

# The log cleaner's (Kafka's LogCleaner.ReconfigurableConfigs).
CLEANER_KEYS: frozenset[str] = frozenset({
    "log.cleaner.threads", "log.cleaner.backoff.ms", "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.buffer.size", "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.max.bytes.per.second",
})
# The connection limits (Kafka's DynamicConnectionQuota / SocketServer's).
CONNECTION_KEYS: frozenset[str] = frozenset({
    "max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides",
    "max.connection.creation.rate",
})

# The broker configs that can change without a restart: every topic config's broker-level
# default (Kafka's DynamicLogConfig), the replication throttles (DynamicReplicationQuota),
# the log cleaner's, the connection limits, and producer.id.expiration.ms (Kafka's
# DynamicProducerStateManagerConfig).
DYNAMIC_BROKER_KEYS: frozenset[str] = frozenset(
    d.broker_key for d in TOPIC_CONFIGS.values() if d.broker_key
) | {"leader.replication.throttled.rate", "follower.replication.throttled.rate",
     "producer.id.expiration.ms"} | CLEANER_KEYS | CONNECTION_KEYS


def parse_dynamic(entity: Mapping[str, str], where: str) -> dict[str, Any]:
    """The dynamically updatable keys of ``entity``, parsed; Odradek's static keys ignored
    with a warning, custom keys silently (they have no effect)."""
    out: dict[str, Any] = {}
    for key, text in entity.items():
        d = BROKER_CONFIGS.get(key)
        if d is None or key not in DYNAMIC_BROKER_KEYS:
            if d is not None:
                log.warning("ignoring dynamic broker config %s in %s: not dynamically "
                            "updatable", key, where)
            continue
        try:
            out[key] = parse_value(d, text)
        except ConfigError as exc:
            log.warning("ignoring dynamic broker config in %s: %s", where, exc)
    return out


class DynamicBrokerConfig:
    def __init__(
        self, config: BrokerConfig, metadata: ClusterMetadata, log_manager: LogManager
    ) -> None:
        self.config = config
        self.metadata = metadata
        self.log_manager = log_manager
        self._reconfigurables: list[Reconfigurable] = []

    def add_reconfigurable(self, reconfigurable: Reconfigurable) -> None:
        """Call ``reconfigurable`` with the configs in effect now and after every change
        (Kafka's BrokerReconfigurable): the log cleaner, the connection limits."""
        self._reconfigurables.append(reconfigurable)
        reconfigurable(self.effective_values())

    def effective_values(self) -> dict[str, Any]:
        return self.static_values() | self.dynamic_values()

    def static_values(self) -> dict[str, Any]:
        return dict(self.config.values) | self.config.log_defaults()

    def dynamic_values(self) -> dict[str, Any]:
        """Parsed dynamic broker configs in effect: the cluster default, then our own."""
        md = self.metadata
        values = parse_dynamic(md.broker_configs(md.DEFAULT_BROKER_ENTITY), "<default>")
        values.update(parse_dynamic(md.broker_configs(str(self.config.broker_id)),
                                    "this broker"))
        return values

    def apply(self, reconfigure_logs: bool = True) -> None:
        """Layer the stored dynamic broker configs over the static ones: topic defaults
        (and so every log without an override) follow at once."""
        effective = self.effective_values()
        self.metadata.broker_defaults = effective
        self.log_manager.broker_config = dict(effective)
        if reconfigure_logs:
            for tp, partition_log in list(self.log_manager.logs.items()):
                partition_log.update_config(self.metadata.log_config(tp.topic))
        for reconfigurable in self._reconfigurables:
            reconfigurable(effective)
