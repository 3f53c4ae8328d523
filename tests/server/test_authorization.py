"""The checks every handler makes with an authorizer on (odradek.server.authorization), and
the ACL APIs' handlers.

Handlers are called for real, on a running broker's loop, with a RequestContext whose
principal is chosen by the test (until SASL exists every connection is User:ANONYMOUS;
the real-client tests over sockets are in tests/interop/test_acls.py): ``alice`` has every
operation on every resource, ``bob`` none, ``admin`` is a super user.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Iterator
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.serial import entity_reader

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.codec import encode_body, schema
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.registry import RequestContext
from odradek.protocol.send import FileRegion, Send
from odradek.server.authorization import API_CHECKS, NOT_REQUESTED
from odradek.testing import RunningBroker, running_broker
from tests.protocol.samples import TOPIC, sample_request

ALICE, BOB, ADMIN = "User:alice", "User:bob", "User:admin"
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
AUTH_ERRORS = {ErrorCode.topic_authorization_failed, ErrorCode.group_authorization_failed,
               ErrorCode.cluster_authorization_failed,
               ErrorCode.transactional_id_authorization_failed}
_ERROR_NAMES = {"TOPIC_AUTHORIZATION_FAILED": ErrorCode.topic_authorization_failed,
                "GROUP_AUTHORIZATION_FAILED": ErrorCode.group_authorization_failed,
                "CLUSTER_AUTHORIZATION_FAILED": ErrorCode.cluster_authorization_failed,
                "TRANSACTIONAL_ID_AUTHORIZATION_FAILED":
                    ErrorCode.transactional_id_authorization_failed}
TOPIC_T, GROUP_T, CLUSTER_T, TXN_T = 2, 3, 4, 5
LITERAL, PREFIXED = 3, 4
ALL, ALLOW = 2, 3


def call(broker: RunningBroker, request: Any, principal: str,
         version: int | None = None) -> tuple[Any, set[ErrorCode]]:
    """Run the registered handler of ``request`` as ``principal``: (response entity or
    None, every error code in it, or the one a KafkaError raised)."""
    key = int(request.__api_key__)
    version = int(request.__version__) if version is None else version
    registration = broker.broker.registry.lookup(key, version)
    body: Any = request
    if registration.decode is not None:
        body = registration.decode(encode_body(request), 0, version)
    ctx = RequestContext(1, "test", key, version, ("127.0.0.1", 40000), "c-1",
                         principal=principal)

    async def run() -> Any:
        return await registration.handler(ctx, body)

    try:
        response = asyncio.run_coroutine_threadsafe(run(), broker.loop).result(60)
    except KafkaError as exc:
        return None, {exc.code}
    if isinstance(response, Send):
        raw = b"".join(
            os.pread(p.fd, p.size, p.position) if isinstance(p, FileRegion) else bytes(p)
            for p in response.parts)
        response, _ = entity_reader(load_response_schema(key, version))(raw, 0)
    return response, set(_codes(response))


def _codes(entity: Any) -> Iterator[ErrorCode]:
    if entity is None:
        return
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        if field.name in ("error_code", "topic_config_error_code", "partition_error_code"):
            yield ErrorCode(value)
        if dataclasses.is_dataclass(value):
            yield from _codes(value)
        elif isinstance(value, tuple):
            for item in value:
                if dataclasses.is_dataclass(item):
                    yield from _codes(item)


def req(api: str, version: int, **fields: Any) -> Any:
    module = __import__(f"kio.schema.{api}.v{version}.request", fromlist=["x"])
    cls = next(v for k, v in vars(module).items() if k.endswith("Request") and k != "Request"
               and isinstance(v, type) and getattr(v, "__api_key__", None) is not None
               and v.__name__ != "RequestHeader")
    return cls(**fields)


def acl_creation(rtype: int, name: str, principal: str, op: int = ALL, perm: int = ALLOW,
                 ptype: int = LITERAL) -> Any:
    module = __import__("kio.schema.create_acls.v3.request", fromlist=["x"])
    return module.AclCreation(resource_type=rtype, resource_name=name,
                              resource_pattern_type=ptype, principal=principal, host="*",
                              operation=op, permission_type=perm)


def grant(broker: RunningBroker, *creations: Any) -> None:
    response, codes = call(broker, req("create_acls", 3, creations=creations), ADMIN)
    assert codes == {ErrorCode.none}, response


@pytest.fixture(scope="module")
def broker() -> Iterator[RunningBroker]:
    with running_broker(overrides={"authorizer.class.name": AUTHORIZER,
                                   "super.users": ADMIN, "num.partitions": "2"}) as b:
        grant(b, *(acl_creation(rt, "*", ALICE) for rt in (TOPIC_T, GROUP_T, TXN_T)),
              acl_creation(CLUSTER_T, "kafka-cluster", ALICE))
        _metadata(b, ADMIN, [TOPIC], auto=True)  # the topic the samples name
        yield b


def test_every_served_api_has_a_row_in_the_table(shared_broker: RunningBroker) -> None:
    served = {r.api_key for r in shared_broker.broker.registry.supported_versions()}
    missing = sorted(ApiKey(k).name for k in served if ApiKey(k) not in API_CHECKS)
    assert not missing, f"served APIs without authorization checks in API_CHECKS: {missing}"


# The newest version naming topics by name (a sample's topic id names no topic, and an
# unknown id is answered UNKNOWN_TOPIC_ID before any authorization, as by Kafka).
_BY_NAME = {ApiKey.FETCH: 12, ApiKey.OFFSET_COMMIT: 9, ApiKey.OFFSET_FETCH: 9}


def _served_max_versions(broker: RunningBroker) -> list[tuple[int, int]]:
    return [(r.api_key, _BY_NAME.get(ApiKey(r.api_key), r.max_version))
            for r in broker.broker.registry.supported_versions()]


# Fields of the sample requests (every field filled with "samples" or 1) that would make
# the request fail before any authorization is asked, as it would with Kafka.
_VALID: dict[int, dict[str, Any]] = {
    ApiKey.FETCH: {"session_id": 0, "session_epoch": -1},
}


_NESTED: dict[int, dict[str, Any]] = {
    ApiKey.DELETE_TOPICS: {"topic_id": None},  # a name or an id, not both
    ApiKey.DESCRIBE_CONFIGS: {"resource_type": TOPIC_T},
    ApiKey.ALTER_CONFIGS: {"resource_type": TOPIC_T},
    ApiKey.INCREMENTAL_ALTER_CONFIGS: {"resource_type": TOPIC_T},
}


def _with(entity: Any, fields: dict[str, Any]) -> Any:
    """``entity`` with ``fields`` replaced wherever they occur in it, at any depth."""
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        if field.name in fields:
            changes[field.name] = fields[field.name]
        elif dataclasses.is_dataclass(value):
            changes[field.name] = _with(value, fields)
        elif isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
            changes[field.name] = tuple(_with(v, fields) for v in value)
    return dataclasses.replace(entity, **changes)


def sample(key: int, version: int) -> Any:
    request = dataclasses.replace(sample_request(key, version), **_VALID.get(key, {}))
    return _with(request, _NESTED[key]) if key in _NESTED else request


def test_every_served_api_refuses_a_principal_without_acls(broker: RunningBroker) -> None:
    """bob has no ACL: each API answers (or fails with) one of its table's errors, or,
    for the APIs that check nothing, no authorization error at all."""
    for key, version in _served_max_versions(broker):
        checks = API_CHECKS[ApiKey(key)]
        expected = {_ERROR_NAMES[c.error] for c in checks if not c.hides}
        response, codes = call(broker, sample(key, version), BOB, version)
        if expected:
            assert codes & expected, f"{ApiKey(key).name} v{version}: {codes} {response}"
        else:
            assert not codes & AUTH_ERRORS, f"{ApiKey(key).name} v{version}: {response}"


def test_every_served_api_serves_a_principal_with_acls(broker: RunningBroker) -> None:
    """alice may do everything: no authorization error anywhere."""
    refused = AUTH_ERRORS
    for key, version in _served_max_versions(broker):
        response, codes = call(broker, sample(key, version), ALICE, version)
        assert not codes & refused, f"{ApiKey(key).name} v{version}: {codes} {response}"


def _metadata(broker: RunningBroker, principal: str, topics: list[str] | None,
              auto: bool = False) -> Any:
    m = __import__("kio.schema.metadata.v12.request", fromlist=["x"])
    wanted = None if topics is None else tuple(
        m.MetadataRequestTopic(topic_id=None, name=t) for t in topics)
    response, _ = call(broker, m.MetadataRequest(
        topics=wanted, allow_auto_topic_creation=auto,
        include_topic_authorized_operations=True), principal)
    return response


def test_metadata_hides_what_the_caller_may_not_describe(broker: RunningBroker) -> None:
    _metadata(broker, ADMIN, ["visible", "hidden"], auto=True)  # created by a super user
    grant(broker, acl_creation(TOPIC_T, "vis", "User:carol", op=8, ptype=PREFIXED))
    listed = {t.name for t in _metadata(broker, "User:carol", None).topics}
    assert "visible" in listed and "hidden" not in listed
    # a named topic it may not describe: the same answer whether it exists or not
    answer = {t.name: (t.error_code, t.partitions, t.is_internal, t.topic_id)
              for t in _metadata(broker, "User:carol", ["hidden", "no-such-topic"]).topics}
    assert answer["hidden"][0] == ErrorCode.topic_authorization_failed
    assert answer["hidden"][1:] == answer["no-such-topic"][1:]
    # KIP-430: the operations carol may perform on a topic she may describe
    (visible,) = _metadata(broker, "User:carol", ["visible"]).topics
    assert visible.topic_authorized_operations == 1 << 8
    # auto-creation needs Create: refused, and nothing was created
    (created,) = _metadata(broker, "User:carol", ["vis-new"], auto=True).topics
    assert created.error_code == ErrorCode.topic_authorization_failed
    assert "vis-new" not in broker.broker.metadata.topics


def test_init_producer_id_needs_idempotent_write_or_write_on_some_topic(
    broker: RunningBroker,
) -> None:
    request = req("init_producer_id", 5, transactional_id=None,
                  transaction_timeout=__import__("datetime").timedelta(seconds=60),
                  producer_id=-1, producer_epoch=-1)
    _, codes = call(broker, request, "User:dave")
    assert codes == {ErrorCode.cluster_authorization_failed}
    grant(broker, acl_creation(TOPIC_T, "dave-", "User:dave", op=4, ptype=PREFIXED))
    _, codes = call(broker, request, "User:dave")
    assert codes == {ErrorCode.none}
    grant(broker, acl_creation(CLUSTER_T, "kafka-cluster", "User:erin", op=12))
    _, codes = call(broker, request, "User:erin")
    assert codes == {ErrorCode.none}


def test_transaction_apis_check_the_transactional_id_the_topics_and_the_group(
    broker: RunningBroker,
) -> None:
    """Write on the transactional id for every transaction API (Describe for
    FindCoordinator), then Write on AddPartitionsToTxn's topics and Read on the group of
    AddOffsetsToTxn and TxnOffsetCommit, as Kafka's KafkaApis."""
    import datetime

    carol, txn_id, topic = "User:carol", "carol-txn", "carol-topic"
    broker.call(broker.broker.metadata.create_topic, topic, 1, 1, {})
    init = req("init_producer_id", 4, transactional_id=txn_id,
               transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
               producer_epoch=-1)
    find = req("find_coordinator", 4, key_type=1, coordinator_keys=(txn_id,))
    assert call(broker, init, carol)[1] == {ErrorCode.transactional_id_authorization_failed}
    assert call(broker, find, carol)[1] == {ErrorCode.transactional_id_authorization_failed}
    grant(broker, acl_creation(TXN_T, txn_id, carol, op=4))  # Write (implies Describe)
    assert call(broker, find, carol)[1] == {ErrorCode.none}
    response, codes = call(broker, init, carol)
    assert codes == {ErrorCode.none}
    pid, epoch = response.producer_id, response.producer_epoch
    add = __import__("kio.schema.add_partitions_to_txn.v3.request", fromlist=["x"])
    add_request = add.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch, v3_and_below_topics=(
            add.AddPartitionsToTxnTopic(name=topic, partitions=(0,)),))
    assert call(broker, add_request, carol)[1] == {ErrorCode.topic_authorization_failed}
    offsets = req("add_offsets_to_txn", 3, transactional_id=txn_id, producer_id=pid,
                  producer_epoch=epoch, group_id="carol-group")
    assert call(broker, offsets, carol)[1] == {ErrorCode.group_authorization_failed}
    end = req("end_txn", 3, transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
              committed=True)
    assert call(broker, end, "User:bob")[1] == {ErrorCode.transactional_id_authorization_failed}
    grant(broker, acl_creation(TOPIC_T, topic, carol, op=4),
          acl_creation(GROUP_T, "carol-group", carol, op=3))
    assert call(broker, add_request, carol)[1] == {ErrorCode.none}
    assert call(broker, offsets, carol)[1] == {ErrorCode.none}
    assert call(broker, end, carol)[1] == {ErrorCode.none}


