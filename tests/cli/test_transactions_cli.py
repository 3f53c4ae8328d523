"""``odradek transactions list|describe`` (kafka-transactions.sh) against a broker with a
real transactional producer (confluent-kafka) holding a transaction open."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator

import confluent_kafka as ck
import pytest
from tests.interop._broker import REPO, odradek_executable

from odradek.testing import RunningBroker, running_broker


@pytest.fixture(scope="module")
def rb() -> Iterator[RunningBroker]:
    with running_broker() as broker:
        yield broker


def _odradek(rb: RunningBroker, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([str(odradek_executable()), "transactions", *args,
                           "--bootstrap-server", rb.bootstrap], capture_output=True,
                          text=True, env=env, timeout=120, check=False)


def test_list_and_describe_an_open_transaction(rb: RunningBroker) -> None:
    topic, txn_id = f"cli-{uuid.uuid4().hex[:6]}", f"cli-txn-{uuid.uuid4().hex[:6]}"
    rb.call(rb.broker.metadata.create_topic, topic, 2, 1, {})
    producer = ck.Producer({"bootstrap.servers": rb.bootstrap, "transactional.id": txn_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=1)
    producer.flush(30)
    try:
        listed = _odradek(rb, "list")
        assert listed.returncode == 0, listed.stderr
        [line] = [row.split() for row in listed.stdout.splitlines() if txn_id in row]
        assert line[1] == str(rb.broker.broker_id) and line[3] == "Ongoing"
        filtered = _odradek(rb, "list", "--state", "CompleteCommit", "--state", "Bogus")
        assert txn_id not in filtered.stdout and "unknown states: Bogus" in filtered.stdout
        described = _odradek(rb, "describe", "--transactional-id", txn_id)
        assert described.returncode == 0, described.stderr
        header, row = (line.split() for line in described.stdout.splitlines()[:2])
        fields = dict(zip(header, row, strict=True))
        assert fields["STATE"] == "Ongoing" and fields["PRODUCER-EPOCH"] == "0"
        assert fields["PARTITIONS"] == f"{topic}-1" and fields["TIMEOUT-MS"] == "60000"
        missing = _odradek(rb, "describe", "--transactional-id", "no-such-id")
        assert missing.returncode == 1
        assert "TRANSACTIONAL_ID_NOT_FOUND" in missing.stdout
    finally:
        producer.abort_transaction(30)
