"""Mutual TLS to ZooKeeper as Kafka's ZooKeeper mode configures it (KIP-515's
``zookeeper.ssl.*`` keys, or the ZooKeeper client's system properties in ``KAFKA_OPTS``).

Against a real Debian ZooKeeper 3.8 with a ``secureClientPort`` only (Netty connection
factory, PKCS12 keystore and keytool-made truststore, ``ssl.clientAuth=need``): a client
with a certificate the server trusts works, with the server's name checked; one without a
certificate, with an untrusted one, or distrusting the server, is refused within the
connection timeout, saying why. Then real ``odradek serve`` processes over it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from odradek.cluster.local_zookeeper import four_letter
from odradek.cluster.store import StoreConnectionError
from odradek.cluster.zk_security import (
    NETTY_SOCKET,
    ZkClientSecurity,
    ZkTls,
    ZooKeeperSecurityError,
    zk_tls_settings,
)
from odradek.cluster.zk_store import ZooKeeperStore
from odradek.server.config import BrokerConfig
from tests.cluster._zk_tls import ZkTlsFiles, make_tls_files
from tests.cluster._zookeeper import ZooKeeperServer, running_zookeeper, wait_for
from tests.interop._broker import BrokerProcess, BrokerStartError, start_broker

#: zookeeper.connection.timeout.ms of the refused clients: how long they may try.
REFUSED_TIMEOUT_MS = 3000


def settings(**values: Any) -> dict[str, Any]:
    """The resolved TLS settings of a broker config with ``values`` (dots as underscores)."""
    config = BrokerConfig.from_raw({k.replace("_", "."): str(v) for k, v in values.items()})
    return zk_tls_settings(config.values, config.raw, {})


# -- the settings, without a server --------------------------------------------------------
def test_a_key_set_in_the_config_wins_over_the_jvm_property() -> None:
    config = BrokerConfig.from_raw({"zookeeper.ssl.keystore.location": "/etc/kafka/zk.p12"})
    props = {
        "zookeeper.client.secure": "true",
        "zookeeper.ssl.keyStore.location": "/ignored.p12",
        "zookeeper.ssl.trustStore.location": "/etc/kafka/trust.p12",
        "zookeeper.ssl.enabledProtocols": "TLSv1.2, TLSv1.3",
        "zookeeper.ssl.hostnameVerification": "false",
    }
    resolved = zk_tls_settings(config.values, config.raw, props)
    assert resolved["zookeeper.ssl.client.enable"] is True
    assert resolved["zookeeper.ssl.keystore.location"] == "/etc/kafka/zk.p12"
    assert resolved["zookeeper.ssl.truststore.location"] == "/etc/kafka/trust.p12"
    assert resolved["zookeeper.ssl.enabled.protocols"] == ["TLSv1.2", "TLSv1.3"]
    assert resolved["zookeeper.ssl.endpoint.identification.algorithm"] == ""
    assert resolved["zookeeper.ssl.protocol"] == "TLSv1.2"  # Kafka's default
    defaults = zk_tls_settings(BrokerConfig.from_raw({}).values, (), {})
    assert defaults["zookeeper.ssl.client.enable"] is False
    assert defaults["zookeeper.ssl.endpoint.identification.algorithm"] == "HTTPS"


def test_tls_without_the_netty_socket_is_refused_as_kafka_documents() -> None:
    assert ZkTls.from_settings(settings()) is None
    with pytest.raises(ZooKeeperSecurityError, match=f"set zookeeper.clientCnxnSocket="
                                                     f"{NETTY_SOCKET}"):
        ZkTls.from_settings(settings(zookeeper_ssl_client_enable="true"))


@pytest.mark.parametrize(("values", "error"), [
    ({"zookeeper.ssl.keystore.location": "/x/zk.jks"},
     "zookeeper.ssl.keystore.type=JKS: Java keystores cannot be read"),
    ({"zookeeper.ssl.truststore.location": "/x/trust.store"},
     "zookeeper.ssl.truststore.type is not set and the extension"),
    ({"zookeeper.ssl.keystore.location": "/absent.p12"},
     "cannot read zookeeper.ssl.keystore.location '/absent.p12'"),
    ({"zookeeper.ssl.protocol": "SSLv3"}, "invalid zookeeper.ssl.protocol 'SSLv3'"),
])
def test_bad_settings_name_the_zookeeper_key(values: dict[str, str], error: str) -> None:
    raw = {"zookeeper.ssl.client.enable": "true", "zookeeper.clientCnxnSocket": NETTY_SOCKET,
           **values}
    config = BrokerConfig.from_raw(raw)
    with pytest.raises(ZooKeeperSecurityError, match=error):
        ZkTls.from_settings(zk_tls_settings(config.values, config.raw, {}))


# -- against a ZooKeeper with a TLS port only ---------------------------------------------
@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> ZkTlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("zk-tls"))


@pytest.fixture(scope="module")
def tls_zookeeper(tls_files: ZkTlsFiles) -> Iterator[ZooKeeperServer]:
    with running_zookeeper(tls=tls_files.server()) as server:
        yield server


def tls_store(server: ZooKeeperServer, overrides: dict[str, str], chroot: str = "/tls"
              ) -> ZooKeeperStore:
    config = BrokerConfig.from_raw(overrides)
    security = ZkClientSecurity.for_broker(config.values, config.raw, {})
    return ZooKeeperStore(server.connect_string(chroot), 6000, REFUSED_TIMEOUT_MS,
                          security=security)


def test_a_client_certificate_the_server_trusts_gets_in(
        tls_zookeeper: ZooKeeperServer, tls_files: ZkTlsFiles) -> None:
    store = tls_store(tls_zookeeper, tls_files.broker_overrides())
    try:
        assert store.security.tls is not None and store.security.tls.check_hostname
        store.create("/brokers/ids/1", b"{}")
        assert store.children("/brokers/ids") == ["1"]
    finally:
        store.close()


def refused(server: ZooKeeperServer, overrides: dict[str, str]) -> str:
    began = time.monotonic()
    with pytest.raises(StoreConnectionError) as raised:
        tls_store(server, overrides).close()
    took = time.monotonic() - began
    assert took < REFUSED_TIMEOUT_MS / 1000 + 3, f"refused after {took:.1f} s"
    return str(raised.value)


def test_no_client_certificate_is_refused_saying_why(
        tls_zookeeper: ZooKeeperServer, tls_files: ZkTlsFiles) -> None:
    message = refused(tls_zookeeper, tls_files.broker_overrides(with_keystore=False))
    assert "TLS to ZooKeeper failed" in message
    assert "the client has no certificate to present" in message
    # TLS 1.3, where the server's refusal comes after the client's handshake
    message = refused(tls_zookeeper, {**tls_files.broker_overrides(with_keystore=False),
                                      "zookeeper.ssl.protocol": "TLSv1.3"})
    # seen by the handler's look after the handshake (kazoo's own reads would not say)
    assert "SSLV3_ALERT_BAD_CERTIFICATE" in message
    assert "the client has no certificate to present" in message


def test_an_untrusted_client_certificate_is_refused_saying_why(
        tls_zookeeper: ZooKeeperServer, tls_files: ZkTlsFiles) -> None:
    message = refused(tls_zookeeper, tls_files.broker_overrides(tls_files.rogue_keystore))
    assert f"ZooKeeper refused the client certificate of {tls_files.rogue_keystore}" in message


def test_a_server_the_truststore_does_not_trust_is_refused(
        tls_zookeeper: ZooKeeperServer, tls_files: ZkTlsFiles, tmp_path: Path) -> None:
    other_ca = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other_ca))
    message = refused(tls_zookeeper, {**tls_files.broker_overrides(),
                                      "zookeeper.ssl.truststore.location": str(other_ca),
                                      "zookeeper.ssl.truststore.type": "PEM"})
    assert "certificate verify failed" in message
    assert "ZooKeeper's certificate is not trusted" in message


# -- brokers ------------------------------------------------------------------------------
def jvm_properties(files: ZkTlsFiles) -> str:
    """The same settings as the ZooKeeper client's system properties, as Kafka takes them
    from KAFKA_OPTS (note the camelCase and zookeeper.client.secure)."""
    return " ".join([
        "-Dzookeeper.client.secure=true",
        f"-Dzookeeper.clientCnxnSocket={NETTY_SOCKET}",
        f"-Dzookeeper.ssl.keyStore.location={files.client_keystore}",
        f"-Dzookeeper.ssl.keyStore.password={files.password}",
        f"-Dzookeeper.ssl.trustStore.location={files.truststore}",  # type: by extension
        f"-Dzookeeper.ssl.trustStore.password={files.password}",
    ])


def test_brokers_over_mutual_tls_serve_and_one_without_a_certificate_refuses(
        tls_zookeeper: ZooKeeperServer, tls_files: ZkTlsFiles, tmp_path: Path) -> None:
    chroot = f"/tls-{uuid.uuid4().hex[:8]}"
    connect = tls_zookeeper.connect_string(chroot)
    brokers: list[BrokerProcess] = []
    try:
        # broker 1 from server.properties keys, broker 2 from KAFKA_OPTS's properties
        brokers.append(start_broker(tmp_path / "b1", env={"KAFKA_OPTS": ""}, overrides={
            "broker.id": 1, "zookeeper.connect": connect,
            "zookeeper.session.timeout.ms": 6000, **tls_files.broker_overrides()}))
        brokers.append(start_broker(
            tmp_path / "b2", env={"KAFKA_OPTS": jvm_properties(tls_files)},
            overrides={"broker.id": 2, "zookeeper.connect": connect,
                       "zookeeper.session.timeout.ms": 6000}))
        bootstrap = ",".join(b.bootstrap for b in brokers)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        wait_for(lambda: len(admin.list_topics(timeout=5).brokers) == 2, 30, "two brokers")
        topic = "over-tls"
        admin.create_topics([NewTopic(topic, 2, 2)])[topic].result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(10):
            producer.produce(topic, f"m{i}".encode(), partition=i % 2)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g",
                             "auto.offset.reset": "earliest"})
        try:
            consumer.subscribe([topic])
            got: set[bytes] = set()

            def consumed() -> bool:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    got.add(message.value() or b"")
                return len(got) == 10

            wait_for(consumed, 30, "ten records consumed")
        finally:
            consumer.close()

        began = time.monotonic()
        with pytest.raises(BrokerStartError) as refused_start:
            start_broker(tmp_path / "b3", env={"KAFKA_OPTS": ""}, timeout=30, overrides={
                "broker.id": 3, "zookeeper.connect": connect,
                "zookeeper.connection.timeout.ms": REFUSED_TIMEOUT_MS,
                **tls_files.broker_overrides(with_keystore=False)})
        took = time.monotonic() - began
        message = str(refused_start.value)
        assert "broker exited during startup" in message
        assert "cannot join the cluster: could not connect to ZooKeeper" in message
        assert "the client has no certificate to present" in message
        assert took < 20, f"refused after {took:.1f} s"
    finally:
        for broker in brokers:
            broker.stop()


def test_the_probe_speaks_four_letter_words_over_tls(
        tls_zookeeper: ZooKeeperServer, tls_files: ZkTlsFiles) -> None:
    assert four_letter(tls_zookeeper.port, "ruok", tls=tls_files.server().probe) == "imok"
    try:  # no plaintext port: a plain client gets no answer
        answer = four_letter(tls_zookeeper.port, "ruok", timeout=2.0)
    except OSError:
        answer = ""
    assert answer != "imok"
