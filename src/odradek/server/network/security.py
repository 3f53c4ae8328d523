"""A listener's security: its protocol, TLS context, principal mapping and SASL settings.

How it works: the broker builds one :class:`ListenerSecurity` per listener from its config
(Kafka's ``ChannelBuilders``: the listener's security protocol picks a plaintext, SSL or
SASL channel builder); the listener's :class:`~odradek.server.network.acceptor.KafkaServer`
hands it to every connection it accepts. A TLS listener wraps the accepted socket in its
``ssl_context`` (the handshake runs before the connection is served); a SASL listener's
connections start unauthenticated, gated by
:class:`~odradek.server.network.sasl.SaslAuthenticator`. :class:`AuthenticationStats`
counts successes and failures per listener (Kafka's ``successful-authentication-total``
and ``failed-authentication-total`` socket-server metrics).
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from odradek.security.principal import (
    ANONYMOUS,
    SslPrincipalMapper,
    certificate_dn,
    rfc2253_name,
    user_principal,
)

__all__ = ["AuthenticationStats", "ListenerSecurity", "SaslSettings", "ScramLookup"]

ScramLookup = Callable[[str, str], Awaitable[str | None]]
"""(mechanism, user) -> the stored credential (``salt=..,stored_key=..,...``) or None."""


@dataclass(slots=True)
class AuthenticationStats:
    """Authentications on one listener (Kafka's socket-server metrics)."""

    successful: int = 0
    failed: int = 0
    successful_reauthentication: int = 0
    # connections closed at a request after their session ended (KIP-368)
    expired_connections_killed: int = 0
    # failures on a connection that had authenticated before (Kafka's Selector counts
    # them here, not in ``failed``)
    failed_reauthentication: int = 0
    # successful re-authentications' latency, SaslHandshake to success (since start)
    reauthentication_latency_count: int = 0
    reauthentication_latency_total_ms: float = 0.0
    reauthentication_latency_max_ms: float = 0.0

    def note_reauthentication(self, latency_ms: float) -> None:
        """A successful re-authentication that took ``latency_ms``."""
        self.successful_reauthentication += 1
        self.reauthentication_latency_count += 1
        self.reauthentication_latency_total_ms += latency_ms
        self.reauthentication_latency_max_ms = max(self.reauthentication_latency_max_ms,
                                                   latency_ms)


@dataclass(frozen=True, slots=True)
class SaslSettings:
    """What a SASL listener's authenticator needs."""

    mechanisms: tuple[str, ...]
    """``sasl.enabled.mechanisms`` of the listener, upper-cased."""
    plain_users: Mapping[str, str] = field(default_factory=dict)
    """PLAIN's users and passwords (``user_<name>`` of the PlainLoginModule JAAS config)."""
    scram_lookup: ScramLookup | None = None
    failed_authentication_delay_ms: int = 100
    """``connection.failed.authentication.delay.ms``."""
    max_reauth_ms: int = 0
    """``connections.max.reauth.ms``: a session's lifetime (0: unbounded)."""
    max_receive_size: int = 524288
    """``sasl.server.max.receive.size``: the largest request before authentication."""


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """One listener's name, security protocol and what its connections authenticate with."""

    name: str = "PLAINTEXT"
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    principal_mapper: SslPrincipalMapper | None = None
    sasl: SaslSettings | None = None
    stats: AuthenticationStats = field(default_factory=AuthenticationStats)

    @property
    def uses_tls(self) -> bool:
        return self.ssl_context is not None

    def tls_principal(self, peercert: Mapping[str, object] | None,
                      der: bytes | None = None) -> str:
        """The principal of a TLS client (Kafka's DefaultKafkaPrincipalBuilder): its
        certificate's subject mapped by ``ssl.principal.mapping.rules``, ANONYMOUS
        without a (verified) certificate. The subject is written as Java's
        ``X500Principal.getName()`` writes it, from the certificate's own bytes ``der``
        when given (attributes beyond the common keywords as ``OID=#hex``, so rules copied
        from Kafka match), else from ``peercert``'s decoded subject. Raises
        NoMatchingRuleError when no rule applies."""
        subject = (peercert or {}).get("subject")
        if not subject:
            return ANONYMOUS
        dn = certificate_dn(der) if der else rfc2253_name(subject)  # type: ignore[arg-type]
        mapper = self.principal_mapper or SslPrincipalMapper()
        return user_principal(mapper.name(dn))
