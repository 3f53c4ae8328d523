"""Bounds check of a message body before kio decodes it.

How it works
------------
kio's native reader (Rust) reserves an array's capacity from the element count the
message declares. A compact array that declares 2^32 elements makes it ask for 34 GB, and
Rust aborts the whole process when an allocation fails: one 35-byte Metadata request
killed the broker (SIGABRT). :func:`check_body` walks the body first, by the same schema
(kio's entity classes), building nothing, and raises :class:`InvalidRequestError` when an
array declares more elements than bytes remain (every element takes at least one byte),
or when a string, a byte field or a tagged field runs past the end. Only then does kio
decode it, so every allocation kio makes is bounded by the frame size
(``socket.request.max.bytes``).

The same walk refuses a null (length -1, or 0 in a compact encoding) in an array, a string
or a byte field the schema does not declare nullable at that version: kio would decode it
as ``None`` and hand it on, where Kafka's generated readers throw "non-nullable field X
was serialized as null" and the request fails to parse. (A struct is null only through
the KIP-893 marker of a nullable one; a non-nullable struct has no null on the wire.)

A walker is compiled once per entity class: a run of fixed-size fields is one skip, an
array of fixed-size values is one multiplication, and only strings, byte fields, nested
structs and tagged fields are read. Everything else (values, UTF-8, truncation) is left
to kio, which reports it as an exception rather than a crash.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from functools import cache
from types import EllipsisType, NoneType, UnionType
from typing import Any, Union, get_args, get_origin

from odradek.protocol.errors import InvalidRequestError
from odradek.protocol.primitives import read_uvarint

Buffer = bytes | bytearray | memoryview

__all__ = ["check_body"]

# (view, position, end) -> position after the value.
Walker = Callable[[Buffer, int, int], int]


_FIXED_SIZES = {
    "int8": 1, "uint8": 1, "bool": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}
_VARIABLE = ("string", "bytes", "records")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def check_body(entity_type: Any, data: bytes | bytearray | memoryview, offset: int) -> None:
    """Raise :class:`InvalidRequestError` if a length in the body at ``offset`` of
    ``data``, read as ``entity_type``, claims more bytes than there are."""
    walker = _entity_walker(entity_type)
    try:  # not contextlib.suppress: this runs for every request
        walker(data, offset, len(data))
    except (IndexError, struct.error):
        return  # ran off the end: a truncated body, which kio reports as an error of its own


def _refuse(what: str, n: int, remaining: int) -> InvalidRequestError:
    return InvalidRequestError(
        f"{what} declares {n}, but only {max(remaining, 0)} bytes remain"
    )


def _null(name: str) -> InvalidRequestError:
    # The words of Kafka's generated readers (MessageDataGenerator).
    return InvalidRequestError(f"non-nullable field {name} was serialized as null")


# -- compiling walkers -------------------------------------------------------------------


def _entity_walker(entity_type: Any) -> Walker:
    return _compile_entity(entity_type)[0]


@cache
def _compile_entity(entity_type: Any) -> tuple[Walker, int | None]:
    """The entity's walker, and its size when every field has a fixed size (then an
    array of it is skipped by one multiplication)."""
    flexible = bool(entity_type.__flexible__)
    steps: list[Walker] = []
    fixed_run = 0
    all_fixed = True
    tagged: dict[int, Walker] = {}
    for field in dataclasses.fields(entity_type):
        tag = field.metadata.get("tag")
        walker, size = _field_walker(field, flexible, is_tag=tag is not None)
        if tag is not None:
            tagged[int(tag)] = walker
            continue
        if size is not None:
            fixed_run += size
            continue
        all_fixed = False
        if fixed_run:
            steps.append(_skip(fixed_run))
            fixed_run = 0
        steps.append(walker)
    if all_fixed and not flexible:
        return _skip(fixed_run), fixed_run
    if fixed_run:
        steps.append(_skip(fixed_run))
    run = tuple(steps)
    tagged_fields = _tagged_fields(tagged)
    if all_fixed:  # flexible: the fixed fields, then (almost always empty) tagged fields
        def fixed_then_tags(view: Buffer, pos: int, end: int) -> int:
            pos += fixed_run
            return tagged_fields(view, pos, end) if view[pos] else pos + 1

        return fixed_then_tags, None

    def walk(view: Buffer, pos: int, end: int) -> int:
        for step in run:
            pos = step(view, pos, end)
        if not flexible:
            return pos
        return tagged_fields(view, pos, end) if view[pos] else pos + 1

    return walk, None


def _skip(n: int) -> Walker:
    def skip(view: Buffer, pos: int, end: int) -> int:
        return pos + n

    return skip


def _field_walker(
    field: dataclasses.Field[Any], flexible: bool, is_tag: bool
) -> tuple[Walker, int | None]:
    """The walker of one field, and its size when fixed (then the walker is unused)."""
    field_type, optional = unwrap_optional(field.type)
    if get_origin(field_type) is tuple:
        args = get_args(field_type)
        if len(args) != 2 or not isinstance(args[1], EllipsisType):
            raise TypeError(f"unsupported tuple type {field_type} of {field.name}")
        inner, inner_optional = unwrap_optional(args[0])
        if is_entity(inner):
            walker, size = _compile_entity(inner)
            return _array(walker, size, flexible, field.name, optional), None
        kafka_type = field.metadata["kafka_type"]
        size = _FIXED_SIZES.get(kafka_type)
        element = (
            _variable(kafka_type, flexible, field.name, inner_optional)
            if size is None
            else _skip(size)
        )
        return _array(element, size, flexible, field.name, optional), None
    if is_entity(field_type):
        walker = _entity_walker(field_type)
        if optional and not is_tag:
            return _nullable_struct(walker), None
        return walker, None
    kafka_type = field.metadata["kafka_type"]
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:
        return _skip(size), size
    return _variable(kafka_type, flexible, field.name, optional), None


def is_entity(field_type: Any) -> bool:
    """A kio entity class (a dataclass of fields), as opposed to a primitive."""
    return isinstance(field_type, type) and dataclasses.is_dataclass(field_type)


def unwrap_optional(field_type: Any) -> tuple[Any, bool]:
    """(``T``, True) for ``T | None``; (the type, False) otherwise."""
    if get_origin(field_type) in (UnionType, Union):
        args = [a for a in get_args(field_type) if a is not NoneType]
        if len(args) == 1:
            return args[0], True
    return field_type, False


def _variable(kafka_type: str, flexible: bool, name: str, nullable: bool) -> Walker:
    """A string or bytes field: its length must fit in what remains, and be null only
    where the schema allows it."""
    if kafka_type not in _VARIABLE:
        raise TypeError(f"unknown kafka_type {kafka_type!r} of {name}")
    if flexible:
        def compact(view: Buffer, pos: int, end: int) -> int:
            n, pos = read_uvarint(view, pos)
            n -= 1
            if n > end - pos:
                raise _refuse(f"{name} length", n, end - pos)
            if n < 0 and not nullable:
                raise _null(name)
            return pos + n if n > 0 else pos

        return compact
    prefix = _I16 if kafka_type == "string" else _I32

    def legacy(view: Buffer, pos: int, end: int) -> int:
        (n,) = prefix.unpack_from(view, pos)
        pos += prefix.size
        if n > end - pos:
            raise _refuse(f"{name} length", n, end - pos)
        if n < 0 and not nullable:
            raise _null(name)
        return pos + n if n > 0 else pos

    return legacy


def _array(
    element: Walker, size: int | None, flexible: bool, name: str, nullable: bool
) -> Walker:
    """An array: its element count must fit in what remains (at least one byte each),
    and be null only where the schema allows it."""
    def walk(view: Buffer, pos: int, end: int) -> int:
        if flexible:
            count, pos = read_uvarint(view, pos)
            count -= 1
        else:
            (count,) = _I32.unpack_from(view, pos)
            pos += 4
        if count <= 0:
            if count < 0 and not nullable:
                raise _null(name)
            return pos
        if count * (size or 1) > end - pos:
            raise _refuse(f"array {name}", count, end - pos)
        if size is not None:
            return pos + count * size
        for _ in range(count):
            pos = element(view, pos, end)
        return pos

    return walk


def _nullable_struct(walker: Walker) -> Walker:
    """KIP-893: an int8 marker (-1 null) before a nullable struct."""
    def walk(view: Buffer, pos: int, end: int) -> int:
        marker = view[pos]
        pos += 1
        if marker == 0xFF:  # -1 as an unsigned byte
            return pos
        return walker(view, pos, end)

    return walk


def _tagged_fields(known: dict[int, Walker]) -> Walker:
    def walk(view: Buffer, pos: int, end: int) -> int:
        count, pos = read_uvarint(view, pos)
        if count > end - pos:
            raise _refuse("tagged field count", count, end - pos)
        for _ in range(count):
            tag, pos = read_uvarint(view, pos)
            size, pos = read_uvarint(view, pos)
            if size > end - pos:
                raise _refuse(f"tagged field {tag} size", size, end - pos)
            walker = known.get(tag)
            if walker is not None:
                walker(view, pos, pos + size)  # its lengths must fit in its own size
            pos += size
        return pos

    return walk
