"""Authentication to ZooKeeper and the ACLs of Odradek's znodes (Kafka's ``zookeeper.set.acl``).

How it works, as Kafka's ZooKeeper mode does it:

- **Who the broker is.** Kafka's brokers (and its ZooKeeper tools) find their ZooKeeper
  credentials in the JAAS file named by the JVM system property
  ``java.security.auth.login.config``, section ``Client`` (or the one named by
  ``zookeeper.sasl.clientconfig``): ``org.apache.zookeeper.server.auth.DigestLoginModule
  required username="..." password="...";`` for SASL DIGEST-MD5. Operators pass that
  property in the environment variable ``KAFKA_OPTS`` (``-Djava.security.auth.login.config=
  /etc/kafka/zk_jaas.conf``), which Kafka's start scripts hand to the JVM. Odradek reads the
  same ``-D`` properties from the same ``KAFKA_OPTS``, for the broker and for ``odradek
  zookeeper-security-migration`` alike: an existing unit file or container environment
  works unchanged, and the broker and the tool cannot disagree on where the credentials
  are (a broker config key would hold only the broker's half). ``-Dzookeeper.sasl.client=
  false`` turns SASL off, as in ZooKeeper's client. The password is never logged or shown
  in a ``repr``.
- **What every znode carries** (Kafka's ``ZkData.defaultAcls``). With
  ``zookeeper.set.acl=false``: world ALL (``OPEN_ACL_UNSAFE``). With ``true``: the creator
  (the authenticated SASL user, ZooKeeper's ``auth`` id) ALL, plus world READ, except under
  Kafka's sensitive roots (``ZkData.SensitiveRootPaths``: ``/config/users`` with SCRAM
  credentials and user quotas, ``/config/brokers`` with dynamic broker configs such as
  keystore passwords, ``/delegation_token/tokens``), where the world gets nothing. Kafka
  leaves ACL nodes (``/kafka-acl*``) world-readable, and so does Odradek; the world cannot
  write them. ``/consumers`` itself (Kafka's old consumers write under it) stays world ALL.
- **No way to authenticate** with ``zookeeper.set.acl=true`` refuses to start, as Kafka's
  ``KafkaServer.initZkClient`` does: the creator ACL would then name nobody. As in Kafka,
  a TLS client certificate (``zookeeper.ssl.client.enable`` with a keystore) is a way:
  ZooKeeper's x509 provider makes the certificate's subject DN the creator (``x509:CN=...``),
  so every broker and the migration tool must then present the same DN.
- **A wrong password** is refused by ZooKeeper at once (kazoo stops connecting): the
  broker refuses to start, naming the user and the JAAS file (:meth:`ZkClientSecurity.
  auth_failed`), rather than retrying. Refused later, while it runs, the store says the
  same at ERROR and tries new sessions until ZooKeeper accepts it again
  (:class:`odradek.cluster.zk_store.ZooKeeperStore`), as Kafka's ZooKeeperClient does.
- **Mutual TLS** (KIP-515, Kafka's ``zookeeper.ssl.*`` configs): with
  ``zookeeper.ssl.client.enable=true`` the client speaks TLS to ZooKeeper's
  ``secureClientPort``, presents the keystore's certificate and verifies the server's
  against the truststore, and its name against the connect string's host unless
  ``zookeeper.ssl.endpoint.identification.algorithm`` is empty. As in Kafka's
  ``KafkaConfig``, each key set in the broker's config wins, else the ZooKeeper client's
  JVM system property of ``KAFKA_OPTS`` (:data:`ZK_TLS_SYSTEM_PROPERTIES`: note
  ``zookeeper.client.secure`` and the camelCase ``keyStore``), else Kafka's default.
  ZooKeeper's Java client speaks TLS only through ``org.apache.zookeeper.
  ClientCnxnSocketNetty``, so ``zookeeper.clientCnxnSocket`` must name it, as Kafka's
  docs require. A store's type left unset is told by its file's extension (ZooKeeper's
  ``X509Util``: ``.pem``, ``.p12``/``.pfx``, ``.jks``); the keystore's key is opened with
  the keystore's password (ZooKeeper has no separate key password). The
  ``ssl.SSLContext`` is the listeners' own (:func:`odradek.security.tls.client_context`):
  PEM and PKCS12 stores, not JKS. :class:`ZkTlsHandler` hands it to kazoo, whose own TLS
  options cannot bound the protocol versions.
- **Migrating an existing tree** (Kafka's ``ZkSecurityMigrator``): the chroot's root, then
  every Odradek root path, recursively, get the ACLs above (``secure``) or world ALL
  (``unsecure``); see :func:`migrate_acls`. The tool takes its TLS keys from Kafka's
  ``--zk-tls-config-file`` (they win over ``KAFKA_OPTS``'s properties), see
  :meth:`ZkClientSecurity.for_tool`.
"""

