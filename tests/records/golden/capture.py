"""Regenerate the golden RecordBatch files in this directory (a dev tool, not a test).

Run it once, from the repository root, whenever the goldens must be rebuilt::

    .venv/bin/python tests/records/golden/capture.py

It writes, for every client and codec, ``<client>-<codec>.bin`` (the raw record bytes the
client put in its produce request, or its builder returned) and ``<client>-<codec>.json``
(the records the test expects to read back: offsets, timestamps, keys, values, headers).

- kafka-python and aiokafka: their offline ``DefaultRecordBatchBuilder`` classes are used
  directly.
- confluent-kafka (librdkafka) needs a broker, so this script starts a tiny capture server
  on loopback (built on ``kio``) that answers ApiVersions, Metadata and Produce just enough
  for a producer to send one batch per codec, and records the ``records`` field of each
  ProduceRequest. The server lives only while the script runs.

The committed ``.bin`` files are what the tests use. With the fixed timestamps below a
rerun reproduces them byte for byte, except kafka-python/aiokafka gzip: Python's gzip
module stamps the current time into the gzip header (so the batch CRC changes too).
kafka-python compresses snappy/lz4/zstd through optional libraries that the venv lacks,
so only its none and gzip batches are captured.
"""

from __future__ import annotations

import datetime
import json
import socket
import struct
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from kio.schema.produce.v9.request import ProduceRequest
from kio.schema.produce.v9.response import (
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.schema.types import BrokerId, TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, i32Timedelta, i64

GOLDEN_DIR = Path(__file__).resolve().parent
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
BASE_TIMESTAMP = 1_700_000_000_000
TOPIC = "golden"

# The records every client produces: (key, value, timestamp, headers).
RECORDS: list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]] = [
    (b"key-0", b"value-0", BASE_TIMESTAMP, [("h1", b"v1"), ("h2", b"")]),
    (b"key-1", b"value-1 " + b"abc" * 40, BASE_TIMESTAMP + 1, []),
    (b"key-2", None, BASE_TIMESTAMP + 5, [("tombstone", None)]),
    (b"key-3", b"", BASE_TIMESTAMP + 3, [("utf8-\u00e9", b"\x00\xff\x10")]),
    (b"key-4", b"value-4 " + b"x" * 300, BASE_TIMESTAMP + 1000, [("a", b"1"), ("a", b"2")]),
]


def _hex(value: bytes | None) -> str | None:
    return None if value is None else value.hex()


def sidecar(records: list[tuple[int, int, bytes | None, bytes | None, list[Any]]]) -> dict:
    return {
        "encoding": "hex",
        "records": [
            {
                "offset": offset,
                "timestamp": ts,
                "key": _hex(key),
                "value": _hex(value),
                "headers": [[hk, _hex(hv)] for hk, hv in headers],
            }
            for offset, ts, key, value, headers in records
        ],
    }


def expected_records() -> dict:
    return sidecar(
        [(i, ts, key, value, headers) for i, (key, value, ts, headers) in enumerate(RECORDS)]
    )


def write_golden(client: str, codec: str, data: bytes) -> None:
    (GOLDEN_DIR / f"{client}-{codec}.bin").write_bytes(data)
    (GOLDEN_DIR / f"{client}-{codec}.json").write_text(
        json.dumps(expected_records(), indent=1) + "\n"
    )
    print(f"wrote {client}-{codec}.bin ({len(data)} bytes)")


def _kafka_python_has(codec: str) -> bool:
    """kafka-python compresses snappy/lz4/zstd through optional libraries (python-snappy,
    lz4, zstandard); the venv has none of them, so only none and gzip are captured."""
    from kafka import codec as kafka_codec

    checks = {
        "none": lambda: True,
        "gzip": kafka_codec.has_gzip,
        "snappy": kafka_codec.has_snappy,
        "lz4": kafka_codec.has_lz4,
        "zstd": kafka_codec.has_zstd,
    }
    return bool(checks[codec]())


def capture_builder(client: str) -> None:
    if client == "kafka-python":
        from kafka.record.default_records import DefaultRecordBatchBuilder
    else:
        from aiokafka.record.default_records import DefaultRecordBatchBuilder
    for codec in CODECS:
        if client == "kafka-python" and not _kafka_python_has(codec):
            print(f"skipped kafka-python-{codec}: its codec library is not installed")
            continue
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=CODEC_IDS[codec],
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 20,
        )
        for offset, (key, value, ts, headers) in enumerate(RECORDS):
            builder.append(offset, timestamp=ts, key=key, value=value, headers=headers)
        write_golden(client, codec, bytes(builder.build()))


# --- confluent-kafka through a loopback capture server ---------------------------------

_API_VERSIONS = 18
_METADATA = 3
_PRODUCE = 0
_FETCH = 1
_FIND_COORDINATOR = 10


def _encode(entity: Any) -> bytes:
    import io

    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


