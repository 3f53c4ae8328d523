"""Admin APIs over a real socket with hand-built kio requests, every served version:
CreatePartitions, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs, DeleteRecords,
DescribeCluster — including the error cases clients filter out before sending."""

from __future__ import annotations

import asyncio
import datetime
import importlib
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.client.connection import BrokerConnection
from odradek.cluster.metadata import MetadataError
from odradek.records.builder import build_batch
from odradek.server.handlers._entities import make
from odradek.testing import RunningBroker, running_broker

TIMEOUT = datetime.timedelta(seconds=10)


def req(api: str, version: int) -> Any:
    return importlib.import_module(f"kio.schema.{api}.v{version}.request")


def send(broker: RunningBroker, request: Any) -> Any:
    async def go() -> Any:
        conn = await BrokerConnection.open(broker.bootstrap)
        try:
            return await conn.send(request)
        finally:
            await conn.close()

    return asyncio.run(go())


@pytest.fixture
def rb() -> Iterator[RunningBroker]:
    with running_broker() as broker:
        yield broker


def new_topic(rb: RunningBroker, partitions: int = 1, configs: dict[str, str] | None = None,
              records: int = 0) -> str:
    name = f"admin-{uuid.uuid4().hex[:8]}"
    rb.call(rb.broker.metadata.create_topic, name, partitions, 1, configs or {})
    if records:
        log = rb.broker.get_log(name, 0)
        assert log is not None
        rb.call(log.append_as_leader,
                build_batch([(b"k", b"v")] * records, timestamp=int(time.time() * 1000)))
    return name


# -- CreatePartitions -----------------------------------------------------------------------
def create_partitions(rb: RunningBroker, version: int, topics: list[tuple[str, int, Any]],
                      validate_only: bool = False) -> list[Any]:
    m = req("create_partitions", version)
    request = m.CreatePartitionsRequest(
        topics=tuple(
            m.CreatePartitionsTopic(
                name=n, count=c,
                assignments=None if a is None else tuple(
                    m.CreatePartitionsAssignment(broker_ids=tuple(ids)) for ids in a),
            )
            for n, c, a in topics
        ),
        timeout=TIMEOUT, validate_only=validate_only,
    )
    return list(send(rb, request).results)


@pytest.mark.parametrize("version", range(0, 4))
def test_create_partitions_every_version(rb: RunningBroker, version: int) -> None:
    name = new_topic(rb)
    (r,) = create_partitions(rb, version, [(name, 3, None)])
    assert (r.name, r.error_code) == (name, ErrorCode.none)
    assert sorted(rb.broker.metadata.topics[name].partitions) == [0, 1, 2]
    assert rb.broker.get_log(name, 2) is not None


def test_create_partitions_errors(rb: RunningBroker) -> None:
    name = new_topic(rb, 2)
    dup = new_topic(rb)
    results = create_partitions(rb, 3, [
        (name, 2, None), (name + "-missing", 4, None), (dup, 3, None), (dup, 4, None),
    ])
    codes = [r.error_code for r in results]
    assert codes == [ErrorCode.invalid_partitions, ErrorCode.unknown_topic_or_partition,
                     ErrorCode.invalid_request, ErrorCode.invalid_request]
    assert "already has 2 partitions" in (results[0].error_message or "")
    (r,) = create_partitions(rb, 3, [(name, 1, None)])
    assert r.error_code == ErrorCode.invalid_partitions
    assert len(rb.broker.metadata.topics[dup].partitions) == 1


def test_more_than_10000_new_partitions_in_one_operation_is_refused(rb: RunningBroker) -> None:
    """Kafka's controller bound on one user operation (MAX_RECORDS_PER_USER_OP)."""
    name = new_topic(rb, 1)
    (r,) = create_partitions(rb, 3, [(name, 10_002, None)])
    assert r.error_code == ErrorCode.policy_violation
    assert "10000" in (r.error_message or "")
    assert len(rb.broker.metadata.topics[name].partitions) == 1
    assert rb.broker.get_log(name, 1) is None
    with pytest.raises(MetadataError, match="in one operation"):
        rb.call(rb.broker.metadata.create_topic, name + "-big", 10_001, 1, {})


