"""LogConfig: Kafka's precedence (topic override > broker default > built-in default) and
the typed attributes derived once from the values."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from odradek.storage.config import LONG_MAX, ConfigError, LogConfig
from tests._own import own_records


def test_defaults() -> None:
    cfg = LogConfig.default()
    assert cfg.segment_bytes == 1073741824
    assert cfg.segment_ms == 604800000
    assert cfg.segment_jitter_ms == 0
    assert cfg.segment_index_bytes == 10485760
    assert cfg.index_interval_bytes == 4096
    assert cfg.max_message_bytes == 1048588
    assert cfg.retention_ms == 604800000
    assert cfg.retention_bytes == -1
    assert cfg.flush_messages == LONG_MAX
    assert cfg.flush_ms == LONG_MAX
    assert cfg.file_delete_delay_ms == 60000
    assert cfg.min_insync_replicas == 1
    assert cfg.timestamp_before_max_ms == LONG_MAX
    assert cfg.timestamp_after_max_ms == 3600000
    assert cfg.compression_type == "producer"
    assert cfg.cleanup_policy == ("delete",)
    assert (cfg.compact, cfg.delete, cfg.log_append_time) == (False, True, False)


def test_override_beats_broker_default() -> None:
    cfg = LogConfig.build(
        {"log.segment.bytes": "5000", "min.insync.replicas": "2", "log.roll.ms": "99"},
        {"segment.bytes": "7000", "cleanup.policy": "compact,delete",
         "message.timestamp.type": "LogAppendTime", "compression.type": "lz4",
         "message.timestamp.after.max.ms": "10"},
    )
    assert cfg.segment_bytes == 7000 == cfg["segment.bytes"]
    assert cfg.segment_ms == 99
    assert cfg.min_insync_replicas == 2
    assert cfg.cleanup_policy == ("compact", "delete")
    assert cfg.compact and cfg.delete and cfg.log_append_time
    assert cfg.compression_type == "lz4"
    assert cfg.timestamp_after_max_ms == 10


def test_derived_attributes_follow_the_values() -> None:
    """Every derived attribute agrees with its key in ``values``, also after replace()."""
    cfg = LogConfig.build({}, {"retention.bytes": "123", "index.interval.bytes": "10"})
    again = dataclasses.replace(cfg, values={**cfg.values, "retention.bytes": 456})
    assert (cfg.retention_bytes, again.retention_bytes) == (123, 456)
    assert again.index_interval_bytes == 10
    for name in ("segment.bytes", "segment.ms", "max.message.bytes", "flush.messages"):
        assert getattr(cfg, name.replace(".", "_")) == cfg[name]


def test_equality_and_repr_leave_out_derived_fields() -> None:
    assert LogConfig.default() == LogConfig.build({}, {})
    assert LogConfig.default() != LogConfig.build({}, {"segment.bytes": "5000"})
    assert "segment_bytes" not in repr(LogConfig.default())


def test_unknown_key_and_bad_value_are_refused() -> None:
    with pytest.raises(ConfigError, match="unknown topic config"):
        LogConfig.build({}, {"no.such.key": "1"})
    with pytest.raises(ConfigError, match=r"segment\.bytes"):
        LogConfig.build({}, {"segment.bytes": "lots"})


def test_message_format_version_is_accepted_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    """Kafka 3.9 accepts the deprecated topic key (KIP-724) and ignores its value; tools
    that still set it expect success."""
    from odradek.storage import config as config_module

    config_module._message_format_warned = False
    with caplog.at_level(logging.WARNING, logger="odradek.storage.config"):
        first = LogConfig.build({}, {"message.format.version": "0.10.0"})
        LogConfig.build({}, {"message.format.version": "2.8-IV1"})
    assert first.values["message.format.version"] == "0.10.0"
    assert first.segment_bytes == LogConfig.default().segment_bytes
    assert [r.getMessage().split(" is deprecated")[0] for r in own_records(caplog)] == [
        "topic config message.format.version=0.10.0"]  # once
    with pytest.raises(ConfigError, match=r"message\.format\.version"):
        LogConfig.build({}, {"message.format.version": "banana"})


@pytest.mark.parametrize("value", [
    "0.10.0.0",      # a 0.x version reads its first three segments: 0.10.0
    "0.10.0-IV1",
    "0.10.0-IV1.7",  # first three segments: 0.10.0-IV1
    "0.11.0.2",
    "0.8.2.2",
    "2.8.1",         # a later version reads its first two: 2.8
    "3.0-IV1",
    "3.9",
    "4.0-IV1",       # Kafka 3.9 knows 4.0's inter-broker versions, not yet 4.0 itself
    "3.0.5-IV0",     # read as 3.0, as Kafka does
    "1.0.0-IV0x",    # read as 1.0
    " 3.0 ",         # string values are trimmed, as Kafka's ConfigDef does
])
def test_message_format_version_reads_versions_as_kafka_does(value: str) -> None:
    """Kafka's MetadataVersion.fromVersionString: the first three dot-separated segments of
    a 0.x version, the first two of any other, looked up among Kafka 3.9's versions."""
    assert LogConfig.build({}, {"message.format.version": value}).values[
        "message.format.version"] == value.strip()


@pytest.mark.parametrize("value", [
    "0.10", "0.10.3", "0.12.0", "0.10.0-IV2", "0.7.0", "2.8-IV2", "4.0", "4.1-IV0",
    "1.0-IV0x", "", "3", "3.0-iv1", "banana",
])
def test_message_format_version_refuses_what_kafka_refuses(value: str) -> None:
    with pytest.raises(ConfigError, match=r"message\.format\.version.*not a valid version"):
        LogConfig.build({}, {"message.format.version": value})


@pytest.mark.parametrize("raw", ["1_000", "1_0.5", " 2_0 "])
def test_numbers_are_read_as_java_reads_them(raw: str) -> None:
    """Kafka's ConfigDef parses with Integer.parseInt / Long.parseLong / Double.parseDouble,
    which refuse the digit separators Python's int() and float() take."""
    key = "min.cleanable.dirty.ratio" if "." in raw else "segment.bytes"
    with pytest.raises(ConfigError, match="not a number of type"):
        LogConfig.build({}, {key: raw})
