"""Admin operations from real clients against an in-process broker (odradek.testing):
confluent-kafka's AdminClient (librdkafka) and kafka-python's KafkaAdminClient.

Covers CreatePartitions, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs,
DeleteRecords and DescribeCluster, their errors as the clients surface them, and a
consumer that starts below the log start offset after DeleteRecords."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from odradek.testing import RunningBroker, running_broker


@pytest.fixture(scope="module")
def rb() -> Iterator[RunningBroker]:
    with running_broker() as broker:
        yield broker


@pytest.fixture
def admin(rb: RunningBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": rb.bootstrap})


def topic_name() -> str:
    return f"adm-{uuid.uuid4().hex[:8]}"


def create(admin: AdminClient, partitions: int = 1, config: dict[str, str] | None = None) -> str:
    name = topic_name()
    for f in admin.create_topics([NewTopic(name, partitions, 1, config=config or {})]).values():
        f.result(10)
    return name


def produce(rb: RunningBroker, topic: str, n: int, partition: int = 0) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": rb.bootstrap})
    for i in range(n):
        producer.produce(topic, b"v%d" % i, partition=partition)
    assert producer.flush(10) == 0


def first(futures: dict[Any, Any]) -> Any:
    """The only future of an admin call (never ``popitem``: the client looks results up in
    the same dict)."""
    return next(iter(futures.values()))


def kafka_error(future: Any) -> confluent_kafka.KafkaError:
    with pytest.raises(confluent_kafka.KafkaException) as info:
        future.result(10)
    error: confluent_kafka.KafkaError = info.value.args[0]
    return error


# -- confluent-kafka -----------------------------------------------------------------------
def test_confluent_create_partitions(rb: RunningBroker, admin: AdminClient) -> None:
    name = create(admin)
    for f in admin.create_partitions([NewPartitions(name, 4)]).values():
        f.result(10)
    assert len(rb.broker.metadata.topics[name].partitions) == 4
    assert rb.broker.get_log(name, 3) is not None
    produce(rb, name, 1, partition=3)
    error = kafka_error(admin.create_partitions([NewPartitions(name, 2)])[name])
    assert error.code() == confluent_kafka.KafkaError.INVALID_PARTITIONS
    # (an unknown topic is retried by librdkafka until it times out: see the raw tests)
    f = admin.create_partitions([NewPartitions(name, 9)], validate_only=True)[name]
    f.result(10)
    assert len(rb.broker.metadata.topics[name].partitions) == 4


def test_confluent_describe_configs(rb: RunningBroker, admin: AdminClient) -> None:
    name = create(admin, config={"retention.ms": "4321"})
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, name),
                                      ConfigResource(ResourceType.BROKER, "0")])
    topic, brk = (f.result(10) for f in futures.values())
    assert topic["retention.ms"].value == "4321"
    assert topic["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert topic["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert brk["broker.id"].value == "0" and brk["broker.id"].is_read_only
    assert not brk["log.retention.ms"].is_read_only
    error = kafka_error(first(admin.describe_configs(
        [ConfigResource(ResourceType.TOPIC, topic_name())], request_timeout=5)))
    assert error.code() == confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART


def test_confluent_alter_configs(rb: RunningBroker, admin: AdminClient) -> None:
    name = create(admin, config={"retention.ms": "1000"})
    resource = ConfigResource(ResourceType.TOPIC, name, set_config={"segment.bytes": "200000"})
    for f in admin.alter_configs([resource]).values():
        f.result(10)
    assert rb.broker.metadata.topics[name].configs == {"segment.bytes": "200000"}
    log = rb.broker.get_log(name, 0)
    assert log is not None and log.config.segment_bytes == 200000
    bad = ConfigResource(ResourceType.TOPIC, name, set_config={"retention.ms": "oops"})
    error = kafka_error(first(admin.alter_configs([bad])))
    assert error.code() == confluent_kafka.KafkaError.INVALID_CONFIG
    # The deprecated message.format.version is accepted as Kafka 3.9 accepts it.
    old_format = ConfigResource(ResourceType.TOPIC, name,
                                set_config={"message.format.version": "0.10.0"})
    for f in admin.alter_configs([old_format]).values():
        f.result(10)
    assert rb.broker.metadata.topics[name].configs == {"message.format.version": "0.10.0"}


def test_confluent_incremental_alter_configs(rb: RunningBroker, admin: AdminClient) -> None:
    name = create(admin)
    resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
        ConfigEntry("retention.ms", "7777", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(10)
    log = rb.broker.get_log(name, 0)
    assert log is not None
    assert log.config.retention_ms == 7777
    assert log.config.cleanup_policy == ("delete", "compact")
    resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(10)
    assert log.config.retention_ms == 604800000
    # Broker-level dynamic config: applies to every topic without an override.
    brk = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
        ConfigEntry("log.segment.bytes", "250000", incremental_operation=AlterConfigOpType.SET),
    ])
    try:
        for f in admin.incremental_alter_configs([brk]).values():
            f.result(10)
        assert log.config.segment_bytes == 250000
        (described,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, "0")]).values()
        entry = described.result(10)["log.segment.bytes"]
        assert entry.value == "250000"
        assert entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    finally:
        brk = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
            ConfigEntry("log.segment.bytes", None,
                        incremental_operation=AlterConfigOpType.DELETE),
        ])
        for f in admin.incremental_alter_configs([brk]).values():
            f.result(10)
    assert log.config.segment_bytes == 1073741824
    static = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
        ConfigEntry("log.dirs", "/elsewhere", incremental_operation=AlterConfigOpType.SET),
    ])
    error = kafka_error(first(admin.incremental_alter_configs([static])))
    assert error.code() == confluent_kafka.KafkaError.INVALID_CONFIG


def test_confluent_delete_records_and_consumer_reset(rb: RunningBroker,
                                                     admin: AdminClient) -> None:
    name = create(admin)
    produce(rb, name, 10)
    (f,) = admin.delete_records([confluent_kafka.TopicPartition(name, 0, 6)]).values()
    assert f.result(10).low_watermark == 6
    (f,) = admin.delete_records([confluent_kafka.TopicPartition(name, 0, 50)]).values()
    assert kafka_error(f).code() == confluent_kafka.KafkaError.OFFSET_OUT_OF_RANGE
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": rb.bootstrap, "group.id": f"g-{name}",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
    })
    try:
        consumer.assign([confluent_kafka.TopicPartition(name, 0, 0)])
        offsets = []
        for _ in range(50):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                offsets.append(msg.offset())
            if len(offsets) == 4:
                break
        assert offsets == [6, 7, 8, 9]
        low, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(name, 0), 10)
        assert (low, high) == (6, 10)
    finally:
        consumer.close()


def test_confluent_describe_cluster(rb: RunningBroker, admin: AdminClient) -> None:
    result = admin.describe_cluster(include_authorized_operations=True).result(10)
    assert result.cluster_id == rb.broker.metadata.cluster_id
    assert result.controller.id == 0
    assert [(n.id, n.host, n.port) for n in result.nodes] == [(0, "127.0.0.1", rb.port)]


# -- kafka-python --------------------------------------------------------------------------
@pytest.fixture
def kp_admin(rb: RunningBroker) -> Iterator[Any]:
    from kafka.admin import KafkaAdminClient  # type: ignore[import-untyped]

    client = KafkaAdminClient(bootstrap_servers=rb.bootstrap)
    try:
        yield client
    finally:
        client.close()


def test_kafka_python_admin(rb: RunningBroker, admin: AdminClient, kp_admin: Any) -> None:
    from kafka import TopicPartition  # type: ignore[import-untyped]
    from kafka.admin import ConfigResource as KpResource  # type: ignore[import-untyped]
    from kafka.admin import ConfigResourceType  # type: ignore[import-untyped]
    from kafka.admin import NewPartitions as KpNewPartitions  # type: ignore[import-untyped]

    name = create(admin)
    kp_admin.create_partitions({name: KpNewPartitions(3)})
    assert len(rb.broker.metadata.topics[name].partitions) == 3

    result = kp_admin.alter_configs([KpResource(ConfigResourceType.TOPIC, name,
                                                {"retention.ms": "9999"})])
    assert result == {"topic": {name: "OK"}}
    log = rb.broker.get_log(name, 0)
    assert log is not None and log.config.retention_ms == 9999

    described = kp_admin.describe_configs(
        [KpResource(ConfigResourceType.TOPIC, name, ["retention.ms"]),
         KpResource(ConfigResourceType.BROKER, "0", ["log.segment.bytes"])],
        config_filter="all",
    )
    assert described["topic"][name]["retention.ms"]["value"] == "9999"
    assert described["broker"]["0"]["log.segment.bytes"]["value"] == "1073741824"

    produce(rb, name, 8)
    deleted = kp_admin.delete_records({TopicPartition(name, 0): 3})
    assert deleted[TopicPartition(name, 0)]["low_watermark"] == 3
    assert log.log_start_offset == 3

    cluster = kp_admin.describe_cluster()
    assert cluster["cluster_id"] == rb.broker.metadata.cluster_id
    assert cluster["controller_id"] == 0
    assert [b["port"] for b in cluster["brokers"]] == [rb.port]


def test_kafka_python_errors(rb: RunningBroker, admin: AdminClient, kp_admin: Any) -> None:
    from kafka.admin import ConfigResource as KpResource  # type: ignore[import-untyped]
    from kafka.admin import ConfigResourceType  # type: ignore[import-untyped]
    from kafka.admin import NewPartitions as KpNewPartitions  # type: ignore[import-untyped]
    from kafka.errors import KafkaError  # type: ignore[import-untyped]

    name = create(admin, partitions=2)
    with pytest.raises(KafkaError) as info:
        kp_admin.create_partitions({name: KpNewPartitions(1)})
    assert "InvalidPartitions" in type(info.value).__name__ or "INVALID_PARTITIONS" in str(
        info.value) or "InvalidPartitions" in str(info.value)
    try:
        result = kp_admin.alter_configs([KpResource(ConfigResourceType.TOPIC, name,
                                                    {"retention.ms": "bad"})])
    except KafkaError as exc:
        assert "InvalidConfig" in type(exc).__name__ or "INVALID_CONFIG" in str(exc) \
            or "InvalidConfig" in str(exc)
    else:
        assert result["topic"][name] != "OK"
    assert rb.broker.metadata.topics[name].configs == {}


def test_kafka_python_consumer_after_delete_records(rb: RunningBroker, admin: AdminClient,
                                                    kp_admin: Any) -> None:
    from kafka import KafkaConsumer, TopicPartition  # type: ignore[import-untyped]

    name = create(admin)
    produce(rb, name, 6)
    tp = TopicPartition(name, 0)
    kp_admin.delete_records({tp: 4})
    consumer = KafkaConsumer(bootstrap_servers=rb.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        offsets = [msg.offset for msg in consumer]
        assert offsets == [4, 5]
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_list_offsets_max_timestamp_names_the_record(
    rb: RunningBroker, admin: AdminClient, codec: str
) -> None:
    """ListOffsets MAX_TIMESTAMP (KIP-734): the offset and timestamp of the record with the
    largest timestamp, not its batch's last offset (KAFKA-16310), timestamps out of order
    within one batch."""
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    name = create(admin)
    producer = Producer({"bootstrap.servers": rb.bootstrap, "linger.ms": 500,
                         "compression.type": codec})
    base = 1_700_000_000_000
    for i, dt in enumerate([5, 900, 30, 900, 7]):
        producer.produce(name, value=f"v{i}".encode(), partition=0, timestamp=base + dt)
    assert producer.flush(30) == 0
    result = admin.list_offsets({TopicPartition(name, 0): OffsetSpec.max_timestamp()},
                                request_timeout=15)
    (info,) = [f.result(30) for f in result.values()]
    assert (info.offset, info.timestamp) == (1, base + 900)


# -- authorized operations (KIP-430) -----------------------------------------------------
# With no authorizer Kafka allows every operation that applies to a resource type
# (AclEntry.supportedOperations), and says so when asked.
TOPIC_OPERATIONS = ["ALTER", "ALTER_CONFIGS", "CREATE", "DELETE", "DESCRIBE",
                    "DESCRIBE_CONFIGS", "READ", "WRITE"]
CLUSTER_OPERATIONS = ["ALTER", "ALTER_CONFIGS", "CLUSTER_ACTION", "CREATE", "DESCRIBE",
                      "DESCRIBE_CONFIGS", "IDEMPOTENT_WRITE"]
GROUP_OPERATIONS = ["DELETE", "DESCRIBE", "READ"]


def _group_with_a_commit(rb: RunningBroker, topic: str) -> str:
    """An Empty group holding a committed offset."""
    group = f"ops-{uuid.uuid4().hex[:8]}"
    consumer = confluent_kafka.Consumer({"bootstrap.servers": rb.bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 1)],
                        asynchronous=False)
    finally:
        consumer.close()
    return group


def test_confluent_authorized_operations(rb: RunningBroker, admin: AdminClient) -> None:
    topic = create(admin)
    group = _group_with_a_commit(rb, topic)

    def names(ops: Any) -> list[str] | None:
        return None if ops is None else sorted(op.name for op in ops)

    for include in (True, False):
        described = admin.describe_topics(confluent_kafka.TopicCollection([topic]),
                                          include_authorized_operations=include)
        td = described[topic].result(10)
        cluster = admin.describe_cluster(include_authorized_operations=include).result(10)
        gd = admin.describe_consumer_groups(
            [group], include_authorized_operations=include)[group].result(10)
        expected = ((TOPIC_OPERATIONS, CLUSTER_OPERATIONS, GROUP_OPERATIONS) if include
                    else (None, None, None))
        assert (names(td.authorized_operations), names(cluster.authorized_operations),
                names(gd.authorized_operations)) == expected, include


def test_java_authorized_operations(rb: RunningBroker, admin: AdminClient) -> None:
    from ._broker import java_client

    topic = create(admin)
    group = _group_with_a_commit(rb, topic)
    res = java_client()(rb.bootstrap, "authorized-operations", topic, group)
    assert res.ok, res.describe()
    got = {k: res.summary[k] for k in ("topic", "cluster", "group", "topic_not_asked",
                                       "cluster_not_asked", "group_not_asked")}
    assert got == {"topic": TOPIC_OPERATIONS, "cluster": CLUSTER_OPERATIONS,
                   "group": GROUP_OPERATIONS, "topic_not_asked": None,
                   "cluster_not_asked": None, "group_not_asked": None}


# -- per-record produce errors (KIP-467) ---------------------------------------------------
def test_java_producer_is_told_which_records_broke_the_rule(
    rb: RunningBroker, admin: AdminClient
) -> None:
    """100 records in one batch to a compacted topic, 10 without a key: the Java producer
    fails those 10 with the broker's reason (InvalidRecordException) and the other 90 as
    refused only for sharing the batch (Sender's KIP-467 handling)."""
    from ._broker import java_client

    topic = create(admin, config={"cleanup.policy": "compact"})
    res = java_client()(rb.bootstrap, "produce-keyless", topic, "100")
    assert res.ok, res.describe()
    assert res.summary["named"] == list(range(5, 100, 10))
    assert res.summary["outcomes"] == {"InvalidRecordException (named)": 10,
                                       "KafkaException": 90}


def test_confluent_producer_is_told_which_records_broke_the_rule(
    rb: RunningBroker, admin: AdminClient
) -> None:
    """librdkafka reads record_errors too: the 10 keyless records fail with INVALID_RECORD,
    the other 90 with _INVALID_DIFFERENT_RECORD (refused for sharing the batch)."""
    topic = create(admin, config={"cleanup.policy": "compact"})
    producer = confluent_kafka.Producer({"bootstrap.servers": rb.bootstrap,
                                         "linger.ms": 1000, "enable.idempotence": False})
    codes: dict[int, int | None] = {}
    for i in range(100):
        producer.produce(
            topic, b"v", None if i % 10 == 5 else b"k%d" % i, partition=0,
            on_delivery=lambda err, _msg, i=i: codes.__setitem__(i, err and err.code()))
    assert producer.flush(30) == 0
    assert codes == {i: confluent_kafka.KafkaError.INVALID_RECORD if i % 10 == 5
                     else confluent_kafka.KafkaError._INVALID_DIFFERENT_RECORD
                     for i in range(100)}