def test_create_partitions_assignments(rb: RunningBroker) -> None:
    name = new_topic(rb)
    bad = [
        [[0]],  # one assignment for two new partitions
        [[0], [7]],  # unknown broker
        [[0, 0], [0, 0]],  # duplicate broker, wrong replication factor
    ]
    for assignment in bad:
        (r,) = create_partitions(rb, 3, [(name, 3, assignment)])
        assert r.error_code == ErrorCode.invalid_replica_assignment, assignment
        assert r.error_message
    (r,) = create_partitions(rb, 3, [(name, 3, [[0], [0]])])
    assert r.error_code == ErrorCode.none
    assert rb.broker.metadata.topics[name].partitions == {0: [0], 1: [0], 2: [0]}


def test_create_partitions_validate_only(rb: RunningBroker) -> None:
    name = new_topic(rb)
    (r,) = create_partitions(rb, 3, [(name, 5, None)], validate_only=True)
    assert r.error_code == ErrorCode.none
    assert len(rb.broker.metadata.topics[name].partitions) == 1
    assert rb.broker.get_log(name, 1) is None


# -- DescribeConfigs -----------------------------------------------------------------------
def describe(rb: RunningBroker, version: int, resources: list[tuple[int, str, Any]],
             synonyms: bool = False, docs: bool = False) -> list[Any]:
    m = req("describe_configs", version)
    request = make(
        m.DescribeConfigsRequest,
        resources=tuple(m.DescribeConfigsResource(resource_type=t, resource_name=n,
                                                  configuration_keys=k)
                        for t, n, k in resources),
        include_synonyms=synonyms, include_documentation=docs,
    )
    return list(send(rb, request).results)


@pytest.mark.parametrize("version", range(1, 5))
def test_describe_configs_every_version(rb: RunningBroker, version: int) -> None:
    name = new_topic(rb, configs={"retention.ms": "1234"})
    topic, brk = describe(rb, version, [(2, name, None), (4, "0", None)], synonyms=True,
                          docs=True)
    assert topic.error_code == brk.error_code == ErrorCode.none
    entries = {c.name: c for c in topic.configs}
    assert entries["retention.ms"].value == "1234"
    assert entries["retention.ms"].config_source == 1
    assert entries["retention.ms"].synonyms[0].name == "retention.ms"
    assert entries["segment.bytes"].config_source == 5
    assert entries["cleanup.policy"].value == "delete"
    assert not entries["retention.ms"].read_only
    broker_entries = {c.name: c for c in brk.configs}
    assert broker_entries["broker.id"].read_only
    assert not broker_entries["log.segment.bytes"].read_only
    if version >= 3:
        assert entries["retention.ms"].config_type == 5  # LONG
        assert entries["cleanup.policy"].config_type == 7  # LIST
        assert entries["preallocate"].config_type == 1  # BOOLEAN
        assert entries["retention.ms"].documentation


def test_describe_configs_filter_and_errors(rb: RunningBroker) -> None:
    name = new_topic(rb)
    results = describe(rb, 4, [
        (2, name, ("segment.bytes", "no.such.config")),
        (2, "does-not-exist", None),
        (2, "bad name!", None),
        (4, "7", None),
        (4, "x", None),
        (8, "0", None),
        (3, "g", None),
    ])
    assert [c.name for c in results[0].configs] == ["segment.bytes"]
    assert [r.error_code for r in results[1:]] == [
        ErrorCode.unknown_topic_or_partition, ErrorCode.invalid_topic_exception,
        ErrorCode.invalid_request, ErrorCode.invalid_request, ErrorCode.invalid_request,
        ErrorCode.invalid_request,
    ]
    assert all(r.configs == () for r in results[1:])


def test_describe_configs_static_broker_source() -> None:
    with running_broker(overrides={"log.retention.hours": "2"}) as rb:
        name = new_topic(rb)
        (topic,) = describe(rb, 4, [(2, name, ("retention.ms",))], synonyms=True)
        (entry,) = topic.configs
        assert entry.value == str(2 * 3600000)
        assert entry.config_source == 4
        assert (entry.synonyms[0].name, entry.synonyms[0].source) == ("log.retention.hours", 4)


