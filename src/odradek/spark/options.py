"""Option parsing for the ``odradek`` Spark data source.

The option names and meanings follow Spark's own Kafka source and sink
(``spark-sql-kafka-0-10``); see docs/spark.md for the side-by-side table. Everything is
validated on the driver, before any task runs, and every error names the option at fault.
Option keys are case-insensitive as Spark's are, except the ``kafka.*`` client properties,
which are passed to librdkafka (confluent-kafka) with the prefix removed. Security settings
come in either dialect, as Spark's Kafka source takes them (the Java client's
``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.*``) or librdkafka's
(``kafka.sasl.username``, ``kafka.ssl.ca.location``); the Java ones are translated for
librdkafka by :func:`odradek.client.security.librdkafka_config`. The client config travels
to the executors inside the options; it is left out of every ``repr`` (the secrets in it
must never reach a log or a plan).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from odradek.client.security import librdkafka_config

__all__ = [
    "OdradekOptionError",
    "ReadOptions",
    "WriteOptions",
    "client_config",
    "parse_read_options",
    "parse_write_options",
]

# librdkafka properties Spark's Kafka source refuses too (it manages them itself), plus the
# Java-only serializer settings that have no librdkafka equivalent.
_REJECTED_KAFKA = {
    "group.id": "the source never joins a consumer group; offsets live in Spark's checkpoint",
    "auto.offset.reset": "use startingOffsets / endingOffsets instead",
    "enable.auto.commit": "offsets are tracked in Spark's checkpoint, never committed",
    "key.deserializer": "keys are always returned as binary; cast or decode in Spark",
    "value.deserializer": "values are always returned as binary; cast or decode in Spark",
    "key.serializer": "write a binary or string 'key' column",
    "value.serializer": "write a binary or string 'value' column",
    "interceptor.classes": "Java interceptors cannot run in a Python client",
}

# kafka.* keys Odradek handles itself instead of passing them on to librdkafka.
_INTERCEPTED_KAFKA = {"default.api.timeout.ms"}

_READ_KEYS = {
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "maxoffsetspertrigger",
    "minoffsetspertrigger",
    "maxtriggerdelay",
    "minpartitions",
    "maxrecordsperpartition",
    "failondataloss",
    "includeheaders",
    "kafkaconsumer.polltimeoutms",
    "fetchoffset.numretries",
    "fetchoffset.retryintervalms",
    "path",
}
_WRITE_KEYS = {"topic", "includeheaders", "path", "checkpointlocation", "odradek.sinkcommittopic"}

# Spark Kafka options we recognise but cannot honour, with the reason shown to the user.
_UNSUPPORTED = {
    "kafka.group.id": _REJECTED_KAFKA["group.id"],
    "groupidprefix": "the source never joins a consumer group",
}

EARLIEST = -2
LATEST = -1


class OdradekOptionError(ValueError):
    """A data source option is missing, unknown, malformed or contradicts another one."""


@dataclass(frozen=True)
class OffsetSpec:
    """What a starting/ending bound means before it is resolved against the broker.

    kind is "earliest", "latest", "offsets" (per partition, -2/-1 allowed), "timestamp"
    (one timestamp for all partitions) or "timestamps" (per partition).
    """

    kind: str
    per_partition: dict[tuple[str, int], int] = field(default_factory=dict)
    timestamp: int = 0


@dataclass(frozen=True)
class ReadOptions:
    bootstrap: str
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[tuple[str, int], ...] = ()
    starting: OffsetSpec = OffsetSpec("latest")
    ending: OffsetSpec = OffsetSpec("latest")
    timestamp_strategy: str = "error"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    api_timeout_ms: int = 60_000
    client: dict[str, str] = field(default_factory=dict, repr=False)  # secrets

    def topic_filter(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None and not topic.startswith("__")
        if self.subscribe:
            return topic in self.subscribe
        return any(t == topic for t, _ in self.assign)


@dataclass(frozen=True)
class WriteOptions:
    bootstrap: str
    topic: str | None
    commit_topic: str
    api_timeout_ms: int
    client: dict[str, str] = field(default_factory=dict, repr=False)  # secrets
    #: ``kafka.transactional.id``: the prefix of each task's transactional.id (the sink's
    #: transactional mode); kept out of ``client``, which the marker reader also uses
    transactional_id: str | None = None


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def client_config(options: Mapping[str, str]) -> tuple[dict[str, str], int]:
    """The ``kafka.*`` options as a librdkafka config, and the API timeout in ms."""
    config: dict[str, str] = {}
    timeout_ms = 60_000
    for key, value in options.items():
        k = str(key)
        if not k.lower().startswith("kafka."):
            continue
        name = k[len("kafka.") :]
        if name in _REJECTED_KAFKA:
            raise OdradekOptionError(
                f"option 'kafka.{name}' is not supported: {_REJECTED_KAFKA[name]}"
            )
        if name in _INTERCEPTED_KAFKA:
            timeout_ms = _int(f"kafka.{name}", str(value), minimum=1)
            continue
        config[name] = str(value)
    if not config.get("bootstrap.servers"):
        raise OdradekOptionError("option 'kafka.bootstrap.servers' is required")
    try:
        return librdkafka_config(config), timeout_ms
    except (ValueError, OSError) as exc:  # a message naming the key, never its value
        raise OdradekOptionError(f"kafka.* security options: {exc}") from None


def _int(name: str, value: str, minimum: int | None = None) -> int:
    try:
        result = int(value)
    except ValueError:
        raise OdradekOptionError(f"option '{name}' must be an integer, got {value!r}") from None
    if minimum is not None and result < minimum:
        raise OdradekOptionError(f"option '{name}' must be >= {minimum}, got {result}")
    return result


def _bool(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "false"):
        return v == "true"
    raise OdradekOptionError(f"option '{name}' must be true or false, got {value!r}")


def _duration_ms(name: str, value: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|min|h)?\s*", value.lower())
    if m is None:
        raise OdradekOptionError(f"option '{name}' must be a duration like '30s', got {value!r}")
    unit = {"ms": 1, None: 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}[m.group(2)]
    return int(m.group(1)) * unit


def _json(name: str, value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise OdradekOptionError(f"option '{name}' is not valid JSON ({exc}): {value!r}") from None


def _per_partition(name: str, value: str) -> dict[tuple[str, int], int]:
    raw = _json(name, value)
    if not isinstance(raw, dict):
        raise OdradekOptionError(
            f'option \'{name}\' must be a JSON object like {{"topic":{{"0":23}}}}'
        )
    out: dict[tuple[str, int], int] = {}
    for topic, parts in raw.items():
        if not isinstance(parts, dict):
            raise OdradekOptionError(
                f"option '{name}': value for topic {topic!r} must be an object"
            )
        for part, off in parts.items():
            try:
                out[(str(topic), int(part))] = int(off)
            except (TypeError, ValueError):
                raise OdradekOptionError(
                    f"option '{name}': bad partition/offset {part!r}: {off!r} for {topic!r}"
                ) from None
    return out


def _bound(opts: dict[str, str], which: str, streaming_allowed_latest: bool) -> OffsetSpec:
    """Resolve the starting* / ending* options (only one of them may be given)."""
    names = {
        "offsets": f"{which}offsets",
        "timestamp": f"{which}timestamp",
        "timestamps": f"{which}offsetsbytimestamp",
    }
    given = [n for n in names.values() if n in opts]
    if len(given) > 1:
        pretty = ", ".join(_PRETTY.get(g, g) for g in given)
        raise OdradekOptionError(f"options {pretty} contradict each other: give only one")
    default = "earliest" if which == "starting" else "latest"
    if not given:
        return OffsetSpec(default)
    key = given[0]
    value = opts[key]
    pretty = _PRETTY[key]
    if key == names["timestamp"]:
        return OffsetSpec("timestamp", timestamp=_int(pretty, value, minimum=0))
    if key == names["timestamps"]:
        return OffsetSpec("timestamps", per_partition=_per_partition(pretty, value))
    v = value.strip().lower()
    if v in ("earliest", "latest"):
        if which == "ending" and v == "earliest":
            raise OdradekOptionError("option 'endingOffsets' cannot be 'earliest'")
        return OffsetSpec(v)
    parts = _per_partition(pretty, value)
    for (t, p), off in parts.items():
        if off < EARLIEST or (which == "ending" and off == EARLIEST):
            allowed = "-2 (earliest), -1 (latest)" if which == "starting" else "-1 (latest)"
            raise OdradekOptionError(
                f"option '{pretty}': offset {off} for {t}-{p} is not allowed "
                f"(use an offset >= 0 or {allowed})"
            )
    return OffsetSpec("offsets", per_partition=parts)


_PRETTY = {
    "startingoffsets": "startingOffsets",
    "endingoffsets": "endingOffsets",
    "startingtimestamp": "startingTimestamp",
    "endingtimestamp": "endingTimestamp",
    "startingoffsetsbytimestamp": "startingOffsetsByTimestamp",
    "endingoffsetsbytimestamp": "endingOffsetsByTimestamp",
}


def _check_unknown(opts: dict[str, str], allowed: set[str]) -> None:
    for key in opts:
        if key.startswith("kafka."):
            continue
        if key in _UNSUPPORTED:
            raise OdradekOptionError(f"option '{key}' is not supported: {_UNSUPPORTED[key]}")
        if key not in allowed:
            raise OdradekOptionError(
                f"unknown option '{key}' (options are case-insensitive; client properties "
                "take the 'kafka.' prefix, e.g. 'kafka.bootstrap.servers')"
            )


def parse_read_options(options: Mapping[str, str], streaming: bool) -> ReadOptions:
    opts = _lower(options)
    if "kafka.group.id" in opts:
        raise OdradekOptionError(
            f"option 'kafka.group.id' is not supported: {_UNSUPPORTED['kafka.group.id']}"
        )
    _check_unknown(opts, _READ_KEYS)
    client, timeout_ms = client_config(options)
    subs = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(subs) != 1:
        which = (
            "none was given"
            if not subs
            else "got "
            + ", ".join(
                {
                    "subscribe": "subscribe",
                    "subscribepattern": "subscribePattern",
                    "assign": "assign",
                }[s]
                for s in subs
            )
        )
        raise OdradekOptionError(
            "exactly one of the options 'subscribe', 'subscribePattern', 'assign' is "
            f"required; {which}"
        )
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[tuple[str, int], ...] = ()
    if "subscribe" in opts:
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise OdradekOptionError("option 'subscribe' must name at least one topic")
    elif "subscribepattern" in opts:
        pattern = opts["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OdradekOptionError(
                f"option 'subscribePattern' is not a valid regex: {exc}"
            ) from None
    else:
        raw = _json("assign", opts["assign"])
        if not isinstance(raw, dict) or not raw:
            raise OdradekOptionError("option 'assign' must be a JSON object like {\"topic\":[0,1]}")
        pairs: list[tuple[str, int]] = []
        for topic, parts in raw.items():
            if not isinstance(parts, list) or not all(isinstance(p, int) for p in parts):
                raise OdradekOptionError(
                    f"option 'assign': partitions of {topic!r} must be a list of integers"
                )
            pairs.extend((str(topic), p) for p in parts)
        assign = tuple(sorted(set(pairs)))
    starting = _bound(opts, "starting", streaming)
    if streaming and any(
        k in opts for k in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")
    ):
        bad = next(
            k for k in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp") if k in opts
        )
        raise OdradekOptionError(
            f"option '{_PRETTY[bad]}' is for batch queries only, not streaming"
        )
    ending = _bound(opts, "ending", streaming) if not streaming else OffsetSpec("latest")
    if not streaming:
        if starting.kind == "latest":
            raise OdradekOptionError(
                "option 'startingOffsets' cannot be 'latest' for batch queries"
            )
        if starting.kind == "offsets" and LATEST in starting.per_partition.values():
            raise OdradekOptionError(
                "option 'startingOffsets': -1 (latest) is not allowed for batch queries"
            )
    elif (
        "startingoffsets" not in opts
        and starting.kind == "earliest"
        and not any(k in opts for k in ("startingtimestamp", "startingoffsetsbytimestamp"))
    ):
        starting = OffsetSpec("latest")  # Spark's streaming default
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise OdradekOptionError(
            "option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', "
            f"got {opts['startingoffsetsbytimestampstrategy']!r}"
        )
    for key in ("maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay"):
        if key in opts and not streaming:
            raise OdradekOptionError(f"option '{key}' is for streaming queries only")
    max_opt = (
        _int("maxOffsetsPerTrigger", opts["maxoffsetspertrigger"], 1)
        if "maxoffsetspertrigger" in opts
        else None
    )
    min_opt = (
        _int("minOffsetsPerTrigger", opts["minoffsetspertrigger"], 1)
        if "minoffsetspertrigger" in opts
        else None
    )
    if max_opt is not None and min_opt is not None and min_opt > max_opt:
        raise OdradekOptionError(
            f"option 'minOffsetsPerTrigger' ({min_opt}) is greater than "
            f"'maxOffsetsPerTrigger' ({max_opt})"
        )
    delay = (
        _duration_ms("maxTriggerDelay", opts["maxtriggerdelay"])
        if "maxtriggerdelay" in opts
        else 15 * 60 * 1000
    )
    min_parts = _int("minPartitions", opts["minpartitions"], 1) if "minpartitions" in opts else None
    max_records = (
        _int("maxRecordsPerPartition", opts["maxrecordsperpartition"], 1)
        if "maxrecordsperpartition" in opts
        else None
    )
    return ReadOptions(
        bootstrap=client["bootstrap.servers"],
        subscribe=subscribe,
        pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        timestamp_strategy=strategy,
        max_offsets_per_trigger=max_opt,
        min_offsets_per_trigger=min_opt,
        max_trigger_delay_ms=delay,
        min_partitions=min_parts,
        max_records_per_partition=max_records,
        fail_on_data_loss=_bool("failOnDataLoss", opts.get("failondataloss", "true")),
        include_headers=_bool("includeHeaders", opts.get("includeheaders", "false")),
        poll_timeout_ms=_int(
            "kafkaConsumer.pollTimeoutMs", opts.get("kafkaconsumer.polltimeoutms", "120000"), 1
        ),
        api_timeout_ms=timeout_ms,
        client=client,
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    opts = _lower(options)
    for key in opts:
        if key in _READ_KEYS and key not in _WRITE_KEYS:
            raise OdradekOptionError(f"option '{key}' is for reading, not for writing")
    _check_unknown(opts, _WRITE_KEYS)
    client, timeout_ms = client_config(options)
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise OdradekOptionError("option 'topic' must not be empty")
    txn = client.pop("transactional.id", None)
    if txn is not None and not txn.strip():
        raise OdradekOptionError("option 'kafka.transactional.id' must not be empty")
    return WriteOptions(
        bootstrap=client["bootstrap.servers"],
        topic=topic,
        commit_topic=opts.get("odradek.sinkcommittopic", "_odradek_spark_sink_commits"),
        api_timeout_ms=timeout_ms,
        client=client,
        transactional_id=txn,
    )
