"""Hot-path encoder for Metadata response bodies (versions 0-12).

How it works
------------
A Metadata response lists every partition of the topics asked for; with a thousand
partitions, building one kio entity per partition and encoding it with kio's reflective
writer took several times longer (bench/README.md has the figures), on the event loop,
for every client's refresh. This writer packs the same bytes with ``struct`` from plain
tuples, and packs each distinct replica list once per response. Layout (Kafka's
``MetadataResponse.json``; "flexible" = v9+: compact arrays and strings, tagged fields
after every struct)::

    MetadataResponse
      throttle_time_ms        int32                       v3+
      brokers                 array of
        node_id                 int32
        host                    string
        port                    int32
        rack                    nullable string            v1+
      cluster_id              nullable string             v2+
      controller_id           int32                       v1+
      topics                  array of
        error_code              int16
        name                    string (nullable v12+)
        topic_id                uuid                       v10+
        is_internal             bool                       v1+
        partitions              array of
          error_code              int16
          partition_index         int32
          leader_id               int32
          leader_epoch            int32                    v7+
          replica_nodes           int32 array
          isr_nodes               int32 array
          offline_replicas        int32 array              v5+
        topic_authorized_operations int32                  v8+
      cluster_authorized_operations int32                 v8-v10

No field of this response is tagged, so every tagged-field section is empty (one zero
byte). The unit tests check the output byte for byte against kio's encoding for every
version.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import NamedTuple

from odradek.protocol.primitives import I32, array_length, nullable_string, string

__all__ = [
    "MetadataBroker",
    "MetadataPartition",
    "MetadataTopic",
    "write_metadata_response",
]

MIN_VERSION = 0
MAX_VERSION = 12
_FLEXIBLE = 9

_ZERO_UUID = bytes(16)
_ERROR_AND_INDEX = struct.Struct(">hii")  # error_code, partition_index, leader_id
_ERROR_INDEX_EPOCH = struct.Struct(">hiii")  # ... and leader_epoch (v7+)
_I16 = struct.Struct(">h")


class MetadataBroker(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: str | None = None


class MetadataPartition(NamedTuple):
    error_code: int
    partition_index: int
    leader_id: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]


class MetadataTopic(NamedTuple):
    error_code: int
    name: str | None
    topic_id: uuid.UUID | None
    is_internal: bool
    partitions: Sequence[MetadataPartition]
    topic_authorized_operations: int


def write_metadata_response(
    version: int,
    brokers: Sequence[MetadataBroker],
    cluster_id: str | None,
    controller_id: int,
    topics: Sequence[MetadataTopic],
    cluster_authorized_operations: int,
    throttle_time_ms: int = 0,
) -> bytes:
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Metadata response v{version} is not supported by this writer")
    flexible = version >= _FLEXIBLE
    tags = b"\x00" if flexible else b""
    out = bytearray()
    if version >= 3:
        out += I32.pack(throttle_time_ms)
    out += array_length(len(brokers), flexible)
    for broker in brokers:
        out += I32.pack(broker.node_id)
        out += string(broker.host, flexible)
        out += I32.pack(broker.port)
        if version >= 1:
            out += nullable_string(broker.rack, flexible)
        out += tags
    if version >= 2:
        out += nullable_string(cluster_id, flexible)
    if version >= 1:
        out += I32.pack(controller_id)
    out += array_length(len(topics), flexible)
    arrays: dict[tuple[int, ...], bytes] = {}  # each distinct replica list packed once

    def int32_array(values: tuple[int, ...]) -> bytes:
        packed = arrays.get(values)
        if packed is None:
            packed = array_length(len(values), flexible) + struct.pack(
                f">{len(values)}i", *values
            )
            arrays[values] = packed
        return packed

    for topic in topics:
        out += _I16.pack(topic.error_code)
        if version >= 12:
            out += nullable_string(topic.name, flexible)
        else:
            out += string(topic.name or "", flexible)
        if version >= 10:
            out += topic.topic_id.bytes if topic.topic_id is not None else _ZERO_UUID
        if version >= 1:
            out += b"\x01" if topic.is_internal else b"\x00"
        out += array_length(len(topic.partitions), flexible)
        for p in topic.partitions:
            if version >= 7:
                out += _ERROR_INDEX_EPOCH.pack(
                    p.error_code, p.partition_index, p.leader_id, p.leader_epoch
                )
            else:
                out += _ERROR_AND_INDEX.pack(p.error_code, p.partition_index, p.leader_id)
            out += int32_array(p.replicas)
            out += int32_array(p.isr)
            if version >= 5:
                out += int32_array(p.offline)
            out += tags
        if version >= 8:
            out += I32.pack(topic.topic_authorized_operations)
        out += tags
    if 8 <= version <= 10:
        out += I32.pack(cluster_authorized_operations)
    out += tags
    return bytes(out)