# -- AlterConfigs / IncrementalAlterConfigs --------------------------------------------------
def alter(rb: RunningBroker, version: int, resources: list[tuple[int, str, dict[str, Any]]],
          validate_only: bool = False) -> list[Any]:
    m = req("alter_configs", version)
    request = m.AlterConfigsRequest(
        resources=tuple(
            m.AlterConfigsResource(resource_type=t, resource_name=n, configs=tuple(
                m.AlterableConfig(name=k, value=v) for k, v in c.items()))
            for t, n, c in resources
        ),
        validate_only=validate_only,
    )
    return list(send(rb, request).responses)


def incremental(rb: RunningBroker, version: int,
                resources: list[tuple[int, str, list[tuple[str, int, str | None]]]],
                validate_only: bool = False) -> list[Any]:
    m = req("incremental_alter_configs", version)
    request = m.IncrementalAlterConfigsRequest(
        resources=tuple(
            m.AlterConfigsResource(resource_type=t, resource_name=n, configs=tuple(
                m.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in c))
            for t, n, c in resources
        ),
        validate_only=validate_only,
    )
    return list(send(rb, request).responses)


@pytest.mark.parametrize("version", range(0, 3))
def test_alter_configs_replaces_overrides(rb: RunningBroker, version: int) -> None:
    name = new_topic(rb, configs={"retention.ms": "1000", "segment.bytes": "100000"})
    (r,) = alter(rb, version, [(2, name, {"max.message.bytes": "2048"})])
    assert r.error_code == ErrorCode.none
    assert rb.broker.metadata.topics[name].configs == {"max.message.bytes": "2048"}
    log = rb.broker.get_log(name, 0)
    assert log is not None and log.config.max_message_bytes == 2048
    assert log.config.retention_ms == 604800000


def test_alter_configs_errors(rb: RunningBroker) -> None:
    name = new_topic(rb)
    other = new_topic(rb)
    results = alter(rb, 2, [
        (2, name, {"no.such.config": "1"}),
        (2, other, {"retention.ms": "-5"}),
        (2, "missing-topic", {"retention.ms": "1"}),
        (8, "0", {"kafka": "DEBUG"}),
        (4, "0", {"broker.id": "3"}),
        (4, "", {"log.segment.bytes": "ten"}),
    ])
    assert [r.error_code for r in results] == [
        ErrorCode.invalid_config, ErrorCode.invalid_config, ErrorCode.unknown_topic_or_partition,
        ErrorCode.invalid_request, ErrorCode.invalid_config, ErrorCode.invalid_config,
    ]
    assert "no.such.config" in (results[0].error_message or "")
    assert results[4].error_message == (  # Kafka's words (ZkAdminManager, DynamicBrokerConfig)
        "Invalid config value for resource ConfigResource(type=BROKER, name='0'): "
        "Cannot update these configs dynamically: Set(broker.id)")
    assert rb.broker.metadata.topics[name].configs == {}
    (r,) = alter(rb, 2, [(2, name, {"retention.ms": "5"})], validate_only=True)
    assert r.error_code == ErrorCode.none
    assert rb.broker.metadata.topics[name].configs == {}
    dup = alter(rb, 2, [(2, name, {"retention.ms": "5"}), (2, name, {"retention.ms": "6"})])
    assert [r.error_code for r in dup] == [ErrorCode.invalid_request] * 2


@pytest.mark.parametrize("version", range(0, 2))
def test_incremental_alter_configs_ops(rb: RunningBroker, version: int) -> None:
    name = new_topic(rb, configs={"retention.ms": "1000", "segment.bytes": "100000"})
    (r,) = incremental(rb, version, [(2, name, [
        ("retention.ms", 0, "2000"),
        ("segment.bytes", 1, None),
        ("cleanup.policy", 2, "compact"),
    ])])
    assert r.error_code == ErrorCode.none
    assert rb.broker.metadata.topics[name].configs == {
        "retention.ms": "2000", "cleanup.policy": "delete,compact"}
    (r,) = incremental(rb, version, [(2, name, [("cleanup.policy", 3, "delete")])])
    assert r.error_code == ErrorCode.none
    log = rb.broker.get_log(name, 0)
    assert log is not None and log.config.cleanup_policy == ("compact",)
    assert log.config.retention_ms == 2000


