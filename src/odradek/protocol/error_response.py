"""The error response of any API (Kafka's ``AbstractRequest.getErrorResponse``).

How it works
------------
When a request fails as a whole, Kafka still answers it: each ``*Request`` class builds a
response with the error code in every place the response has one, echoing the request's
topics, partitions, groups or resources so that the client can tell what failed (Produce:
every partition of the request; Metadata: every requested topic; DescribeConfigs: every
resource; a response with only a top-level ``error_code`` gets it there).
:func:`build_error_response` does the same for every API from the kio schemas, with one
table instead of one function per API:

1. It walks the response class of the (key, version) field by field. Every field of
   Kafka type ``error_code`` gets the code and every ``error_message`` the message. Other
   fields get the schema's default (kio keeps the JSON ``"default"``) or, as Kafka's
   generated code does without one, zero, ``""``, an empty collection or null (nullable
   structs, records, UUIDs and timestamps). Nested structs are built by the same rules.
2. A response collection named in :data:`ECHOES` gets one element per element of the
   request collection it echoes, with the key fields (names, ids, indexes) copied and
   every other field built by the same rules; the others stay empty.
3. The few fields Kafka sets to something other than the schema default in its error
   responses (Fetch's high watermark -1, FindCoordinator's "no node") come from
   :data:`VALUES`.

Produce with ``acks=0`` has no error response (``ProduceRequest.getErrorResponse``
returns null): :func:`build_error_response` returns ``None`` and the caller closes the
connection, which is how Kafka tells such a client that something went wrong.

The request may be a kio entity or what a hot-path reader returns instead (Produce's
:class:`~odradek.protocol.produce_reader.ProduceRequestView`): its fields are read by their
kio name or, from a tuple without that attribute, by their position in the kio class.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from functools import cache
from typing import Any, Final, get_args, get_origin

from kio.static.constants import uuid_zero

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.codec import schema
from odradek.protocol.errors import ErrorCode
from odradek.protocol.wire_guard import is_entity, unwrap_optional

__all__ = ["ECHOES", "VALUES", "Echo", "build_error_response"]

ANY_VERSION: Final = (0, 0x7FFF)
_EPOCH: Final = datetime.datetime.fromtimestamp(0, tz=datetime.UTC)


@dataclasses.dataclass(frozen=True, slots=True)
class Echo:
    """A response collection with one element per element of a request collection.

    ``request`` names the request collection (several names when it was renamed between
    versions: the first the request has is used). ``keys`` are the (response field,
    request field) pairs copied into each element; the request field ``""`` means the
    element itself, for a collection of plain values (FindCoordinator's keys). ``nested``
    echoes collections inside each element; ``versions`` limits the echo to a range.
    """

    request: tuple[str, ...]
    keys: tuple[tuple[str, str], ...] = ()
    nested: Mapping[str, Echo] = dataclasses.field(default_factory=dict)
    versions: tuple[int, int] = ANY_VERSION
    distinct: bool = False
    """Echo every request collection named, one element per distinct key (Kafka's
    ``AlterUserScramCredentialsRequest``: each user of its deletions and upsertions)."""


_NAME = (("name", "name"),)
_TOPIC = (("name", "name"), ("topic_id", "topic_id"))
_PARTITIONS = {"partitions": Echo(("partitions",), (("partition_index", "partition_index"),))}
_RESOURCE = (("resource_type", "resource_type"), ("resource_name", "resource_name"))

ECHOES: Final[Mapping[int, Mapping[str, Echo]]] = {
    # ProduceRequest.getErrorResponse: every partition of the request.
    ApiKey.PRODUCE: {
        "responses": Echo(("topic_data",), _NAME, {
            "partition_responses": Echo(("partition_data",), (("index", "index"),)),
        }),
    },
    # FetchRequest.getErrorResponse: every partition before v13, the top level only after.
    ApiKey.FETCH: {
        "responses": Echo(("topics",), (("topic", "topic"), ("topic_id", "topic_id")), {
            "partitions": Echo(("partitions",), (("partition_index", "partition"),)),
        }, versions=(0, 12)),
    },
    ApiKey.LIST_OFFSETS: {"topics": Echo(("topics",), _NAME, _PARTITIONS)},
    ApiKey.METADATA: {"topics": Echo(("topics",), _TOPIC)},
    ApiKey.OFFSET_COMMIT: {"topics": Echo(("topics",), _TOPIC, _PARTITIONS)},
    # v0-1 answer per partition, v2-7 at the top level only, v8+ per group.
    ApiKey.OFFSET_FETCH: {
        "topics": Echo(("topics",), _NAME, {
            "partitions": Echo(("partition_indexes",), (("partition_index", ""),)),
        }, versions=(0, 1)),
        "groups": Echo(("groups",), (("group_id", "group_id"),)),
    },
    ApiKey.FIND_COORDINATOR: {"coordinators": Echo(("coordinator_keys",), (("key", ""),))},
    ApiKey.DESCRIBE_GROUPS: {"groups": Echo(("groups",), (("group_id", ""),))},
    ApiKey.CONSUMER_GROUP_DESCRIBE: {"groups": Echo(("group_ids",), (("group_id", ""),))},
    ApiKey.DELETE_GROUPS: {"results": Echo(("groups_names",), (("group_id", ""),))},
    ApiKey.CREATE_TOPICS: {"topics": Echo(("topics",), _NAME)},
    # CreateAclsRequest / DeleteAclsRequest.getErrorResponse: a result per creation / filter.
    ApiKey.CREATE_ACLS: {"results": Echo(("creations",))},
    ApiKey.DELETE_ACLS: {"filter_results": Echo(("filters",))},
    ApiKey.DELETE_TOPICS: {
        "responses": Echo(("topics", "topic_names"), (*_TOPIC, ("name", ""))),
    },
    ApiKey.DELETE_RECORDS: {"topics": Echo(("topics",), _NAME, _PARTITIONS)},
    ApiKey.CREATE_PARTITIONS: {"results": Echo(("topics",), _NAME)},
    ApiKey.DESCRIBE_CONFIGS: {"results": Echo(("resources",), _RESOURCE)},
    ApiKey.ALTER_CONFIGS: {"responses": Echo(("resources",), _RESOURCE)},
    ApiKey.INCREMENTAL_ALTER_CONFIGS: {"responses": Echo(("resources",), _RESOURCE)},
    # AlterClientQuotasRequest.getErrorResponse: every entry, with its entity.
    ApiKey.ALTER_CLIENT_QUOTAS: {"entries": Echo(("entries",), (), {
        "entity": Echo(("entity",), (("entity_type", "entity_type"),
                                     ("entity_name", "entity_name"))),
    })},
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: {
        "results": Echo(("deletions", "upsertions"), (("user", "name"),), distinct=True),
    },
    ApiKey.OFFSET_FOR_LEADER_EPOCH: {
        "topics": Echo(("topics",), (("topic", "topic"),), {
            "partitions": Echo(("partitions",), (("partition", "partition"),)),
        }),
    },
    # AddPartitionsToTxnRequest.getErrorResponse: every partition before v4, the top
    # level only from v4 (the batched form of brokers).
    ApiKey.ADD_PARTITIONS_TO_TXN: {
        "results_by_topic_v3_and_below": Echo(("v3_and_below_topics",), _NAME, {
            "results_by_partition": Echo(("partitions",), (("partition_index", ""),)),
        }),
    },
    ApiKey.TXN_OFFSET_COMMIT: {"topics": Echo(("topics",), _NAME, _PARTITIONS)},
    ApiKey.DESCRIBE_TRANSACTIONS: {
        "transaction_states": Echo(("transactional_ids",), (("transactional_id", ""),)),
    },
    # DescribeProducersRequest.getErrorResponse: every partition of every topic.
    ApiKey.DESCRIBE_PRODUCERS: {
        "topics": Echo(("topics",), _NAME, {
            "partitions": Echo(("partition_indexes",), (("partition_index", ""),)),
        }),
    },
    # ElectLeadersRequest.getErrorResponse: every partition named (none when null).
    ApiKey.ELECT_LEADERS: {
        "replica_election_results": Echo(("topic_partitions",), (("topic", "topic"),), {
            "partition_result": Echo(("partitions",), (("partition_id", ""),)),
        }),
    },
    # WriteTxnMarkersRequest.getErrorResponse: every partition of every marker.
    ApiKey.WRITE_TXN_MARKERS: {
        "markers": Echo(("markers",), (("producer_id", "producer_id"),), {
            "topics": Echo(("topics",), _NAME, {
                "partitions": Echo(("partition_indexes",), (("partition_index", ""),)),
            }),
        }),
    },
}
"""API key -> top-level response collection -> the request collection it echoes."""

_NO_NODE = {"node_id": -1, "host": "", "port": -1}  # Kafka's Node.noNode()

VALUES: Final[Mapping[int, Mapping[str, Any]]] = {
    # ProduceResponse.PartitionResponse(error): INVALID_OFFSET.
    ApiKey.PRODUCE: {"base_offset": -1},
    # FetchResponse.partitionResponse: INVALID_HIGH_WATERMARK and MemoryRecords.EMPTY.
    ApiKey.FETCH: {"high_watermark": -1, "records": b""},
    ApiKey.FIND_COORDINATOR: _NO_NODE,
    # RecordBatch.NO_PRODUCER_ID and NO_PRODUCER_EPOCH.
    ApiKey.INIT_PRODUCER_ID: {"producer_id": -1, "producer_epoch": -1},
    # EpochEndOffset's UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET.
    ApiKey.OFFSET_FOR_LEADER_EPOCH: {"leader_epoch": -1, "end_offset": -1},
}
"""API key -> response field name (at any depth) -> the value Kafka puts there."""


def build_error_response(
    api_key: int,
    api_version: int,
    request: Any,
    code: ErrorCode,
    message: str | None = None,
) -> Any:
    """The response entity telling the client that ``request`` failed with ``code``.

    ``None`` when the request takes no response (Produce with ``acks=0``).
    """
    api_schema = schema(api_key, api_version)
    if api_key == ApiKey.PRODUCE and _read(request, api_schema.request_type, "acks") == 0:
        return None
    builder = _Builder(code, message, VALUES.get(api_key, {}), api_version)
    return builder.entity(
        api_schema.response_type, ECHOES.get(api_key, {}), request, api_schema.request_type
    )


class _Builder:
    __slots__ = ("code", "message", "values", "version")

    def __init__(
        self, code: ErrorCode, message: str | None, values: Mapping[str, Any], version: int
    ) -> None:
        self.code = code
        self.message = message
        self.values = values
        self.version = version

    def entity(
        self,
        cls: Any,
        echoes: Mapping[str, Echo],
        source: Any = None,
        source_cls: Any = None,
        copied: Mapping[str, Any] | None = None,
    ) -> Any:
        """An instance of ``cls``; ``source`` is the request (element) it answers."""
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            name = field.name
            if copied and name in copied:
                values[name] = copied[name]
                continue
            echo = echoes.get(name)
            if (
                echo is not None
                and echo.versions[0] <= self.version <= echo.versions[1]
                and source is not None
            ):
                values[name] = self.echo(field, echo, source, source_cls)
            else:
                values[name] = self.value(field)
        return cls(**values)

    def echo(self, field: dataclasses.Field[Any], echo: Echo, source: Any, source_cls: Any) -> Any:
        element_cls, _ = _element_type(field.type)
        if element_cls is None:
            return self.value(field)
        if echo.distinct:
            return self.echo_distinct(element_cls, echo, source, source_cls)
        request_name = next((n for n in echo.request if _has_field(source_cls, n)), None)
        if request_name is None:
            return self.value(field)
        items = _read(source, source_cls, request_name)
        if items is None:  # a null collection (Metadata: all topics) echoes nothing
            return ()
        item_cls, _ = _element_type(_field_type(source_cls, request_name))
        elements = []
        for item in items:
            copied: dict[str, Any] = {}
            for response_name, item_name in echo.keys:
                if not _has_field(element_cls, response_name):
                    continue
                if item_name == "":
                    if item_cls is None:
                        copied[response_name] = item
                elif item_cls is not None and _has_field(item_cls, item_name):
                    copied[response_name] = _read(item, item_cls, item_name)
            elements.append(self.entity(element_cls, echo.nested, item, item_cls, copied))
        return tuple(elements)

    def echo_distinct(
        self, element_cls: Any, echo: Echo, source: Any, source_cls: Any
    ) -> tuple[Any, ...]:
        seen: dict[tuple[Any, ...], None] = {}
        for request_name in echo.request:
            item_cls, _ = _element_type(_field_type(source_cls, request_name))
            for item in _read(source, source_cls, request_name) or ():
                seen[tuple(_read(item, item_cls, k) for _, k in echo.keys)] = None
        return tuple(
            self.entity(element_cls, {}, copied={r: v for (r, _), v in zip(echo.keys, key,
                                                                           strict=True)})
            for key in seen)

    def value(self, field: dataclasses.Field[Any]) -> Any:
        """The value of a field nothing is echoed into."""
        kafka_type = field.metadata.get("kafka_type")
        if kafka_type == "error_code":
            return self.code
        if field.name == "error_message":
            nullable = unwrap_optional(field.type)[1]
            return self.message if self.message is not None or nullable else ""
        if field.name in self.values:
            return self.values[field.name]
        if field.default is not dataclasses.MISSING:
            return field.default
        if field.default_factory is not dataclasses.MISSING:
            return field.default_factory()
        field_type, nullable = unwrap_optional(field.type)
        if get_origin(field_type) is tuple:
            return ()
        if is_entity(field_type):
            return None if nullable else self.entity(field_type, {})
        return _zero(kafka_type, nullable)


def _zero(kafka_type: str | None, nullable: bool) -> Any:
    """Kafka's generated default for a field whose schema has none."""
    if kafka_type == "string":
        return ""
    if kafka_type == "bytes":
        return b""
    if kafka_type in ("records", "uuid", "datetime_i64") and nullable:
        return None
    if kafka_type == "records":
        return b""
    if kafka_type == "uuid":
        return uuid_zero
    if kafka_type == "datetime_i64":
        return _EPOCH
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if kafka_type == "bool":
        return False
    if kafka_type == "float64":
        return 0.0
    return 0


# -- reading the request and the schema --------------------------------------------------


def _read(source: Any, source_cls: Any, name: str) -> Any:
    """Field ``name`` of a request (element): by attribute, else by kio field position."""
    if isinstance(source, tuple) and name not in getattr(source, "_fields", ()):
        return source[_field_index(source_cls, name)]  # not getattr: tuple.index exists
    return getattr(source, name)


@cache
def _field_index(cls: Any, name: str) -> int:
    return [f.name for f in dataclasses.fields(cls)].index(name)


@cache
def _field_types(cls: Any) -> dict[str, Any]:
    return {f.name: f.type for f in dataclasses.fields(cls)}


def _has_field(cls: Any, name: str) -> bool:
    return name in _field_types(cls)


def _field_type(cls: Any, name: str) -> Any:
    return _field_types(cls)[name]


def _element_type(field_type: Any) -> tuple[Any, bool]:
    """(entity class of a collection's elements or None for plain values, nullable)."""
    field_type, nullable = unwrap_optional(field_type)
    if get_origin(field_type) is not tuple:
        return None, nullable
    inner = get_args(field_type)[0]
    return (inner if is_entity(inner) else None), nullable
