"""Option parsing and planning helpers (no Spark, no broker)."""

from __future__ import annotations

import pytest

from odradek.spark.options import OdradekOptionError, parse_read_options, parse_write_options
from odradek.spark.source import OffsetRange, rate_limit, split_ranges

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_exactly_one_subscription() -> None:
    with pytest.raises(OdradekOptionError, match=r"exactly one of.*subscribe.*none"):
        parse_read_options(BOOT, streaming=False)
    with pytest.raises(OdradekOptionError, match=r"got subscribe, subscribePattern"):
        parse_read_options({**BOOT, "subscribe": "a", "subscribePattern": "a.*"}, streaming=False)


def test_bootstrap_required_and_unknown_options_named() -> None:
    with pytest.raises(OdradekOptionError, match=r"kafka.bootstrap.servers"):
        parse_read_options({"subscribe": "a"}, streaming=False)
    with pytest.raises(OdradekOptionError, match=r"unknown option 'startoffsets'"):
        parse_read_options({**BOOT, "subscribe": "a", "startOffsets": "earliest"}, streaming=False)
    with pytest.raises(OdradekOptionError, match=r"kafka.group.id"):
        parse_read_options({**BOOT, "subscribe": "a", "kafka.group.id": "g"}, streaming=True)
    with pytest.raises(OdradekOptionError, match=r"kafka.auto.offset.reset"):
        parse_read_options(
            {**BOOT, "subscribe": "a", "kafka.auto.offset.reset": "x"}, streaming=True
        )


def test_contradictions() -> None:
    with pytest.raises(OdradekOptionError, match=r"startingOffsets, startingTimestamp"):
        parse_read_options(
            {**BOOT, "subscribe": "a", "startingOffsets": "earliest", "startingTimestamp": "5"},
            streaming=False,
        )
    with pytest.raises(OdradekOptionError, match=r"minOffsetsPerTrigger"):
        parse_read_options(
            {**BOOT, "subscribe": "a", "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"},
            streaming=True,
        )
    with pytest.raises(OdradekOptionError, match=r"endingOffsets.*batch queries only"):
        parse_read_options({**BOOT, "subscribe": "a", "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(OdradekOptionError, match=r"cannot be 'latest' for batch"):
        parse_read_options({**BOOT, "subscribe": "a", "startingOffsets": "latest"}, streaming=False)
    with pytest.raises(OdradekOptionError, match=r"maxoffsetspertrigger.*streaming"):
        parse_read_options({**BOOT, "subscribe": "a", "maxOffsetsPerTrigger": "5"}, streaming=False)


def test_parsed_values() -> None:
    o = parse_read_options(
        {
            **BOOT,
            "assign": '{"t":[1,0]}',
            "startingOffsets": '{"t":{"0":-2,"1":5}}',
            "maxTriggerDelay": "30s",
            "includeHeaders": "TRUE",
            "kafka.fetch.wait.max.ms": "50",
        },
        streaming=True,
    )
    assert o.assign == (("t", 0), ("t", 1))
    assert o.starting.per_partition == {("t", 0): -2, ("t", 1): 5}
    assert o.max_trigger_delay_ms == 30_000 and o.include_headers
    assert o.client == {"bootstrap.servers": "127.0.0.1:9092", "fetch.wait.max.ms": "50"}
    assert parse_read_options({**BOOT, "subscribe": "a"}, streaming=True).starting.kind == "latest"
    assert (
        parse_read_options({**BOOT, "subscribe": "a"}, streaming=False).starting.kind == "earliest"
    )
    with pytest.raises(OdradekOptionError, match=r"for reading"):
        parse_write_options({**BOOT, "subscribe": "a"})


def test_rate_limit_and_split() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 90}
    latest = {("t", 0): 100, ("t", 1): 10, ("t", 2): 100}
    capped = rate_limit(start, latest, 60)
    assert sum(capped[tp] - start[tp] for tp in start) == 60
    assert all(start[tp] <= capped[tp] <= latest[tp] for tp in start)
    assert rate_limit(start, latest, 1000) == latest
    parts = split_ranges([OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 10)], 6)
    assert len(parts) >= 6
    assert sum(r.until - r.start for r in parts) == 110
    assert [(r.start, r.until) for r in parts if r.partition == 1] == [(0, 10)]