def test_incremental_alter_configs_errors(rb: RunningBroker) -> None:
    name = new_topic(rb)
    results = incremental(rb, 1, [
        (2, name, [("retention.ms", 2, "5")]),  # APPEND on a non-list
    ])
    assert results[0].error_code == ErrorCode.invalid_config
    results = incremental(rb, 1, [(2, name, [("retention.ms", 9, "5")])])
    assert results[0].error_code == ErrorCode.invalid_request
    results = incremental(rb, 1, [(2, name, [("retention.ms", 0, "5"),
                                             ("retention.ms", 1, None)])])
    assert results[0].error_code == ErrorCode.invalid_request
    results = incremental(rb, 1, [(2, name, [("cleanup.policy", 2, "bogus")])])
    assert results[0].error_code == ErrorCode.invalid_config
    results = incremental(rb, 1, [(2, name, [("retention.ms", 0, "77")])], validate_only=True)
    assert results[0].error_code == ErrorCode.none
    assert rb.broker.metadata.topics[name].configs == {}


def _store_behind(rb: RunningBroker, path: str, configs: dict[str, str]) -> None:
    """Write a config document as another broker would, behind this broker's view (the
    embedded store tells no view of it: the notification has not come yet)."""
    doc = json.dumps({"version": 1, "config": configs}).encode()
    rb.call(rb.broker.metadata.store.set_or_create, path, doc)


def test_incremental_alter_configs_starts_from_the_stored_overrides(rb: RunningBroker) -> None:
    """Another broker's change this broker has not heard of yet is kept: the operations
    apply to what the store holds, not to this broker's view of it."""
    md = rb.broker.metadata
    name = new_topic(rb, configs={"retention.ms": "1000"})
    _store_behind(rb, md.topic_config_path(name),
                  {"retention.ms": "1000", "segment.bytes": "100000"})
    assert md.topics[name].configs == {"retention.ms": "1000"}  # the view is behind
    (r,) = incremental(rb, 1, [(2, name, [("retention.ms", 0, "2000")])])
    assert r.error_code == ErrorCode.none
    expected = {"retention.ms": "2000", "segment.bytes": "100000"}
    assert rb.call(md.read_configs, md.topic_config_path(name)) == expected
    assert md.topics[name].configs == expected
    log = rb.broker.get_log(name, 0)
    assert log is not None and log.config.segment_bytes == 100000
    # the same for the cluster-wide broker default
    (r,) = incremental(rb, 1, [(4, "", [("log.retention.ms", 0, "60000")])])
    assert r.error_code == ErrorCode.none
    _store_behind(rb, md.broker_config_path("<default>"),
                  {"log.retention.ms": "60000", "log.cleaner.threads": "2"})
    (r,) = incremental(rb, 1, [(4, "", [("log.retention.ms", 1, None)])])
    assert r.error_code == ErrorCode.none
    assert md.broker_configs("<default>") == {"log.cleaner.threads": "2"}


