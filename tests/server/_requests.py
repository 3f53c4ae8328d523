"""Requests to a running broker over the project's client, as the group and transaction
handler tests send them: kio request modules by API and version, requests answered in
order on one connection, and the transactional requests the tests repeat."""

from __future__ import annotations

import asyncio
import datetime
import importlib
import uuid
from typing import Any

from odradek.client.connection import BrokerConnection
from odradek.testing import RunningBroker

TIMEOUT = datetime.timedelta(seconds=60)


def req(api: str, version: int) -> Any:
    """The kio request module of ``api`` at ``version``."""
    return importlib.import_module(f"kio.schema.{api}.v{version}.request")


def call(rb: RunningBroker, *requests: Any) -> list[Any]:
    """Send requests in order on one connection; return their responses."""
    async def go() -> list[Any]:
        conn = await BrokerConnection.open(rb.bootstrap, client_id="test-client")
        try:
            return [await conn.send(r) for r in requests]
        finally:
            await conn.close()

    return asyncio.run(go())


def one(rb: RunningBroker, request: Any) -> Any:
    return call(rb, request)[0]


# -- transactions ------------------------------------------------------------------------
def new_id() -> str:
    """A fresh transactional id."""
    return f"tid-{uuid.uuid4().hex[:8]}"


def init(rb: RunningBroker, txn_id: str, version: int = 4,
         timeout: datetime.timedelta = TIMEOUT, producer_id: int = -1,
         epoch: int = -1) -> Any:
    m = req("init_producer_id", version)
    return one(rb, m.InitProducerIdRequest(
        transactional_id=txn_id, transaction_timeout=timeout, producer_id=producer_id,
        producer_epoch=epoch) if version >= 3 else m.InitProducerIdRequest(
        transactional_id=txn_id, transaction_timeout=timeout))


def add_partitions(rb: RunningBroker, txn_id: str, pid: int, epoch: int,
                   topics: dict[str, list[int]], version: int = 3) -> dict[tuple[str, int], Any]:
    m = req("add_partitions_to_txn", version)
    topic_entries = tuple(m.AddPartitionsToTxnTopic(name=t, partitions=tuple(ps))
                          for t, ps in topics.items())
    response = one(rb, m.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch, v3_and_below_topics=topic_entries))
    return {(t.name, p.partition_index): p.partition_error_code
            for t in response.results_by_topic_v3_and_below for p in t.results_by_partition}


def end_txn(rb: RunningBroker, txn_id: str, pid: int, epoch: int, commit: bool,
            version: int = 3) -> Any:
    m = req("end_txn", version)
    return one(rb, m.EndTxnRequest(transactional_id=txn_id, producer_id=pid,
                                   producer_epoch=epoch, committed=commit)).error_code


def begin(rb: RunningBroker) -> tuple[str, int, int]:
    """A new transactional id and its producer id and epoch (InitProducerId answered)."""
    txn_id = new_id()
    response = init(rb, txn_id)
    assert response.error_code == 0, response
    return txn_id, int(response.producer_id), int(response.producer_epoch)
