"""TLS contexts from Kafka's ssl.* keys: keystores (PEM file, inline PEM, PKCS12),
truststores, client authentication, protocol versions and cipher suites. Handshakes run
in memory (ssl.MemoryBIO), certificates are made here with trustme."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest
import trustme
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509 import load_pem_x509_certificate

from odradek.security.tls import (
    TlsConfigError,
    client_context,
    openssl_cipher_name,
    server_context,
)

DEFAULTS: dict[str, Any] = {
    "ssl.keystore.type": "JKS", "ssl.keystore.location": "", "ssl.keystore.password": "",
    "ssl.key.password": "", "ssl.keystore.key": "", "ssl.keystore.certificate.chain": "",
    "ssl.truststore.type": "JKS", "ssl.truststore.location": "",
    "ssl.truststore.password": "", "ssl.truststore.certificates": "",
    "ssl.enabled.protocols": ("TLSv1.2", "TLSv1.3"), "ssl.cipher.suites": (),
    "ssl.client.auth": "none",
}


def settings(**values: Any) -> Any:
    merged = {**DEFAULTS, **{k.replace("_", "."): v for k, v in values.items()}}
    return merged.__getitem__


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def files(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("tls")
    server = ca.issue_cert("localhost", "127.0.0.1")
    server.private_key_and_cert_chain_pem.write_to_path(str(d / "server.pem"))
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    client = ca.issue_cert("alice@example.com", common_name="alice")
    client.private_key_and_cert_chain_pem.write_to_path(str(d / "client.pem"))
    other = trustme.CA().issue_cert("mallory@example.com", common_name="mallory")
    other.private_key_and_cert_chain_pem.write_to_path(str(d / "other.pem"))
    # PKCS12 keystore (password "store-pw") and truststore
    key = serialization.load_pem_private_key(server.private_key_pem.bytes(), None)
    cert = load_pem_x509_certificate(server.cert_chain_pems[0].bytes())
    (d / "server.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        b"server", key, cert, None,  # type: ignore[arg-type]
        serialization.BestAvailableEncryption(b"store-pw")))
    ca_cert = load_pem_x509_certificate(ca.cert_pem.bytes())
    (d / "trust.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        None, None, None, [ca_cert], serialization.BestAvailableEncryption(b"trust-pw")))
    # an encrypted PEM key (ssl.key.password)
    encrypted = key.private_bytes(serialization.Encoding.PEM,  # type: ignore[union-attr]
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(b"key-pw"))
    (d / "server-encrypted.pem").write_bytes(
        encrypted + b"".join(p.bytes() for p in server.cert_chain_pems))
    return {p.stem: p for p in d.iterdir()}


def handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> ssl.SSLObject:
    """Run a TLS handshake in memory; the server's end once done."""
    s_in, s_out, c_in, c_out = (ssl.MemoryBIO() for _ in range(4))
    s = server.wrap_bio(s_in, s_out, server_side=True)
    c = client.wrap_bio(c_in, c_out, server_hostname="localhost")
    done = {"s": False, "c": False}
    for _ in range(20):
        for name, end in (("c", c), ("s", s)):
            if not done[name]:
                try:
                    end.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            # TLSv1.3: the server learns of a refused client certificate on first read
            c.write(b"x")
            s_in.write(c_out.read())
            s.read(1)
            return s
    raise AssertionError("handshake did not finish")


