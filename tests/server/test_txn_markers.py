"""Transactions on the partition side over a real socket: transactional produce, the last
stable offset, WriteTxnMarkers (v0 and v1) with its fencing, read_committed Fetch with
aborted transactions, ListOffsets by isolation level, and the state after a restart. The
fencing and error cases run twice: as WriteTxnMarkers requests, and in-process as the
broker's own coordinator writes markers to partitions it leads (server/txn_markers.py).

The transactions are written without a transaction coordinator (the test plays its part
with WriteTxnMarkers), so the brokers run with
``transaction.partition.verification.enable=false`` (KIP-890's verification is tested in
test_txn_verification.py)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

from odradek.coordinator.transaction_coordinator import TxnMarker
from odradek.protocol.errors import ErrorCode
from odradek.records.batch import iter_batches
from odradek.records.builder import BatchBuilder
from odradek.records.control import read_end_txn_marker
from odradek.server.metrics import snapshot
from odradek.storage import files
from odradek.storage.txn_index import TxnIndex
from odradek.testing import RunningBroker, running_broker
from tests.protocol.wire import raw_header
from tests.server._raw_client import TXN_ID, TxnClient, new_topic, txn_batch

NO_VERIFICATION = {"transaction.partition.verification.enable": "false"}


@pytest.fixture(scope="module")
def broker() -> Iterator[RunningBroker]:
    with running_broker(NO_VERIFICATION) as running:
        yield running


@pytest.fixture
def topic(broker: RunningBroker) -> str:
    return new_topic(broker, "txn")


@pytest.fixture
def client(broker: RunningBroker) -> Iterator[TxnClient]:
    with closing(TxnClient(broker.port)) as c:
        yield c


#: (topic, producer id, producer epoch, commit, coordinator epoch, partitions) -> the error
#: code of the first partition
WriteMarkers = Callable[..., int]


def in_process_markers(broker: RunningBroker, topic: str, pid: int, epoch: int, commit: bool,
                       coordinator_epoch: int = 0, partitions: tuple[int, ...] = (0,)) -> int:
    """A marker as the broker's own transaction coordinator writes it to partitions this
    broker leads: through its marker sender, without a request."""
    broker_id = broker.broker.broker_id
    send = broker.broker.transaction_coordinator.send_markers
    assert send is not None
    marker = TxnMarker(pid, epoch, commit, coordinator_epoch,
                       tuple((topic, p) for p in partitions))
    answer = asyncio.run_coroutine_threadsafe(send(broker_id, marker), broker.loop).result(30)
    assert set(answer) == set(marker.partitions)
    return int(answer[(topic, partitions[0])].value)


@pytest.fixture(params=["request", "in-process"])
def markers(request: pytest.FixtureRequest, broker: RunningBroker,
            client: TxnClient) -> WriteMarkers:
    if request.param == "request":
        return client.markers
    return lambda *args, **kwargs: in_process_markers(broker, *args, **kwargs)


def offsets_of(records: bytes | None) -> list[int]:
    return [o for h in iter_batches(records or b"") for o in range(h.base_offset,
                                                                    h.last_offset + 1)]


def test_open_transaction_holds_the_last_stable_offset(
    broker: RunningBroker, client: TxnClient, topic: str
) -> None:
    assert client.produce(topic, txn_batch(-1, -1, -1)).error_code == ErrorCode.none  # offset 0
    pid, epoch = client.init_producer_id()
    response = client.produce(topic, txn_batch(pid, epoch, 0, 3), transactional_id=TXN_ID)
    assert response.error_code == ErrorCode.none and response.base_offset == 1
    committed = client.fetch(topic)
    assert int(committed.high_watermark) == 4
    assert int(committed.last_stable_offset) == 1
    assert offsets_of(committed.records) == [0]
    assert committed.aborted_transactions == ()
    uncommitted = client.fetch(topic, read_committed=False)
    assert offsets_of(uncommitted.records) == [0, 1, 2, 3]
    assert int(uncommitted.last_stable_offset) == 1
    assert client.latest(topic, read_committed=True) == 1
    assert client.latest(topic, read_committed=False) == 4
    lags = broker.call(snapshot, broker.broker).stable_lag
    assert (topic, 0, 3) in lags  # LastStableOffsetLag

    assert client.markers(topic, pid, epoch, commit=True) == ErrorCode.none.value
    after = client.fetch(topic)
    assert int(after.last_stable_offset) == int(after.high_watermark) == 5
    assert offsets_of(after.records) == [0, 1, 2, 3, 4]
    assert client.latest(topic, read_committed=True) == 5


def test_abort_is_indexed_and_named_to_read_committed_fetchers(
    broker: RunningBroker, client: TxnClient, topic: str
) -> None:
    pid, epoch = client.init_producer_id()
    client.produce(topic, txn_batch(pid, epoch, 0, 2, tag="aborted"), transactional_id=TXN_ID)
    assert client.markers(topic, pid, epoch, commit=False, coordinator_epoch=3) == 0
    client.produce(topic, txn_batch(pid, epoch, 2, 1, tag="kept"), transactional_id=TXN_ID)
    assert client.markers(topic, pid, epoch, commit=True, coordinator_epoch=3) == 0
    fetched = client.fetch(topic)
    assert [(int(t.producer_id), int(t.first_offset)) for t in
            fetched.aborted_transactions] == [(pid, 0)]
    assert offsets_of(fetched.records) == [0, 1, 2, 3, 4]
    uncommitted = client.fetch(topic, read_committed=False)
    assert uncommitted.aborted_transactions is None
    plog = broker.broker.get_log(topic, 0)
    assert plog is not None
    index = TxnIndex(files.txn_index_file(plog.dir, 0))
    [entry] = index.entries
    assert (entry.producer_id, entry.first_offset, entry.last_offset,
            entry.last_stable_offset) == (pid, 0, 2, 3)
    data = plog.read(0, 1 << 20).read()
    markers = [h for h in iter_batches(data) if h.is_control]
    assert [h.base_offset for h in markers] == [2, 4]
    assert all(h.is_transactional and h.producer_id == pid for h in markers)
    first = read_end_txn_marker(data[markers[0].position: markers[0].position + markers[0].size])
    assert first is not None and not first.committed and first.coordinator_epoch == 3


def test_markers_are_fenced(markers: WriteMarkers, client: TxnClient, topic: str) -> None:
    pid, _ = client.init_producer_id()
    client.produce(topic, txn_batch(pid, 2, 0), transactional_id=TXN_ID)
    assert markers(topic, pid, 1, commit=True, coordinator_epoch=5) == (
        ErrorCode.invalid_producer_epoch.value)
    assert markers(topic, pid, 2, commit=True, coordinator_epoch=5) == 0
    client.produce(topic, txn_batch(pid, 2, 1), transactional_id=TXN_ID)
    assert markers(topic, pid, 2, commit=True, coordinator_epoch=4) == (
        ErrorCode.transaction_coordinator_fenced.value)
    assert client.fetch(topic).last_stable_offset == 2  # still open from offset 2
    assert markers(topic, pid, 2, commit=False, coordinator_epoch=6) == 0
    assert client.fetch(topic).last_stable_offset == 4


def test_unknown_partition(markers: WriteMarkers, topic: str) -> None:
    assert markers(topic, 1, 0, commit=True, partitions=(7,)) == (
        ErrorCode.unknown_topic_or_partition.value)
    assert markers("no-such-topic", 1, 0, commit=True) == (
        ErrorCode.unknown_topic_or_partition.value)


def test_produce_rules(client: TxnClient, topic: str) -> None:
    pid, epoch = client.init_producer_id()
    client.produce(topic, txn_batch(pid, epoch, 0), transactional_id=TXN_ID)
    response = client.produce(topic, txn_batch(pid, epoch, 1, transactional=False))
    assert response.error_code == ErrorCode.invalid_txn_state
    builder = BatchBuilder(producer_id=pid, producer_epoch=epoch, is_transactional=True,
                           is_control=True)
    builder.append(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 0), 0)
    response = client.produce(topic, builder.build(), transactional_id=TXN_ID)
    assert response.error_code == ErrorCode.invalid_record


def test_version_0(client: TxnClient, topic: str) -> None:
    pid, epoch = client.init_producer_id()
    client.produce(topic, txn_batch(pid, epoch, 0), transactional_id=TXN_ID)
    name = topic.encode()
    body = (struct.pack(">iqh?", 1, pid, epoch, True) + struct.pack(">ih", 1, len(name)) + name
            + struct.pack(">iii", 1, 0, 0))
    payload = raw_header(27, 0, 99, "test", flexible=False) + body
    client.sock.sendall(struct.pack(">i", len(payload)) + payload)
    (size,) = struct.unpack(">i", client._exact(4))
    answer = client._exact(size)
    expected = (struct.pack(">iiqi", 99, 1, pid, 1) + struct.pack(">h", len(name)) + name
                + struct.pack(">iih", 1, 0, 0))
    assert answer == expected
    assert client.fetch(topic).last_stable_offset == 2


def test_open_transaction_survives_restart(tmp_path: Path) -> None:
    with running_broker(NO_VERIFICATION, data_dir=tmp_path) as running:
        running.call(running.broker.metadata.create_topic, "t", 1, 1)
        c = TxnClient(running.port)
        c.produce("t", txn_batch(-1, -1, -1))
        pid, epoch = c.init_producer_id()
        c.produce("t", txn_batch(pid, epoch, 0, 2), transactional_id=TXN_ID)
        c.close()
    with running_broker(NO_VERIFICATION, data_dir=tmp_path) as running:
        c = TxnClient(running.port)
        assert c.fetch("t").last_stable_offset == 1
        assert c.markers("t", pid, epoch, commit=False) == 0
        fetched = c.fetch("t")
        assert fetched.last_stable_offset == 4
        assert [(int(t.producer_id), int(t.first_offset))
                for t in fetched.aborted_transactions] == [(pid, 1)]
        c.close()
