"""``odradek dev-cluster --security sasl_ssl``: a CA, the brokers' certificate, SCRAM users
and the client settings to use, under ``<data-dir>/security/``.

How it works: made once, on the first run, and reused by later runs on the same data dir
(so a client's settings stay valid across restarts):

* ``ca.pem`` and ``ca.key``: a self-signed certificate authority (the ``cryptography``
  package, the ``tls`` extra: an EC P-256 key);
* ``broker.pem``: the brokers' key and certificate, signed by the CA, for ``127.0.0.1``
  and ``localhost`` (every broker listens there), usable as server and as client
  certificate (brokers are each other's clients);
* ``users.properties``: the passwords of the first user ``admin`` and of the brokers'
  own user ``broker``, random;
* ``broker.properties``: the brokers' security config, given to every broker as
  ``serve --config`` (not as ``--override``: a password on a command line is visible to
  every local user): one ``SASL_SSL`` listener, also the inter-broker one
  (``inter.broker.listener.name``), SCRAM-SHA-256 and SCRAM-SHA-512, the brokers
  authenticating to each other as ``broker`` with SCRAM-SHA-512
  (docs/operations.md, "Between brokers"); the ACL authorizer on, with ``admin`` and
  ``broker`` as super users and ``allow.everyone.if.no.acl.found=false``, so any other
  user is refused everything until an ACL allows it (``--override`` still changes these,
  the overrides coming after this file);
* ``client.properties`` (the Java client's keys, for ``--command-config`` and Kafka's
  tools) and ``librdkafka.properties`` (confluent-kafka's and kcat's, ``kcat -F``).

Every file holding a secret is written readable by its owner only. The SCRAM credentials
of both users are written into ZooKeeper before a broker starts, as ``kafka-configs.sh
--zookeeper --alter --add-config 'SCRAM-SHA-512=[...]'`` does (Kafka's way to bootstrap
the inter-broker user): salted, never the password.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PROTOCOLS", "DevSecurity", "client_lines", "prepare", "write_scram_users"]

#: the values of ``dev-cluster --security``
PROTOCOLS = ("plaintext", "sasl_ssl")
ADMIN = "admin"
BROKER_USER = "broker"
MECHANISM = "SCRAM-SHA-512"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
CERT_DAYS = 825
SECURITY_DIR = "security"
SCRAM_ITERATIONS = 4096
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
SUPER_USERS = f"User:{ADMIN};User:{BROKER_USER}"


@dataclass(frozen=True)
class DevSecurity:
    directory: Path
    passwords: dict[str, str]  # user -> password

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def broker_properties(self) -> Path:
        return self.directory / "broker.properties"

    @property
    def client_properties(self) -> Path:
        return self.directory / "client.properties"

    @property
    def librdkafka_properties(self) -> Path:
        return self.directory / "librdkafka.properties"

    def __repr__(self) -> str:  # never the passwords
        return f"DevSecurity(directory={str(self.directory)!r})"


def _write_secret(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (atomically)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _certificates(directory: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(days=1), now + datetime.timedelta(days=CERT_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "odradek dev-cluster CA")])
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                     crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False,
                                     decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "broker")]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                              ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
            ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    unencrypted = serialization.NoEncryption()
    pkcs8 = serialization.PrivateFormat.PKCS8
    _write_secret(directory / "ca.key", ca_key.private_bytes(pem, pkcs8, unencrypted).decode())
    _write_secret(directory / "broker.pem",
                  key.private_bytes(pem, pkcs8, unencrypted).decode()
                  + cert.public_bytes(pem).decode() + ca_cert.public_bytes(pem).decode())
    (directory / "ca.pem").write_bytes(ca_cert.public_bytes(pem))


def _passwords(path: Path) -> dict[str, str]:
    from odradek.client.security import load_client_properties

    if path.exists():
        found = load_client_properties(str(path))
        if all(found.get(u) for u in (ADMIN, BROKER_USER)):
            return found
    passwords = {u: secrets.token_urlsafe(18) for u in (ADMIN, BROKER_USER)}
    _write_secret(path, "# dev-cluster's SCRAM users (user=password)\n"
                  + "".join(f"{u}={p}\n" for u, p in passwords.items()))
    return passwords


def _jaas(user: str, password: str) -> str:
    return ("org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{user}" password="{password}";')


def prepare(data_dir: Path) -> DevSecurity:
    """Make (or find) the CA, the brokers' certificate, the users and the config files.
    ImportError when the ``cryptography`` package is missing."""
    import cryptography  # noqa: F401  (fail before writing anything)

    directory = data_dir / SECURITY_DIR
    directory.mkdir(parents=True, exist_ok=True)
    if not all((directory / f).exists() for f in ("ca.pem", "ca.key", "broker.pem")):
        _certificates(directory)
    sec = DevSecurity(directory, _passwords(directory / "users.properties"))
    ca, keystore = sec.ca, directory / "broker.pem"
    _write_secret(sec.broker_properties, "\n".join([
        "# written by odradek dev-cluster --security sasl_ssl",
        "inter.broker.listener.name=SASL_SSL",
        f"sasl.enabled.mechanisms={','.join(SCRAM_MECHANISMS)}",
        f"sasl.mechanism.inter.broker.protocol={MECHANISM}",
        f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config="
        + _jaas(BROKER_USER, sec.passwords[BROKER_USER]),
        "ssl.keystore.type=PEM", f"ssl.keystore.location={keystore}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={ca}",
        f"authorizer.class.name={AUTHORIZER}", f"super.users={SUPER_USERS}",
        "allow.everyone.if.no.acl.found=false", ""]))
    _write_secret(sec.client_properties, "\n".join([
        "# odradek dev-cluster's first user, for --command-config and Kafka's tools",
        "security.protocol=SASL_SSL", f"sasl.mechanism={MECHANISM}",
        "sasl.jaas.config=" + _jaas(ADMIN, sec.passwords[ADMIN]),
        "ssl.truststore.type=PEM", f"ssl.truststore.location={ca}", ""]))
    _write_secret(sec.librdkafka_properties, "\n".join([
        "# odradek dev-cluster's first user, for confluent-kafka and kcat -F",
        "security.protocol=SASL_SSL", f"sasl.mechanism={MECHANISM}",
        f"sasl.username={ADMIN}", f"sasl.password={sec.passwords[ADMIN]}",
        f"ssl.ca.location={ca}", ""]))
    return sec


def write_scram_users(zookeeper_connect: str, sec: DevSecurity) -> None:
    """Both users' SCRAM credentials (both mechanisms) into the cluster's ZooKeeper
    (``zookeeper_connect`` with the chroot)."""
    from odradek.cluster.user_credentials import set_scram_credential
    from odradek.cluster.zk_store import ZooKeeperStore
    from odradek.security.sasl import make_scram_credential

    store = ZooKeeperStore(zookeeper_connect)
    try:
        for user, password in sec.passwords.items():
            for mechanism in SCRAM_MECHANISMS:
                credential = make_scram_credential(mechanism, password, SCRAM_ITERATIONS)
                set_scram_credential(store, user, mechanism, credential.to_text())
    finally:
        store.close()


def client_lines(sec: DevSecurity, bootstrap: str) -> list[str]:
    """What dev-cluster prints: where the settings are, never a password."""
    lib = sec.librdkafka_properties
    return [
        f"security: SASL_SSL with {MECHANISM}, user {ADMIN!r} (its password is in "
        f"{sec.directory / 'users.properties'}), CA {sec.ca}",
        f"  odradek tools:   --command-config {sec.client_properties}",
        f"  Kafka's tools:   --command-config {sec.client_properties} "
        "(kafka-topics.sh ...; --producer.config / --consumer.config for the console "
        "clients)",
        f"  confluent-kafka: the settings of {lib} (security.protocol, sasl.mechanism, "
        "sasl.username, sasl.password, ssl.ca.location)",
        f"  kcat:            kcat -b {bootstrap} -F {lib} -L",
        f"authorization: ACLs on ({AUTHORIZER}); super users {ADMIN!r} and "
        f"{BROKER_USER!r}; any other user is refused everything until an ACL allows it "
        f"(odradek acls --add ... --command-config {sec.client_properties})",
    ]
