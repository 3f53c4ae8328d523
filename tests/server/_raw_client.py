"""A raw Kafka client over a real socket for the producer-state tests: requests encoded
with kio, answered one at a time (InitProducerId, Produce, and for transactions written
without a coordinator WriteTxnMarkers, read_committed Fetch and ListOffsets), and record
batches of a producer built with BatchBuilder."""

from __future__ import annotations

import datetime
import socket
import struct
import time
import uuid
from typing import Any

from kio.schema.fetch.v11 import request as fetch_v11
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest as InitV4
from kio.schema.list_offsets.v5 import request as list_offsets_v5
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.write_txn_markers.v1 import request as markers_v1
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from odradek.protocol.errors import ErrorCode
from odradek.records.builder import BatchBuilder
from odradek.testing import RunningBroker
from tests.protocol.wire import decode_response, request_frame

TXN_TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=60))
TXN_ID = "txn-test"


def new_topic(broker: RunningBroker, prefix: str) -> str:
    """A fresh one-partition topic."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    broker.call(broker.broker.metadata.create_topic, name, 1, 1)
    return name


def batch(pid: int, epoch: int, seq: int, count: int = 1, *, transactional: bool = False,
          tag: str = "value") -> bytes:
    """``count`` records of producer ``pid`` from sequence ``seq``, valued "<tag>-<seq>"."""
    builder = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                           is_transactional=transactional)
    now = int(time.time() * 1000)
    for i in range(count):
        builder.append(b"k", f"{tag}-{seq + i}".encode(), now)
    return builder.build()


def txn_batch(pid: int, epoch: int, seq: int, count: int = 1,
              transactional: bool | None = None, tag: str = "v") -> bytes:
    """:func:`batch`, transactional unless told otherwise or without a producer id (a
    plain batch, which the transactional bit would make a request without a
    transactional id refused whole)."""
    if transactional is None:
        transactional = pid >= 0
    return batch(pid, epoch, seq, count, transactional=transactional, tag=tag)


class Client:
    """One connection; :meth:`call` sends a kio request and returns its decoded answer."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "connection closed"
            buf += chunk
        return buf

    def call(self, request: Any) -> Any:
        self.correlation_id += 1
        self.sock.sendall(request_frame(request, self.correlation_id))
        (size,) = struct.unpack(">i", self._exact(4))
        cid, response = decode_response(
            self._exact(size), request.__api_key__, request.__version__
        )
        assert cid == self.correlation_id
        return response

    def init_producer_id(self) -> tuple[int, int]:
        response = self.call(InitV4(transactional_id=None,
                                    transaction_timeout=TXN_TIMEOUT))
        assert response.error_code == ErrorCode.none
        return int(response.producer_id), int(response.producer_epoch)

    def produce(self, topic: str, records: bytes, transactional_id: str | None = None) -> Any:
        m = produce_v9
        request = m.ProduceRequest(
            transactional_id=transactional_id, acks=-1,  # type: ignore[arg-type]
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
            topic_data=(m.TopicProduceData(name=topic, partition_data=(  # type: ignore[arg-type]
                m.PartitionProduceData(index=0, records=records),  # type: ignore[arg-type]
            )),),
        )
        return self.call(request).responses[0].partition_responses[0]


class TxnClient(Client):
    """:class:`Client` with what a test playing the transaction coordinator sends."""

    def markers(self, topic: str, pid: int, epoch: int, commit: bool,
                coordinator_epoch: int = 0, partitions: tuple[int, ...] = (0,)) -> int:
        m = markers_v1
        response = self.call(m.WriteTxnMarkersRequest(markers=(m.WritableTxnMarker(
            producer_id=pid, producer_epoch=i16(epoch),  # type: ignore[arg-type]
            transaction_result=commit, coordinator_epoch=i32(coordinator_epoch),
            topics=(m.WritableTxnMarkerTopic(name=topic,  # type: ignore[arg-type]
                                             partition_indexes=tuple(map(i32, partitions))),),
        ),)))
        assert int(response.markers[0].producer_id) == pid
        return int(response.markers[0].topics[0].partitions[0].error_code.value)

    def fetch(self, topic: str, offset: int = 0, read_committed: bool = True) -> Any:
        m = fetch_v11
        response = self.call(m.FetchRequest(
            max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=i32(0),
            isolation_level=i8(1 if read_committed else 0),
            topics=(m.FetchTopic(topic=topic, partitions=(  # type: ignore[arg-type]
                m.FetchPartition(partition=i32(0), fetch_offset=i64(offset),
                                 partition_max_bytes=i32(1 << 20)),)),),
            forgotten_topics_data=(), rack_id="",
        ))
        return response.responses[0].partitions[0]

    def latest(self, topic: str, read_committed: bool) -> int:
        m = list_offsets_v5
        response = self.call(m.ListOffsetsRequest(
            replica_id=-1, isolation_level=i8(1 if read_committed else 0),  # type: ignore[arg-type]
            topics=(m.ListOffsetsTopic(name=topic, partitions=(  # type: ignore[arg-type]
                m.ListOffsetsPartition(partition_index=i32(0), timestamp=i64(-1)),)),),
        ))
        partition = response.topics[0].partitions[0]
        assert partition.error_code == ErrorCode.none
        return int(partition.offset)
