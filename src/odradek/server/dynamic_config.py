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

Password configs (:func:`is_password_config`: a key ending in one of Kafka's dynamic
password configs, ``listener.name.ssl.ssl.keystore.password``, ``…sasl.jaas.config`` …)
are stored encrypted with ``password.encoder.secret``
(:mod:`odradek.security.password_encoder`), as Kafka's ``DynamicBrokerConfig`` stores them
in ZooKeeper: :meth:`DynamicBrokerConfig.to_persistent` encodes them before a write, and
refuses them without a secret ("Password encoder secret not configured") or at the cluster
default ("Password config can be defined only at broker level");
:meth:`DynamicBrokerConfig.broker_configs` is the decoded view every reader uses (a value
that does not decode is left out with an error in the log, as Kafka's, once: it is not
tried again; each decode is a PBKDF2 of milliseconds on the event loop). At start,
:meth:`DynamicBrokerConfig.reencode_passwords` rewrites this broker's stored passwords
with the current secret: those that ``password.encoder.old.secret`` opens (Kafka's secret
rotation) and, unlike Kafka, those an older Odradek stored in clear.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from odradek.cluster.metadata import ClusterMetadata
from odradek.security.password_encoder import PasswordEncoder, PasswordEncoderError, is_encoded
from odradek.server.config import BROKER_CONFIGS, BrokerConfig
from odradek.server.kafka_config_support import KAFKA_BROKER_CONFIGS
from odradek.storage import LogManager
from odradek.storage.config import TOPIC_CONFIGS, ConfigError, parse_value

__all__ = [
    "CLEANER_KEYS", "CONNECTION_KEYS", "DYNAMIC_BROKER_KEYS", "DYNAMIC_PASSWORD_CONFIGS",
    "DynamicBrokerConfig", "Reconfigurable", "is_password_config", "parse_dynamic",
]

log = logging.getLogger(__name__)

# Decoded passwords kept beyond those still stored (a broker has a handful; the stored
# ones are always kept: decoding them all again on every read, on the event loop, stalled
# a broker with 300 of them for 11 s at each alter)
_DECODED_CACHE = 256

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

# Kafka's DynamicBrokerConfig.DynamicPasswordConfigs: its dynamic configs of type PASSWORD.
DYNAMIC_PASSWORD_CONFIGS: frozenset[str] = frozenset(
    k.name for k in KAFKA_BROKER_CONFIGS.values()
    if k.type == "password" and k.update_mode != "read-only")
_PASSWORD_SUFFIXES = tuple(sorted(DYNAMIC_PASSWORD_CONFIGS))

NO_SECRET = "Password encoder secret not configured"  # Kafka's words
DEFAULT_LEVEL = "Password config can be defined only at broker level"  # Kafka's words


