"""Shared by the security interop tests: certificates made at test time (trustme), and a
broker with one listener of each security protocol.

Listeners of :func:`secure_broker`: ``PLAINTEXT``, ``SSL`` (server authentication only),
``MTLS`` (a custom name mapped to SSL, client certificates required, principals mapped
from the certificate's CN), ``SASL_PLAINTEXT`` and ``SASL_SSL`` (PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512). PLAIN's users come from the listeners' JAAS configs; the SCRAM users are
created through AlterUserScramCredentials on the PLAINTEXT listener.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import trustme
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from odradek.server.network import KafkaServer
from odradek.testing import RunningBroker, running_broker

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret" '
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
PROTOCOL_MAP = ("PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                "SASL_SSL:SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class Certs:
    ca: Path  # the CA's certificate (PEM)
    server: Path  # the broker's key and chain (PEM keystore)
    client_cert: Path  # alice's certificate, by the same CA
    client_key: Path
    client_pem: Path  # key and chain in one file
    client_p12: Path  # PKCS12, password "alice-store" (the Java client's keystore)
    other_cert: Path  # mallory's, by another CA
    other_key: Path


def make_certs(directory: Path) -> Certs:
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(directory / "server.pem"))
    alice = ca.issue_cert("alice@example.com", common_name="alice")
    alice.cert_chain_pems[0].write_to_path(str(directory / "alice.crt"))
    alice.private_key_pem.write_to_path(str(directory / "alice.key"))
    alice.private_key_and_cert_chain_pem.write_to_path(str(directory / "alice.pem"))
    key = serialization.load_pem_private_key(alice.private_key_pem.bytes(), None)
    cert = x509.load_pem_x509_certificate(alice.cert_chain_pems[0].bytes())
    (directory / "alice.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        b"alice", key, cert, None,  # type: ignore[arg-type]
        serialization.BestAvailableEncryption(b"alice-store")))
    mallory = trustme.CA().issue_cert("mallory@example.com", common_name="mallory")
    mallory.cert_chain_pems[0].write_to_path(str(directory / "mallory.crt"))
    mallory.private_key_pem.write_to_path(str(directory / "mallory.key"))
    return Certs(directory / "ca.pem", directory / "server.pem", directory / "alice.crt",
                 directory / "alice.key", directory / "alice.pem", directory / "alice.p12",
                 directory / "mallory.crt",
                 directory / "mallory.key")


def broker_config(certs: Certs, **extra: str) -> dict[str, str]:
    return {
        "listeners": ",".join(f"{n}://127.0.0.1:0" for n in
                              ("PLAINTEXT", "SSL", "MTLS", "SASL_PLAINTEXT", "SASL_SSL")),
        "listener.security.protocol.map": PROTOCOL_MAP,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.server),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/,DEFAULT",
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        **extra,
    }


def server(broker: RunningBroker, name: str) -> KafkaServer:
    return next(s for s in broker.broker.servers if s.security.name == name)


def bootstrap(broker: RunningBroker, name: str) -> str:
    return f"127.0.0.1:{server(broker, name).port}"


def create_scram_users(broker: RunningBroker) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap(broker, "PLAINTEXT")})
    upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, 4096),
                                            password.encode())
               for user, password in USERS.items()
               for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(30)


@contextlib.contextmanager
def secure_broker(directory: Path, **extra: str) -> Iterator[tuple[RunningBroker, Certs]]:
    certs = make_certs(directory / "certs")
    with running_broker(broker_config(certs, **extra), data_dir=directory / "broker") as broker:
        create_scram_users(broker)
        yield broker, certs


def confluent_settings(certs: Certs, listener: str, mechanism: str = "PLAIN",
                       user: str = "alice", password: str | None = None) -> dict[str, str]:
    """confluent-kafka (librdkafka) settings for a listener of :func:`secure_broker`."""
    out: dict[str, str] = {}
    if listener in ("SSL", "MTLS", "SASL_SSL"):
        out["ssl.ca.location"] = str(certs.ca)
    if listener == "MTLS":
        out["ssl.certificate.location"] = str(certs.client_cert)
        out["ssl.key.location"] = str(certs.client_key)
    out["security.protocol"] = "SSL" if listener == "MTLS" else listener
    if listener.startswith("SASL_"):
        out.update({"sasl.mechanism": mechanism, "sasl.username": user,
                    "sasl.password": USERS.get(user, "x") if password is None else password})
    return out


def principals(broker: RunningBroker, listener: str) -> set[str]:
    return {c.principal for c in server(broker, listener).connections}


def stats(broker: RunningBroker, listener: str) -> Mapping[str, int]:
    s = server(broker, listener).security.stats
    return {"successful": s.successful, "failed": s.failed,
            "reauth": s.successful_reauthentication}


def client_properties(path: Path, certs: Certs, mechanism: str = "SCRAM-SHA-256",
                      user: str = "alice", password: str | None = None) -> Path:
    """A ``--command-config`` file in the Java client's keys for :func:`secure_broker`'s
    SASL_SSL listener (the password in a JAAS config, the CA as a PEM truststore)."""
    module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mechanism ==
              "PLAIN" else "org.apache.kafka.common.security.scram.ScramLoginModule")
    secret = USERS.get(user, "x") if password is None else password
    path.write_text("security.protocol=SASL_SSL\n"
                    f"sasl.mechanism={mechanism}\n"
                    f'sasl.jaas.config={module} required username="{user}" '
                    f'password="{secret}";\n'
                    "ssl.truststore.type=PEM\n"
                    f"ssl.truststore.location={certs.ca}\n")
    return path