def test_describe_cluster_operations_come_from_the_authorizer(broker: RunningBroker) -> None:
    request = req("describe_cluster", 1, include_cluster_authorized_operations=True,
                  endpoint_type=1)
    everything, _ = call(broker, request, ALICE)
    assert everything.cluster_authorized_operations == sum(
        1 << op for op in (5, 7, 8, 9, 10, 11, 12))
    nothing, _ = call(broker, request, BOB)
    assert nothing.cluster_authorized_operations == 0
    plain, _ = call(broker, req("describe_cluster", 1,
                                include_cluster_authorized_operations=False,
                                endpoint_type=1), BOB)
    assert plain.cluster_authorized_operations == NOT_REQUESTED


def _describe_filter(**fields: Any) -> Any:
    values = {"resource_type_filter": 1, "resource_name_filter": None,
              "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
              "operation": 1, "permission_type": 1, **fields}
    return req("describe_acls", 3, **values)


def test_create_describe_delete_acls(broker: RunningBroker) -> None:
    creations = (acl_creation(GROUP_T, "frank-app", "User:frank", op=3),
                 acl_creation(TOPIC_T, "frank-", "User:frank", op=4, ptype=PREFIXED),
                 acl_creation(CLUSTER_T, "not-the-cluster", "User:frank", op=7),
                 acl_creation(TOPIC_T, "", "User:frank", op=3),
                 acl_creation(TOPIC_T, "t", "frank", op=3),
                 acl_creation(TOPIC_T, "t", "User:frank", op=1))
    response, _ = call(broker, req("create_acls", 3, creations=creations), ADMIN)
    assert [r.error_code for r in response.results] == [
        ErrorCode.none, ErrorCode.none] + [ErrorCode.invalid_request] * 4
    described, _ = call(broker, _describe_filter(principal_filter="User:frank"), ADMIN)
    assert described.error_code == ErrorCode.none
    found = {(r.resource_type, r.resource_name, r.pattern_type,
              tuple((a.principal, a.host, a.operation, a.permission_type) for a in r.acls))
             for r in described.resources}
    assert found == {(GROUP_T, "frank-app", LITERAL, (("User:frank", "*", 3, ALLOW),)),
                     (TOPIC_T, "frank-", PREFIXED, (("User:frank", "*", 4, ALLOW),))}
    # MATCH: the patterns covering one topic name
    matched, _ = call(broker, _describe_filter(resource_type_filter=TOPIC_T,
                                               resource_name_filter="frank-orders",
                                               pattern_type_filter=2,
                                               principal_filter="User:frank"), ADMIN)
    assert [(r.resource_name, r.pattern_type) for r in matched.resources] == [
        ("frank-", PREFIXED)]
    bad, _ = call(broker, _describe_filter(pattern_type_filter=0), ADMIN)
    assert bad.error_code == ErrorCode.invalid_request
    delete_m = __import__("kio.schema.delete_acls.v3.request", fromlist=["x"])
    filters = (delete_m.DeleteAclsFilter(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
        principal_filter="User:frank", host_filter=None, operation=1, permission_type=1),)
    deleted, _ = call(broker, delete_m.DeleteAclsRequest(filters=filters), ADMIN)
    (result,) = deleted.filter_results
    assert result.error_code == ErrorCode.none
    assert {(m.resource_name, m.operation) for m in result.matching_acls} == {
        ("frank-app", 3), ("frank-", 4)}
    again, _ = call(broker, _describe_filter(principal_filter="User:frank"), ADMIN)
    assert again.resources == ()
    # the ACL APIs themselves: Describe / Alter on the cluster
    _, codes = call(broker, _describe_filter(), BOB)
    assert codes == {ErrorCode.cluster_authorization_failed}
    _, codes = call(broker, req("create_acls", 3, creations=creations[:1]), BOB)
    assert codes == {ErrorCode.cluster_authorization_failed}


