"""Keystores for mutual TLS between Odradek and a real ZooKeeper, made as operators make
them: certificates from a test CA (trustme), each key and certificate chain exported to
PKCS12 by ``openssl pkcs12 -export``, and the truststore of trusted CAs made by the JDK's
``keytool -importcert``. The server and the broker use the same truststore (one CA); a
second, unknown CA signs the certificate that must be refused."""

from __future__ import annotations

import ssl
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import trustme

from odradek.cluster.local_zookeeper import ServerTls
from odradek.cluster.zk_security import NETTY_SOCKET

__all__ = ["ZkTlsFiles", "make_tls_files"]

PASSWORD = "zk-st0re-secret"


@dataclass(frozen=True)
class ZkTlsFiles:
    directory: Path
    ca: trustme.CA
    truststore: Path  # keytool PKCS12: the CA
    server_keystore: Path  # openssl PKCS12: 127.0.0.1 / localhost
    client_keystore: Path  # openssl PKCS12: the broker, signed by the CA
    rogue_keystore: Path  # openssl PKCS12: signed by a CA nobody trusts
    ca_pem: Path
    password: str = field(default=PASSWORD, repr=False)

    def server(self) -> ServerTls:
        probe = self.ca.issue_cert("zookeeper-probe")
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        probe.configure_cert(context)
        return ServerTls(self.server_keystore, self.password, self.truststore, self.password,
                         context)

    def broker_overrides(self, keystore: Path | None = None,
                         with_keystore: bool = True) -> dict[str, str]:
        """A broker's ``zookeeper.ssl.*`` keys (Kafka's names), with ``keystore`` (default:
        the client keystore), or no keystore at all."""
        overrides = {
            "zookeeper.ssl.client.enable": "true",
            "zookeeper.clientCnxnSocket": NETTY_SOCKET,
            "zookeeper.ssl.truststore.location": str(self.truststore),
            "zookeeper.ssl.truststore.password": self.password,
            "zookeeper.ssl.truststore.type": "PKCS12",
        }
        if not with_keystore:
            return overrides
        chosen = keystore or self.client_keystore
        overrides.update({
            "zookeeper.ssl.keystore.location": str(chosen),
            "zookeeper.ssl.keystore.password": self.password,
            "zookeeper.ssl.keystore.type": "PKCS12",
        })
        return overrides


def _pkcs12(cert: trustme.LeafCert, directory: Path, name: str) -> Path:
    pem = directory / f"{name}.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(pem))
    out = directory / f"{name}.p12"
    subprocess.run(["openssl", "pkcs12", "-export", "-in", str(pem), "-out", str(out),
                    "-name", name, "-passout", f"pass:{PASSWORD}"],
                   check=True, capture_output=True, timeout=60)
    pem.unlink()
    return out


def make_tls_files(directory: Path) -> ZkTlsFiles:
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    ca_pem = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_pem))
    truststore = directory / "truststore.p12"
    subprocess.run(["keytool", "-importcert", "-noprompt", "-alias", "ca", "-file",
                    str(ca_pem), "-keystore", str(truststore), "-storetype", "PKCS12",
                    "-storepass", PASSWORD],
                   check=True, capture_output=True, timeout=60)
    server = _pkcs12(ca.issue_cert("127.0.0.1", "localhost"), directory, "zookeeper")
    client = _pkcs12(ca.issue_cert("127.0.0.1", "localhost", common_name="broker"),
                     directory, "broker")
    rogue = _pkcs12(trustme.CA().issue_cert("127.0.0.1", "localhost", common_name="rogue"),
                    directory, "rogue")
    return ZkTlsFiles(directory, ca, truststore, server, client, rogue, ca_pem)
