"""Keystores and truststores of TLS listeners changed without a restart (KIP-226).

How it works, as Kafka's ``DynamicListenerConfig`` and ``SslFactory.reconfigure``: the
keystore and truststore configs of a listener (:data:`RECONFIGURABLE`) can be set per
broker with the listener prefix, ``listener.name.<listener>.ssl.keystore.location`` and
so on, through AlterConfigs / IncrementalAlterConfigs on the broker's own resource (the
handler refuses them unprefixed or at the cluster default, as Kafka does). A dynamic value
wins over ``server.properties``'. Before anything is stored, :meth:`TlsReloader.validate`
builds the listener's new context and checks Kafka's rules:

- the new keystore must load (with its passwords) and make a context;
- its certificate keeps the subject (distinguished name) of the one serving, and every
  subject alternative name it had (new ones may be added), unless the listener's
  ``ssl.allow.dn.changes`` / ``ssl.allow.san.changes`` say otherwise (Kafka's
  ``CertificateEntries.ensureCompatible``): clients that verify the broker's name keep
  verifying it;
- a truststore cannot be added to a listener that had none.

A refused change is INVALID_CONFIG with the reason (never a password), and the old
context keeps serving. Once stored, :meth:`TlsReloader.apply` (a reconfigurable of
:class:`~odradek.server.dynamic_config.DynamicBrokerConfig`, on every broker-config
change; at start too, where the stored configs are taken without the rules, as Kafka
builds its listeners from them) rebuilds the context of each listener whose settings, or whose
keystore or truststore file (its modification time, as Kafka's
``shouldBeRebuilt``), changed, and swaps it into the listener: connections accepted from
then on handshake with the new certificate, established ones keep theirs.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from odradek.security.tls import (
    CertificateIdentity,
    TlsConfigError,
    keystore_identity,
    server_context,
)
from odradek.server.config import BrokerConfig
from odradek.server.kafka_config_support import PER_LISTENER_SECURITY_CONFIGS

__all__ = ["RECONFIGURABLE", "TlsReloader", "listener_tls_key"]

log = logging.getLogger(__name__)

# Kafka's SslConfigs.RECONFIGURABLE_CONFIGS: the keystore and truststore of a listener.
RECONFIGURABLE: Final = PER_LISTENER_SECURITY_CONFIGS
_PREFIX: Final = "listener.name."
_FAILED: Final = "Validation of dynamic config update of SSLFactory failed: "


def listener_tls_key(key: str) -> tuple[str, str] | None:
    """(listener name, config) of a ``listener.name.<listener>.<config>`` key whose config
    is reloadable; None for any other key."""
    if not key.startswith(_PREFIX):
        return None
    listener, _, config = key[len(_PREFIX):].partition(".")
    return (listener, config) if config in RECONFIGURABLE and listener else None


class Listener(Protocol):
    """A listener (:class:`~odradek.server.network.acceptor.KafkaServer`): its
    :class:`~odradek.server.network.security.ListenerSecurity`, read by each connection
    it accepts, is what is swapped. (Not imported: the handlers import this module.)"""

    security: Any


@dataclass(frozen=True, slots=True)
class _Serving:
    """What a listener's context was built from."""

    fingerprint: tuple[Any, ...]
    identity: CertificateIdentity
    has_truststore: bool


