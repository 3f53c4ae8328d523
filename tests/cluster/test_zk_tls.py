"""Mutual TLS to ZooKeeper as Kafka's ZooKeeper mode configures it (KIP-515's
``zookeeper.ssl.*`` keys, or the ZooKeeper client's system properties in ``KAFKA_OPTS``).

Against a real Debian ZooKeeper 3.8 with a ``secureClientPort`` only (Netty connection
factory, PKCS12 keystore and keytool-made truststore, ``ssl.clientAuth=need``): a client
with a certificate the server trusts works, with the server's name checked; one without a
certificate, with an untrusted one, or distrusting the server, is refused within the
connection timeout, saying why. Then real ``odradek serve`` processes over it."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kazoo.client import KazooClient
from kazoo.security import ACL, Id, Permissions

from odradek.cli.main import main
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
from tests.cluster.test_zk_security import assert_locked, populate
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


def test_an_identification_algorithm_other_than_https_is_off_and_said_to_be(
        caplog: pytest.LogCaptureFixture) -> None:
    """As in Kafka only HTTPS checks the name; a typo such as HTTP turns the check off,
    so it is warned about (empty, the documented way, is not)."""
    tls = ZkTls.from_settings(settings(
        zookeeper_ssl_client_enable="true", zookeeper_clientCnxnSocket=NETTY_SOCKET,
        **{"zookeeper_ssl_endpoint_identification_algorithm": "HTTP"}))
    assert tls is not None and not tls.check_hostname
    assert "is not HTTPS: ZooKeeper's certificate will not be checked" in caplog.text
    caplog.clear()
    for value in ("", "https"):
        tls = ZkTls.from_settings(settings(
            zookeeper_ssl_client_enable="true", zookeeper_clientCnxnSocket=NETTY_SOCKET,
            **{"zookeeper_ssl_endpoint_identification_algorithm": value}))
        assert tls is not None and tls.check_hostname == (value == "https")
    assert "is not HTTPS" not in caplog.text


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


# -- the migration verb over TLS (Kafka's --zk-tls-config-file) ----------------------------
def other_client(server: ZooKeeperServer, files: ZkTlsFiles, directory: Path,
                 chroot: str) -> KazooClient:
    """A kazoo client whose certificate the server trusts but whose DN is not the broker's:
    the "world" of the x509 creator ACLs."""
    pem = directory / "someone-else.pem"
    files.ca.issue_cert("127.0.0.1", common_name="someone-else") \
        .private_key_and_cert_chain_pem.write_to_path(str(pem))
    config = BrokerConfig.from_raw({
        **tls_files_pem(files), "zookeeper.ssl.keystore.location": str(pem),
        "zookeeper.ssl.keystore.type": "PEM"})
    security = ZkClientSecurity.for_broker(config.values, config.raw, {})
    client = KazooClient(hosts=server.connect_string(chroot), timeout=5.0,
                         **security.kazoo_options())
    client.start(timeout=10)
    return client


def tls_files_pem(files: ZkTlsFiles) -> dict[str, str]:
    return {"zookeeper.ssl.client.enable": "true", "zookeeper.clientCnxnSocket": NETTY_SOCKET,
            "zookeeper.ssl.truststore.location": str(files.ca_pem),
            "zookeeper.ssl.truststore.type": "PEM"}


def write_tls_config_file(path: Path, files: ZkTlsFiles) -> Path:
    """What Kafka's --zk-tls-config-file takes: the broker's zookeeper.ssl.* keys (other
    keys are ignored, as Kafka's tool ignores them)."""
    lines = [f"{key}={value}" for key, value in files.broker_overrides().items()]
    path.write_text("# ZooKeeper client TLS for the migration tool\n" + "\n".join(lines)
                    + "\nzookeeper.connect=ignored:1\n")
    return path


def test_the_migration_verb_over_tls_with_a_tls_config_file_both_ways(
        tls_zookeeper: ZooKeeperServer, tls_files: ZkTlsFiles, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    chroot = f"/migrated-{uuid.uuid4().hex[:8]}"
    store = tls_store(tls_zookeeper, tls_files.broker_overrides(), chroot)  # no set.acl
    try:
        populate(store)
    finally:
        store.close()
    config_file = write_tls_config_file(tmp_path / "zk-tls.properties", tls_files)
    monkeypatch.setenv("KAFKA_OPTS", "")  # no JAAS file: the certificate authenticates
    connect = tls_zookeeper.connect_string(chroot)

    def migrate(acl: str) -> int:
        return main(["zookeeper-security-migration", "--zookeeper.connect", connect,
                     "--zookeeper.acl", acl, "--zk-tls-config-file", str(config_file),
                     "--zookeeper.connection.timeout", str(REFUSED_TIMEOUT_MS * 3)])

    someone = other_client(tls_zookeeper, tls_files, tmp_path, chroot)
    try:
        assert migrate("secure") == 0, capsys.readouterr().err
        assert_locked(someone)
        acls, _ = someone.get_acls("/brokers/topics/orders")
        assert [acl.id.scheme for acl in acls] == ["x509", "world"]
        assert "CN=broker" in acls[0].id.id

        assert migrate("unsecure") == 0, capsys.readouterr().err
        someone.set("/config/users/alice", b"{}")
        acls, _ = someone.get_acls("/config/users/alice")
        assert acls == [ACL(Permissions.ALL, Id("world", "anyone"))]
    finally:
        someone.stop()
        someone.close()
    assert tls_files.password not in capsys.readouterr().out


def test_the_migration_verb_needs_sasl_or_a_client_certificate(
        tls_zookeeper: ZooKeeperServer, tls_files: ZkTlsFiles, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KAFKA_OPTS", "")
    no_keystore = tmp_path / "no-keystore.properties"
    no_keystore.write_text("\n".join(
        f"{k}={v}" for k, v in tls_files.broker_overrides(with_keystore=False).items()))
    for extra in ([], ["--zk-tls-config-file", str(no_keystore)]):
        code = main(["zookeeper-security-migration", "--zookeeper.acl", "secure",
                     "--zookeeper.connect", tls_zookeeper.connect_string("/x"), *extra])
        assert code == 2
        err = capsys.readouterr().err
        assert "java.security.auth.login.config" in err and "--zk-tls-config-file" in err
    missing = main(["zookeeper-security-migration", "--zookeeper.acl", "secure",
                    "--zk-tls-config-file", str(tmp_path / "absent.properties")])
    assert missing == 2
    assert "absent.properties" in capsys.readouterr().err


def test_set_acl_with_a_client_certificate_and_no_sasl_is_kafkas_x509_creator(
        tls_zookeeper: ZooKeeperServer, tls_files: ZkTlsFiles) -> None:
    """Kafka accepts zookeeper.set.acl=true when TLS client authentication is configured
    (KafkaServer: SASL or a ZooKeeper client certificate); the creator is the x509 DN."""
    store = tls_store(tls_zookeeper, {**tls_files.broker_overrides(),
                                      "zookeeper.set.acl": "true"},
                      f"/x509-{uuid.uuid4().hex[:8]}")
    try:
        store.create("/config/users/alice", b"{}")
        acls, _ = store.client.get_acls("/config/users/alice")
        assert [acl.id.scheme for acl in acls] == ["x509"]
    finally:
        store.close()


@pytest.mark.parametrize("when", ["expired", "not yet valid"])
def test_a_client_certificate_out_of_its_validity_is_named_as_such(
        tls_zookeeper: ZooKeeperServer, tls_files: ZkTlsFiles, tmp_path: Path,
        when: str) -> None:
    """ZooKeeper answers an expired certificate with certificate_unknown, as it answers
    an unknown CA: the broker tells the two apart from its own certificate's dates."""
    now = datetime.datetime.now(datetime.UTC)
    day = datetime.timedelta(days=1)
    not_before, not_after = ((now - 10 * day, now - day) if when == "expired"
                             else (now + day, now + 10 * day))
    pem = tmp_path / "client.pem"
    tls_files.ca.issue_cert("127.0.0.1", common_name="broker", not_before=not_before,
                            not_after=not_after) \
        .private_key_and_cert_chain_pem.write_to_path(str(pem))
    message = refused(tls_zookeeper, {**tls_files_pem(tls_files),
                                      "zookeeper.ssl.keystore.location": str(pem),
                                      "zookeeper.ssl.keystore.type": "PEM"})
    expected = "expired on" if when == "expired" else "is not valid before"
    assert f"ZooKeeper refused the client certificate of {pem}: it {expected}" in message
    assert "not signed by a CA" not in message


def test_tls_to_a_plaintext_port_is_refused_in_time_saying_so(tls_files: ZkTlsFiles) -> None:
    with running_zookeeper() as plaintext:
        message = refused(plaintext, tls_files.broker_overrides())
    assert "TLS to ZooKeeper failed" in message
    assert "is that its plaintext clientPort rather than its secureClientPort?" in message
