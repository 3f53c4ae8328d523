"""Idempotent produce over a real socket: InitProducerId, duplicate batches, sequence gaps
and epoch fencing, with batches built by BatchBuilder and requests encoded with kio."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from kio.schema.init_producer_id.v0.request import InitProducerIdRequest as InitV0
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest as InitV4

from odradek.protocol.errors import ErrorCode
from odradek.records.batch import iter_batches
from odradek.testing import RunningBroker, running_broker
from tests.server._raw_client import TXN_TIMEOUT, Client, batch, new_topic


@pytest.fixture(scope="module")
def broker() -> Iterator[RunningBroker]:
    with running_broker() as running:
        yield running


@pytest.fixture
def topic(broker: RunningBroker) -> str:
    return new_topic(broker, "idem")


@pytest.fixture
def client(broker: RunningBroker) -> Iterator[Client]:
    with closing(Client(broker.port)) as c:
        yield c


def log_batches(broker: RunningBroker, topic: str) -> list[tuple[int, int, int]]:
    plog = broker.broker.get_log(topic, 0)
    assert plog is not None
    data = plog.read(0, 1 << 24).read()
    return [(h.base_offset, h.producer_id, h.base_sequence) for h in iter_batches(data)]


def test_producer_ids_are_unique_and_epoch_zero(client: Client) -> None:
    ids = [client.init_producer_id() for _ in range(5)]
    assert all(epoch == 0 for _, epoch in ids)
    assert len({pid for pid, _ in ids}) == 5
    response = client.call(InitV0(transactional_id=None,
                                  transaction_timeout=TXN_TIMEOUT))
    assert response.error_code == ErrorCode.none and response.producer_id >= 0


def test_existing_id_gets_a_new_id(client: Client) -> None:
    pid, epoch = client.init_producer_id()
    response = client.call(InitV4(transactional_id=None,
                                  transaction_timeout=TXN_TIMEOUT,
                                  producer_id=pid, producer_epoch=epoch))  # type: ignore[arg-type]
    assert response.error_code == ErrorCode.none
    assert (int(response.producer_id), int(response.producer_epoch)) != (pid, epoch)


def test_a_transactional_id_goes_to_the_transaction_coordinator(client: Client) -> None:
    """(The transaction coordinator's own tests are tests/server/test_transactions.py.)"""
    response = client.call(InitV4(transactional_id="tx",  # type: ignore[arg-type]
                                  transaction_timeout=TXN_TIMEOUT))
    assert response.error_code == ErrorCode.none
    assert response.producer_id >= 0 and response.producer_epoch == 0
    empty = client.call(InitV4(transactional_id="",  # type: ignore[arg-type]
                               transaction_timeout=TXN_TIMEOUT))
    assert empty.error_code == ErrorCode.invalid_request


def test_duplicate_batch_answers_same_offset(broker: RunningBroker, client: Client,
                                             topic: str) -> None:
    pid, epoch = client.init_producer_id()
    first = client.produce(topic, batch(pid, epoch, 0, 3))
    assert first.error_code == ErrorCode.none and first.base_offset == 0
    second = client.produce(topic, batch(pid, epoch, 3, 2))
    assert second.base_offset == 3
    retry = client.produce(topic, batch(pid, epoch, 0, 3))
    assert retry.error_code == ErrorCode.none and retry.base_offset == 0
    retry = client.produce(topic, batch(pid, epoch, 3, 2))
    assert retry.error_code == ErrorCode.none and retry.base_offset == 3
    assert log_batches(broker, topic) == [(0, pid, 0), (3, pid, 3)]


def test_out_of_order_sequence(broker: RunningBroker, client: Client, topic: str) -> None:
    pid, epoch = client.init_producer_id()
    assert client.produce(topic, batch(pid, epoch, 0)).error_code == ErrorCode.none
    response = client.produce(topic, batch(pid, epoch, 5))
    assert response.error_code == ErrorCode.out_of_order_sequence_number
    assert response.error_message
    assert log_batches(broker, topic) == [(0, pid, 0)]


def test_old_epoch_is_fenced(broker: RunningBroker, client: Client, topic: str) -> None:
    pid, _ = client.init_producer_id()
    assert client.produce(topic, batch(pid, 1, 0)).error_code == ErrorCode.none
    assert client.produce(topic, batch(pid, 2, 0)).error_code == ErrorCode.none
    response = client.produce(topic, batch(pid, 1, 1))
    assert response.error_code == ErrorCode.invalid_producer_epoch
    assert len(log_batches(broker, topic)) == 2


def test_producer_ids_survive_restart(tmp_path: Path) -> None:
    with running_broker(data_dir=tmp_path) as running:
        c = Client(running.port)
        before = {c.init_producer_id()[0] for _ in range(3)}
        c.close()
    with running_broker(data_dir=tmp_path) as running:
        c = Client(running.port)
        after = {c.init_producer_id()[0] for _ in range(3)}
        c.close()
    assert min(after) > max(before)


def test_duplicate_detected_after_restart(tmp_path: Path) -> None:
    with running_broker(data_dir=tmp_path) as running:
        running.call(running.broker.metadata.create_topic, "t", 1, 1)
        c = Client(running.port)
        pid, epoch = c.init_producer_id()
        for seq in range(3):
            assert c.produce("t", batch(pid, epoch, seq)).base_offset == seq
        c.close()
    with running_broker(data_dir=tmp_path) as running:
        c = Client(running.port)
        assert c.produce("t", batch(pid, epoch, 2)).base_offset == 2
        assert c.produce("t", batch(pid, epoch, 3)).base_offset == 3
        response = c.produce("t", batch(pid, epoch, 9))
        assert response.error_code == ErrorCode.out_of_order_sequence_number
        c.close()
        assert len(log_batches(running, "t")) == 4
