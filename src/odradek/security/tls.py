"""TLS: an ``ssl.SSLContext`` for a listener, from Kafka's ``ssl.*`` keys.

How it works: :func:`server_context` reads a listener's settings (Kafka's
``SslFactory``/``DefaultSslEngineFactory`` keys, the ``listener.name.<name>.`` overrides
already resolved by the caller) and builds a server context:

- *Keystore* (the broker's key and certificate chain): ``ssl.keystore.type`` PEM (the
  file at ``ssl.keystore.location`` holds the key and the chain, the key encrypted with
  ``ssl.key.password`` or not; or KIP-651's inline ``ssl.keystore.key`` and
  ``ssl.keystore.certificate.chain``) or PKCS12 (``ssl.keystore.location`` opened with
  ``ssl.keystore.password``, read with the ``cryptography`` package). Java's JKS cannot be
  read: converting it (``keytool -importkeystore -deststoretype PKCS12``) is the way.
- *Truststore* (the CAs client certificates must chain to): PEM file, KIP-651's inline
  ``ssl.truststore.certificates``, or PKCS12; none configured: the system's CAs, as the
  JVM's default truststore.
- ``ssl.enabled.protocols`` (TLSv1.2, TLSv1.3) bound the versions; ``ssl.cipher.suites``
  (OpenSSL names, or IANA names as Kafka's docs give them) restrict TLSv1.2's suites;
  ``ssl.client.auth`` none / requested / required is ``CERT_NONE`` / ``CERT_OPTIONAL`` /
  ``CERT_REQUIRED``. A client's TLS 1.2 renegotiation is refused (``OP_NO_RENEGOTIATION``,
  what OpenSSL 3.0 does by default and 1.1.1 does not): each would cost a handshake.

``ssl`` loads a key and certificate only from a file: inline PEM and PKCS12 material is
written to a private temporary file (mode 0600 in a 0700 directory) that is removed as
soon as it is loaded. Every problem is a :class:`TlsConfigError` naming the key, never a
password. :func:`keystore_identity` reads the subject and subject alternative names of
the keystore's certificate, which a keystore reloaded at runtime must keep (Kafka's
``SslFactory.CertificateEntries``).
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "CertificateIdentity",
    "TlsConfigError",
    "client_context",
    "keystore_identity",
    "openssl_cipher_name",
    "server_context",
]

_VERSIONS: Final = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH: Final = {
    "none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED,
}
# TLSv1.3's suites: fixed by OpenSSL in Python's ssl, accepted in ssl.cipher.suites.
_TLS13_SUITES: Final = frozenset({
    "TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
    "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256",
})

Settings = Callable[[str], Any]
"""key -> the value in effect for the listener (a parsed ``BrokerConfig`` value)."""


class TlsConfigError(ValueError):
    """A listener's TLS settings cannot make a context (the message names the key)."""


def server_context(setting: Settings, listener: str = "") -> ssl.SSLContext:
    """The server context of a TLS listener (see the module's header)."""
    where = f" (listener {listener})" if listener else ""
    auth = str(setting("ssl.client.auth") or "none").lower()
    if auth not in _CLIENT_AUTH:
        raise TlsConfigError(f"invalid ssl.client.auth {auth!r}{where}: expected none, "
                             "requested or required")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # TLS 1.2 renegotiation asked by clients: refused (OpenSSL 3.0's default, not 1.1.1's)
    ctx.options |= ssl.OP_NO_RENEGOTIATION
    _versions(ctx, setting, where)
    _ciphers(ctx, setting, where)
    _load_keystore(ctx, setting, where)
    if auth != "none":
        _load_truststore(ctx, setting, where, ssl.Purpose.CLIENT_AUTH)
    ctx.verify_mode = _CLIENT_AUTH[auth]
    return ctx


