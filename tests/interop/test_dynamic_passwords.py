"""Dynamic password configs are stored encrypted (Kafka's password.encoder.secret), with
real clients (confluent-kafka's AdminClient) and real brokers.

A TLS listener's keystore is changed with its password (a PKCS12 keystore and
``listener.name.ssl.ssl.keystore.password`` through IncrementalAlterConfigs; a PEM keystore
with an encrypted key and ``…ssl.key.password`` through AlterConfigs): the new certificate
serves; the embedded store's file (mode 0600) or ZooKeeper's ``/config/brokers/0`` znode,
read raw, holds Kafka's encoded form and nowhere the password; after a restart the listener
loads the keystore with the decoded password. Without ``password.encoder.secret`` the
change is refused in Kafka's words (and validate_only passes, as Kafka's does); a secret
changed with ``password.encoder.old.secret`` re-encodes the stored password at start, and
without the old secret the broker cannot open it and keeps its static certificate.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import socket
import ssl
import stat
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12
from kazoo.client import KazooClient

from odradek.cluster.local_zookeeper import LocalZooKeeper
from odradek.security.password_encoder import PasswordEncoder, is_encoded
from odradek.server.broker import METADATA_FILE
from odradek.testing import RunningBroker, running_broker
from tests.interop._cluster import cluster_zookeeper, wait_for

pytestmark = pytest.mark.interop

SECRET = "encoder-secret-1"
STORE_PASSWORD = "St0re-pa55-Zq"  # must appear nowhere but in the keystore's lock
PKCS12_PASSWORD = "listener.name.ssl.ssl.keystore.password"
KEY_PASSWORD = "listener.name.ssl.ssl.key.password"
LOCATION = "listener.name.ssl.ssl.keystore.location"


class Keys:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.ca = trustme.CA()
        self.ca_file = directory / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.static = self.pem("static.pem")

    def pem(self, name: str, password: str | None = None) -> Path:
        leaf = self.ca.issue_cert("127.0.0.1", "localhost", common_name="broker-0",
                                  organization_name="Odradek tests",
                                  organization_unit_name="brokers")
        key = leaf.private_key_pem.bytes()
        if password is not None:
            key = serialization.load_pem_private_key(key, None).private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                serialization.BestAvailableEncryption(password.encode()))
        path = self.directory / name
        path.write_bytes(key + b"".join(p.bytes() for p in leaf.cert_chain_pems))
        return path

    def pkcs12(self, name: str, password: str) -> Path:
        leaf = self.ca.issue_cert("127.0.0.1", "localhost", common_name="broker-0",
                                  organization_name="Odradek tests",
                                  organization_unit_name="brokers")
        key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), None)
        certs = [x509.load_pem_x509_certificate(p.bytes()) for p in leaf.cert_chain_pems]
        path = self.directory / name
        path.write_bytes(pkcs12.serialize_key_and_certificates(
            b"broker", key, certs[0], certs[1:],  # type: ignore[arg-type]
            serialization.BestAvailableEncryption(password.encode())))
        return path

    def config(self, **extra: str) -> dict[str, str]:
        return {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                "ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.static),
                **extra}


def fingerprint_of(path: Path, password: str) -> str:
    if path.suffix == ".p12":
        _, cert, _ = pkcs12.load_key_and_certificates(path.read_bytes(), password.encode())
        assert cert is not None
        return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()
    pem = path.read_text()
    cert_pem = pem[pem.index("-----BEGIN CERTIFICATE-----"):]
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(cert_pem)).hexdigest()


def served(broker: RunningBroker, keys: Keys) -> str:
    """The SHA-256 of the certificate a new, verifying TLS connection gets."""
    port = next(s.port for s in broker.broker.servers if s.security.name == "SSL")
    context = ssl.create_default_context(cafile=str(keys.ca_file))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
        der = conn.getpeercert(binary_form=True)
    assert der is not None
    return hashlib.sha256(der).hexdigest()


def admin(broker: RunningBroker) -> AdminClient:
    port = next(s.port for s in broker.broker.servers if s.security.name == "PLAINTEXT")
    return AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})


def set_configs(broker: RunningBroker, configs: dict[str, str], incremental: bool = True,
                validate_only: bool = False) -> None:
    """Broker 0's configs set through IncrementalAlterConfigs (SET) or AlterConfigs,
    raising the broker's error."""
    client = admin(broker)
    if incremental:
        resource = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()])
        futures = client.incremental_alter_configs([resource], validate_only=validate_only)
    else:
        resource = ConfigResource(ConfigResource.Type.BROKER, "0", set_config=configs)
        with warnings.catch_warnings():  # deprecated in the client; brokers still serve it
            warnings.simplefilter("ignore", DeprecationWarning)
            futures = client.alter_configs([resource], validate_only=validate_only)
    for future in futures.values():
        future.result(30)


def change_keystore(broker: RunningBroker, keys: Keys, kind: str) -> tuple[Path, str]:
    """A new keystore locked with STORE_PASSWORD set on the SSL listener: (its path, the
    password key)."""
    if kind == "pkcs12":
        path, key = keys.pkcs12("new.p12", STORE_PASSWORD), PKCS12_PASSWORD
        configs = {"listener.name.ssl.ssl.keystore.type": "PKCS12", LOCATION: str(path),
                   key: STORE_PASSWORD}
    else:
        path, key = keys.pem("new.pem", STORE_PASSWORD), KEY_PASSWORD
        configs = {LOCATION: str(path), key: STORE_PASSWORD}
    set_configs(broker, configs, incremental=kind == "pkcs12")
    wait_for(lambda: served(broker, keys) == fingerprint_of(path, STORE_PASSWORD),
             what="the new keystore serving")
    return path, key


