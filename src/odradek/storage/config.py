"""Topic-level log configuration: Kafka's names, types and defaults (Kafka's LogConfig).

Each topic config has a broker-level default under another name (``segment.bytes`` ←
``log.segment.bytes``); a topic override wins over the broker default, which wins over
Kafka's built-in default. Values are parsed and validated here, so a bad value is refused
with a message naming the key, never half-applied.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

LONG_MAX = (1 << 63) - 1


class ConfigError(ValueError):
    """An unknown key or an invalid value; the message names the key."""


def _bool(value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "false"):
        return v == "true"
    raise ValueError(f"expected true or false, got {value!r}")


def _list(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: str  # int, long, double, boolean, string, list
    default: Any
    broker_key: str | None
    doc: str
    validator: Callable[[Any], str | None] | None = None


def _at_least(minimum: float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= minimum else f"must be at least {minimum}"


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        values = value if isinstance(value, tuple) else (value,)
        bad = [v for v in values if v not in choices]
        return f"must be one of {', '.join(choices)}" if bad else None

    return check


def _throttled_replicas(value: Any) -> str | None:
    """KIP-73's list: ``*``, or ``partition:broker`` pairs."""
    for item in value:
        if item == "*":
            continue
        partition, sep, broker = item.partition(":")
        if not sep or not partition.isdigit() or not broker.isdigit():
            return "must be * or a list of partition:broker pairs"
    return None


# Kafka 3.9's MetadataVersion: each release with its count of inter-broker versions
# (IV0, IV1, ...; 0 for the releases before 0.10.0, which have none). 4.0 is not yet a
# production release in 3.9: only its -IV versions are known, not "4.0" itself.
_KAFKA_RELEASES: dict[str, int] = {
    "0.8.0": 0, "0.8.1": 0, "0.8.2": 0, "0.9.0": 0,
    "0.10.0": 2, "0.10.1": 3, "0.10.2": 1, "0.11.0": 3,
    "1.0": 1, "1.1": 1, "2.0": 2, "2.1": 3, "2.2": 2, "2.3": 2, "2.4": 2, "2.5": 1,
    "2.6": 1, "2.7": 3, "2.8": 2, "3.0": 2, "3.1": 1, "3.2": 1, "3.3": 4, "3.4": 1,
    "3.5": 3, "3.6": 3, "3.7": 5, "3.8": 1, "3.9": 1, "4.0": 2,
}
_UNRELEASED = frozenset({"4.0"})
KAFKA_METADATA_VERSIONS: frozenset[str] = frozenset(
    {release for release in _KAFKA_RELEASES if release not in _UNRELEASED}
    | {f"{release}-IV{i}" for release, count in _KAFKA_RELEASES.items() for i in range(count)})
_message_format_warned = False


def kafka_metadata_version(value: str) -> str | None:
    """The Kafka version ``value`` names, read as Kafka's ``MetadataVersion.fromVersionString``
    reads it, or None: a 0.x version is its first three dot-separated segments
    (``0.10.0.0`` is ``0.10.0``, ``0.10.0-IV1`` stays whole), any later one its first two
    (``2.8.1`` is ``2.8``); the result must be one of Kafka 3.9's versions."""
    segments = value.split(".")
    wanted = 3 if value.startswith("0.") else 2
    key = value if wanted >= len(segments) else ".".join(segments[:wanted])
    return key if key in KAFKA_METADATA_VERSIONS else None


def _message_format_version(value: Any) -> str | None:
    """Kafka 3.9 accepts a topic's ``message.format.version`` (deprecated since 3.0, KIP-724)
    and ignores its value, the stored format following the inter-broker protocol (3.0 or
    newer: RecordBatch v2). So does Odradek, which stores v2 only; it warns once."""
    global _message_format_warned
    if kafka_metadata_version(str(value)) is None:
        return (f"Version {value} is not a valid version (a Kafka version such as 0.10.0, "
                "0.10.0-IV1, 2.8 or 3.0-IV1)")
    if not _message_format_warned:
        _message_format_warned = True
        log.warning("topic config message.format.version=%s is deprecated (KIP-724) and "
                    "ignored: records are stored as RecordBatch v2, as Kafka 3.x does", value)
    return None


def _ratio(value: Any) -> str | None:
    return None if 0.0 <= value <= 1.0 else "must be between 0 and 1"