from __future__ import annotations

import datetime
import logging
import re
import select
import shlex
import socket
import ssl
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.security import ACL, CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE

from odradek.cluster.store import StoreError
from odradek.cluster.zk_security_names import (
    JAVA_LOGIN_CONFIG,
    KAFKA_OPTS,
    ZK_TLS_SYSTEM_PROPERTIES,
)
from odradek.security.sasl import parse_jaas_config
from odradek.security.tls import TlsConfigError, _keystore_pem, client_context

__all__ = [
    "JAVA_LOGIN_CONFIG",
    "ROOT_PATHS",
    "SENSITIVE_ROOT_PATHS",
    "ZK_TLS_SYSTEM_PROPERTIES",
    "DigestCredentials",
    "ZkClientSecurity",
    "ZkTls",
    "ZkTlsHandler",
    "ZooKeeperSecurityError",
    "default_acls",
    "java_system_properties",
    "migrate_acls",
    "read_jaas_sections",
    "sensitive_path",
    "zk_tls_settings",
]

#: ZooKeeper's client properties: the JAAS section to use, and whether to use SASL at all.
ZK_SASL_CLIENT_CONFIG = "zookeeper.sasl.clientconfig"
ZK_SASL_CLIENT = "zookeeper.sasl.client"
DEFAULT_SECTION = "Client"
DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"

#: Kafka's ZkData.SensitiveRootPaths: the world may not even read under these.
SENSITIVE_ROOT_PATHS = ("/config/users", "/config/brokers", "/delegation_token/tokens")
#: Kafka keeps the old consumers' root open to everyone (ZkData.defaultAcls).
CONSUMERS_PATH = "/consumers"
#: The top-level paths the migration walks: Kafka's ZkData.SecureRootPaths (with
#: ZkAclStore's), plus the roots Odradek itself writes.
ROOT_PATHS = (
    "/admin", "/brokers", "/cluster", "/config", "/controller", "/controller_epoch",
    "/isr_change_notification", "/latest_producer_id_block", "/log_dir_event_notification",
    "/delegation_token", "/kafka-acl", "/kafka-acl-changes", "/kafka-acl-extended",
    "/kafka-acl-extended-changes",
    # Odradek's own
    "/controlled_shutdown", "/partition_state_notification", CONSUMERS_PATH,
)
log = logging.getLogger(__name__)

#: Requests the migration keeps in flight (a window of set_acls and get_children).
_PIPELINE = 500


#: The only socket of ZooKeeper's Java client that speaks TLS.
NETTY_SOCKET = "org.apache.zookeeper.ClientCnxnSocketNetty"
NIO_SOCKET = "org.apache.zookeeper.ClientCnxnSocketNIO"
#: ZooKeeper's X509Util.StoreFileType: a store's type from its file name's extension.
_STORE_EXTENSIONS = {".pem": "PEM", ".crt": "PEM", ".p12": "PKCS12", ".pfx": "PKCS12",
                     ".jks": "JKS", ".bcfks": "BCFKS"}
_LIST_KEYS = ("zookeeper.ssl.enabled.protocols", "zookeeper.ssl.cipher.suites")


class ZooKeeperSecurityError(StoreError):
    """ZooKeeper security is misconfigured (a JAAS file, ``zookeeper.set.acl``)."""


def sensitive_path(path: str) -> bool:
    return any(path == root or path.startswith(root + "/") for root in SENSITIVE_ROOT_PATHS)