class TlsReloader:
    """The TLS listeners of one broker and the settings their contexts were built from."""

    def __init__(self, config: BrokerConfig, servers: Sequence[Listener]) -> None:
        self.config = config
        self._servers = {s.security.name.lower(): s for s in servers if s.security.uses_tls}
        self._serving: dict[str, _Serving] = {}
        # The first apply (at start) takes the stored configs as they are, as Kafka's
        # broker builds its listeners from them: the rules guard changes, not a start.
        self._started = False
        for name, server in self._servers.items():
            setting = self._settings(server.security.name, {})
            try:
                identity = keystore_identity(setting, server.security.name)
            except TlsConfigError as exc:  # e.g. no 'cryptography': reloads are refused
                log.info("listener %s: certificates cannot be reloaded: %s",
                         server.security.name, exc)
                continue
            self._serving[name] = _Serving(_fingerprint(setting), identity,
                                           _has_truststore(setting))

    def _settings(self, listener: str, dynamic: Mapping[str, str]) -> Callable[[str], Any]:
        prefix = f"{_PREFIX}{listener.lower()}."

        def setting(key: str) -> Any:
            if key in RECONFIGURABLE and prefix + key in dynamic:
                return dynamic[prefix + key]
            return self.config.listener_value(listener, key)

        return setting

    def _flag(self, listener: str, key: str) -> bool:
        raw = self.config.raw
        text = raw.get(f"{_PREFIX}{listener.lower()}.{key}", raw.get(key, "false"))
        return str(text).strip().lower() == "true"

    def _check(self, name: str, dynamic: Mapping[str, str],
               rules: bool = True) -> tuple[ssl.SSLContext, _Serving]:
        """The listener's new context and what it is built from; TlsConfigError if it
        cannot be built or (``rules``) Kafka's rules refuse it."""
        server = self._servers[name]
        listener = server.security.name
        current = self._serving.get(name)
        if current is None:
            raise TlsConfigError(f"the certificates of listener {listener} cannot be "
                                 "reloaded (see the broker's log at start)")
        setting = self._settings(listener, dynamic)
        context = server_context(setting, listener)
        identity = keystore_identity(setting, listener)
        has_truststore = _has_truststore(setting)
        if not rules:
            return context, _Serving(_fingerprint(setting), identity, has_truststore)
        old = current.identity
        if not self._flag(listener, "ssl.allow.dn.changes") and identity.subject != old.subject:
            raise TlsConfigError(
                f"{_FAILED}Keystore DistinguishedName does not match: existing={{DN="
                f"{old.subject}}}, new={{DN={identity.subject}}} (listener {listener})")
        if (not self._flag(listener, "ssl.allow.san.changes")
                and not identity.subject_alt_names >= old.subject_alt_names):
            raise TlsConfigError(
                f"{_FAILED}Keystore SubjectAltNames do not match: existing={{SAN="
                f"{sorted(old.subject_alt_names)}}}, new={{SAN="
                f"{sorted(identity.subject_alt_names)}}} (listener {listener})")
        if has_truststore and not current.has_truststore:
            raise TlsConfigError(f"{_FAILED}Cannot add SSL truststore to an existing listener "
                                 f"for which no truststore was configured (listener {listener})")
        return context, _Serving(_fingerprint(setting), identity, has_truststore)

    def validate(self, dynamic: Mapping[str, str]) -> None:
        """Check a broker's new dynamic configs (all of them, as they would be stored);
        TlsConfigError with the reason if a listener's TLS change is refused."""
        for key in dynamic:
            found = listener_tls_key(key)
            if found is not None and found[0] not in self._servers:
                raise TlsConfigError(f"{key}: this broker has no SSL or SASL_SSL listener "
                                     f"named {found[0].upper()}")
        for name in self._servers:
            if self._changed(name, dynamic):
                self._check(name, dynamic)

    def _changed(self, name: str, dynamic: Mapping[str, str]) -> bool:
        current = self._serving.get(name)
        setting = self._settings(self._servers[name].security.name, dynamic)
        return current is None or _fingerprint(setting) != current.fingerprint

    def apply(self, dynamic: Mapping[str, str]) -> None:
        """Rebuild the contexts whose settings or files changed; one that fails keeps the
        old context serving, with an error in the log."""
        rules, self._started = self._started, True
        for name, server in self._servers.items():
            if name not in self._serving or not self._changed(name, dynamic):
                continue
            listener = server.security.name
            try:
                context, serving = self._check(name, dynamic, rules)
            except TlsConfigError as exc:
                log.error("listener %s keeps its certificate: %s", listener, exc)
                continue
            server.security = dataclasses.replace(server.security, ssl_context=context)
            self._serving[name] = serving
            log.info("listener %s: new connections use the certificate of %s (subject %s)",
                     listener, _where(self._settings(listener, dynamic)),
                     serving.identity.subject)


def _has_truststore(setting: Callable[[str], Any]) -> bool:
    return bool(setting("ssl.truststore.location") or setting("ssl.truststore.certificates"))


def _mtime(path: object) -> float | None:
    try:
        return os.stat(str(path)).st_mtime if path else None
    except OSError:
        return None


def _fingerprint(setting: Callable[[str], Any]) -> tuple[Any, ...]:
    values = tuple(str(setting(k) or "") for k in sorted(RECONFIGURABLE))
    return (*values, _mtime(setting("ssl.keystore.location")),
            _mtime(setting("ssl.truststore.location")))


def _where(setting: Callable[[str], Any]) -> str:
    location = setting("ssl.keystore.location")
    return f"ssl.keystore.location {location}" if location else "ssl.keystore.key"