TOPIC_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        ConfigDef("cleanup.policy", "list", ("delete",), "log.cleanup.policy",
                  "delete, compact, or both", _one_of("delete", "compact")),
        ConfigDef("compression.type", "string", "producer", "compression.type",
                  "final codec of the topic's data; producer keeps the producer's",
                  _one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")),
        ConfigDef("delete.retention.ms", "long", 86400000, "log.cleaner.delete.retention.ms",
                  "how long tombstones are kept after cleaning", _at_least(0)),
        ConfigDef("file.delete.delay.ms", "long", 60000, "log.segment.delete.delay.ms",
                  "delay before a .deleted file is removed", _at_least(0)),
        ConfigDef("flush.messages", "long", LONG_MAX, "log.flush.interval.messages",
                  "fsync after this many messages", _at_least(1)),
        ConfigDef("flush.ms", "long", LONG_MAX, "log.flush.interval.ms",
                  "fsync after this many ms", _at_least(0)),
        ConfigDef("index.interval.bytes", "int", 4096, "log.index.interval.bytes",
                  "bytes between offset index entries", _at_least(0)),
        ConfigDef("max.compaction.lag.ms", "long", LONG_MAX, "log.cleaner.max.compaction.lag.ms",
                  "longest a record stays uncompacted", _at_least(1)),
        ConfigDef("max.message.bytes", "int", 1048588, "message.max.bytes",
                  "largest record batch accepted", _at_least(0)),
        ConfigDef("message.format.version", "string", "3.0-IV1", None,
                  "deprecated (KIP-724): accepted and ignored, records are stored as "
                  "RecordBatch v2", _message_format_version),
        ConfigDef("message.timestamp.type", "string", "CreateTime",
                  "log.message.timestamp.type", "CreateTime or LogAppendTime",
                  _one_of("CreateTime", "LogAppendTime")),
        ConfigDef("message.timestamp.before.max.ms", "long", LONG_MAX,
                  "log.message.timestamp.before.max.ms",
                  "how far in the past a CreateTime timestamp may be", _at_least(0)),
        # Kafka 4.0 (KIP-1030) bounds future timestamps to one hour by default.
        ConfigDef("message.timestamp.after.max.ms", "long", 3600000,
                  "log.message.timestamp.after.max.ms",
                  "how far in the future a CreateTime timestamp may be", _at_least(0)),
        ConfigDef("min.cleanable.dirty.ratio", "double", 0.5,
                  "log.cleaner.min.cleanable.ratio", "dirty ratio that triggers cleaning",
                  _ratio),
        ConfigDef("min.compaction.lag.ms", "long", 0, "log.cleaner.min.compaction.lag.ms",
                  "shortest time a record stays uncompacted", _at_least(0)),
        ConfigDef("min.insync.replicas", "int", 1, "min.insync.replicas",
                  "replicas that must ack an acks=all write", _at_least(1)),
        ConfigDef("preallocate", "boolean", False, "log.preallocate",
                  "preallocate segment files (not supported: must stay false)",
                  lambda v: "is not supported by Odradek" if v else None),
        ConfigDef("retention.bytes", "long", -1, "log.retention.bytes",
                  "largest size of a partition before old segments go; -1 no limit", None),
        ConfigDef("retention.ms", "long", 604800000, "log.retention.ms",
                  "age after which closed segments go; -1 no limit", _at_least(-1)),
        ConfigDef("segment.bytes", "int", 1073741824, "log.segment.bytes",
                  "size at which a segment rolls", _at_least(14)),
        ConfigDef("segment.index.bytes", "int", 10485760, "log.index.size.max.bytes",
                  "size of an index file", _at_least(8)),
        ConfigDef("segment.jitter.ms", "long", 0, "log.roll.jitter.ms",
                  "random jitter subtracted from segment.ms", _at_least(0)),
        ConfigDef("segment.ms", "long", 604800000, "log.roll.ms",
                  "age at which a segment rolls", _at_least(1)),
        ConfigDef("unclean.leader.election.enable", "boolean", False,
                  "unclean.leader.election.enable",
                  "allow an out-of-sync replica to become leader", None),
        ConfigDef("leader.replication.throttled.replicas", "list", (), None,
                  "partition:broker pairs (or *) whose replication the leader throttles to "
                  "leader.replication.throttled.rate", _throttled_replicas),
        ConfigDef("follower.replication.throttled.replicas", "list", (), None,
                  "partition:broker pairs (or *) whose replication the follower throttles to "
                  "follower.replication.throttled.rate", _throttled_replicas),
    )
}


def java_int(text: str) -> int:
    """``text`` as Java's ``Long.parseLong`` of the trimmed text reads it (Kafka's ConfigDef):
    ValueError where Java throws NumberFormatException. Python's ``int()`` also takes
    digit separators (``1_000``), which Java refuses."""
    if "_" in text:
        raise ValueError(f"not a Java number: {text!r}")
    return int(text.strip())


def java_float(text: str) -> float:
    """``text`` as Java's ``Double.parseDouble`` reads it, as far as digit separators go."""
    if "_" in text:
        raise ValueError(f"not a Java number: {text!r}")
    return float(text.strip())