class CaptureServer:
    """Answers ApiVersions v3, Metadata v12 and Produce v9; stores produced record bytes."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.captured: list[bytes] = []
        self.lock = threading.Lock()
        self.got_batch = threading.Condition(self.lock)
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.closed = True
        self.sock.close()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @staticmethod
    def _recv_exact(conn: socket.socket, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = conn.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return bytes(out)

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                while True:
                    (size,) = struct.unpack(">i", self._recv_exact(conn, 4))
                    frame = self._recv_exact(conn, size)
                    reply = self._handle(frame)
                    if reply is not None:
                        conn.sendall(struct.pack(">i", len(reply)) + reply)
            except (ConnectionError, OSError):
                return

    def _handle(self, frame: bytes) -> bytes | None:
        api_key, api_version, correlation_id = struct.unpack_from(">hhi", frame)
        if api_key == _API_VERSIONS:
            # The response header of ApiVersions is always v0; when the client asks for a
            # version we do not speak, the error reply lists what we do.
            header = _encode(ResponseHeaderV0(correlation_id=i32(correlation_id)))
            error = ErrorCode.none if api_version == 3 else ErrorCode.unsupported_version
            body = ApiVersionsResponse(
                error_code=error,
                api_keys=(
                    ApiVersion(api_key=i16(_PRODUCE), min_version=i16(9), max_version=i16(9)),
                    ApiVersion(api_key=i16(_METADATA), min_version=i16(12), max_version=i16(12)),
                    # Never called, but librdkafka enables RecordBatch v2 (MsgVer2) and zstd
                    # only when the broker also lists Fetch v4+ / v10+.
                    ApiVersion(api_key=i16(_FETCH), min_version=i16(4), max_version=i16(12)),
                    # Likewise lz4 needs FindCoordinator v0 listed (a 0.8.2+ broker marker).
                    ApiVersion(
                        api_key=i16(_FIND_COORDINATOR), min_version=i16(0), max_version=i16(0)
                    ),
                    ApiVersion(api_key=i16(_API_VERSIONS), min_version=i16(3), max_version=i16(3)),
                ),
                throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
            )
            if error != ErrorCode.none:
                # v0 layout: error_code int16, [api_key, min, max] int32-length array.
                keys = body.api_keys
                raw = struct.pack(">hi", error, len(keys)) + b"".join(
                    struct.pack(">hhh", k.api_key, k.min_version, k.max_version) for k in keys
                )
                return header + raw
            return header + _encode(body)
        request_header, offset = entity_reader(RequestHeader)(frame, 0)
        reply_header = _encode(ResponseHeaderV1(correlation_id=i32(correlation_id)))
        if api_key == _METADATA:
            entity_reader(MetadataRequest)(frame, offset)
            response = MetadataResponse(
                throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
                brokers=(
                    MetadataResponseBroker(
                        node_id=BrokerId(1), host="127.0.0.1", port=i32(self.port)
                    ),
                ),
                cluster_id="golden-capture",
                controller_id=BrokerId(1),
                topics=(
                    MetadataResponseTopic(
                        error_code=ErrorCode.none,
                        name=TopicName(TOPIC),
                        topic_id=uuid.UUID(int=1),
                        partitions=(
                            MetadataResponsePartition(
                                error_code=ErrorCode.none,
                                partition_index=i32(0),
                                leader_id=BrokerId(1),
                                leader_epoch=i32(0),
                                replica_nodes=(BrokerId(1),),
                                isr_nodes=(BrokerId(1),),
                            ),
                        ),
                    ),
                ),
            )
            return reply_header + _encode(response)
        if api_key == _PRODUCE:
            request, _ = entity_reader(ProduceRequest)(frame, offset)
            responses = []
            for topic in request.topic_data:
                parts = []
                for part in topic.partition_data:
                    with self.got_batch:
                        self.captured.append(bytes(part.records or b""))
                        self.got_batch.notify_all()
                    parts.append(
                        PartitionProduceResponse(
                            index=part.index,
                            error_code=ErrorCode.none,
                            base_offset=i64(0),
                            record_errors=(),
                        )
                    )
                responses.append(
                    TopicProduceResponse(name=topic.name, partition_responses=tuple(parts))
                )
            if request.acks == 0:
                return None
            return reply_header + _encode(ProduceResponse(responses=tuple(responses)))
        raise RuntimeError(f"capture server got unexpected api key {api_key} ({request_header})")


def capture_confluent() -> None:
    from confluent_kafka import Producer

    server = CaptureServer()
    try:
        for codec in CODECS:
            producer = Producer(
                {
                    "bootstrap.servers": f"127.0.0.1:{server.port}",
                    "compression.type": codec,
                    "linger.ms": 200,
                    "broker.address.family": "v4",
                }
            )
            with server.got_batch:
                before = len(server.captured)
            for key, value, ts, headers in RECORDS:
                producer.produce(
                    TOPIC, key=key, value=value, timestamp=ts, headers=headers, partition=0
                )
            remaining = producer.flush(30)
            if remaining:
                raise RuntimeError(f"{remaining} messages not delivered for codec {codec}")
            with server.got_batch:
                new = server.captured[before:]
            if len(new) != 1:
                raise RuntimeError(f"expected one produce for {codec}, got {len(new)}")
            write_golden("confluent-kafka", codec, new[0])
    finally:
        server.close()


def main(argv: list[str]) -> int:
    clients = argv or ["kafka-python", "aiokafka", "confluent-kafka"]
    for client in clients:
        if client == "confluent-kafka":
            capture_confluent()
        else:
            capture_builder(client)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