def client_context(setting: Settings, check_hostname: bool = True) -> ssl.SSLContext:
    """A client context from the same keys (a broker's inter-broker client, the CLI):
    the truststore verifies the server, a keystore, if configured, is the client's
    certificate (mutual TLS)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _versions(ctx, setting, "")
    _ciphers(ctx, setting, "")
    _load_truststore(ctx, setting, "", ssl.Purpose.SERVER_AUTH)
    if setting("ssl.keystore.location") or setting("ssl.keystore.key"):
        _load_keystore(ctx, setting, "")
    ctx.check_hostname = check_hostname
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _versions(ctx: ssl.SSLContext, setting: Settings, where: str) -> None:
    enabled = [str(v) for v in setting("ssl.enabled.protocols") or ()]
    unknown = [v for v in enabled if v not in _VERSIONS]
    if unknown or not enabled:
        raise TlsConfigError(f"invalid ssl.enabled.protocols {','.join(enabled)!r}{where}: "
                             "expected TLSv1.2 and/or TLSv1.3")
    versions = sorted(_VERSIONS[v] for v in enabled)
    ctx.minimum_version = versions[0]
    ctx.maximum_version = versions[-1]


def openssl_cipher_name(name: str) -> str:
    """An IANA suite name as Kafka's docs give them (``TLS_ECDHE_RSA_WITH_AES_128_GCM_
    SHA256``) -> OpenSSL's (``ECDHE-RSA-AES128-GCM-SHA256``); other names unchanged."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    kx, _, cipher = name[4:].partition("_WITH_")
    parts = cipher.split("_")
    if parts[0] == "AES" and len(parts) >= 3:  # AES_128_GCM_SHA256 / AES_256_CBC_SHA384
        parts = [f"AES{parts[1]}", *parts[2:]]
    if "CBC" in parts:
        parts.remove("CBC")
    if parts[:2] == ["CHACHA20", "POLY1305"]:  # OpenSSL leaves its hash out
        parts = parts[:2]
    prefix = kx.replace("_", "-")
    if prefix == "RSA":  # plain RSA key exchange: OpenSSL names it by the cipher alone
        return "-".join(parts)
    return f"{prefix}-{'-'.join(parts)}"


def _ciphers(ctx: ssl.SSLContext, setting: Settings, where: str) -> None:
    suites = [str(s) for s in setting("ssl.cipher.suites") or ()]
    tls12 = [openssl_cipher_name(s) for s in suites if s not in _TLS13_SUITES]
    if not tls12:
        return
    try:
        ctx.set_ciphers(":".join(tls12))
    except ssl.SSLError:
        raise TlsConfigError(f"invalid ssl.cipher.suites {','.join(suites)!r}{where}: no "
                             "cipher suite OpenSSL knows") from None


def _store_type(setting: Settings, key: str, where: str) -> str:
    kind = str(setting(key) or "JKS").upper()
    if kind == "JKS":
        raise TlsConfigError(
            f"{key}=JKS{where}: Java keystores cannot be read by Odradek; set {key} to "
            "PEM or PKCS12 (keytool -importkeystore -deststoretype PKCS12 converts one)")
    if kind not in ("PEM", "PKCS12"):
        raise TlsConfigError(f"invalid {key} {kind!r}{where}: expected PEM or PKCS12")
    return kind


