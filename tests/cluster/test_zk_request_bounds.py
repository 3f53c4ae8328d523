"""Client-supplied strings that become ZooKeeper node names or node data, at hostile sizes,
on a broker whose store is a real ZooKeeper and on the embedded store: each request is
refused with its API's own error before the store is asked, the same on both stores, and
the broker's ZooKeeper session never drops (ZooKeeper closes the connection of a request
longer than its ``jute.maxbuffer``, 1 MB by default: the session with it)."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.client.connection import BrokerConnection, request_class
from odradek.cluster.store import (
    DEFAULT_JUTE_MAXBUFFER,
    OP_OVERHEAD,
    REQUEST_OVERHEAD,
    CreateOp,
    EmbeddedStore,
    MetadataStore,
    RequestTooLargeError,
    SessionEvent,
    SetOp,
    StoreError,
    jute_maxbuffer,
)
from odradek.testing import RunningBroker, running_broker
from tests.cluster._zookeeper import ZooKeeperServer
from tests.server.test_admin_protocol import alter, incremental

TOPIC, BROKER = 2, 4
SET = 0
#: 200,000 two-byte characters: 400 kB of UTF-8, 1.2 MB once URL-encoded as a node name.
HUGE = "é" * 200_000
#: a config value of 1.5 MB: beyond one ZooKeeper request whatever its path
HUGE_VALUE = "x" * 1_500_000
#: Kafka's longest STRING: what any non-flexible request version can carry
LONGEST = "é" * (32767 // 2)


def send(rb: RunningBroker, request: Any) -> Any:
    async def go() -> Any:
        conn = await BrokerConnection.open(rb.bootstrap)
        try:
            return await conn.send(request)
        finally:
            await conn.close()

    return asyncio.run(go())


@pytest.fixture(params=["zookeeper", "embedded"])
def broker(request: pytest.FixtureRequest) -> Iterator[tuple[RunningBroker, list[SessionEvent]]]:
    overrides = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                 "super.users": "User:ANONYMOUS"}
    if request.param == "zookeeper":
        zookeeper: ZooKeeperServer = request.getfixturevalue("zookeeper")
        overrides |= {"zookeeper.connect": zookeeper.connect_string(
            f"/bound-{uuid.uuid4().hex[:8]}"), "broker.id": "1"}
    with running_broker(overrides=overrides) as rb:
        events: list[SessionEvent] = []
        rb.broker.metadata.store.add_session_listener(events.append)
        yield rb, events
        # the connection never dropped (no SUSPENDED, no new session)
        assert events == []


def quotas(rb: RunningBroker, entity: tuple[tuple[str, str], ...]) -> tuple[ErrorCode, Any]:
    req = request_class("alter_client_quotas", 1, "AlterClientQuotasRequest")
    entry = request_class("alter_client_quotas", 1, "EntryData")
    data = request_class("alter_client_quotas", 1, "EntityData")
    op = request_class("alter_client_quotas", 1, "OpData")
    (r,) = send(rb, req(entries=(entry(
        entity=tuple(data(entity_type=t, entity_name=n) for t, n in entity),
        ops=(op(key="producer_byte_rate", value=1000.0, remove=False),)),),
        validate_only=False)).entries
    return r.error_code, r.error_message


@pytest.mark.parametrize("entity", [
    (("user", HUGE),), (("client-id", HUGE),), (("user", "alice"), ("client-id", HUGE)),
], ids=["user", "client-id", "user+client-id"])
def test_a_client_quota_entity_name_too_long_is_invalid_request(
        broker: tuple[RunningBroker, list[SessionEvent]], entity: Any) -> None:
    rb, _ = broker
    assert quotas(rb, (("user", LONGEST),)) == (ErrorCode.none, None)
    assert quotas(rb, entity) == (
        ErrorCode.invalid_request, "Entity name is longer than 32767 bytes")
    assert all(HUGE not in str(e) for e in rb.broker.metadata.client_quotas)


def create_acl(rb: RunningBroker, name: str, principal: str = "User:alice",
               host: str = "*") -> tuple[ErrorCode, Any]:
    m = request_class("create_acls", 3, "CreateAclsRequest")
    c = request_class("create_acls", 3, "AclCreation")
    (r,) = send(rb, m(creations=(c(
        resource_type=TOPIC, resource_name=name, resource_pattern_type=3,
        principal=principal, host=host, operation=2, permission_type=3),))).results
    return r.error_code, r.error_message


@pytest.mark.parametrize(("name", "principal", "host", "message"), [
    (HUGE, "User:alice", "*", "Resource name is longer than 32767 bytes"),
    ("t", "User:" + HUGE, "*", "Principal is longer than 32767 bytes"),
    ("t", "User:alice", HUGE, "Host is longer than 32767 bytes"),
], ids=["resource-name", "principal", "host"])
def test_an_acl_string_too_long_is_invalid_request(
        broker: tuple[RunningBroker, list[SessionEvent]], name: str, principal: str, host: str,
        message: str) -> None:
    rb, _ = broker
    assert create_acl(rb, LONGEST) == (ErrorCode.none, None)
    assert create_acl(rb, name, principal, host) == (ErrorCode.invalid_request, message)


def test_acls_of_one_resource_beyond_one_store_write_are_refused(
        broker: tuple[RunningBroker, list[SessionEvent]]) -> None:
    """Every ACL of a resource is in one node: 40 of 32 kB principals would be 1.3 MB."""
    rb, _ = broker
    codes = [create_acl(rb, "crowded", f"User:{n:05d}" + "p" * 32000)[0] for n in range(40)]
    assert ErrorCode.invalid_request in codes
    first = codes.index(ErrorCode.invalid_request)
    assert codes == [ErrorCode.none] * first + [ErrorCode.invalid_request] * (40 - first)
    assert create_acl(rb, "crowded", "User:bob") == (ErrorCode.none, None)


def scram(rb: RunningBroker, user: str) -> tuple[ErrorCode, Any]:
    m = request_class("alter_user_scram_credentials", 0, "AlterUserScramCredentialsRequest")
    u = request_class("alter_user_scram_credentials", 0, "ScramCredentialUpsertion")
    (r,) = send(rb, m(deletions=(), upsertions=(u(
        name=user, mechanism=1, iterations=4096, salt=b"salt" * 4,
        salted_password=b"p" * 32),))).results
    return r.error_code, r.error_message


def test_a_scram_user_name_too_long_is_unacceptable_credential(
        broker: tuple[RunningBroker, list[SessionEvent]]) -> None:
    rb, _ = broker
    assert scram(rb, LONGEST) == (ErrorCode.none, None)
    assert scram(rb, HUGE) == (
        ErrorCode.unacceptable_credential, "Username is longer than 32767 bytes")


#: a valid value of a topic's list config, 1.5 MB long
THROTTLED = ",".join(f"{p}:1" for p in range(200_000))
def _too_big(message: str | None) -> bool:
    return message is not None and message.startswith("Configs of ") and message.endswith(
        "are more than one metadata store write may carry (jute.maxbuffer: 1048575 bytes)")


@pytest.mark.parametrize("validate_only", [False, True])
def test_topic_configs_too_big_for_one_store_write_are_invalid_config(
        broker: tuple[RunningBroker, list[SessionEvent]], validate_only: bool) -> None:
    rb, _ = broker
    topic = f"big-{uuid.uuid4().hex[:6]}"
    rb.call(rb.broker.metadata.create_topic, topic, 1, 1, {})
    key = "leader.replication.throttled.replicas"
    (r,) = incremental(rb, 1, [(TOPIC, topic, [(key, SET, THROTTLED)])], validate_only)
    assert r.error_code == ErrorCode.invalid_config and _too_big(r.error_message), r
    (r,) = alter(rb, 2, [(TOPIC, topic, {key: THROTTLED})], validate_only)
    assert r.error_code == ErrorCode.invalid_config and _too_big(r.error_message), r
    (r,) = incremental(rb, 1, [(TOPIC, topic, [(key, SET, "0:1")])], validate_only)
    assert (r.error_code, r.error_message) == (ErrorCode.none, None)


def test_create_topics_with_configs_too_big_is_invalid_config(
        broker: tuple[RunningBroker, list[SessionEvent]]) -> None:
    rb, _ = broker
    m = request_class("create_topics", 5, "CreateTopicsRequest")
    t = request_class("create_topics", 5, "CreatableTopic")
    c = request_class("create_topics", 5, "CreatableTopicConfig")
    for validate_only in (True, False):
        (r,) = send(rb, m(topics=(t(
            name="big-created", num_partitions=1, replication_factor=1, assignments=(),
            configs=(c(name="leader.replication.throttled.replicas", value=THROTTLED),)),),
            timeout=datetime.timedelta(seconds=10), validate_only=validate_only)).topics
        assert r.error_code == ErrorCode.invalid_config and _too_big(r.error_message), r
    assert "big-created" not in rb.broker.metadata.topics


def test_broker_configs_too_big_for_one_store_write_are_invalid_config(
        broker: tuple[RunningBroker, list[SessionEvent]]) -> None:
    rb, _ = broker
    key = "max.connections.per.ip.overrides"
    overrides = ",".join(f"host{n}:5" for n in range(150_000))  # 1.5 MB
    for entity in ("", str(rb.broker.broker_id)):  # the cluster default, this broker
        (r,) = incremental(rb, 1, [(BROKER, entity, [(key, SET, overrides)])])
        assert r.error_code == ErrorCode.invalid_config and _too_big(r.error_message), r
        (r,) = incremental(rb, 1, [(BROKER, entity, [(key, SET, "host0:5")])])
        assert (r.error_code, r.error_message) == (ErrorCode.none, None)


# -- the store's own guard: no request ZooKeeper would drop the connection for ---------------
@pytest.fixture(params=["zookeeper", "embedded"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MetadataStore]:
    opened: MetadataStore
    if request.param == "zookeeper":
        zookeeper: ZooKeeperServer = request.getfixturevalue("zookeeper")
        opened = zookeeper.store(zookeeper.fresh_chroot())
    else:
        opened = EmbeddedStore(tmp_path / "metadata.json")
    try:
        yield opened
    finally:
        opened.close()


def test_the_store_refuses_a_request_longer_than_jute_maxbuffer(store: MetadataStore) -> None:
    events: list[SessionEvent] = []
    store.add_session_listener(events.append)
    big, long_path = b"x" * DEFAULT_JUTE_MAXBUFFER, "/n" + "p" * DEFAULT_JUTE_MAXBUFFER
    store.create("/n", b"")
    calls: list[Callable[[], object]] = [
        lambda: store.create("/m", big), lambda: store.set("/n", big),
        lambda: store.create(long_path, b""), lambda: store.get(long_path),
        lambda: store.children(long_path), lambda: store.delete(long_path),
        lambda: store.get_many(["/n", long_path]),
        lambda: store.multi([CreateOp("/m", big[:600_000]), SetOp("/n", big[:600_000])]),
        lambda: store.set_or_create("/m", big),
    ]
    for call in calls:
        with pytest.raises(RequestTooLargeError, match=r"jute.maxbuffer: 1048575 bytes\); "
                           r"not sent") as refused:
            call()
        assert len(str(refused.value)) < 400  # the path is cut in the message
    # just within: written and read back; the session never dropped
    fits = b"x" * (DEFAULT_JUTE_MAXBUFFER - REQUEST_OVERHEAD - OP_OVERHEAD - len("/n") - 512)
    assert store.fits("/n", fits)
    store.set("/n", fits)
    node = store.get("/n")
    assert node is not None and node.data == fits and store.get("/m") is None
    assert events == []


def test_the_controllers_largest_transaction_fits(store: MetadataStore) -> None:
    """The controller writes partition states in transactions of at most
    MAX_OPS_PER_MULTI ops and MAX_MULTI_BYTES of paths and data: one that large must be
    sent, not refused (a whole run's stress test had 364 states refused at 1.12 MB
    counted for some 0.5 MB, and the controller re-read them for good)."""
    from odradek.cluster.controller import MAX_MULTI_BYTES, MAX_OPS_PER_MULTI
    from odradek.cluster.store import CheckVersion, Op

    store.create("/s", b"")
    each = MAX_MULTI_BYTES // MAX_OPS_PER_MULTI
    ops: list[Op] = [CheckVersion("/s", 0)]
    ops += [CreateOp(f"/s/{i:04d}", b"x" * (each - len(f"/s/{i:04d}")))
            for i in range(MAX_OPS_PER_MULTI - 1)]
    store.multi(ops)
    assert len(store.children("/s")) == MAX_OPS_PER_MULTI - 1


@pytest.mark.parametrize(("opts", "expected"), [
    ("", DEFAULT_JUTE_MAXBUFFER), ("-Xmx1g -Djute.maxbuffer=4194304", 4194304),
    ("-Djute.maxbuffer=0x200000", 0x200000),
])
def test_jute_maxbuffer_is_read_from_kafka_opts(opts: str, expected: int) -> None:
    assert jute_maxbuffer({"KAFKA_OPTS": opts}) == expected


@pytest.mark.parametrize("value", ["lots", "-1", "100"])
def test_a_jute_maxbuffer_that_is_not_a_size_is_refused(value: str) -> None:
    with pytest.raises(StoreError, match=r"jute\.maxbuffer"):
        jute_maxbuffer({"KAFKA_OPTS": f"-Djute.maxbuffer={value}"})
