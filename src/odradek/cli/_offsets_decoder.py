"""``dump-log --offsets-decoder``: records of ``__consumer_offsets`` as Kafka's
DumpLogSegments prints them (its ``OffsetsMessageParser``).

Each record becomes ``key: {"type":"T","data":{...}}`` and ``payload: {"version":"V",
"data":{...}}`` (``payload: <DELETE>`` for a tombstone): T is the record type (the key's
int16), V the value's version, and ``data`` the fields under Kafka's JSON names (the
camelCase of the schema's), compact like Jackson's ``toString``. Topic ids are printed
as Kafka's ``Uuid.toString``, bytes as base64. The records known are the offset commits
and classic groups (:mod:`odradek.coordinator.group_records`; a classic member's
subscription and assignment are decoded when the group's protocol type is ``consumer``)
and KIP-848's consumer groups (:mod:`odradek.coordinator.consumer_group_records`).
Another record type prints ``key: Unknown record type T at offset O, skipping.`` and a
record that does not decode ``key: Error at offset O, skipping. <reason>``, as Kafka's.
"""

from __future__ import annotations

import base64
import json
import struct
import uuid
from dataclasses import fields
from typing import Any

from odradek.coordinator import consumer_group_records as cg
from odradek.coordinator import group_records as classic
from odradek.coordinator.group_protocol import decode_assignment, decode_subscription

__all__ = ["parse_offsets_record"]

_I16 = struct.Struct(">h")

def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _json(value: Any) -> Any:
    """Our record dataclasses as Kafka's JsonConverters write them."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, uuid.UUID):
        return cg.kafka_uuid_string(value)
    if isinstance(value, (tuple, list)):
        return [_json(v) for v in value]
    out = {}
    for f in fields(value):
        if f.name == "classic_member_metadata" and getattr(value, f.name) is None:
            continue  # a tagged field at its default is not written
        out[_camel(f.name)] = _json(getattr(value, f.name))
    return out


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _classic_key(key: classic.OffsetCommitKey | classic.GroupMetadataKey) -> dict[str, Any]:
    if isinstance(key, classic.OffsetCommitKey):
        return {"group": key.group, "topic": key.topic, "partition": key.partition}
    return {"group": key.group}


def _offset_value(version: int, v: classic.OffsetCommitValue) -> dict[str, Any]:
    out: dict[str, Any] = {"offset": v.offset}
    if version >= 3:
        out["leaderEpoch"] = v.leader_epoch
    out["metadata"] = v.metadata
    out["commitTimestamp"] = v.commit_timestamp
    if version == 1:
        out["expireTimestamp"] = v.expire_timestamp
    return out


def _member_bytes(protocol_type: str, kind: str, data: bytes) -> Any:
    if protocol_type == "consumer":
        try:
            if kind == "subscription":
                s = decode_subscription(data)
                return {"topics": list(s.topics), "userData": _json(s.user_data or None)}
            a = decode_assignment(data)
            return {
                "assignedPartitions": [{"topic": t, "partitions": list(p)}
                                       for t, p in a.partitions.items()],
                "userData": _json(a.user_data or None),
            }
        except (classic.RecordFormatError, ValueError, struct.error):
            pass  # keep the bytes, as Kafka does
    return _json(data)


def _group_value(version: int, v: classic.GroupMetadataValue) -> dict[str, Any]:
    out: dict[str, Any] = {
        "protocolType": v.protocol_type, "generation": v.generation,
        "protocol": v.protocol, "leader": v.leader,
    }
    if version >= 2:
        out["currentStateTimestamp"] = v.current_state_timestamp
    members = []
    for m in v.members:
        member: dict[str, Any] = {"memberId": m.member_id}
        if version >= 3:
            member["groupInstanceId"] = m.group_instance_id
        member.update(clientId=m.client_id, clientHost=m.client_host)
        if version >= 1:
            member["rebalanceTimeout"] = m.rebalance_timeout
        member["sessionTimeout"] = m.session_timeout
        member["subscription"] = _member_bytes(v.protocol_type, "subscription", m.subscription)
        member["assignment"] = _member_bytes(v.protocol_type, "assignment", m.assignment)
        members.append(member)
    out["members"] = members
    return out


def parse_offsets_record(offset: int, key: bytes | None, value: bytes | None
                         ) -> tuple[str, str | None]:
    """(key text, payload text or None) of one record of ``__consumer_offsets``."""
    if key is None:
        return (f"Failed to decode message at offset {offset} using offset topic decoder "
                "(message had a missing key)", None)
    try:
        if len(key) < 2:
            raise classic.RecordFormatError("the key is shorter than its record type")
        (record_type,) = _I16.unpack_from(key)
        version = _I16.unpack_from(value)[0] if value is not None and len(value) >= 2 else 0
        data: dict[str, Any]
        payload: dict[str, Any] | None
        consumer_key = cg.decode_key(key)
        if consumer_key is not None:
            data = _json(consumer_key)
            decoded = cg.decode_value(consumer_key, value)
            payload = None if decoded is None else _json(decoded)
        elif record_type in (0, 1, 2):
            classic_key = classic.decode_key(key)
            if classic_key is None:  # not reached: 0-2 are classic.decode_key's own
                raise classic.RecordFormatError(f"record type {record_type} not decoded")
            data = _classic_key(classic_key)
            if value is None:
                payload = None
            else:
                decoded_classic = classic.decode_value(classic_key, value)
                if isinstance(decoded_classic, classic.OffsetCommitValue):
                    payload = _offset_value(version, decoded_classic)
                else:
                    payload = _group_value(version, decoded_classic)
        else:
            return f"Unknown record type {record_type} at offset {offset}, skipping.", None
    except (classic.RecordFormatError, struct.error) as exc:
        return f"Error at offset {offset}, skipping. {exc}", None
    key_text = _dumps({"type": str(record_type), "data": data})
    if payload is None:
        return key_text, "<DELETE>"
    return key_text, _dumps({"version": str(version), "data": payload})
