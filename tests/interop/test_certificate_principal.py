"""A client certificate's subject is named as Java's ``X500Principal.getName()`` names it,
so ``ssl.principal.mapping.rules`` copied from a Kafka cluster match the same clients
here: an attribute outside RFC 2253's keywords (title, say) is written as its OID and the
hex of its DER value, not by OpenSSL's name (issue 47, item 5)."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from confluent_kafka import Producer
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from odradek.testing import running_broker

from ._security import principals, server

TITLE_OID = "2.5.4.12"


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _certificates(directory: Path) -> tuple[Path, Path, Path, Path]:
    """A CA, the broker's key and chain (127.0.0.1), and carol's certificate and key,
    her subject ``CN=carol`` then ``title=ops``."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])

    def issue(subject: x509.Name, key: ec.EllipticCurvePrivateKey, ca: bool = False,
              san: x509.SubjectAlternativeName | None = None) -> x509.Certificate:
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=2))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None),
                                  critical=True))
        if san is not None:
            builder = builder.add_extension(san, critical=False)
        return builder.sign(ca_key, hashes.SHA256())

    pem = serialization.Encoding.PEM
    ca_cert = issue(ca_name, ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = issue(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "broker")]),
                        server_key, san=x509.SubjectAlternativeName(
                            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]))
    carol_key = ec.generate_private_key(ec.SECP256R1())
    carol_cert = issue(x509.Name([
        x509.NameAttribute(NameOID.COMMON_NAME, "carol"),
        x509.NameAttribute(NameOID.TITLE, "ops"),
    ]), carol_key)
    paths = (directory / "ca.pem", directory / "server.pem", directory / "carol.crt",
             directory / "carol.key")
    paths[0].write_bytes(ca_cert.public_bytes(pem))
    paths[1].write_bytes(_pem(server_key) + server_cert.public_bytes(pem)
                         + ca_cert.public_bytes(pem))
    paths[2].write_bytes(carol_cert.public_bytes(pem))
    paths[3].write_bytes(_pem(carol_key))
    return paths


def test_a_mapping_rule_written_for_javas_subject_names_the_client(tmp_path: Path) -> None:
    ca, keystore, cert, key = _certificates(tmp_path)
    # Java's getName() of carol's subject: the last RDN first, title as OID=#hex (a
    # UTF8String: tag 0x0c, length 3, then the text).
    title_der = "#0c03" + b"ops".hex()
    rule = rf"RULE:^{TITLE_OID.replace('.', '[.]')}=({title_der}),CN=([^,]*)$/$2/"
    config = {
        "listeners": "PLAINTEXT://127.0.0.1:0,MTLS://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,MTLS:SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.principal.mapping.rules": rule,
    }
    with running_broker(config, data_dir=tmp_path / "broker") as broker:
        # A producer that has delivered keeps its connection to the broker it learnt
        # (broker 0) open. An admin client that only listed topics may hold none: since
        # librdkafka 2.10 the bootstrap connection is dropped once the cluster's brokers
        # are known, and a learnt broker is connected to only when needed (whole run
        # CI-55 saw no connection left).
        producer = Producer({
            "bootstrap.servers": f"127.0.0.1:{server(broker, 'MTLS').port}",
            "security.protocol": "SSL", "ssl.ca.location": str(ca),
            "ssl.certificate.location": str(cert), "ssl.key.location": str(key)})
        delivered: list[object] = []
        producer.produce("carol", b"x", on_delivery=lambda err, _msg: delivered.append(err))
        assert producer.flush(30) == 0
        assert delivered == [None]  # authenticated: the rule matched
        assert "User:carol" in principals(broker, "MTLS")
