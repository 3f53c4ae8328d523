"""ACLs with real clients over real sockets: confluent-kafka's AdminClient (librdkafka),
kafka-python's KafkaAdminClient, kcat and ``odradek acls`` manage them, and producers,
consumers and admin calls meet Kafka's authorization errors.

Every connection is ``User:ANONYMOUS`` until SASL and TLS exist, so the broker runs with
``allow.everyone.if.no.acl.found=true`` (what has no ACL is open) and the tests DENY
ANONYMOUS what they want refused; the cluster test adds the ACL through broker 1 and
watches broker 3 enforce it.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from odradek.testing import RunningBroker, running_broker
from tests._deadlines import expired
from tests._zygote import run as run_odradek
from tests.interop._broker import kcat, odradek_executable
from tests.interop._cluster import running_cluster

ANON = "User:ANONYMOUS"
OPEN = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "true"}


@pytest.fixture(scope="module")
def rb() -> Iterator[RunningBroker]:
    with running_broker(overrides=OPEN) as broker:
        yield broker


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def acls(bootstrap: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_odradek([str(odradek_executable()), "acls", "--bootstrap-server", bootstrap,
                           *args], timeout=60, input=stdin)


def _deny_all(topic: str) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, ANON, "*",
                      AclOperation.ALL, AclPermissionType.DENY)


def _produce(bootstrap: str, topic: str) -> Any:
    """The delivery error of one record (None: delivered)."""
    errors: list[Any] = []
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap,
                                         "message.timeout.ms": 10000})
    producer.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    assert len(errors) == 1
    return errors[0]


def test_confluent_admin_creates_describes_and_deletes_acls(rb: RunningBroker) -> None:
    admin = AdminClient({"bootstrap.servers": rb.bootstrap})
    topic = _name("acl-c")
    bindings = [
        _deny_all(topic),
        AclBinding(ResourceType.GROUP, "grp-", ResourcePatternType.PREFIXED, "User:alice",
                   "10.0.0.1", AclOperation.READ, AclPermissionType.ALLOW),
    ]
    for future in admin.create_acls(bindings).values():
        future.result(15)
    any_filter = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    found = admin.describe_acls(any_filter).result(15)
    assert set(bindings) <= set(found)
    # an invalid binding: the Cluster resource's name must be kafka-cluster
    bad = AclBinding(ResourceType.BROKER, "other", ResourcePatternType.LITERAL, ANON, "*",
                     AclOperation.ALTER, AclPermissionType.ALLOW)
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        for future in admin.create_acls([bad]).values():
            future.result(15)
    assert refused.value.args[0].code() == confluent_kafka.KafkaError.INVALID_REQUEST
    group_filter = AclBindingFilter(ResourceType.GROUP, None, ResourcePatternType.ANY, None,
                                    None, AclOperation.ANY, AclPermissionType.ANY)
    (deleted,) = admin.delete_acls([group_filter]).values()
    assert deleted.result(15) == [bindings[1]]
    assert bindings[1] not in admin.describe_acls(any_filter).result(15)
    for future in admin.delete_acls([AclBindingFilter(
            ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None,
            AclOperation.ANY, AclPermissionType.ANY)]).values():
        future.result(15)


def test_denied_topic_refuses_producers_consumers_and_metadata(rb: RunningBroker) -> None:
    admin = AdminClient({"bootstrap.servers": rb.bootstrap})
    secret, public = _name("secret"), _name("public")
    for future in admin.create_topics([NewTopic(secret, 1), NewTopic(public, 1)]).values():
        future.result(15)
    assert _produce(rb.bootstrap, secret) is None  # open: no ACL yet
    for future in admin.create_acls([_deny_all(secret)]).values():
        future.result(15)
    error = _produce(rb.bootstrap, secret)
    assert error is not None
    assert error.code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _produce(rb.bootstrap, public) is None
    # the topic is left out of every listing, as if it did not exist
    listed = admin.list_topics(timeout=15).topics
    assert public in listed and secret not in listed
    assert secret not in kcat("-b", rb.bootstrap, "-L").stdout
    produced = kcat("-b", rb.bootstrap, "-P", "-t", secret, input="x\n", check=False)
    assert produced.returncode != 0
    assert "Topic authorization failed" in produced.stderr
    consumed = kcat("-b", rb.bootstrap, "-C", "-t", secret, "-e", "-o", "beginning",
                    check=False)
    assert consumed.returncode != 0
    assert "Topic authorization failed" in consumed.stderr
    assert (_first_consumer_error(rb, secret, _name("g"))
            == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED)


def _first_consumer_error(rb: RunningBroker, topic: str, group: str) -> int | None:
    """The code of the first error a confluent-kafka group consumer of ``topic`` sees
    within 20 s, longer on a slow machine (None if it sees none)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": rb.bootstrap, "group.id": group,
                                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        started = time.monotonic()
        while not expired(started, 20):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error():
                return int(msg.error().code())
        return None
    finally:
        consumer.close()


