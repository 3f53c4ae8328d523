"""Valid request bodies of the old versions kio has no schema for (``codec.LEGACY_VERSIONS``).

kio is generated from Kafka 4.0's schemas, which dropped these versions (KIP-896); the
broker decodes them by hand (``protocol/legacy_api.py``, ``protocol/produce_reader.py``)
or transcodes them to a version kio knows (``server/handlers/_transcode.py``). These are
the bodies, laid out as Kafka 2.x's schemas define them, with one element in every array
and a value in every nullable field, like ``samples.py`` does for kio's versions: seeds for
the fuzzer and for the bounded-decoding property test.
"""

from __future__ import annotations

import struct

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.codec import LEGACY_VERSIONS
from odradek.records.legacy import build_message_set

TOPIC = "samples"


def _str(value: str) -> bytes:
    data = value.encode()
    return struct.pack(">h", len(data)) + data


def _bytes(value: bytes) -> bytes:
    return struct.pack(">i", len(value)) + value


def _array(*elements: bytes) -> bytes:
    return struct.pack(">i", len(elements)) + b"".join(elements)


def _produce(version: int) -> bytes:
    magic = 0 if version < 2 else 1
    records = build_message_set(magic, [(0, 1_000, b"k", b"value")])
    partition = struct.pack(">i", 0) + _bytes(records)
    return struct.pack(">hi", 1, 1_000) + _array(_str(TOPIC) + _array(partition))


def _fetch(version: int) -> bytes:
    head = struct.pack(">iii", -1, 100, 1)  # replica_id, max_wait_ms, min_bytes
    if version >= 3:
        head += struct.pack(">i", 1 << 20)  # max_bytes
    partition = struct.pack(">iqi", 0, 0, 1 << 20)  # partition, fetch_offset, max_bytes
    return head + _array(_str(TOPIC) + _array(partition))


def _list_offsets(version: int) -> bytes:
    partition = struct.pack(">iqi", 0, -1, 1)  # partition, timestamp, max_num_offsets
    return struct.pack(">i", -1) + _array(_str(TOPIC) + _array(partition))


def _offset_commit(version: int) -> bytes:
    if version == 0:
        partition = struct.pack(">iq", 0, 5) + _str("meta")
        return _str("group") + _array(_str(TOPIC) + _array(partition))
    partition = struct.pack(">iqq", 0, 5, 1_000) + _str("meta")
    return (_str("group") + struct.pack(">i", 1) + _str("member")
            + _array(_str(TOPIC) + _array(partition)))


def _offset_fetch(version: int) -> bytes:
    return _str("group") + _array(_str(TOPIC) + _array(struct.pack(">i", 0)))


def _create_topics(version: int) -> bytes:
    assignment = struct.pack(">i", 0) + _array(struct.pack(">i", 1))
    config = _str("cleanup.policy") + _str("compact")
    topic = (_str(TOPIC) + struct.pack(">ih", -1, -1) + _array(assignment)
             + _array(config))
    body = _array(topic) + struct.pack(">i", 1_000)
    return body + b"\x00" if version >= 1 else body  # v1: validate_only


def _delete_topics(version: int) -> bytes:
    return _array(_str(TOPIC)) + struct.pack(">i", 1_000)


def _offset_for_leader_epoch(version: int) -> bytes:
    return _array(_str(TOPIC) + _array(struct.pack(">ii", 0, 0)))


def _describe_configs(version: int) -> bytes:
    return _array(struct.pack(">b", 2) + _str(TOPIC) + _array(_str("retention.ms")))


def _acl_filter(version: int) -> bytes:
    """DescribeAcls v0: type, name, principal, host, operation, permission (no pattern)."""
    return struct.pack(">b", 2) + _str(TOPIC) + _str("User:alice") + _str("*") + (
        struct.pack(">bb", 3, 3))


def _acl_entries(version: int) -> bytes:
    """CreateAcls v0 creations / DeleteAcls v0 filters: the same fields, in an array."""
    return _array(_acl_filter(version))


def _write_txn_markers(version: int) -> bytes:
    """producer id, epoch, result (commit), topics, coordinator epoch."""
    topic = _str(TOPIC) + _array(struct.pack(">i", 0))
    return _array(struct.pack(">qh?", 1, 0, True) + _array(topic) + struct.pack(">i", 0))


_BUILDERS = {
    ApiKey.DESCRIBE_ACLS: _acl_filter,
    ApiKey.CREATE_ACLS: _acl_entries,
    ApiKey.DELETE_ACLS: _acl_entries,
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _fetch,
    ApiKey.LIST_OFFSETS: _list_offsets,
    ApiKey.OFFSET_COMMIT: _offset_commit,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
    ApiKey.DESCRIBE_CONFIGS: _describe_configs,
    ApiKey.WRITE_TXN_MARKERS: _write_txn_markers,
}


def legacy_sample_body(api_key: int, version: int) -> bytes:
    """The body of a valid ``api_key`` request at an old ``version`` kio lacks."""
    low, high = LEGACY_VERSIONS[int(api_key)]
    if not low <= version <= high:
        raise ValueError(f"API {api_key} v{version} is not an old version kio lacks")
    return _BUILDERS[ApiKey(api_key)](version)


def legacy_versions() -> list[tuple[int, int]]:
    """Every (API key, version) of ``LEGACY_VERSIONS``."""
    return [(key, version) for key, (low, high) in sorted(LEGACY_VERSIONS.items())
            for version in range(low, high + 1)]


def legacy_request_frame(api_key: int, version: int, correlation_id: int = 1,
                         client_id: str = "test") -> bytes:
    """A whole frame (size prefix, header v1, body) of an old-version request."""
    payload = (struct.pack(">hhi", api_key, version, correlation_id) + _str(client_id)
               + legacy_sample_body(api_key, version))
    return struct.pack(">i", len(payload)) + payload