def test_acls_survive_a_restart(tmp_path: Any) -> None:
    overrides = {"authorizer.class.name": "odradek.security.acl.AclAuthorizer",
                 "super.users": ADMIN}
    with running_broker(overrides, data_dir=tmp_path) as b:
        grant(b, acl_creation(GROUP_T, "kept", ALICE, op=3))
    with running_broker(overrides, data_dir=tmp_path) as b:
        described, _ = call(b, _describe_filter(), ADMIN)
        assert [r.resource_name for r in described.resources] == ["kept"]
        _, codes = call(b, req("heartbeat", 4, group_id="kept", generation_id=1,
                               member_id="m", group_instance_id=None), ALICE)
        assert ErrorCode.group_authorization_failed not in codes
        _, codes = call(b, req("heartbeat", 4, group_id="other", generation_id=1,
                               member_id="m", group_instance_id=None), ALICE)
        assert codes == {ErrorCode.group_authorization_failed}


def test_without_an_authorizer_the_acl_apis_answer_security_disabled(
    shared_broker: RunningBroker,
) -> None:
    described, _ = call(shared_broker, _describe_filter(), BOB)
    assert described.error_code == ErrorCode.security_disabled
    response, _ = call(shared_broker, sample_request(ApiKey.CREATE_ACLS, 3), BOB)
    assert [r.error_code for r in response.results] == [ErrorCode.security_disabled]
    # and nothing else is checked
    _, codes = call(shared_broker, sample_request(ApiKey.METADATA, 12), BOB)
    assert not codes & AUTH_ERRORS