def client(ca: trustme.CA, cert: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    if cert is not None:
        ctx.load_cert_chain(str(cert))
    return ctx


def test_pem_keystore_file(ca: trustme.CA, files: dict[str, Path]) -> None:
    ctx = server_context(settings(ssl_keystore_type="PEM",
                                  ssl_keystore_location=str(files["server"])))
    assert ctx.verify_mode == ssl.CERT_NONE
    assert handshake(ctx, client(ca)).getpeercert() is None


def test_encrypted_pem_key_with_ssl_key_password(ca: trustme.CA, files: dict[str, Path]) -> None:
    path = str(files["server-encrypted"])
    ctx = server_context(settings(ssl_keystore_type="PEM", ssl_keystore_location=path,
                                  ssl_key_password="key-pw"))
    handshake(ctx, client(ca))
    with pytest.raises(TlsConfigError, match=r"wrong or missing ssl\.key\.password"):
        server_context(settings(ssl_keystore_type="PEM", ssl_keystore_location=path,
                                ssl_key_password="nope"))
    # no ssl.key.password at all (e.g. a stored one that no longer decodes): a config
    # error naming the key, not a bare OSError or a terminal prompt
    with pytest.raises(TlsConfigError, match=r"missing ssl\.key\.password"):
        server_context(settings(ssl_keystore_type="PEM", ssl_keystore_location=path))


def test_inline_pem_keystore_kip651(ca: trustme.CA) -> None:
    cert = ca.issue_cert("localhost")
    ctx = server_context(settings(
        ssl_keystore_type="PEM", ssl_keystore_key=cert.private_key_pem.bytes().decode(),
        ssl_keystore_certificate_chain="".join(p.bytes().decode()
                                               for p in cert.cert_chain_pems)))
    handshake(ctx, client(ca))


def test_pkcs12_keystore_and_truststore(ca: trustme.CA, files: dict[str, Path]) -> None:
    ctx = server_context(settings(
        ssl_keystore_type="PKCS12", ssl_keystore_location=str(files["server"].with_suffix(
            ".p12")), ssl_keystore_password="store-pw",
        ssl_truststore_type="PKCS12", ssl_truststore_location=str(files["trust"]),
        ssl_truststore_password="trust-pw", ssl_client_auth="required"))
    peer = handshake(ctx, client(ca, files["client"])).getpeercert()
    assert peer is not None and (("commonName", "alice"),) in peer["subject"]
    with pytest.raises(TlsConfigError, match="a wrong password"):
        server_context(settings(ssl_keystore_type="PKCS12", ssl_keystore_password="x",
                                ssl_keystore_location=str(files["server"].with_suffix(
                                    ".p12"))))


def test_client_auth_required_refuses_another_ca(ca: trustme.CA, files: dict[str, Path]) -> None:
    ctx = server_context(settings(
        ssl_keystore_type="PEM", ssl_keystore_location=str(files["server"]),
        ssl_truststore_type="PEM", ssl_truststore_location=str(files["ca"]),
        ssl_client_auth="required"))
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    with pytest.raises(ssl.SSLError):
        handshake(ctx, client(ca, files["other"]))
    with pytest.raises(ssl.SSLError):
        handshake(ctx, client(ca))  # no certificate at all


def test_client_auth_requested_accepts_none(ca: trustme.CA, files: dict[str, Path]) -> None:
    ctx = server_context(settings(
        ssl_keystore_type="PEM", ssl_keystore_location=str(files["server"]),
        ssl_truststore_type="PEM", ssl_truststore_location=str(files["ca"]),
        ssl_client_auth="requested"))
    assert ctx.verify_mode == ssl.CERT_OPTIONAL
    assert not handshake(ctx, client(ca)).getpeercert()
    assert handshake(ctx, client(ca, files["client"])).getpeercert()


def test_enabled_protocols_bound_the_version(ca: trustme.CA, files: dict[str, Path]) -> None:
    ctx = server_context(settings(ssl_keystore_type="PEM",
                                  ssl_keystore_location=str(files["server"]),
                                  ssl_enabled_protocols=("TLSv1.2",)))
    assert handshake(ctx, client(ca)).version() == "TLSv1.2"
    only13 = client(ca)
    only13.minimum_version = ssl.TLSVersion.TLSv1_3
    with pytest.raises(ssl.SSLError):
        handshake(ctx, only13)
    with pytest.raises(TlsConfigError, match=r"ssl\.enabled\.protocols"):
        server_context(settings(ssl_enabled_protocols=("TLSv1.1",)))


def test_cipher_suites_by_iana_name(ca: trustme.CA, files: dict[str, Path]) -> None:
    ctx = server_context(settings(
        ssl_keystore_type="PEM", ssl_keystore_location=str(files["server"]),
        ssl_enabled_protocols=("TLSv1.2",),
        ssl_cipher_suites=("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",)))  # trustme: ECDSA
    cipher = handshake(ctx, client(ca)).cipher()
    assert cipher is not None and cipher[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"
    with pytest.raises(TlsConfigError, match=r"ssl\.cipher\.suites"):
        server_context(settings(ssl_keystore_type="PEM",
                                ssl_keystore_location=str(files["server"]),
                                ssl_cipher_suites=("NO_SUCH_SUITE",)))


@pytest.mark.parametrize(("iana", "openssl"), [
    ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"),
    ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"),
    ("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384", "ECDHE-RSA-AES256-SHA384"),
    ("TLS_RSA_WITH_AES_128_GCM_SHA256", "AES128-GCM-SHA256"),
    ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256"),
])
def test_openssl_cipher_name(iana: str, openssl: str) -> None:
    assert openssl_cipher_name(iana) == openssl


@pytest.mark.parametrize(("values", "error"), [
    ({}, "needs a keystore"),
    ({"ssl_keystore_location": "/x.jks"}, "Java keystores cannot be read"),
    ({"ssl_keystore_type": "PEM", "ssl_keystore_location": "/no/such.pem"},
     "cannot read ssl.keystore.location '/no/such.pem'"),
    ({"ssl_keystore_type": "PEM", "ssl_keystore_key": "k"},
     "needs ssl.keystore.certificate.chain"),
    ({"ssl_keystore_type": "BCFKS", "ssl_keystore_location": "/x"}, "expected PEM or PKCS12"),
    ({"ssl_client_auth": "always"}, "ssl.client.auth"),
])
def test_config_errors_name_the_key(values: dict[str, Any], error: str) -> None:
    with pytest.raises(TlsConfigError, match=error.replace(".", r"\.").replace("(", r"\(")):
        server_context(settings(**values), "SSL")


def test_client_context_verifies_the_server(ca: trustme.CA, files: dict[str, Path]) -> None:
    server = server_context(settings(ssl_keystore_type="PEM",
                                     ssl_keystore_location=str(files["server"])))
    good = client_context(settings(ssl_truststore_type="PEM",
                                   ssl_truststore_location=str(files["ca"])))
    handshake(server, good)
    wrong = client_context(settings(
        ssl_truststore_certificates=trustme.CA().cert_pem.bytes().decode()))
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(server, wrong)


def test_server_context_refuses_client_renegotiation(files: dict[str, Path]) -> None:
    """TLS 1.2 renegotiation asked by a client costs the server a handshake each time
    (and was the way of CVE-2009-3555): refused whatever OpenSSL's own default (3.0
    refuses it, 1.1.1 allows it). Over a real socket: tests/interop/test_security_hostile."""
    ctx = server_context(settings(ssl_keystore_type="PEM",
                                  ssl_keystore_location=str(files["server"])))
    assert ctx.options & ssl.OP_NO_RENEGOTIATION
