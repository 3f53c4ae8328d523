"""Client security settings: TLS and SASL for Odradek's own client, from Kafka's keys.

How it works: :func:`client_security` reads a client config as Kafka's tools take it
(``--command-config client.properties``) in either dialect: the Java client's
(``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config`` with ``username`` and
``password``, ``ssl.truststore.*``, ``ssl.keystore.*``) or librdkafka's (``sasl.username``,
``sasl.password``, ``ssl.ca.location``, ``ssl.certificate.location``,
``ssl.key.location``). Secrets can stay out of the file through Kafka's config providers
(KIP-297, KIP-887): with ``config.providers=env,file`` and
``config.providers.env.class=org.apache.kafka.common.config.provider.EnvVarConfigProvider``
a value ``${env:KAFKA_PASSWORD}`` is read from the environment, ``${file:/path:key}`` from
another properties file (``FileConfigProvider``), ``${dir:/path:name}`` from a file of a
directory (``DirectoryConfigProvider``): :func:`resolve_config_providers`.
The result, a :class:`ClientSecurity`, tells
:class:`~odradek.client.connection.BrokerConnection` to wrap its socket in TLS (verifying
the broker against the truststore, its host name unless
``ssl.endpoint.identification.algorithm`` is empty) and to authenticate with SaslHandshake
v1 and SaslAuthenticate (PLAIN, or SCRAM through
:class:`~odradek.security.sasl.ScramClient`) before anything else.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from odradek.security.sasl import MECHANISMS, parse_jaas_config
from odradek.security.tls import TlsConfigError, client_context

__all__ = ["ClientSecurity", "client_security", "librdkafka_config", "librdkafka_settings",
           "load_client_properties", "resolve_config_providers"]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

#: the Java client's security keys librdkafka does not know (:func:`librdkafka_config`
#: translates them)
_JAVA_ONLY_KEYS = frozenset({
    "sasl.jaas.config", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.certificates", "ssl.keystore.type",
    "ssl.keystore.key", "ssl.keystore.certificate.chain",
})


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mechanism: str = ""
    username: str = ""
    password: str = ""

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def __repr__(self) -> str:  # never the password
        return (f"ClientSecurity(protocol={self.protocol!r}, mechanism={self.mechanism!r}, "
                f"username={self.username!r})")


PLAINTEXT = ClientSecurity()


def load_client_properties(path: str) -> dict[str, str]:
    """A Java properties file (``--command-config``): ``key=value`` or ``key: value``,
    ``#``/``!`` comments, backslash continuations; config providers resolved."""
    return resolve_config_providers(_read_properties(path))


def _read_properties(path: str) -> dict[str, str]:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    props: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = (pending + raw.strip()) if pending else raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1] + " "
            continue
        key, _, value = line.partition("=") if "=" in line else line.partition(":")
        props[key.strip()] = value.strip()
    return props


#: ``${provider:[path:]key}``, Kafka's ConfigTransformer pattern
_VARIABLE = re.compile(r"\$\{([^}]*?):(?:([^}]*?):)?([^}]*?)\}")


def _env(path: str, key: str) -> str | None:
    return os.environ.get(key)


def _file(path: str, key: str) -> str | None:
    return _read_properties(path).get(key)