def test_incremental_alter_configs_applies_again_after_a_write_between(
        rb: RunningBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that lands between the read and the compare-and-set write (another broker's
    alter) fails the write; the operations are applied again to a fresh read, and neither
    change is lost."""
    md = rb.broker.metadata
    name = new_topic(rb)
    path = md.topic_config_path(name)
    get = md.store.get
    reads: list[int] = []

    def read_then_lose_the_race(at: str, *args: Any, **kw: Any) -> Any:
        node = get(at, *args, **kw)
        if at == path:
            reads.append(-1 if node is None else node.version)
            if len(reads) == 1:  # another broker's alter lands now
                md.store.set_or_create(
                    path, json.dumps({"version": 1, "config": {"segment.ms": "3600000"}})
                    .encode())
        return node

    monkeypatch.setattr(md.store, "get", read_then_lose_the_race)
    (r,) = incremental(rb, 1, [(2, name, [("retention.ms", 0, "2000")])])
    assert r.error_code == ErrorCode.none
    assert len(reads) == 2 and reads[0] != reads[1]
    expected = {"segment.ms": "3600000", "retention.ms": "2000"}
    assert md.read_configs(path) == expected
    assert md.topics[name].configs == expected


def test_dynamic_broker_configs(rb: RunningBroker) -> None:
    plain = new_topic(rb)
    pinned = new_topic(rb, configs={"segment.bytes": "200000"})
    (r,) = incremental(rb, 1, [(4, "", [("log.segment.bytes", 0, "300000"),
                                         ("log.retention.ms", 0, "60000")])])
    assert r.error_code == ErrorCode.none
    (r,) = incremental(rb, 1, [(4, "0", [("log.segment.bytes", 0, "400000")])])
    assert r.error_code == ErrorCode.none
    plain_log, pinned_log = rb.broker.get_log(plain, 0), rb.broker.get_log(pinned, 0)
    assert plain_log is not None and pinned_log is not None
    assert plain_log.config.segment_bytes == 400000  # per-broker wins over cluster default
    assert plain_log.config.retention_ms == 60000
    assert pinned_log.config.segment_bytes == 200000  # topic override wins
    assert rb.broker.metadata.broker_configs("<default>") == {
        "log.segment.bytes": "300000", "log.retention.ms": "60000"}
    (brk,) = describe(rb, 4, [(4, "0", ("log.segment.bytes", "log.retention.ms"))],
                      synonyms=True)
    entries = {c.name: c for c in brk.configs}
    assert (entries["log.segment.bytes"].value, entries["log.segment.bytes"].config_source) == (
        "400000", 2)
    assert [s.source for s in entries["log.segment.bytes"].synonyms] == [2, 3, 5]
    assert entries["log.retention.ms"].config_source == 3
    (default,) = describe(rb, 4, [(4, "", None)])
    assert {(c.name, c.value, c.config_source) for c in default.configs} == {
        ("log.segment.bytes", "300000", 3), ("log.retention.ms", "60000", 3)}
    (topic,) = describe(rb, 4, [(2, plain, ("segment.bytes",))])
    assert (topic.configs[0].value, topic.configs[0].config_source) == ("400000", 2)
    # Deleting the per-broker value falls back to the cluster default.
    (r,) = incremental(rb, 1, [(4, "0", [("log.segment.bytes", 1, None)])])
    assert r.error_code == ErrorCode.none
    assert plain_log.config.segment_bytes == 300000
    # Not dynamically updatable, bad values, other brokers.
    results = incremental(rb, 1, [
        (4, "0", [("log.dirs", 0, "/tmp/x")]),
        (4, "", [("log.segment.bytes", 0, "ten")]),
        (4, "5", [("log.segment.bytes", 0, "1000")]),
    ])
    assert [r.error_code for r in results] == [
        ErrorCode.invalid_config, ErrorCode.invalid_config, ErrorCode.invalid_request]


def test_dynamic_broker_configs_survive_restart(tmp_path: Any) -> None:
    with running_broker(data_dir=tmp_path) as rb:
        name = new_topic(rb)
        (r,) = alter(rb, 2, [(4, "0", {"log.retention.ms": "90000"})])
        assert r.error_code == ErrorCode.none
    with running_broker(data_dir=tmp_path) as rb:
        log = rb.broker.get_log(name, 0)
        assert log is not None and log.config.retention_ms == 90000


# -- DeleteRecords ---------------------------------------------------------------------------
def delete_records(rb: RunningBroker, version: int, topic: str,
                   offsets: dict[int, int]) -> dict[int, Any]:
    m = req("delete_records", version)
    request = m.DeleteRecordsRequest(
        topics=(m.DeleteRecordsTopic(name=topic, partitions=tuple(
            m.DeleteRecordsPartition(partition_index=p, offset=o) for p, o in offsets.items())),),
        timeout=TIMEOUT,
    )
    (t,) = send(rb, request).topics
    return {p.partition_index: p for p in t.partitions}


@pytest.mark.parametrize("version", range(0, 3))
def test_delete_records_every_version(rb: RunningBroker, version: int) -> None:
    name = new_topic(rb, records=10)
    result = delete_records(rb, version, name, {0: 4})
    assert (result[0].error_code, result[0].low_watermark) == (ErrorCode.none, 4)
    log = rb.broker.get_log(name, 0)
    assert log is not None and log.log_start_offset == 4
    result = delete_records(rb, version, name, {0: -1})
    assert (result[0].error_code, result[0].low_watermark) == (ErrorCode.none, 10)


def test_delete_records_errors(rb: RunningBroker) -> None:
    name = new_topic(rb, partitions=2, records=5)
    result = delete_records(rb, 2, name, {0: 6, 1: -7, 5: 0})
    assert result[0].error_code == ErrorCode.offset_out_of_range
    assert result[1].error_code == ErrorCode.offset_out_of_range
    assert result[5].error_code == ErrorCode.unknown_topic_or_partition
    assert result[5].low_watermark == -1
    result = delete_records(rb, 2, "no-such-topic", {0: 0})
    assert result[0].error_code == ErrorCode.unknown_topic_or_partition
    compacted = new_topic(rb, configs={"cleanup.policy": "compact"}, records=3)
    result = delete_records(rb, 2, compacted, {0: 1})
    assert result[0].error_code == ErrorCode.policy_violation
    # Moving backwards is a no-op that reports the current start.
    delete_records(rb, 2, name, {0: 3})
    result = delete_records(rb, 2, name, {0: 1})
    assert (result[0].error_code, result[0].low_watermark) == (ErrorCode.none, 3)


def test_delete_records_then_retention_removes_segments(rb: RunningBroker) -> None:
    name = new_topic(rb, configs={"segment.bytes": "100"})
    log = rb.broker.get_log(name, 0)
    assert log is not None
    for _ in range(5):
        rb.call(log.append_as_leader,
                build_batch([(b"k", b"v" * 50)], timestamp=int(time.time() * 1000)))
    assert len(log.segments) >= 4
    result = delete_records(rb, 2, name, {0: 3})
    assert result[0].low_watermark == 3
    rb.call(rb.broker.log_manager.cleanup_logs)
    assert log.segments[0].base_offset == 3
    assert log.log_start_offset == 3


# -- DescribeCluster -------------------------------------------------------------------------
@pytest.mark.parametrize("version", range(0, 3))
def test_describe_cluster_every_version(rb: RunningBroker, version: int) -> None:
    m = req("describe_cluster", version)
    response = send(rb, make(m.DescribeClusterRequest, include_cluster_authorized_operations=True,
                             endpoint_type=1, include_fenced_brokers=False))
    assert response.error_code == ErrorCode.none
    assert response.cluster_id == rb.broker.metadata.cluster_id
    assert response.controller_id == 0
    (b,) = response.brokers
    assert (b.broker_id, b.host, b.port) == (0, "127.0.0.1", rb.port)
    assert response.cluster_authorized_operations > 0


def test_describe_cluster_controller_endpoint(rb: RunningBroker) -> None:
    m = req("describe_cluster", 1)
    response = send(rb, m.DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                 endpoint_type=2))
    assert response.error_code == ErrorCode.mismatched_endpoint_type
    assert response.brokers == ()


@pytest.mark.parametrize("version", range(8, 13))
def test_metadata_authorized_operations_every_version(rb: RunningBroker, version: int) -> None:
    """KIP-430 without an authorizer: every operation that applies, as Kafka's bit field
    (AclOperation codes); the cluster's only up to v10, where it left for DescribeCluster;
    the "not requested" marker when not asked."""
    name = new_topic(rb)
    m = req("metadata", version)
    fields: dict[str, Any] = {"allow_auto_topic_creation": False,
                              "include_topic_authorized_operations": True}
    if version <= 10:
        fields["include_cluster_authorized_operations"] = True
    topic = (make(m.MetadataRequestTopic, name=name, topic_id=None)
             if version >= 10 else make(m.MetadataRequestTopic, name=name))
    asked = send(rb, make(m.MetadataRequest, topics=(topic,), **fields))
    not_asked = send(rb, make(m.MetadataRequest, topics=(topic,), **{
        k: False if k.startswith("include") else v for k, v in fields.items()}))
    topic_ops = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))  # 3576
    assert asked.topics[0].topic_authorized_operations == topic_ops
    assert not_asked.topics[0].topic_authorized_operations == -(1 << 31)
    if version <= 10:
        cluster_ops = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))  # 8096
        assert asked.cluster_authorized_operations == cluster_ops
        assert not_asked.cluster_authorized_operations == -(1 << 31)
