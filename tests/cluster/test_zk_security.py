"""ZooKeeper locked as Kafka locks it: SASL DIGEST-MD5 from a JAAS ``Client`` section,
Kafka's ACLs on every znode with ``zookeeper.set.acl=true``, the migration verb both ways.

Against a real Debian ZooKeeper started with a ``Server`` JAAS section, ``authProvider.1=
SASLAuthenticationProvider`` and ``requireClientAuthScheme=sasl``; the "world" is a kazoo
client without credentials."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, Id, Permissions

from odradek.cli.main import main
from odradek.cluster.zk_security import (
    DigestCredentials,
    ZkClientSecurity,
    ZooKeeperSecurityError,
    default_acls,
    java_system_properties,
    read_jaas_sections,
)
from odradek.cluster.zk_store import ZooKeeperStore
from tests.cluster._zookeeper import ZooKeeperServer, running_zookeeper

BROKER, BROKER_PASSWORD = "broker", "br0ker-s3cret"
WORLD = Id("world", "anyone")
SASL_BROKER = Id("sasl", BROKER)


def client_jaas(path: Path, user: str = BROKER, password: str = BROKER_PASSWORD) -> Path:
    path.write_text(
        "// the broker's identity to ZooKeeper\n"
        "Client {\n"
        "  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        f'  username="{user}"\n  password="{password}";\n'
        "};\n"
        "/* a listener's section, not ours */\n"
        'KafkaServer { org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="x}y"; };\n'
    )
    return path


# -- the JAAS file and KAFKA_OPTS ---------------------------------------------------------
def test_kafka_opts_jvm_properties() -> None:
    props = java_system_properties(
        '-Xmx1G -Djava.security.auth.login.config="/etc/kafka/zk jaas.conf" -Dflag -ea')
    assert props == {"java.security.auth.login.config": "/etc/kafka/zk jaas.conf", "flag": ""}


def test_the_client_section_gives_digest_credentials(tmp_path: Path) -> None:
    jaas = client_jaas(tmp_path / "jaas.conf")
    assert set(read_jaas_sections(jaas.read_text())) == {"Client", "KafkaServer"}
    security = ZkClientSecurity.from_environment(
        {"KAFKA_OPTS": f"-Djava.security.auth.login.config={jaas}"}, set_acl=True)
    assert security.sasl == DigestCredentials(BROKER, BROKER_PASSWORD)
    assert BROKER_PASSWORD not in repr(security)
    assert security.kazoo_options()["sasl_options"]["mechanism"] == "DIGEST-MD5"


def test_no_client_section_means_no_sasl_unless_named(tmp_path: Path) -> None:
    jaas = tmp_path / "jaas.conf"
    jaas.write_text("KafkaServer { org.apache.kafka.common.security.plain.PlainLoginModule "
                    "required; };")
    opts = {"java.security.auth.login.config": str(jaas)}
    assert ZkClientSecurity.from_jvm_properties(opts, set_acl=False).sasl is None
    with pytest.raises(ZooKeeperSecurityError, match="no section 'ZkClient'"):
        ZkClientSecurity.from_jvm_properties(
            {**opts, "zookeeper.sasl.clientconfig": "ZkClient"}, set_acl=False)


def test_a_bad_jaas_file_is_refused_without_quoting_it(tmp_path: Path) -> None:
    jaas = tmp_path / "jaas.conf"
    jaas.write_text('Client { org.apache.zookeeper.server.auth.DigestLoginModule required '
                    'username="u" password="hunter2" }')
    with pytest.raises(ZooKeeperSecurityError) as raised:
        ZkClientSecurity.from_jvm_properties(
            {"java.security.auth.login.config": str(jaas)}, set_acl=True)
    assert "hunter2" not in str(raised.value)
    with pytest.raises(ZooKeeperSecurityError, match="cannot read the JAAS file"):
        ZkClientSecurity.from_jvm_properties(
            {"java.security.auth.login.config": str(tmp_path / "absent")}, set_acl=True)


def test_kafkas_default_acls() -> None:
    creator_all = ACL(Permissions.ALL, Id("auth", ""))
    world_read = ACL(Permissions.READ, WORLD)
    world_all = ACL(Permissions.ALL, WORLD)
    assert default_acls(False, "/config/users/alice") == [world_all]
    assert default_acls(True, "/brokers/topics/t") == [creator_all, world_read]
    assert default_acls(True, "/kafka-acl/Topic/t") == [creator_all, world_read]
    for sensitive in ("/config/users", "/config/users/alice", "/config/brokers/1",
                      "/delegation_token/tokens/x"):
        assert default_acls(True, sensitive) == [creator_all], sensitive
    assert default_acls(True, "/config/topics/t") == [creator_all, world_read]
    assert default_acls(True, "/consumers") == [world_all]


# -- against a SASL ZooKeeper ------------------------------------------------------------
@pytest.fixture(scope="module")
def sasl_zookeeper() -> Iterator[ZooKeeperServer]:
    with running_zookeeper(sasl_users={BROKER: BROKER_PASSWORD, "other": "0ther"}) as server:
        yield server


@pytest.fixture
def world(sasl_zookeeper: ZooKeeperServer) -> Iterator[Callable[[str], KazooClient]]:
    """A kazoo client without credentials, rooted at the given chroot."""
    clients: list[KazooClient] = []

    def open_(chroot: str) -> KazooClient:
        client = KazooClient(hosts=sasl_zookeeper.connect_string(chroot), timeout=5.0)
        client.start(timeout=10)
        clients.append(client)
        return client

    yield open_
    for client in clients:
        client.stop()
        client.close()


def secure_store(server: ZooKeeperServer, chroot: str, set_acl: bool = True) -> ZooKeeperStore:
    security = ZkClientSecurity(DigestCredentials(BROKER, BROKER_PASSWORD), set_acl=set_acl)
    return ZooKeeperStore(server.connect_string(chroot), 4000, 5000, security=security)


def populate(store: ZooKeeperStore) -> None:
    """A tree as a cluster leaves it: topics, partition state, ACLs, credentials, configs."""
    store.create("/brokers/topics/orders/partitions/0/state", b'{"leader":1}')
    store.create("/kafka-acl/Topic/orders", b'{"acls":[]}')
    store.create("/config/users/alice", b'{"config":{"SCRAM-SHA-256":"salted"}}')
    store.create("/config/brokers/1", b'{"config":{"ssl.keystore.password":"pw"}}')
    store.create("/config/topics/orders", b'{"config":{}}')


def assert_locked(world: KazooClient) -> None:
    """What Kafka lets the world do with a secured tree: read all but credentials, write
    nothing."""
    assert world.get("/brokers/topics/orders/partitions/0/state")[0] == b'{"leader":1}'
    assert world.get("/kafka-acl/Topic/orders")[0] == b'{"acls":[]}'
    assert world.get("/config/topics/orders")[0] == b'{"config":{}}'
    writes: list[Callable[[], Any]] = [
        lambda: world.get("/config/users/alice"),
        lambda: world.get("/config/brokers/1"),
        lambda: world.set("/config/users/alice", b'{"config":{"SCRAM-SHA-256":"mine"}}'),
        lambda: world.create("/config/users/mallory", b"{}"),
        lambda: world.create("/kafka-acl/Topic/orders2", b"{}"),
        lambda: world.set("/kafka-acl/Topic/orders", b'{"acls":[{"principal":"User:*"}]}'),
        lambda: world.delete("/kafka-acl/Topic/orders"),
        lambda: world.set("/brokers/topics/orders/partitions/0/state", b"{}"),
        lambda: world.create("/controller", b'{"brokerid":66}', ephemeral=True),
        lambda: world.set_acls("/kafka-acl/Topic/orders", [ACL(Permissions.ALL, WORLD)]),
    ]
    for index, attempt in enumerate(writes):
        with pytest.raises(NoAuthError):
            attempt()
            pytest.fail(f"the world's request {index} was allowed")


def test_set_acl_locks_every_znode_the_store_creates(
        sasl_zookeeper: ZooKeeperServer, world: Callable[[str], KazooClient]) -> None:
    chroot = f"/secure-{uuid.uuid4().hex[:8]}"
    store = secure_store(sasl_zookeeper, chroot)
    try:
        populate(store)
        acls, _ = store.client.get_acls("/config/users/alice")
        assert acls == [ACL(Permissions.ALL, SASL_BROKER)]
        acls, _ = store.client.get_acls("/config")  # a parent made on the way: its own ACLs
        assert acls == [ACL(Permissions.ALL, SASL_BROKER), ACL(Permissions.READ, WORLD)]
        assert_locked(world(chroot))
        # the broker itself still reads and writes everything
        store.set("/config/users/alice", b"{}")
        assert store.get("/config/users/alice") is not None
    finally:
        store.close()


def test_set_acl_without_credentials_refuses_with_the_reason(
        sasl_zookeeper: ZooKeeperServer) -> None:
    with pytest.raises(ZooKeeperSecurityError, match=r"zookeeper\.set\.acl is true, but"):
        ZooKeeperStore(sasl_zookeeper.connect_string("/x"), 4000, 5000,
                       security=ZkClientSecurity(None, set_acl=True))


def migrate(connect: str, acl: str, jaas: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setenv("KAFKA_OPTS", f"-Djava.security.auth.login.config={jaas}")
    return main(["zookeeper-security-migration", "--zookeeper.connect", connect,
                 "--zookeeper.acl", acl])


def test_the_migration_verb_both_ways_on_a_populated_tree(
        sasl_zookeeper: ZooKeeperServer, world: Callable[[str], KazooClient], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    chroot = f"/migrated-{uuid.uuid4().hex[:8]}"
    jaas = client_jaas(tmp_path / "jaas.conf")
    store = secure_store(sasl_zookeeper, chroot, set_acl=False)  # an unsecured cluster's tree
    try:
        populate(store)
    finally:
        store.close()
    anyone = world(chroot)
    anyone.set("/config/users/alice", b'{"config":{"SCRAM-SHA-256":"salted"}}')  # wide open

    assert migrate(sasl_zookeeper.connect_string(chroot), "secure", jaas, monkeypatch) == 0
    assert_locked(anyone)

    assert migrate(sasl_zookeeper.connect_string(chroot), "unsecure", jaas, monkeypatch) == 0
    anyone.set("/config/users/alice", b"{}")
    anyone.create("/kafka-acl/Topic/orders2", b"{}")
    acls, _ = anyone.get_acls("/config/users/alice")
    assert acls == [ACL(Permissions.ALL, WORLD)]


def test_the_migration_verb_needs_a_jaas_file(
        sasl_zookeeper: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("KAFKA_OPTS", raising=False)
    code = main(["zookeeper-security-migration", "--zookeeper.connect",
                 sasl_zookeeper.connect_string("/nothing"), "--zookeeper.acl", "secure"])
    assert code == 2
    assert "java.security.auth.login.config" in capsys.readouterr().err


def test_secrets_written_for_zookeeper_are_private_even_over_an_older_file(
        tmp_path: Path) -> None:
    """zoo.cfg holds the stores' passwords with TLS, the server's JAAS file the users'
    passwords: both 0600, also when a wider file was left there by an earlier run (a
    dev-cluster restarted with security turned on)."""
    from odradek.cluster.local_zookeeper import write_config, write_server_jaas
    from tests.cluster._zk_tls import make_tls_files

    config, jaas = tmp_path / "zoo.cfg", tmp_path / "zookeeper_jaas.conf"
    for path in (config, jaas):
        path.write_text("# an earlier run's\n")
        path.chmod(0o644)
    write_config(config, tmp_path / "data", 2182, 2000, False,
                 tls=make_tls_files(tmp_path / "tls").server())
    write_server_jaas(jaas, {BROKER: BROKER_PASSWORD})
    for path in (config, jaas):
        assert path.stat().st_mode & 0o777 == 0o600, path