def parse_value(d: ConfigDef, raw: Any) -> Any:
    """Parse ``raw`` (a string from a properties file or a request) for config ``d``."""
    try:
        if not isinstance(raw, str):
            value = raw
        elif d.type in ("int", "long"):
            value = java_int(raw)
        elif d.type == "double":
            value = java_float(raw)
        elif d.type == "boolean":
            value = _bool(raw)
        elif d.type == "list":
            value = _list(raw)
        else:
            value = raw.strip()
    except ValueError as exc:
        if d.type in ("int", "long", "double"):  # Kafka's words, with its type name
            raise ConfigError(
                f"invalid value {raw!r} for {d.name}: not a number of type {d.type.upper()}"
            ) from None
        raise ConfigError(f"invalid value {raw!r} for {d.name}: {exc}") from exc
    if d.type == "int" and not -(1 << 31) <= value < (1 << 31):
        raise ConfigError(f"invalid value {raw!r} for {d.name}: out of int32 range")
    if d.validator is not None:
        problem = d.validator(value)
        if problem:
            raise ConfigError(f"invalid value {raw!r} for {d.name}: {problem}")
    return value


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Effective configuration of one partition log. ``overrides`` are topic-level values
    explicitly set; everything else comes from broker defaults or Kafka's defaults.

    The config is immutable, so the values the append path reads (sizes, times, flags) are
    parsed once here into plain attributes: reading one is a slot load, not a dict lookup
    plus a conversion per partition per request."""

    values: Mapping[str, Any]
    overrides: Mapping[str, Any]
    # Derived from ``values`` by __post_init__ (typed accessors for the hot keys).
    segment_bytes: int = field(init=False, repr=False, compare=False)
    segment_ms: int = field(init=False, repr=False, compare=False)
    segment_jitter_ms: int = field(init=False, repr=False, compare=False)
    segment_index_bytes: int = field(init=False, repr=False, compare=False)
    index_interval_bytes: int = field(init=False, repr=False, compare=False)
    max_message_bytes: int = field(init=False, repr=False, compare=False)
    retention_ms: int = field(init=False, repr=False, compare=False)
    retention_bytes: int = field(init=False, repr=False, compare=False)
    flush_messages: int = field(init=False, repr=False, compare=False)
    flush_ms: int = field(init=False, repr=False, compare=False)
    file_delete_delay_ms: int = field(init=False, repr=False, compare=False)
    min_insync_replicas: int = field(init=False, repr=False, compare=False)
    timestamp_before_max_ms: int = field(init=False, repr=False, compare=False)
    timestamp_after_max_ms: int = field(init=False, repr=False, compare=False)
    compression_type: str = field(init=False, repr=False, compare=False)
    cleanup_policy: tuple[str, ...] = field(init=False, repr=False, compare=False)
    compact: bool = field(init=False, repr=False, compare=False)
    delete: bool = field(init=False, repr=False, compare=False)
    log_append_time: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        values = self.values

        def get(name: str) -> Any:
            return values[name] if name in values else TOPIC_CONFIGS[name].default

        derived: dict[str, Any] = {
            "segment_bytes": int(get("segment.bytes")),
            "segment_ms": int(get("segment.ms")),
            "segment_jitter_ms": int(get("segment.jitter.ms")),
            "segment_index_bytes": int(get("segment.index.bytes")),
            "index_interval_bytes": int(get("index.interval.bytes")),
            "max_message_bytes": int(get("max.message.bytes")),
            "retention_ms": int(get("retention.ms")),
            "retention_bytes": int(get("retention.bytes")),
            "flush_messages": int(get("flush.messages")),
            "flush_ms": int(get("flush.ms")),
            "file_delete_delay_ms": int(get("file.delete.delay.ms")),
            "min_insync_replicas": int(get("min.insync.replicas")),
            "timestamp_before_max_ms": int(get("message.timestamp.before.max.ms")),
            "timestamp_after_max_ms": int(get("message.timestamp.after.max.ms")),
            "compression_type": str(get("compression.type")),
            "cleanup_policy": tuple(get("cleanup.policy")),
            "compact": "compact" in get("cleanup.policy"),
            "delete": "delete" in get("cleanup.policy"),
            "log_append_time": get("message.timestamp.type") == "LogAppendTime",
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    @classmethod
    def default(cls) -> LogConfig:
        return cls.build({}, {})

    @classmethod
    def build(cls, broker: Mapping[str, Any], overrides: Mapping[str, Any]) -> LogConfig:
        """``broker``: broker-level properties (``log.segment.bytes`` …), raw or parsed;
        ``overrides``: topic configs (``segment.bytes`` …). Unknown topic keys are refused."""
        values: dict[str, Any] = {}
        parsed_overrides: dict[str, Any] = {}
        for key in overrides:
            if key not in TOPIC_CONFIGS:
                raise ConfigError(f"unknown topic config {key!r}")
        for name, d in TOPIC_CONFIGS.items():
            if name in overrides:
                values[name] = parsed_overrides[name] = parse_value(d, overrides[name])
            elif d.broker_key and d.broker_key in broker:
                values[name] = parse_value(d, broker[d.broker_key])
            else:
                values[name] = d.default
        return cls(values, parsed_overrides)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]