def test_denied_group_refuses_the_consumer(rb: RunningBroker) -> None:
    topic, group = _name("gt"), _name("blocked")
    assert _produce(rb.bootstrap, topic) is None
    admin = AdminClient({"bootstrap.servers": rb.bootstrap})
    for future in admin.create_acls([AclBinding(
            ResourceType.GROUP, group, ResourcePatternType.LITERAL, ANON, "*",
            AclOperation.READ, AclPermissionType.DENY)]).values():
        future.result(15)
    assert (_first_consumer_error(rb, topic, group)
            == confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED)


def test_kafka_python_admin_acl_calls(rb: RunningBroker) -> None:
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KResourceType

    admin = KafkaAdminClient(bootstrap_servers=rb.bootstrap)
    try:
        topic = _name("kp")
        acl = ACL("User:bob", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
                  ResourcePattern(KResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL))
        created = admin.create_acls([acl])
        assert created["failed"] == [] and len(created["succeeded"]) == 1
        flt = ACLFilter("User:bob", None, ACLOperation.ANY, ACLPermissionType.ANY,
                        ResourcePatternFilter(KResourceType.TOPIC, topic,
                                              ACLResourcePatternType.LITERAL))
        found, error = admin.describe_acls(flt)
        assert error.errno == 0
        assert [(a.principal, a.operation) for a in found] == [("User:bob", ACLOperation.WRITE)]
        ((_, deleted, _),) = admin.delete_acls([flt])
        assert len(deleted) == 1
        found, _ = admin.describe_acls(flt)
        assert found == []
    finally:
        admin.close()


def test_odradek_acls_cli(rb: RunningBroker) -> None:
    topic, group = _name("cli"), _name("cg")
    added = acls(rb.bootstrap, "--add", "--allow-principal", "User:carol", "--consumer",
                 "--topic", topic, "--group", group)
    assert added.returncode == 0, added.stderr
    assert "Current ACLs for resource `ResourcePattern(resourceType=TOPIC" in added.stdout
    listed = acls(rb.bootstrap, "--list", "--topic", topic)
    assert listed.returncode == 0, listed.stderr
    assert "(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)" in (
        listed.stdout)
    assert "operation=DESCRIBE" in listed.stdout
    by_principal = acls(rb.bootstrap, "--list", "--principal", "User:carol")
    assert f"name={group}, patternType=LITERAL" in by_principal.stdout
    wrong = acls(rb.bootstrap, "--add", "--allow-principal", "User:carol", "--operation",
                 "Write", "--group", group)
    assert wrong.returncode == 2 and "only supports operations" in wrong.stderr
    kept = acls(rb.bootstrap, "--remove", "--topic", topic, stdin="n\n")
    assert kept.returncode == 1
    removed = acls(rb.bootstrap, "--remove", "--force", "--topic", topic)
    assert removed.returncode == 0, removed.stderr
    assert "Removed ACLs" in removed.stdout
    assert "User:carol" not in acls(rb.bootstrap, "--list", "--topic", topic).stdout
    assert "User:carol" in acls(rb.bootstrap, "--list", "--group", group).stdout


def test_with_a_cluster_acl_anonymous_may_no_longer_manage_acls(tmp_path: Path) -> None:
    with running_broker(overrides=OPEN, data_dir=tmp_path) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_acls([AclBinding(
                ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                "User:admin", "*", AclOperation.ALTER, AclPermissionType.ALLOW)]).values():
            future.result(15)
        with pytest.raises(confluent_kafka.KafkaException) as refused:
            for future in admin.create_acls([_deny_all("t")]).values():
                future.result(15)
        assert refused.value.args[0].code() == (
            confluent_kafka.KafkaError.CLUSTER_AUTHORIZATION_FAILED)
        cli = acls(broker.bootstrap, "--list")
        assert cli.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in cli.stderr


def test_without_an_authorizer_acl_calls_are_security_disabled(tmp_path: Path) -> None:
    with running_broker(data_dir=tmp_path) as broker:
        cli = acls(broker.bootstrap, "--list")
        assert cli.returncode == 1 and "SECURITY_DISABLED" in cli.stderr


