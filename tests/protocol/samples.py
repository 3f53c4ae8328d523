"""Valid request entities of any (API key, version), built from kio's classes.

Every collection has one element and every nullable field a value (so that every field
of the schema is on the wire); tagged fields keep their defaults. Strings are ``topic``
(a topic name that works wherever a name is needed), integers 1 (``acks=1``: a Produce
that gets an answer), and the rest the obvious non-empty value of its type.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from typing import Any, get_args, get_origin

from odradek.protocol.codec import schema
from odradek.protocol.wire_guard import is_entity, unwrap_optional

TOPIC = "samples"
TOPIC_ID = uuid.UUID(int=0x0DA0DEC)

_VALUES: dict[str, Any] = {
    "string": TOPIC,
    "bytes": b"x",
    "records": b"",
    "uuid": TOPIC_ID,
    "bool": False,
    "float64": 0.5,
    "timedelta_i32": datetime.timedelta(seconds=1),
    "timedelta_i64": datetime.timedelta(seconds=1),
    "datetime_i64": datetime.datetime.fromtimestamp(1, tz=datetime.UTC),
}


def sample_request(api_key: int, api_version: int) -> Any:
    return sample_entity(schema(api_key, api_version).request_type)


def sample_entity(cls: Any) -> Any:
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if "tag" in field.metadata:
            continue
        field_type = unwrap_optional(field.type)[0]
        if get_origin(field_type) is tuple:
            inner = unwrap_optional(get_args(field_type)[0])[0]
            values[field.name] = (_value(inner, field),)
        else:
            values[field.name] = _value(field_type, field)
    return cls(**values)


def _value(field_type: Any, field: dataclasses.Field[Any]) -> Any:
    if is_entity(field_type):
        return sample_entity(field_type)
    return _VALUES.get(field.metadata["kafka_type"], 1)