def test_an_unknown_authorizer_class_refuses_to_start() -> None:
    from odradek.server.config import BrokerConfig, ConfigError

    with pytest.raises(ConfigError, match=r"authorizer\.class\.name"):
        BrokerConfig.from_raw({"authorizer.class.name": "com.example.MyAuthorizer"})
    assert schema(ApiKey.CREATE_ACLS, 1)  # v1-3 are served


def _raw(broker: RunningBroker, key: int, version: int, body: bytes, principal: str) -> bytes:
    """The answer body of a request given as bytes (the versions kio lacks)."""
    registration = broker.broker.registry.lookup(key, version)
    assert registration.decode is not None
    request = registration.decode(body, 0, version)
    ctx = RequestContext(1, "test", key, version, ("127.0.0.1", 40000), "c-1",
                         principal=principal)

    async def run() -> Any:
        return await registration.handler(ctx, request)

    try:
        response = asyncio.run_coroutine_threadsafe(run(), broker.loop).result(60)
    except KafkaError as exc:  # answered as the network layer does
        assert registration.error_response is not None
        response = registration.error_response(ctx, request, exc.code)
    assert isinstance(response, Send)
    return b"".join(bytes(p) for p in response.parts)  # type: ignore[arg-type]


def test_version_0_of_the_acl_apis(broker: RunningBroker) -> None:
    """Kafka 1.0 clients: no pattern types, every pattern LITERAL."""
    import struct

    def s(text: str) -> bytes:
        return struct.pack(">h", len(text)) + text.encode()

    entry = struct.pack(">b", GROUP_T) + s("v0-group") + s("User:gina") + s("*") + (
        struct.pack(">bb", 3, ALLOW))
    created = _raw(broker, ApiKey.CREATE_ACLS, 0, struct.pack(">i", 1) + entry, ADMIN)
    assert created == struct.pack(">iih", 0, 1, 0) + b"\xff\xff"
    described = _raw(broker, ApiKey.DESCRIBE_ACLS, 0,
                     struct.pack(">b", GROUP_T) + s("v0-group") + b"\xff\xff\xff\xff"
                     + struct.pack(">bb", 1, 1), ADMIN)
    assert described == (struct.pack(">ih", 0, 0) + b"\xff\xff" + struct.pack(">i", 1)
                         + struct.pack(">b", GROUP_T) + s("v0-group") + struct.pack(">i", 1)
                         + s("User:gina") + s("*") + struct.pack(">bb", 3, ALLOW))
    deleted = _raw(broker, ApiKey.DELETE_ACLS, 0, struct.pack(">i", 1) + entry, ADMIN)
    assert deleted == (struct.pack(">iihh", 0, 1, 0, -1) + struct.pack(">i", 1)
                       + struct.pack(">hh", 0, -1) + struct.pack(">b", GROUP_T)
                       + s("v0-group") + s("User:gina") + s("*") + struct.pack(">bb", 3, ALLOW))
    refused = _raw(broker, ApiKey.CREATE_ACLS, 0, struct.pack(">i", 1) + entry, BOB)
    code = int(ErrorCode.cluster_authorization_failed.value)
    assert refused[:10] == struct.pack(">iih", 0, 1, code)


