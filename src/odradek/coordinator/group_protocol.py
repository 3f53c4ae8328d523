"""The "consumer" embedded protocol: what consumers put in JoinGroup and SyncGroup bytes.

The coordinator treats member metadata and assignments as opaque bytes; only the tools
(``odradek groups describe``) and OffsetDelete (which topics a consumer group subscribes
to) look inside. Layouts of Kafka's ``ConsumerProtocolSubscription`` and
``ConsumerProtocolAssignment`` (versions 0-3, non-flexible; int16 version first)::

    Subscription  topics [string], user_data nullable bytes,
                  owned_partitions [topic string, partitions [int32]] (v1+),
                  generation_id int32 (v2+), rack_id nullable string (v3+)
    Assignment    assigned_partitions [topic string, partitions [int32]],
                  user_data nullable bytes

Newer versions keep these fields first, so a reader of v3 decodes them too.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from odradek.coordinator.group_records import RecordFormatError, _Reader

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "ConsumerAssignment",
    "ConsumerSubscription",
    "RecordFormatError",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
]

CONSUMER_PROTOCOL_TYPE = "consumer"


@dataclass(frozen=True, slots=True)
class ConsumerSubscription:
    version: int
    topics: tuple[str, ...]
    user_data: bytes
    # v1+: the partitions the member owns (cooperative clients); v2+: its generation
    # (-1 when not sent); v3+: its rack
    owned_partitions: tuple[tuple[str, tuple[int, ...]], ...] = ()
    generation_id: int = -1
    rack_id: str | None = None


@dataclass(frozen=True, slots=True)
class ConsumerAssignment:
    version: int
    partitions: dict[str, tuple[int, ...]]
    user_data: bytes


def decode_subscription(data: bytes) -> ConsumerSubscription:
    r = _Reader(data)
    version = r.i16()
    if version < 0:
        raise RecordFormatError(f"invalid subscription version {version}")
    topics = tuple(r.string() or "" for _ in range(r.array_length(False)))
    user_data = r.bytes_()
    owned: list[tuple[str, tuple[int, ...]]] = []
    generation_id = -1
    rack_id = None
    # the fields of later versions are read when present (a client may send a version
    # number ahead of the fields it wrote, as the reader of each version tolerates)
    if version >= 1 and r.pos < len(data):
        for _ in range(r.array_length(False)):
            topic = r.string() or ""
            owned.append((topic, tuple(r.i32() for _ in range(r.array_length(False)))))
        if version >= 2 and r.pos < len(data):
            generation_id = r.i32()
            if version >= 3 and r.pos < len(data):
                rack_id = r.string()
    return ConsumerSubscription(version, topics, user_data, tuple(owned), generation_id,
                                rack_id)


def decode_assignment(data: bytes) -> ConsumerAssignment:
    if not data:
        return ConsumerAssignment(0, {}, b"")
    r = _Reader(data)
    version = r.i16()
    if version < 0:
        raise RecordFormatError(f"invalid assignment version {version}")
    partitions: dict[str, tuple[int, ...]] = {}
    for _ in range(r.array_length(False)):
        topic = r.string() or ""
        partitions[topic] = tuple(r.i32() for _ in range(r.array_length(False)))
    user_data = r.bytes_() if r.pos < len(data) else b""
    return ConsumerAssignment(version, partitions, user_data)


def encode_assignment(partitions: dict[str, list[int]], version: int = 0) -> bytes:
    out = bytearray(struct.pack(">hi", version, len(partitions)))
    for topic, parts in partitions.items():
        name = topic.encode()
        out += struct.pack(">h", len(name)) + name + struct.pack(">i", len(parts))
        out += b"".join(struct.pack(">i", p) for p in parts)
    out += struct.pack(">i", -1)
    return bytes(out)