def test_max_records_per_partition_then_min_partitions() -> None:
    ranges = [OffsetRange("t", 0, 5, 105), OffsetRange("t", 1, 0, 10), OffsetRange("t", 2, 7, 7)]
    parts = split_ranges(ranges, None, 30)
    assert [(r.partition, r.start, r.until) for r in parts] == [
        (0, 5, 30), (0, 30, 55), (0, 55, 80), (0, 80, 105), (1, 0, 10),
    ]
    assert all(r.until - r.start <= 30 for r in parts)
    # minPartitions still splits further when the max-records split left too few
    parts = split_ranges(ranges, 10, 50)
    assert len(parts) >= 10 and all(r.until - r.start <= 50 for r in parts)
    assert sum(r.until - r.start for r in parts) == 110
    # and is parsed, validated, named in errors
    opts = parse_read_options(
        {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "maxRecordsPerPartition": "30"},
        streaming=False,
    )
    assert opts.max_records_per_partition == 30
    with pytest.raises(OdradekOptionError, match="maxRecordsPerPartition"):
        parse_read_options(
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "maxRecordsPerPartition": "0"},
            streaming=False,
        )


def test_security_options_in_the_java_clients_keys_reach_librdkafka_and_no_repr() -> None:
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            'username="alice" password="s3cret-pw";')
    security = {"kafka.security.protocol": "SASL_PLAINTEXT",
                "kafka.sasl.mechanism": "SCRAM-SHA-256", "kafka.sasl.jaas.config": jaas}
    read = parse_read_options({**BOOT, **security, "subscribe": "a"}, streaming=False)
    assert read.client == {"bootstrap.servers": "127.0.0.1:9092",
                           "security.protocol": "SASL_PLAINTEXT",
                           "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice",
                           "sasl.password": "s3cret-pw"}
    write = parse_write_options({**BOOT, **security, "topic": "a"})
    assert write.client == read.client
    assert "s3cret-pw" not in repr(read) and "s3cret-pw" not in repr(write)
    with pytest.raises(OdradekOptionError, match=r"sasl\.username") as caught:
        parse_read_options({**BOOT, "subscribe": "a", "kafka.security.protocol": "SASL_SSL",
                            "kafka.sasl.mechanism": "PLAIN",
                            "kafka.sasl.password": "s3cret-pw"}, streaming=False)
    assert "s3cret-pw" not in str(caught.value)


def test_a_password_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ODRADEK_SPARK_PASSWORD", "env-secret")
    read = parse_read_options({
        **BOOT, "subscribe": "a", "kafka.config.providers": "env",
        "kafka.config.providers.env.class":
            "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
        "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.username": "bob", "kafka.sasl.password": "${env:ODRADEK_SPARK_PASSWORD}",
    }, streaming=True)
    assert read.client["sasl.password"] == "env-secret"
    assert not any(k.startswith("config.providers") for k in read.client)


def test_a_mechanism_odradek_lacks_goes_to_librdkafka_as_it_is() -> None:
    options = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "OAUTHBEARER",
               "kafka.sasl.oauthbearer.config": "principal=alice"}
    read = parse_read_options({**BOOT, **options, "subscribe": "a"}, streaming=False)
    assert read.client == {"bootstrap.servers": "127.0.0.1:9092",
                           **{k[len("kafka."):]: v for k, v in options.items()}}


def test_transactional_id_is_the_sinks_prefix_and_not_a_client_setting() -> None:
    from odradek.spark.sink import task_transactional_id

    o = parse_write_options({**BOOT, "topic": "t", "kafka.transactional.id": "etl",
                             "kafka.transaction.timeout.ms": "120000"})
    assert o.transactional_id == "etl"
    assert "transactional.id" not in o.client  # the marker reader and admin client use it
    assert o.client["transaction.timeout.ms"] == "120000"
    assert parse_write_options({**BOOT, "topic": "t"}).transactional_id is None
    with pytest.raises(OdradekOptionError, match=r"kafka.transactional.id"):
        parse_write_options({**BOOT, "topic": "t", "kafka.transactional.id": " "})
    assert task_transactional_id("etl", "q-1", 3) == "etl-q-1-3"
    assert task_transactional_id("etl", None, 3) == "etl-3"