def test_a_cluster_broker_warns_when_the_acls_would_refuse_followers(
    broker: RunningBroker, caplog: pytest.LogCaptureFixture,
) -> None:
    from odradek.security.acl import AclAuthorizer

    broker.broker._warn_if_followers_refused(AclAuthorizer())
    assert "replica fetches come as User:ANONYMOUS" in caplog.text
    caplog.clear()
    broker.broker._warn_if_followers_refused(AclAuthorizer(allow_if_no_acl=True))
    broker.broker._warn_if_followers_refused(AclAuthorizer(super_users={"User:ANONYMOUS"}))
    assert "replica fetches" not in caplog.text


DESCRIBE = 8


def test_describe_transactions_lists_only_the_topics_the_caller_may_describe(
    broker: RunningBroker,
) -> None:
    """Kafka's KafkaApis removes from each transaction the topics the caller may not
    Describe (issue 47)."""
    import datetime

    dana, txn_id = "User:dana", "dana-txn"
    seen, hidden = "dana-seen", "dana-hidden"
    for topic in (seen, hidden):
        broker.call(broker.broker.metadata.create_topic, topic, 1, 1, {})
    response, codes = call(broker, req(
        "init_producer_id", 4, transactional_id=txn_id,
        transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
        producer_epoch=-1), ALICE)
    assert codes == {ErrorCode.none}
    add = __import__("kio.schema.add_partitions_to_txn.v3.request", fromlist=["x"])
    _, codes = call(broker, add.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn_id,
        v3_and_below_producer_id=response.producer_id,
        v3_and_below_producer_epoch=response.producer_epoch, v3_and_below_topics=tuple(
            add.AddPartitionsToTxnTopic(name=t, partitions=(0,)) for t in (seen, hidden))),
        ALICE)
    assert codes == {ErrorCode.none}
    grant(broker, acl_creation(TXN_T, txn_id, dana, op=DESCRIBE),
          acl_creation(TOPIC_T, seen, dana, op=DESCRIBE))
    describe = req("describe_transactions", 0, transactional_ids=(txn_id,))
    described, codes = call(broker, describe, dana)
    assert codes == {ErrorCode.none}
    assert [t.topic for t in described.transaction_states[0].topics] == [seen]
    described, _ = call(broker, describe, ALICE)
    assert sorted(t.topic for t in described.transaction_states[0].topics) == [hidden, seen]