def test_an_acl_added_through_one_broker_is_enforced_by_another(tmp_path: Path) -> None:
    with running_cluster(tmp_path, size=3, overrides=OPEN) as cluster:
        topic = _name("zk-acl")
        cluster.create_topic(topic, partitions=1, replication_factor=1,
                             replica_assignment=[[3]])
        assert _produce(cluster.address(3), topic) is None
        added = acls(cluster.address(1), "--add", "--deny-principal", ANON, "--operation",
                     "Write", "--topic", topic)
        assert added.returncode == 0, added.stderr
        started = time.monotonic()
        assert cluster.zk_get(f"/kafka-acl/Topic/{topic}") is not None

        def refused_by_3() -> bool:
            error = _produce(cluster.address(3), topic)
            return error is not None and (
                error.code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED)

        cluster.wait_for(refused_by_3, 15, "broker 3 to refuse the produce")
        elapsed = time.monotonic() - started
        print(f"enforced by broker 3 {elapsed:.2f} s after the CLI returned")
        # by ZooKeeper's watch, not a periodic reload (a poll of tens of seconds would fail
        # here); no tighter bound, since a loaded machine's produce alone can take seconds
        assert elapsed < 10, f"enforced after {elapsed:.2f} s"
        removed = acls(cluster.address(2), "--remove", "--force", "--topic", topic)
        assert removed.returncode == 0, removed.stderr
        cluster.wait_for(lambda: _produce(cluster.address(3), topic) is None, 15,
                         "broker 3 to accept the produce again")


def test_java_admin_acl_calls(rb: RunningBroker) -> None:
    from tests.interop._broker import java_client

    topic = _name("java-acl")
    res = java_client()(rb.bootstrap, "acls", topic, "User:jane")
    assert res.ok, res.describe()
    assert res.summary["described"] == [f"LITERAL {topic} READ ALLOW",
                                        f"PREFIXED {topic}- WRITE DENY"]
    assert res.summary["matched"] == 1  # only the prefix covers <topic>-orders
    assert (res.summary["deleted"], res.summary["left"]) == (2, 0)
    assert res.summary["invalid"] == "InvalidRequestException"


def test_authorized_operations_come_from_the_authorizer(rb: RunningBroker) -> None:
    """KIP-430's fields, as confluent-kafka and the Java Admin read them: ANONYMOUS is
    allowed All on a topic and a group but denied Alter and Delete on the topic and Delete
    on the group (DENY wins). (An ACL on a resource ends allow.everyone.if.no.acl.found
    for it: the ALLOWs are needed.)"""
    from tests.interop._broker import java_client

    admin = AdminClient({"bootstrap.servers": rb.bootstrap})
    topic, group = _name("ops"), _name("ops-g")
    for future in admin.create_topics([NewTopic(topic, 1)]).values():
        future.result(15)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": rb.bootstrap, "group.id": group,
                                         "enable.auto.commit": False})
    consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 0)], asynchronous=False)
    consumer.close()
    for future in admin.create_acls([
        AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, ANON, "*", op,
                   AclPermissionType.DENY) for op in (AclOperation.ALTER, AclOperation.DELETE)
    ] + [AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, ANON, "*",
                    AclOperation.DELETE, AclPermissionType.DENY)] + [
        AclBinding(rtype, name, ResourcePatternType.LITERAL, ANON, "*", AclOperation.ALL,
                   AclPermissionType.ALLOW)
        for rtype, name in ((ResourceType.TOPIC, topic), (ResourceType.GROUP, group))
    ]).values():
        future.result(15)
    described = admin.describe_topics(confluent_kafka.TopicCollection([topic]),
                                      include_authorized_operations=True)[topic].result(15)
    topic_ops = sorted(op.name for op in described.authorized_operations)
    assert topic_ops == ["ALTER_CONFIGS", "CREATE", "DESCRIBE", "DESCRIBE_CONFIGS", "READ",
                         "WRITE"]
    gd = admin.describe_consumer_groups([group], include_authorized_operations=True)[
        group].result(15)
    assert sorted(op.name for op in gd.authorized_operations) == ["DESCRIBE", "READ"]
    res = java_client()(rb.bootstrap, "authorized-operations", topic, group)
    assert res.ok, res.describe()
    assert res.summary["topic"] == topic_ops
    assert res.summary["group"] == ["DESCRIBE", "READ"]