def default_acls(secure: bool, path: str) -> list[ACL]:
    """Kafka's ZkData.defaultAcls: the ACLs of a znode created at ``path`` (chroot-relative)."""
    if not secure or path == CONSUMERS_PATH:
        return list(OPEN_ACL_UNSAFE)
    return list(CREATOR_ALL_ACL) + ([] if sensitive_path(path) else list(READ_ACL_UNSAFE))


def java_system_properties(kafka_opts: str) -> dict[str, str]:
    """The ``-Dkey=value`` properties of a JVM command line (``KAFKA_OPTS``)."""
    props: dict[str, str] = {}
    for word in shlex.split(kafka_opts):
        if word.startswith("-D") and len(word) > 2:
            key, _, value = word[2:].partition("=")
            props[key] = value
    return props


def _strip_comments(text: str) -> str:
    """JAAS files allow ``//`` and ``/* */`` comments; quoted values keep theirs."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            end = i + 1
            while end < len(text) and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            out.append(text[i:end + 1])
            i = end + 1
        elif text.startswith("//", i):
            newline = text.find("\n", i)
            i = len(text) if newline < 0 else newline
        elif text.startswith("/*", i):
            close = text.find("*/", i + 2)
            i = len(text) if close < 0 else close + 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


_SECTION = re.compile(r"\s*([A-Za-z_][\w.$-]*)\s*\{")


def read_jaas_sections(text: str) -> dict[str, str]:
    """A JAAS file's sections, ``Name { <entries> };`` → {Name: <entries>}. ValueError when
    it is not that (naming the character, never quoting the text: it holds passwords)."""
    text = _strip_comments(text)
    sections: dict[str, str] = {}
    pos = 0
    while text[pos:].strip():
        m = _SECTION.match(text, pos)
        if m is None:
            raise ValueError(f"invalid JAAS file at character {pos + 1}: expected 'Name {{'")
        i = m.end()
        while i < len(text) and text[i] != "}":  # the body ends at the first unquoted }
            if text[i] == '"':
                i += 1
                while i < len(text) and text[i] != '"':
                    i += 2 if text[i] == "\\" else 1
            i += 1
        if i >= len(text):
            raise ValueError(f"invalid JAAS file: section {m[1]} has no closing '}}'")
        sections[m[1]] = text[m.end():i]
        pos = i + 1
        rest = text[pos:].lstrip()
        if not rest.startswith(";"):
            raise ValueError(f"invalid JAAS file: section {m[1]} must end with '}};'")
        pos = len(text) - len(rest) + 1
    return sections


@dataclass(frozen=True, slots=True)
class DigestCredentials:
    """A SASL DIGEST-MD5 user of ZooKeeper; the password stays out of ``repr``."""

    username: str
    password: str = field(repr=False)


def zk_tls_settings(config: Mapping[str, Any], explicit: Collection[str],
                    props: Mapping[str, str]) -> dict[str, Any]:
    """Kafka's ``zk*ConfigOrSystemProperty``: each TLS key of :data:`ZK_TLS_SYSTEM_PROPERTIES`
    from ``config`` when set there (``explicit``), else from the JVM property ``props`` has,
    else ``config``'s default. Lists are lists; the hostname property's true/false becomes
    ``HTTPS``/empty, as Kafka translates it."""
    settings: dict[str, Any] = {}
    for key, prop in ZK_TLS_SYSTEM_PROPERTIES.items():
        value = config.get(key)
        if key not in explicit and prop in props:
            raw = props[prop].strip()
            if key == "zookeeper.ssl.client.enable":
                value = raw.lower() == "true"
            elif key == "zookeeper.ssl.endpoint.identification.algorithm":
                value = "HTTPS" if raw.lower() == "true" else ""
            elif key in _LIST_KEYS:
                value = [v.strip() for v in raw.split(",") if v.strip()]
            else:
                value = raw
        settings[key] = value
    return settings


def _store_type(settings: Mapping[str, Any], store: str) -> str:
    location = str(settings[f"zookeeper.ssl.{store}.location"] or "")
    kind = str(settings[f"zookeeper.ssl.{store}.type"] or "").upper()
    if kind or not location:
        return kind or "PEM"
    detected = _STORE_EXTENSIONS.get(Path(location).suffix.lower())
    if detected is None:
        raise ZooKeeperSecurityError(
            f"zookeeper.ssl.{store}.type is not set and the extension of "
            f"zookeeper.ssl.{store}.location {location!r} does not tell it: set "
            f"zookeeper.ssl.{store}.type to PEM or PKCS12")
    return detected


@dataclass(frozen=True, slots=True)
class ZkTls:
    """The client side of mutual TLS to ZooKeeper: the context and whether the server's
    certificate must name the host of the connect string."""

    context: ssl.SSLContext
    check_hostname: bool
    keystore: str  # where the client certificate comes from (for messages), or ""
    #: why the client certificate is out of its validity period ("expired on ..."), or ""
    keystore_expiry: str = ""

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> ZkTls | None:
        """None when ``zookeeper.ssl.client.enable`` is false; a
        :class:`ZooKeeperSecurityError` naming the key when the settings cannot work."""
        if not settings["zookeeper.ssl.client.enable"]:
            return None
        socket_class = str(settings["zookeeper.clientCnxnSocket"] or "")
        if socket_class != NETTY_SOCKET:
            raise ZooKeeperSecurityError(
                "zookeeper.ssl.client.enable is true, but zookeeper.clientCnxnSocket is "
                f"{socket_class or 'not set'}: ZooKeeper's client speaks TLS only through "
                f"{NETTY_SOCKET}; set zookeeper.clientCnxnSocket={NETTY_SOCKET}")
        protocol = str(settings["zookeeper.ssl.protocol"] or "TLSv1.2")
        if protocol not in ("TLSv1.2", "TLSv1.3"):
            raise ZooKeeperSecurityError(
                f"invalid zookeeper.ssl.protocol {protocol!r}: expected TLSv1.2 or TLSv1.3")
        keystore_password = settings["zookeeper.ssl.keystore.password"] or None
        # ZooKeeper's X509Util: without enabled protocols, only the context's protocol.
        as_listener: dict[str, Any] = {
            "ssl.enabled.protocols": list(settings["zookeeper.ssl.enabled.protocols"] or ())
            or [protocol],
            "ssl.cipher.suites": list(settings["zookeeper.ssl.cipher.suites"] or ()),
            "ssl.keystore.location": settings["zookeeper.ssl.keystore.location"] or None,
            "ssl.keystore.password": keystore_password,
            "ssl.keystore.type": _store_type(settings, "keystore"),
            "ssl.key.password": keystore_password,  # ZooKeeper: one password for both
            "ssl.truststore.location": settings["zookeeper.ssl.truststore.location"] or None,
            "ssl.truststore.password": settings["zookeeper.ssl.truststore.password"] or None,
            "ssl.truststore.type": _store_type(settings, "truststore"),
        }
        algorithm = str(settings["zookeeper.ssl.endpoint.identification.algorithm"] or "")
        check_hostname = algorithm.strip().upper() == "HTTPS"
        if algorithm.strip() and not check_hostname:
            # Kafka too turns the check off for anything but HTTPS: a typo must not be silent
            log.warning("zookeeper.ssl.endpoint.identification.algorithm=%s is not HTTPS: "
                        "ZooKeeper's certificate will not be checked against its host name "
                        "(set it empty to say so, or HTTPS)", algorithm)
        try:
            context = client_context(as_listener.get, check_hostname=check_hostname)
        except TlsConfigError as exc:
            message = re.sub(r"(?<![\w.])ssl\.", "zookeeper.ssl.", str(exc))
            message = message.replace("zookeeper.ssl.key.password",
                                      "zookeeper.ssl.keystore.password")
            raise ZooKeeperSecurityError(f"TLS to ZooKeeper: {message}") from None
        keystore = str(as_listener["ssl.keystore.location"] or "")
        return cls(context, check_hostname, keystore,
                   _validity_problem(as_listener) if keystore else "")

    def describe_failure(self, error: BaseException) -> str:
        """Why a handshake failed, in an operator's words (ZooKeeper with
        ``ssl.clientAuth=need`` refuses a client without a certificate it trusts)."""
        reason = getattr(error, "reason", None) or str(error) or type(error).__name__
        # ZooKeeper's refusals of a client certificate are alerts about certificates
        # (bad_certificate, certificate_unknown, certificate_required)
        about_ours = isinstance(error, ssl.SSLError) and "CERTIFICATE" in str(reason).upper()
        if isinstance(error, ssl.SSLCertVerificationError):
            reason = f"certificate verify failed: {error.verify_message}"
            hint = ("; ZooKeeper's certificate is not trusted by zookeeper.ssl.truststore.*"
                    " or does not name the host (zookeeper.ssl.endpoint.identification."
                    "algorithm)")
        elif isinstance(error, ssl.SSLEOFError):
            # a plaintext port reads the ClientHello as a request too large, and hangs up
            hint = ("; ZooKeeper closed the connection during the handshake: is that its "
                    "plaintext clientPort rather than its secureClientPort?")
        elif about_ours and self.keystore_expiry:
            # ZooKeeper's trust manager says only certificate_unknown: say why
            hint = (f"; ZooKeeper refused the client certificate of {self.keystore}: it "
                    f"{self.keystore_expiry}")
        elif about_ours and not self.keystore:
            hint = ("; the client has no certificate to present: set "
                    "zookeeper.ssl.keystore.location if ZooKeeper asks for one "
                    "(ssl.clientAuth=need)")
        elif about_ours:
            hint = (f"; ZooKeeper refused the client certificate of {self.keystore} (not "
                    "signed by a CA in its ssl.trustStore?)")
        else:
            hint = ""
        return f"TLS to ZooKeeper failed: {reason}{hint}"


def _validity_problem(as_listener: Mapping[str, Any],
                      now: datetime.datetime | None = None) -> str:
    """"expired on <date>" / "is not valid before <date>" for the keystore's certificate
    (the chain's first), "" when it is valid now or cannot be read here."""
    try:
        from cryptography import x509

        pem, _, _ = _keystore_pem(as_listener.get, "")
        cert = x509.load_pem_x509_certificate(pem)
    except (ImportError, TlsConfigError, ValueError):
        return ""
    now = now or datetime.datetime.now(datetime.UTC)
    if cert.not_valid_after_utc < now:
        return f"expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M:%S} UTC"
    if cert.not_valid_before_utc > now:
        return f"is not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M:%S} UTC"
    return ""


class ZkTlsHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's threading handler whose connections are wrapped in :class:`ZkTls`'s context
    (kazoo's own TLS options cannot set the protocol versions). The last handshake failure
    is kept, for the message of a start that timed out."""

    def __init__(self, tls: ZkTls) -> None:
        super().__init__()
        self.tls = tls
        self.last_failure: BaseException | None = None

    def create_connection(self, address: tuple[str, int], hostname: str | None = None,
                          timeout: float | None = None, **_ignored: Any) -> socket.socket:
        sock = socket.create_connection(address, timeout)
        try:
            tls_sock = self.tls.context.wrap_socket(
                sock, server_hostname=hostname if self.tls.check_hostname else None)
            if tls_sock.version() == "TLSv1.3":
                _refused_after_handshake(tls_sock)
        except OSError as exc:  # ssl.SSLError too
            sock.close()
            self.last_failure = exc
            raise
        tls_sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.last_failure = None
        return tls_sock


#: How long a TLS 1.3 client waits for the server's first word after the handshake.
_TLS13_VERDICT_S = 0.2


def _refused_after_handshake(tls_sock: ssl.SSLSocket) -> None:
    """In TLS 1.3 the client's handshake ends before the server has checked the client's
    certificate: a refusal is an alert that follows. A server that accepts sends its
    session tickets first, so wait (briefly) for the first record and read it without
    blocking: the alert raises its ``ssl.SSLError``, a ticket leaves nothing to read."""
    readable, _, _ = select.select([tls_sock], [], [], _TLS13_VERDICT_S)
    if not readable:
        return
    blocking = tls_sock.gettimeout()
    tls_sock.setblocking(False)
    try:
        tls_sock.recv(1)  # ZooKeeper says nothing before our connect request
    except ssl.SSLWantReadError:
        pass
    finally:
        tls_sock.settimeout(blocking)


@dataclass(frozen=True, slots=True)
class ZkClientSecurity:
    """How a client authenticates to ZooKeeper and which ACLs its znodes get."""

    sasl: DigestCredentials | None = None
    set_acl: bool = False
    jaas_file: str | None = None  # where the credentials came from (for messages)
    tls: ZkTls | None = None

    @classmethod
    def from_jvm_properties(cls, props: Mapping[str, str], set_acl: bool) -> ZkClientSecurity:
        """Kafka's JaasUtils.isZkSaslEnabled: SASL when the login config names a file with
        the client section (``Client``, or ``zookeeper.sasl.clientconfig``) and
        ``zookeeper.sasl.client`` is not false. A section named explicitly but missing, an
        unreadable file or a login module other than DigestLoginModule is an error."""
        jaas_file = props.get(JAVA_LOGIN_CONFIG)
        if not jaas_file or props.get(ZK_SASL_CLIENT, "true").lower() == "false":
            return cls(None, set_acl, None)
        section = props.get(ZK_SASL_CLIENT_CONFIG, DEFAULT_SECTION)
        try:
            text = Path(jaas_file).read_text()
        except OSError as exc:
            raise ZooKeeperSecurityError(
                f"cannot read the JAAS file {jaas_file} ({JAVA_LOGIN_CONFIG}): "
                f"{exc.strerror}") from None
        try:
            sections = read_jaas_sections(text)
            body = sections.get(section)
            modules = parse_jaas_config(body) if body is not None else []
        except ValueError as exc:
            raise ZooKeeperSecurityError(f"{jaas_file}: {exc}") from None
        if body is None:
            if ZK_SASL_CLIENT_CONFIG in props:
                raise ZooKeeperSecurityError(
                    f"the JAAS file {jaas_file} has no section {section!r} "
                    f"({ZK_SASL_CLIENT_CONFIG})")
            return cls(None, set_acl, jaas_file)
        for module in modules:
            if module.login_module == DIGEST_LOGIN_MODULE:
                username = module.options.get("username")
                password = module.options.get("password")
                if not username or password is None:
                    raise ZooKeeperSecurityError(
                        f"{jaas_file}: section {section}: {DIGEST_LOGIN_MODULE} needs "
                        "username and password")
                return cls(DigestCredentials(username, password), set_acl, jaas_file)
        names = ", ".join(m.login_module for m in modules)
        raise ZooKeeperSecurityError(
            f"{jaas_file}: section {section}: Odradek authenticates to ZooKeeper with SASL "
            f"DIGEST-MD5 only ({DIGEST_LOGIN_MODULE}), not {names}")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str], set_acl: bool) -> ZkClientSecurity:
        """From the ``-D`` properties of ``KAFKA_OPTS`` (as Kafka's start scripts pass them)."""
        return cls.from_jvm_properties(java_system_properties(environ.get(KAFKA_OPTS, "")),
                                       set_acl)

    @classmethod
    def for_broker(cls, config: Mapping[str, Any], explicit: Collection[str],
                   environ: Mapping[str, str]) -> ZkClientSecurity:
        """A broker's: SASL from ``KAFKA_OPTS``'s JAAS file, ``zookeeper.set.acl`` and the
        TLS keys from its config (``explicit``: the keys set there), falling back to
        ``KAFKA_OPTS``'s ZooKeeper client properties (:func:`zk_tls_settings`)."""
        props = java_system_properties(environ.get(KAFKA_OPTS, ""))
        security = cls.from_jvm_properties(props, bool(config.get("zookeeper.set.acl")))
        tls = ZkTls.from_settings(zk_tls_settings(config, explicit, props))
        return cls(security.sasl, security.set_acl, security.jaas_file, tls)

    @classmethod
    def for_tool(cls, config: Mapping[str, Any], explicit: Collection[str],
                 environ: Mapping[str, str], set_acl: bool) -> ZkClientSecurity:
        """A ZooKeeper tool's (Kafka's ZkSecurityMigrator): SASL from ``KAFKA_OPTS``, the
        TLS keys from ``config`` where ``explicit`` (its ``--zk-tls-config-file``), else
        ``KAFKA_OPTS``'s ZooKeeper client properties, else Kafka's defaults."""
        security = cls.for_broker(config, explicit, environ)
        return cls(security.sasl, set_acl, security.jaas_file, security.tls)

    @property
    def tls_client_auth(self) -> bool:
        """Kafka's ``zkTlsClientAuthEnabled``: TLS with a client certificate to present."""
        return self.tls is not None and bool(self.tls.keystore)

    @property
    def authenticated(self) -> bool:
        """SASL, or a TLS client certificate (ZooKeeper's x509 id), as Kafka counts them."""
        return self.sasl is not None or self.tls_client_auth

    def require_authentication(self) -> None:
        """Refuse ``zookeeper.set.acl=true`` without credentials (Kafka's SecurityException)."""
        if self.set_acl and not self.authenticated:
            where = (f"the JAAS file {self.jaas_file} has no usable {DEFAULT_SECTION} section"
                     if self.jaas_file else
                     f"no JAAS file is named (-D{JAVA_LOGIN_CONFIG}=<file> in {KAFKA_OPTS})")
            raise ZooKeeperSecurityError(
                "zookeeper.set.acl is true, but the broker has no way to authenticate to "
                f"ZooKeeper: {where}, and it presents no TLS client certificate "
                "(zookeeper.ssl.client.enable, zookeeper.ssl.keystore.location); give it a "
                f"'{DEFAULT_SECTION} {{ {DIGEST_LOGIN_MODULE} required username=\"...\" "
                "password=\"...\"; };' section or a certificate (docs/operations.md)")

    def auth_failed(self, hosts: str) -> str:
        """The reason a refused SASL authentication is given (never the password)."""
        user = self.sasl.username if self.sasl else "?"
        source = (f"the {DEFAULT_SECTION} section of the JAAS file {self.jaas_file}"
                  if self.jaas_file else "the broker's credentials")
        return (f"ZooKeeper refused the SASL DIGEST-MD5 authentication of user '{user}' "
                f"at {hosts}: a wrong password, or a user its Server section does not know "
                f"(credentials from {source})")

    def acls(self, path: str) -> list[ACL]:
        return default_acls(self.set_acl, path)

    def kazoo_options(self) -> dict[str, Any]:
        """Keyword arguments of a ``KazooClient`` (a new TLS handler each: one a client)."""
        options: dict[str, Any] = {}
        if self.sasl is not None:
            options["sasl_options"] = {"mechanism": "DIGEST-MD5",
                                       "username": self.sasl.username,
                                       "password": self.sasl.password}
        if self.tls is not None:
            options["handler"] = ZkTlsHandler(self.tls)
            options["use_ssl"] = True  # for kazoo's log lines; the handler does the TLS
        return options


def migrate_acls(client: KazooClient, secure: bool,
                 roots: Sequence[str] = ROOT_PATHS) -> tuple[int, list[str]]:
    """Kafka's ZkSecurityMigrator on ``client``'s tree (rooted at its chroot): ``/`` alone,
    then each existing root of ``roots`` and everything under it get
    :func:`default_acls`. Returns how many znodes were set and the roots that were missing.
    Nodes deleted meanwhile are skipped; any other failure raises (re-run the tool)."""
    client.set_acls("/", default_acls(secure, "/"))
    count = 1
    missing = [root for root in roots if client.exists(root) is None]
    level = [root for root in roots if root not in missing]
    while level:
        following: list[str] = []
        for start in range(0, len(level), _PIPELINE):
            window = level[start:start + _PIPELINE]
            sets = [client.set_acls_async(p, default_acls(secure, p)) for p in window]
            kids = [client.get_children_async(p) for p in window]
            for path, set_request, kid_request in zip(window, sets, kids, strict=True):
                try:
                    set_request.get()
                    count += 1
                    following.extend(f"{path}/{child}" for child in kid_request.get())
                except NoNodeError:
                    continue
        level = following
    return count, missing