def test_delete_topics_by_id_does_not_name_a_topic_the_caller_may_not_describe(
    broker: RunningBroker,
) -> None:
    """Kafka: a null name with TOPIC_AUTHORIZATION_FAILED; with Describe but not Delete,
    the name and TOPIC_AUTHORIZATION_FAILED (issue 47)."""
    frank, topic = "User:frank", "frank-secret-name"
    broker.call(broker.broker.metadata.create_topic, topic, 1, 1, {})
    info = broker.broker.metadata.get(topic)
    assert info is not None
    m = __import__("kio.schema.delete_topics.v6.request", fromlist=["x"])
    delete = m.DeleteTopicsRequest(topics=(m.DeleteTopicState(name=None,
                                                              topic_id=info.topic_id),),
                                   timeout=datetime_ms(30_000))
    response, codes = call(broker, delete, frank)
    assert codes == {ErrorCode.topic_authorization_failed}
    assert response.responses[0].name is None
    assert response.responses[0].topic_id == info.topic_id
    grant(broker, acl_creation(TOPIC_T, topic, frank, op=DESCRIBE))
    response, codes = call(broker, delete, frank)
    assert codes == {ErrorCode.topic_authorization_failed}
    assert response.responses[0].name == topic
    assert broker.broker.metadata.get(topic) is not None


