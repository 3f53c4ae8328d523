"""Each listener's security, built from the broker's config (Kafka's ``ChannelBuilders``).

How it works: :func:`listener_security` resolves a listener's security protocol
(``listener.security.protocol.map``) and, for SSL and SASL_SSL, builds its TLS context
(:func:`odradek.security.tls.server_context`) from its ``ssl.*`` settings with the
``listener.name.<listener>.`` overrides; for SASL_PLAINTEXT and SASL_SSL, its
:class:`~odradek.server.network.security.SaslSettings`: the enabled mechanisms, PLAIN's
users from the JAAS config (``listener.name.<listener>.plain.sasl.jaas.config``, then
``listener.name.<listener>.sasl.jaas.config``, then ``sasl.jaas.config``), SCRAM
credentials through ``scram_lookup``, the failed-authentication delay and the session
lifetime. A setting that cannot work refuses to start, naming the key.

:func:`inter_broker_security` is the other side, Kafka's inter-broker client: a broker
connects to the others' inter-broker listener with that listener's TLS settings (its
truststore to verify them, its keystore as the client certificate, so mutual TLS works),
and on a SASL listener with ``sasl.mechanism.inter.broker.protocol`` and the ``username``
and ``password`` of the listener's JAAS config for that mechanism (Kafka's
``listener.name.<listener>.<mechanism>.sasl.jaas.config``).
"""

from __future__ import annotations

from odradek.client.security import ClientSecurity
from odradek.security.principal import SslPrincipalMapper
from odradek.security.sasl import MECHANISMS, parse_jaas_config, plain_users
from odradek.security.tls import TlsConfigError, client_context, server_context
from odradek.server.config import BrokerConfig, ConfigError
from odradek.server.network.security import ListenerSecurity, SaslSettings, ScramLookup

__all__ = ["inter_broker_security", "listener_security"]


def listener_security(
    config: BrokerConfig, name: str, scram_lookup: ScramLookup | None = None
) -> ListenerSecurity:
    protocol = config.listener_protocols[name]
    ssl_context = None
    mapper = None
    if protocol in ("SSL", "SASL_SSL"):
        try:
            ssl_context = server_context(lambda key: config.listener_value(name, key), name)
        except TlsConfigError as exc:
            raise ConfigError(str(exc)) from None
        mapper = SslPrincipalMapper(config.listener_value(name, "ssl.principal.mapping.rules"))
        if protocol == "SASL_SSL":
            mapper = None  # checked, but the principal comes from SASL (as Kafka's)
    sasl = None
    if protocol.startswith("SASL_"):
        mechanisms = tuple(m.upper() for m in config.listener_value(
            name, "sasl.enabled.mechanisms"))
        users: dict[str, str] = {}
        if "PLAIN" in mechanisms:
            jaas = config.listener_value(name, "sasl.jaas.config", mechanism="PLAIN")
            if not jaas:
                raise ConfigError(
                    f"listener {name} enables SASL PLAIN but has no JAAS config: set "
                    f"listener.name.{name.lower()}.plain.sasl.jaas.config (Kafka's "
                    "PlainLoginModule with user_<name>=\"<password>\" entries)")
            try:
                users = plain_users(jaas)
            except ValueError as exc:
                raise ConfigError(f"invalid sasl.jaas.config of listener {name}: "
                                  f"{exc}") from None
        sasl = SaslSettings(
            mechanisms=mechanisms,
            plain_users=users,
            scram_lookup=scram_lookup,
            failed_authentication_delay_ms=int(config.listener_value(
                name, "connection.failed.authentication.delay.ms")),
            max_reauth_ms=int(config.listener_value(name, "connections.max.reauth.ms")),
            max_receive_size=int(config.listener_value(name, "sasl.server.max.receive.size")),
        )
    return ListenerSecurity(name, protocol, ssl_context, mapper, sasl)


def inter_broker_security(config: BrokerConfig) -> ClientSecurity:
    """How this broker connects to the others (see the module's header)."""
    name = config.inter_broker_listener
    protocol = config.listener_protocols.get(name, "PLAINTEXT")
    context = None
    if protocol in ("SSL", "SASL_SSL"):
        def setting(key: str) -> object:
            return config.listener_value(name, key)

        try:
            context = client_context(setting)
        except TlsConfigError as exc:
            raise ConfigError(f"the inter-broker client of listener {name}: {exc}") from None
    if not protocol.startswith("SASL_"):
        return ClientSecurity(protocol, context)
    mechanism = str(config.listener_value(name, "sasl.mechanism.inter.broker.protocol"))
    mechanism = mechanism.upper()
    if mechanism not in MECHANISMS:
        raise ConfigError(
            f"sasl.mechanism.inter.broker.protocol={mechanism}: the inter-broker listener "
            f"{name} uses {protocol}; set it to one of {', '.join(MECHANISMS)}")
    jaas = config.listener_value(name, "sasl.jaas.config", mechanism=mechanism)
    options: dict[str, str] = {}
    try:
        for module in parse_jaas_config(jaas) if jaas else ():
            options.update(module.options)
    except ValueError as exc:
        raise ConfigError(f"invalid sasl.jaas.config of listener {name}: {exc}") from None
    if not options.get("username"):
        raise ConfigError(
            f"the inter-broker listener {name} uses {protocol} with {mechanism}: set "
            f"username=\"...\" password=\"...\" in listener.name.{name.lower()}."
            f"{mechanism.lower()}.sasl.jaas.config (the broker's own credentials)")
    return ClientSecurity(protocol, context, mechanism, options["username"],
                          options.get("password", ""))