def _directory(path: str, key: str) -> str | None:
    try:
        with open(os.path.join(path, key), encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


#: the config providers Odradek's tools implement, by the tail of Kafka's class name
_PROVIDERS: dict[str, Callable[[str, str], str | None]] = {
    "EnvVarConfigProvider": _env,
    "FileConfigProvider": _file,
    "DirectoryConfigProvider": _directory,
}


def resolve_config_providers(props: Mapping[str, str]) -> dict[str, str]:
    """``props`` with every ``${provider:[path:]key}`` of a provider named in
    ``config.providers`` replaced by its value, and the ``config.providers`` keys
    removed. ValueError naming the key or the variable that cannot be resolved (never a
    value)."""
    names = [n.strip() for n in props.get("config.providers", "").split(",") if n.strip()]
    out = {k: v for k, v in props.items()
           if k != "config.providers" and not k.startswith("config.providers.")}
    if not names:
        return out
    providers: dict[str, Callable[[str, str], str | None]] = {}
    for name in names:
        cls = props.get(f"config.providers.{name}.class", "").strip()
        found = _PROVIDERS.get(cls.rpartition(".")[2])
        if found is None:
            raise ValueError(f"config.providers.{name}.class {cls!r} is not supported (only "
                             f"Kafka's {', '.join(_PROVIDERS)})")
        providers[name] = found

    def value(key: str, match: re.Match[str]) -> str:
        provider, path, name = match.group(1), match.group(2) or "", match.group(3)
        if provider not in providers:
            return match.group(0)  # not a provider: left as it is, as Kafka does
        try:
            found = providers[provider](path, name)
        except OSError as exc:
            raise ValueError(f"{key}: cannot read {path!r} for ${{{provider}:...}}: "
                             f"{exc.strerror or exc}") from None
        if found is None:
            raise ValueError(f"{key}: ${{{provider}:{path + ':' if path else ''}{name}}} "
                             "is not set")
        return found

    resolved: dict[str, str] = {}
    for key, text in out.items():
        def one(match: re.Match[str], key: str = key) -> str:
            return value(key, match)

        resolved[key] = _VARIABLE.sub(one, text)
    return resolved


def client_security(props: Mapping[str, str]) -> ClientSecurity:
    """The security of a client config; ValueError naming the key that is wrong."""
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        raise ValueError(f"security.protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")
    context = None
    if protocol in ("SSL", "SASL_SSL"):
        context = _tls(props)
    if not protocol.startswith("SASL_"):
        return ClientSecurity(protocol, context)
    mechanism = props.get("sasl.mechanism", props.get("sasl.mechanisms", "GSSAPI")).upper()
    if mechanism not in MECHANISMS:
        raise ValueError(f"sasl.mechanism {mechanism} is not supported by Odradek's client "
                         f"(only {', '.join(MECHANISMS)})")
    username = props.get("sasl.username", "")
    password = props.get("sasl.password", "")
    if "sasl.jaas.config" in props:
        for module in parse_jaas_config(props["sasl.jaas.config"]):
            username = module.options.get("username", username)
            password = module.options.get("password", password)
    if not username:
        raise ValueError("SASL needs a user: sasl.username (and sasl.password), or "
                         "sasl.jaas.config with username=\"...\" password=\"...\"")
    return ClientSecurity(protocol, context, mechanism, username, password)


_LIBRDKAFKA_KEYS = (
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username",
    "sasl.password", "ssl.ca.location", "ssl.certificate.location", "ssl.key.location",
    "ssl.key.password", "ssl.endpoint.identification.algorithm",
)


def librdkafka_settings(props: Mapping[str, str]) -> dict[str, str]:
    """The same client config for confluent-kafka (librdkafka): its own keys as they are,
    the Java client's translated (a JAAS config's user and password, a PEM truststore's
    location as ``ssl.ca.location``)."""
    client_security(props)  # refuse what cannot work, as for Odradek's own client
    out = {k: props[k] for k in _LIBRDKAFKA_KEYS if k in props}
    for module in parse_jaas_config(props["sasl.jaas.config"]) if "sasl.jaas.config" in \
            props else ():
        if "username" in module.options:
            out["sasl.username"] = module.options["username"]
        if "password" in module.options:
            out["sasl.password"] = module.options["password"]
    if "ssl.ca.location" not in out and props.get("ssl.truststore.location") and \
            props.get("ssl.truststore.type", "").upper() == "PEM":
        out["ssl.ca.location"] = props["ssl.truststore.location"]
    return out


def librdkafka_config(props: Mapping[str, str]) -> dict[str, str]:
    """A whole client config for librdkafka (confluent-kafka): its own keys as they are,
    the Java client's security keys translated (:func:`librdkafka_settings`; a PKCS12
    keystore is librdkafka's ``ssl.keystore.location`` too, a PEM one its certificate and
    key locations). ValueError for a setting that cannot work, or that librdkafka cannot
    take (a PKCS12 truststore: give the CA as PEM, ``ssl.ca.location``). A SASL
    mechanism Odradek's client lacks (GSSAPI, OAUTHBEARER) is librdkafka's business: such
    a config is passed on as it is."""
    props = resolve_config_providers(props)
    mechanism = props.get("sasl.mechanism", props.get("sasl.mechanisms", "GSSAPI")).upper()
    if props.get("security.protocol", "").upper().startswith("SASL_") and \
            mechanism not in MECHANISMS:
        return dict(props)  # librdkafka's own (GSSAPI, OAUTHBEARER), as they are
    if props.get("ssl.truststore.location") and \
            props.get("ssl.truststore.type", "JKS").upper() != "PEM" and \
            props.get("security.protocol", "").upper() in ("SSL", "SASL_SSL"):
        raise ValueError("librdkafka reads a truststore in PEM only: set "
                         "ssl.truststore.type=PEM, or ssl.ca.location to the CA's PEM file")
    out = {k: v for k, v in props.items() if k not in _JAVA_ONLY_KEYS}
    out.update(librdkafka_settings(props))
    if props.get("ssl.truststore.certificates") and "ssl.ca.location" not in out:
        out["ssl.ca.pem"] = props["ssl.truststore.certificates"]
    keystore = props.get("ssl.keystore.location", "")
    if keystore and props.get("ssl.keystore.type", "JKS").upper() == "PEM":
        del out["ssl.keystore.location"]
        out.pop("ssl.keystore.password", None)
        out.setdefault("ssl.certificate.location", keystore)
        out.setdefault("ssl.key.location", keystore)
    if props.get("ssl.keystore.key"):
        out["ssl.key.pem"] = props["ssl.keystore.key"]
        out["ssl.certificate.pem"] = props.get("ssl.keystore.certificate.chain", "")
    return out


def _tls(props: Mapping[str, str]) -> ssl.SSLContext:
    values: dict[str, Any] = {
        "ssl.enabled.protocols": ("TLSv1.2", "TLSv1.3"), "ssl.cipher.suites": (),
        "ssl.truststore.type": props.get("ssl.truststore.type", "JKS"),
        "ssl.keystore.type": props.get("ssl.keystore.type", "JKS"),
    }
    for key in ("ssl.truststore.location", "ssl.truststore.password",
                "ssl.truststore.certificates", "ssl.keystore.location",
                "ssl.keystore.password", "ssl.key.password", "ssl.keystore.key",
                "ssl.keystore.certificate.chain"):
        values[key] = props.get(key, "")
    if "ssl.enabled.protocols" in props:
        values["ssl.enabled.protocols"] = tuple(
            p.strip() for p in props["ssl.enabled.protocols"].split(",") if p.strip())
    # librdkafka's names: a CA file, and a certificate and key in PEM files
    if props.get("ssl.ca.location"):
        values.update({"ssl.truststore.type": "PEM",
                       "ssl.truststore.location": props["ssl.ca.location"]})
    if props.get("ssl.certificate.location"):
        with open(props["ssl.certificate.location"]) as f:
            chain = f.read()
        with open(props.get("ssl.key.location") or props["ssl.certificate.location"]) as f:
            key = f.read()
        values.update({"ssl.keystore.type": "PEM", "ssl.keystore.key": key,
                       "ssl.keystore.certificate.chain": chain,
                       "ssl.key.password": props.get("ssl.key.password", "")})
    check_hostname = props.get("ssl.endpoint.identification.algorithm", "https") != ""
    try:
        return client_context(values.__getitem__, check_hostname=check_hostname)
    except TlsConfigError as exc:
        raise ValueError(str(exc)) from None