def datetime_ms(ms: int) -> Any:
    import datetime

    return datetime.timedelta(milliseconds=ms)


CLUSTER_ACTION, ALTER = 9, 7


def _epoch_request(topic: str, replica_id: int) -> Any:
    m = __import__("kio.schema.offset_for_leader_epoch.v4.request", fromlist=["x"])
    return m.OffsetForLeaderEpochRequest(replica_id=replica_id, topics=(
        m.OffsetForLeaderTopic(topic=topic, partitions=(m.OffsetForLeaderPartition(
            partition=0, current_leader_epoch=-1, leader_epoch=0),)),))


def test_offset_for_leader_epoch_needs_cluster_action_or_describe_whoever_asks(
    broker: RunningBroker,
) -> None:
    """Kafka's KafkaApis: ClusterAction on the cluster answers every topic; without it
    Describe on each topic, for a follower's request as for a consumer's (issue 47)."""
    topic = "epoch-topic"
    broker.call(broker.broker.metadata.create_topic, topic, 1, 1, {})
    grace, heidi = "User:grace", "User:heidi"
    grant(broker, acl_creation(TOPIC_T, topic, grace, op=DESCRIBE),
          acl_creation(CLUSTER_T, "kafka-cluster", heidi, op=CLUSTER_ACTION))
    for principal in (grace, heidi):
        for replica_id in (-1, 1):
            _, codes = call(broker, _epoch_request(topic, replica_id), principal)
            assert codes == {ErrorCode.none}, (principal, replica_id)
    _, codes = call(broker, _epoch_request(topic, 1), BOB)
    assert codes == {ErrorCode.topic_authorization_failed}


def test_write_txn_markers_takes_alter_or_cluster_action(broker: RunningBroker) -> None:
    """Kafka's KafkaApis: Alter on the cluster, else ClusterAction (issue 47)."""
    m = __import__("kio.schema.write_txn_markers.v1.request", fromlist=["x"])
    request = m.WriteTxnMarkersRequest(markers=())
    ivan = "User:ivan"
    assert call(broker, request, ivan)[1] == {ErrorCode.cluster_authorization_failed}
    grant(broker, acl_creation(CLUSTER_T, "kafka-cluster", ivan, op=ALTER))
    assert call(broker, request, ivan)[1] == set()
