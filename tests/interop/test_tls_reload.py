"""A TLS listener's keystore changed without a restart (KIP-226), with real clients.

The broker serves certificate A; its keystore is altered (confluent-kafka's
IncrementalAlterConfigs of ``listener.name.ssl.ssl.keystore.location``) to certificate B,
the same names from a new key: new connections (Python's ``ssl`` and librdkafka, both
verifying the broker) get B, the connection opened before keeps A and keeps working.
Refused, with INVALID_CONFIG and the old certificate still serving: a certificate with
another subject, one that drops a subject alternative name, a missing file, a wrong key
password. The keystore's passwords are sensitive in DescribeConfigs and appear in no
answer and no log line.
"""

from __future__ import annotations

import hashlib
import logging
import socket
import ssl
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from cryptography.hazmat.primitives import serialization

from odradek.testing import RunningBroker, running_broker
from tests._deadlines import describe, expired

pytestmark = pytest.mark.interop

NAMES = {"common_name": "broker-0", "organization_name": "Odradek tests",
         "organization_unit_name": "brokers"}
KEY_PASSWORD = "k3y-pa55-Xq"  # must never be echoed
LOCATION = "listener.name.ssl.ssl.keystore.location"


@dataclass
class Tls:
    broker: RunningBroker
    ca: trustme.CA
    ca_file: Path
    directory: Path

    def port(self) -> int:
        return next(s.port for s in self.broker.broker.servers if s.security.name == "SSL")

    def plaintext(self) -> str:
        port = next(s.port for s in self.broker.broker.servers
                    if s.security.name == "PLAINTEXT")
        return f"127.0.0.1:{port}"

    def keystore(self, name: str, *identities: str, password: str | None = None,
                 **names: str) -> Path:
        """A new key and certificate from the CA, written as a PEM keystore."""
        leaf = self.ca.issue_cert(*(identities or ("127.0.0.1", "localhost")),
                                  **{**NAMES, **names})
        path = self.directory / name
        key = leaf.private_key_pem.bytes()
        if password is not None:
            loaded = serialization.load_pem_private_key(key, None)
            key = loaded.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                serialization.BestAvailableEncryption(password.encode()))
        path.write_bytes(key + b"".join(p.bytes() for p in leaf.cert_chain_pems))
        return path


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tls]:
    directory = tmp_path_factory.mktemp("tls-reload")
    ca = trustme.CA()
    ca_file = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    holder = Tls(None, ca, ca_file, directory)  # type: ignore[arg-type]
    first = holder.keystore("a.pem")
    config = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(first),
        # a dynamic password is stored encrypted (tests/interop/test_dynamic_passwords.py)
        "password.encoder.secret": "tls-reload-secret",
    }
    with running_broker(config, data_dir=directory / "broker") as broker:
        holder.broker = broker
        yield holder


def served(tls: Tls) -> str:
    """The SHA-256 of the certificate a new, verifying TLS connection gets."""
    context = ssl.create_default_context(cafile=str(tls.ca_file))
    with socket.create_connection(("127.0.0.1", tls.port()), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
        der = conn.getpeercert(binary_form=True)
    assert der is not None
    return hashlib.sha256(der).hexdigest()


def fingerprint(path: Path) -> str:
    pem = path.read_text()
    cert = pem[pem.index("-----BEGIN CERTIFICATE-----"):]
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(cert)).hexdigest()