def is_password_config(name: str) -> bool:
    """Whether dynamic config ``name`` is stored encrypted (Kafka's isPasswordConfig: it
    ends with a dynamic password config, so listener-prefixed ones are)."""
    return name.endswith(_PASSWORD_SUFFIXES)


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
        self.password_encoder = PasswordEncoder.from_config(config.values)
        self._old_encoder = PasswordEncoder.from_config(config.values,
                                                        "password.encoder.old.secret")
        # encoded text -> password: PBKDF2 costs milliseconds, and every change re-reads
        self._decoded: dict[str, str] = {}
        # encoded text -> why it does not decode (tried and said in the log once)
        self._undecodable: dict[str, str] = {}
        self._warned_clear: set[str] = set()

    # -- password configs (Kafka's toPersistentProps / fromPersistentProps) ---------------
    def to_persistent(self, configs: Mapping[str, str], entity: str,
                      stored: Mapping[str, str] | None = None) -> dict[str, str]:
        """``configs`` as they are stored: password configs encoded. ConfigError with
        Kafka's message without a secret, or for a password at the cluster default. A
        password the ``stored`` configs already hold encoded keeps its stored text (Kafka
        encodes every one again: the same, with a new salt); one they hold in clear is
        encoded when there is a secret."""
        out = dict(configs)
        before = self.from_persistent(stored, entity) if stored else {}
        for key, value in configs.items():
            if not is_password_config(key):
                continue
            if entity == self.metadata.DEFAULT_BROKER_ENTITY:
                raise ConfigError(f"{DEFAULT_LEVEL}: {key}")
            if (stored and key in stored and before.get(key) == value
                    and (is_encoded(stored[key]) or self.password_encoder is None)):
                # unchanged: its stored text, unless that is clear and can be encoded
                # (written after this broker's start by an older Odradek, or a tool)
                out[key] = stored[key]
                continue
            if self.password_encoder is None:
                raise ConfigError(NO_SECRET)
            out[key] = self.password_encoder.encode(value)
        return out

    def from_persistent(self, stored: Mapping[str, str], entity: str) -> dict[str, str]:
        """The stored configs of ``entity`` with their passwords decoded; one that does not
        decode is left out, with an error in the log (never its value)."""
        where = ("the cluster default" if entity == self.metadata.DEFAULT_BROKER_ENTITY
                 else f"broker {entity}")
        out = dict(stored)
        for key, value in stored.items():
            if not is_password_config(key):
                continue
            if not is_encoded(value):  # stored in clear by an Odradek before encryption
                if key not in self._warned_clear:
                    self._warned_clear.add(key)
                    log.warning("dynamic password config %s of %s is stored in clear (by an "
                                "older Odradek): %s", key, where,
                                "it is encrypted when the broker starts" if
                                self.password_encoder else "set password.encoder.secret "
                                "and restart to encrypt it")
                continue
            password = self._decoded.get(value)
            if password is None:
                if value in self._undecodable:  # tried already: the same answer
                    del out[key]
                    continue
                try:
                    password = self._decode(value, stored)
                except PasswordEncoderError as exc:
                    log.error("Dynamic password config %s of %s could not be decoded, "
                              "ignoring: %s", key, where, exc)
                    if len(self._undecodable) >= _DECODED_CACHE:
                        live = set(stored.values())
                        self._undecodable = {v: e for v, e in self._undecodable.items()
                                             if v in live}
                    self._undecodable[value] = str(exc)
                    del out[key]
                    continue
            out[key] = password
        return out

    def _decode(self, value: str, stored: Mapping[str, str]) -> str:
        if self.password_encoder is None:
            raise PasswordEncoderError(NO_SECRET)
        password = self.password_encoder.decode(value)
        if len(self._decoded) >= _DECODED_CACHE:  # forget those no longer stored
            live = set(stored.values())
            self._decoded = {v: p for v, p in self._decoded.items() if v in live}
        self._decoded[value] = password
        return password

    def broker_configs(self, entity: str) -> dict[str, str]:
        """The dynamic configs of ``entity`` (an id or ``<default>``), passwords decoded."""
        return self.from_persistent(self.metadata.broker_configs(entity), entity)

    def reencode_passwords(self) -> None:
        """At start (Kafka's maybeReEncodePasswords): this broker's stored passwords that
        ``password.encoder.old.secret`` opens are encoded again with the secret; with a
        secret, those stored in clear are encoded too. Blocking (the store)."""
        if self.password_encoder is None:
            return
        entity = str(self.config.broker_id)
        encoder, old = self.password_encoder, self._old_encoder
        changed: list[str] = []

        def reencode(current: dict[str, str]) -> dict[str, str]:
            changed.clear()
            out = dict(current)
            for key, value in current.items():
                if not is_password_config(key):
                    continue
                if not is_encoded(value):
                    out[key] = encoder.encode(value)
                elif old is not None:
                    try:
                        out[key] = encoder.encode(old.decode(value))
                    except PasswordEncoderError:  # already the new secret's, or damaged
                        log.debug("dynamic password config %s could not be decoded with "
                                  "password.encoder.old.secret: the secret's is kept", key)
                        continue
                else:
                    continue
                changed.append(key)
            return out if changed else current

        reencode(self.metadata.broker_configs(entity))
        if not changed:  # nothing to rotate (the old secret left in place): nothing written
            return
        self.metadata.update_broker_configs(entity, reencode)
        if changed:
            log.info("dynamic password configs %s of broker %s encoded again with "
                     "password.encoder.secret", ", ".join(sorted(changed)), entity)

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
