"""WriteTxnMarkers from the transaction coordinator to partition leaders (Kafka's
``TransactionMarkerChannelManager``'s network side).

How it works: a marker for partitions this broker leads itself is written in-process,
through the code the WriteTxnMarkers handler runs (``local``: the same control-batch
appends, producer-epoch and coordinator-epoch fencing, wait for the ISR and error per
partition, without encoding a request, a loopback connection and a response; Kafka's
coordinator sends these over the network to its own broker too). For any other leader:
one connection per leader broker, opened on first use to the broker's inter-broker
listener with that listener's security settings (as the replica fetcher connects) and
kept for the next markers. A marker is one WriteTxnMarkers v1 request carrying the
transaction's partitions led by that broker; the answer is the error per partition. The
same connections carry the partition leaders' AddPartitionsToTxn ``verify_only``
requests (server/txn_verification.py). A failed exchange (no answer within
``request.timeout.ms``, a lost connection) closes the connection and raises: the
coordinator retries those partitions in its next round, with the leaders looked up again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kio.schema.types import ProducerId, TopicName
from kio.schema.write_txn_markers.v1 import request as wtm_v1
from kio.static.primitive import i16, i32, i64

from odradek.client.connection import BrokerConnection
from odradek.client.security import ClientSecurity
from odradek.coordinator.transaction_coordinator import TxnMarker
from odradek.coordinator.transaction_state import TopicPartition
from odradek.protocol.errors import ErrorCode

__all__ = ["TxnMarkerSender"]

log = logging.getLogger(__name__)

# Kafka's request.timeout.ms default: how long a marker's answer may take.
REQUEST_TIMEOUT_S = 30.0


class TxnMarkerSender:
    def __init__(
        self,
        broker_id: int,
        endpoints: Callable[[], list[tuple[int, str, int, str | None]]],
        security: ClientSecurity,
        local: Callable[[TxnMarker], Awaitable[Mapping[TopicPartition, ErrorCode]]]
        | None = None,
    ) -> None:
        self.broker_id = broker_id
        self._endpoints = endpoints
        self._security = security
        self._local = local
        self._connections: dict[int, BrokerConnection] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def __call__(
        self, leader: int, marker: TxnMarker
    ) -> Mapping[TopicPartition, ErrorCode]:
        if leader == self.broker_id and self._local is not None:
            return await self._local(marker)
        conn = await self.connection(leader)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in marker.partitions:
            by_topic.setdefault(topic, []).append(partition)
        request = wtm_v1.WriteTxnMarkersRequest(markers=(wtm_v1.WritableTxnMarker(
            producer_id=ProducerId(i64(marker.producer_id)),
            producer_epoch=i16(marker.producer_epoch),
            transaction_result=marker.commit,
            topics=tuple(wtm_v1.WritableTxnMarkerTopic(
                name=TopicName(topic), partition_indexes=tuple(i32(p) for p in parts))
                for topic, parts in by_topic.items()),
            coordinator_epoch=i32(marker.coordinator_epoch),
        ),))
        try:
            response: Any = await asyncio.wait_for(conn.send(request), REQUEST_TIMEOUT_S)
        except BaseException:
            await self.drop(leader)
            raise
        out: dict[TopicPartition, ErrorCode] = {}
        for result in response.markers:
            for topic in result.topics:
                for p in topic.partitions:
                    out[(str(topic.name), int(p.partition_index))] = ErrorCode(p.error_code)
        return out

    async def connection(self, broker_id: int) -> BrokerConnection:
        lock = self._locks.setdefault(broker_id, asyncio.Lock())
        async with lock:
            conn = self._connections.get(broker_id)
            if conn is not None and not conn.closed:
                return conn
            for found, host, port, _rack in self._endpoints():
                if found == broker_id:
                    conn = await BrokerConnection.open(
                        f"{host}:{port}", timeout=10.0,
                        client_id=f"broker-{self.broker_id}-txn",
                        security=self._security)
                    self._connections[broker_id] = conn
                    return conn
            raise ConnectionError(f"broker {broker_id} is not live")

    async def drop(self, broker_id: int) -> None:
        conn = self._connections.pop(broker_id, None)
        if conn is not None:
            try:
                await conn.close()
            except Exception as exc:
                log.debug("closing the marker connection to broker %d: %s", broker_id, exc)

    async def close(self) -> None:
        for broker_id in list(self._connections):
            await self.drop(broker_id)