def _read(path: str, key: str, where: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise TlsConfigError(f"cannot read {key} {path!r}{where}: "
                             f"{exc.strerror or exc}") from None


def _password(setting: Settings, key: str) -> str | None:
    value = setting(key)
    return str(value) if value else None


def _keystore_pem(setting: Settings, where: str) -> tuple[bytes, str | None, str]:
    """The keystore as one PEM text (its key and certificate chain), the key's password
    (None: not encrypted) and the config key naming where it came from."""
    location = str(setting("ssl.keystore.location") or "")
    inline_key = str(setting("ssl.keystore.key") or "")
    inline_chain = str(setting("ssl.keystore.certificate.chain") or "")
    if not location and not inline_key:
        raise TlsConfigError(f"a TLS listener{where} needs a keystore: set "
                             "ssl.keystore.location, or ssl.keystore.key and "
                             "ssl.keystore.certificate.chain (ssl.keystore.type=PEM)")
    kind = "PEM" if (inline_key and not location and setting("ssl.keystore.type") in (
        None, "", "JKS")) else _store_type(setting, "ssl.keystore.type", where)
    key_password = _password(setting, "ssl.key.password")
    if inline_key:
        if location:
            raise TlsConfigError(f"set either ssl.keystore.location or ssl.keystore.key"
                                 f"{where}, not both")
        if kind != "PEM":
            raise TlsConfigError(f"ssl.keystore.key{where} needs ssl.keystore.type=PEM")
        if not inline_chain:
            raise TlsConfigError(f"ssl.keystore.key{where} needs "
                                 "ssl.keystore.certificate.chain")
        pem = (inline_chain.strip() + "\n" + inline_key.strip() + "\n").encode()
        return pem, key_password, "ssl.keystore.key"
    data = _read(location, "ssl.keystore.location", where)
    if kind == "PEM":
        return data, key_password, "ssl.keystore.location"
    store_password = _password(setting, "ssl.keystore.password")
    key, cert, extra = _pkcs12(data, store_password, "ssl.keystore.location", where)
    if key is None or cert is None:
        raise TlsConfigError(f"ssl.keystore.location {location!r}{where} holds no private "
                             "key with its certificate")
    return key + cert + b"".join(extra), None, "ssl.keystore.location"


def _load_keystore(ctx: ssl.SSLContext, setting: Settings, where: str) -> None:
    pem, password, key = _keystore_pem(setting, where)
    _load_chain_pem(ctx, pem, password, key, where)


@dataclass(frozen=True, slots=True)
class CertificateIdentity:
    """Who a keystore's certificate says the broker is."""

    subject: str
    """The subject's distinguished name (RFC 4514)."""
    subject_alt_names: frozenset[str]
    """The subject alternative names, as ``DNS:host``, ``IP:addr``, ..."""


def keystore_identity(setting: Settings, listener: str = "") -> CertificateIdentity:
    """The subject and SANs of the keystore's own certificate (the chain's first)."""
    where = f" (listener {listener})" if listener else ""
    pem, _, key = _keystore_pem(setting, where)
    try:
        from cryptography import x509
    except ImportError:
        raise TlsConfigError(f"reading the certificate of {key}{where} needs the "
                             "'cryptography' package (pip install 'odradek[tls]')") from None
    try:
        cert = x509.load_pem_x509_certificate(pem)
    except ValueError:
        raise TlsConfigError(f"{key}{where} holds no PEM certificate") from None
    try:
        extension = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        names = frozenset(_general_name(n) for n in extension.value)
    except x509.ExtensionNotFound:
        names = frozenset()
    return CertificateIdentity(cert.subject.rfc4514_string(), names)


def _general_name(name: Any) -> str:
    from cryptography import x509

    kinds = ((x509.DNSName, "DNS"), (x509.IPAddress, "IP"), (x509.RFC822Name, "email"),
             (x509.UniformResourceIdentifier, "URI"))
    for cls, label in kinds:
        if isinstance(name, cls):
            return f"{label}:{name.value}"
    return f"{type(name).__name__}:{name.value}"


def _load_chain_pem(
    ctx: ssl.SSLContext, pem: bytes, password: str | None, key: str, where: str
) -> None:
    with tempfile.TemporaryDirectory(prefix="odradek-tls-") as tmp:
        path = os.path.join(tmp, "keystore.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        # Without a password, a callable answering "" rather than None: OpenSSL's default
        # would prompt on the terminal for an encrypted key (or fail with a bare EINVAL).
        try:
            ctx.load_cert_chain(path, password=password or _no_password)
        except (ssl.SSLError, OSError) as exc:
            reason = getattr(exc, "reason", None) or exc.strerror or exc
            raise TlsConfigError(
                f"cannot load the key and certificate chain of {key}{where}: {reason}"
                " (a wrong or missing ssl.key.password, or no key matching the certificate)"
            ) from None


def _no_password() -> str:
    return ""


def _pkcs12(
    data: bytes, password: str | None, key: str, where: str
) -> tuple[bytes | None, bytes | None, list[bytes]]:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:
        raise TlsConfigError(f"{key}{where} is a PKCS12 store: reading it needs the "
                             "'cryptography' package (pip install 'odradek[tls]')") from None
    try:
        p_key, cert, extra = pkcs12.load_key_and_certificates(
            data, password.encode() if password else None)
    except ValueError as exc:
        raise TlsConfigError(f"cannot open the PKCS12 store {key}{where}: {exc} (a wrong "
                             "password?)") from None
    pem = serialization.Encoding.PEM
    key_pem = (p_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption())
               if p_key is not None else None)
    return (key_pem, cert.public_bytes(pem) if cert is not None else None,
            [c.public_bytes(pem) for c in extra])


def _load_truststore(
    ctx: ssl.SSLContext, setting: Settings, where: str, purpose: ssl.Purpose
) -> None:
    location = str(setting("ssl.truststore.location") or "")
    inline = str(setting("ssl.truststore.certificates") or "")
    if not location and not inline:
        ctx.load_default_certs(purpose)
        return
    if inline and location:
        raise TlsConfigError(f"set either ssl.truststore.location or "
                             f"ssl.truststore.certificates{where}, not both")
    if inline:
        cadata = inline
    else:
        kind = _store_type(setting, "ssl.truststore.type", where)
        data = _read(location, "ssl.truststore.location", where)
        if kind == "PEM":
            cadata = data.decode("ascii", "replace")
        else:
            _, cert, extra = _pkcs12(data, _password(setting, "ssl.truststore.password"),
                                       "ssl.truststore.location", where)
            cadata = b"".join([*([cert] if cert else []), *extra]).decode()
    try:
        ctx.load_verify_locations(cadata=cadata)
    except (ssl.SSLError, ValueError) as exc:
        raise TlsConfigError(f"cannot load the trusted certificates{where}: {exc}") from None