def alter(tls: Tls, **configs: str) -> None:
    """IncrementalAlterConfigs (SET) of broker 0, raising the broker's error."""
    admin = AdminClient({"bootstrap.servers": tls.plaintext()})
    resource = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry(k.replace("__", "."), v, incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def producer(tls: Tls) -> Producer:
    return Producer({"bootstrap.servers": f"127.0.0.1:{tls.port()}",
                     "security.protocol": "SSL", "ssl.ca.location": str(tls.ca_file),
                     "linger.ms": 0})


def produce(p: Producer, topic: str) -> None:
    failed: list[object] = []
    p.produce(topic, b"v", on_delivery=lambda err, _m: failed.append(err) if err else None)
    assert p.flush(30) == 0 and not failed, failed


def test_new_connections_get_the_new_certificate_old_ones_keep_theirs(tls: Tls) -> None:
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": tls.plaintext()})
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(30)
    first = served(tls)
    before = producer(tls)
    produce(before, topic)  # connected, with the first certificate
    context = ssl.create_default_context(cafile=str(tls.ca_file))
    old = context.wrap_socket(socket.create_connection(("127.0.0.1", tls.port()), timeout=10),
                              server_hostname="127.0.0.1")
    try:
        new_store = tls.keystore("b.pem")
        alter(tls, **{LOCATION.replace(".", "__"): str(new_store)})
        assert served(tls) == fingerprint(new_store) != first
        produce(producer(tls), topic)  # librdkafka verifies the new certificate
        produce(before, topic)  # the connection made before still works
        der = old.getpeercert(binary_form=True)
        assert der is not None and hashlib.sha256(der).hexdigest() == first
    finally:
        old.close()
        before.flush(0)


@pytest.mark.parametrize(("case", "message"), [
    ("other-subject", "Keystore DistinguishedName does not match"),
    ("fewer-names", "Keystore SubjectAltNames do not match"),
    ("missing-file", "cannot read ssl.keystore.location"),
    ("not-a-keystore", "cannot load the key and certificate chain"),
])
def test_a_bad_keystore_is_refused_and_the_old_one_keeps_serving(
    tls: Tls, case: str, message: str
) -> None:
    before = served(tls)
    if case == "other-subject":
        store = tls.keystore(f"{case}.pem", common_name="someone-else")
    elif case == "fewer-names":
        store = tls.keystore(f"{case}.pem", "127.0.0.1")  # localhost dropped
    elif case == "missing-file":
        store = tls.directory / "nowhere.pem"
    else:
        store = tls.directory / "garbage.pem"
        store.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    with pytest.raises(KafkaException) as raised:
        alter(tls, **{LOCATION.replace(".", "__"): str(store)})
    error = raised.value.args[0]
    assert error.name() == "INVALID_CONFIG", error
    assert message in error.str()
    assert served(tls) == before
    stored = tls.broker.broker.metadata.broker_configs("0").get(LOCATION)
    assert stored != str(store)


def test_passwords_are_sensitive_and_never_echoed(
    tls: Tls, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    store = tls.keystore("encrypted.pem", password=KEY_PASSWORD)
    with pytest.raises(KafkaException) as raised:  # the key cannot be read without it
        alter(tls, **{LOCATION.replace(".", "__"): str(store),
                      "listener__name__ssl__ssl__key__password": KEY_PASSWORD + "-wrong"})
    assert raised.value.args[0].name() == "INVALID_CONFIG"
    assert KEY_PASSWORD not in raised.value.args[0].str()
    alter(tls, **{LOCATION.replace(".", "__"): str(store),
                  "listener__name__ssl__ssl__key__password": KEY_PASSWORD})
    started = time.monotonic()
    while served(tls) != fingerprint(store):
        assert not expired(started, 10), \
            f"the encrypted keystore not served in {describe(started, 10)}"
        time.sleep(0.05)
    admin = AdminClient({"bootstrap.servers": tls.plaintext()})
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    configs = admin.describe_configs([resource])[resource].result(30)
    entry = configs["listener.name.ssl.ssl.key.password"]
    assert entry.is_sensitive and entry.value is None
    assert configs[LOCATION].value == str(store)
    assert all(KEY_PASSWORD not in str(c.value) for c in configs.values())
    assert KEY_PASSWORD not in caplog.text


def test_a_stored_keystore_serves_again_after_a_restart(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    holder = Tls(None, ca, ca_file, tmp_path)  # type: ignore[arg-type]
    config = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
              "ssl.keystore.type": "PEM", "ssl.keystore.location": str(holder.keystore("a.pem"))}
    second = holder.keystore("b.pem")
    with running_broker(config, data_dir=tmp_path / "broker") as broker:
        holder.broker = broker
        alter(holder, **{LOCATION.replace(".", "__"): str(second)})
        assert served(holder) == fingerprint(second)
    with running_broker(config, data_dir=tmp_path / "broker") as broker:
        holder.broker = broker
        assert served(holder) == fingerprint(second)