def stored_in_file(broker: RunningBroker) -> dict[str, str]:
    """/config/brokers/0 as the embedded store's file holds it, read raw."""
    path = broker.broker.config.log_dirs[0] / METADATA_FILE
    doc = json.loads(path.read_text())
    data = base64.b64decode(doc["nodes"]["/config/brokers/0"][0])
    return dict(json.loads(data)["config"])


@pytest.mark.parametrize("kind", ["pkcs12", "pem"])
def test_a_keystore_password_is_stored_encrypted_and_serves_after_a_restart(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    keys = Keys(tmp_path)
    config = keys.config(**{"password.encoder.secret": SECRET})
    with running_broker(config, data_dir=tmp_path / "broker") as broker:
        path, key = change_keystore(broker, keys, kind)
        metadata_file = broker.broker.config.log_dirs[0] / METADATA_FILE
        raw = metadata_file.read_bytes()
        assert STORE_PASSWORD.encode() not in raw
        assert base64.b64encode(STORE_PASSWORD.encode()) not in raw
        stored = stored_in_file(broker)
        assert is_encoded(stored[key]) and STORE_PASSWORD not in stored[key]
        assert PasswordEncoder(SECRET).decode(stored[key]) == STORE_PASSWORD
        assert stat.S_IMODE(metadata_file.stat().st_mode) == 0o600
        resource = ConfigResource(ConfigResource.Type.BROKER, "0")
        client = admin(broker)  # kept: a collected client cancels its futures
        described = client.describe_configs([resource])[resource].result(30)
        assert described[key].is_sensitive and described[key].value is None
    with running_broker(config, data_dir=tmp_path / "broker") as broker:
        assert served(broker, keys) == fingerprint_of(path, STORE_PASSWORD)
    assert STORE_PASSWORD not in caplog.text and SECRET not in caplog.text
    assert "is stored but has no effect" not in caplog.text  # they are served (KIP-226)


def test_without_a_secret_a_password_is_refused_in_kafkas_words(tmp_path: Path) -> None:
    keys = Keys(tmp_path)
    path = keys.pem("locked.pem", STORE_PASSWORD)
    with running_broker(keys.config(), data_dir=tmp_path / "broker") as broker:
        before = served(broker, keys)
        configs = {LOCATION: str(path), KEY_PASSWORD: STORE_PASSWORD}
        set_configs(broker, configs, validate_only=True)  # Kafka encodes only to write
        for incremental in (True, False):
            with pytest.raises(KafkaException) as raised:
                set_configs(broker, configs, incremental=incremental)
            error = raised.value.args[0]
            assert error.name() == "INVALID_CONFIG"
            assert error.str() == ("Invalid config value for resource ConfigResource("
                                   "type=BROKER, name='0'): Password encoder secret not "
                                   "configured")
        assert served(broker, keys) == before
        assert KEY_PASSWORD not in broker.broker.metadata.read_broker_configs("0")
        set_configs(broker, {"log.retention.ms": "3600000"})  # other configs still change
    assert STORE_PASSWORD.encode() not in (tmp_path / "broker" / "data" / METADATA_FILE
                                           ).read_bytes()


def test_a_changed_secret_needs_the_old_one_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    keys = Keys(tmp_path)
    data = tmp_path / "broker"
    with running_broker(keys.config(**{"password.encoder.secret": SECRET}),
                        data_dir=data) as broker:
        path, key = change_keystore(broker, keys, "pkcs12")
        first = stored_in_file(broker)[key]
    new_secret = {"password.encoder.secret": "encoder-secret-2"}
    caplog.set_level(logging.ERROR)
    with running_broker(keys.config(**new_secret), data_dir=data) as broker:
        # the new secret cannot open it: the static keystore serves, and the log says why
        assert served(broker, keys) == fingerprint_of(keys.static, "")
        assert f"Dynamic password config {key} of broker 0 could not be decoded" in caplog.text
        assert stored_in_file(broker)[key] == first
    with running_broker(keys.config(**new_secret,
                                    **{"password.encoder.old.secret": SECRET}),
                        data_dir=data) as broker:
        assert served(broker, keys) == fingerprint_of(path, STORE_PASSWORD)
        rotated = stored_in_file(broker)[key]
    assert rotated != first
    assert PasswordEncoder("encoder-secret-2").decode(rotated) == STORE_PASSWORD
    assert STORE_PASSWORD not in caplog.text


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[LocalZooKeeper]:
    server = cluster_zookeeper(tmp_path / "zookeeper")
    try:
        yield server
    finally:
        server.stop()


def test_in_zookeeper_the_znode_holds_no_password(tmp_path: Path,
                                                 zookeeper: LocalZooKeeper) -> None:
    keys = Keys(tmp_path)
    config = keys.config(**{"password.encoder.secret": SECRET, "broker.id": "0",
                            "zookeeper.connect": zookeeper.connect_string("/pw")})
    with running_broker(config, data_dir=tmp_path / "broker") as broker:
        path, key = change_keystore(broker, keys, "pkcs12")
    client = KazooClient(hosts=zookeeper.connect_string("/pw"), timeout=10.0)
    client.start(timeout=30)
    try:
        raw, _ = client.get("/config/brokers/0")
    finally:
        client.stop()
        client.close()
    assert STORE_PASSWORD.encode() not in raw
    stored = json.loads(raw)["config"][key]
    assert is_encoded(stored) and PasswordEncoder(SECRET).decode(stored) == STORE_PASSWORD
    with running_broker(config, data_dir=tmp_path / "broker") as broker:
        assert served(broker, keys) == fingerprint_of(path, STORE_PASSWORD)
