"""``odradek transactions list|describe`` (kafka-transactions.sh) against a broker with a
real transactional producer (confluent-kafka) holding a transaction open."""

from __future__ import annotations

import argparse
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import confluent_kafka as ck
import pytest
from tests._deadlines import expired
from tests._zygote import run as run_odradek
from tests.interop._broker import odradek_executable
from tests.server._raw_client import TxnClient, txn_batch

from odradek.cli import transactions
from odradek.testing import RunningBroker, running_broker


@pytest.fixture(scope="module")
def rb() -> Iterator[RunningBroker]:
    # The hanging transaction below is written as raw transactional batches, with no
    # coordinator: what a leader verifying with the coordinator (KIP-890, the default)
    # refuses, and what a cluster without that check (before Kafka 3.6) could be left with.
    with running_broker({"transaction.partition.verification.enable": "false"}) as broker:
        yield broker


def _odradek(rb: RunningBroker, *args: str) -> subprocess.CompletedProcess[str]:
    return run_odradek([str(odradek_executable()), "transactions", *args,
                           "--bootstrap-server", rb.bootstrap], timeout=120)


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


def _rows(stdout: str) -> list[dict[str, str]]:
    lines = [line.split() for line in stdout.splitlines() if line.strip()]
    return [dict(zip(lines[0], row, strict=True)) for row in lines[1:]]


def test_every_flag_of_every_verb_has_help() -> None:
    parser = argparse.ArgumentParser()
    transactions.add_parser(parser.add_subparsers())
    [txn] = [a for a in parser._subparsers._group_actions  # type: ignore[union-attr]
             if isinstance(a, argparse._SubParsersAction)]
    verbs = txn.choices["transactions"]._subparsers._group_actions[0].choices
    assert set(verbs) == {"list", "describe", "describe-producers", "abort", "find-hanging"}
    for name, verb in verbs.items():
        for action in verb._actions:
            assert action.help, f"transactions {name} {action.option_strings}: no help"


def _read_committed(rb: RunningBroker, topic: str, wanted: bytes) -> list[tuple[Any, Any]]:
    """What a read_committed consumer of partition 0 reads until it reaches ``wanted``."""
    consumer = ck.Consumer({"bootstrap.servers": rb.bootstrap, "group.id": "cli-rc",
                            "isolation.level": "read_committed",
                            "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition(topic, 0, 0)])
    seen: list[tuple[Any, Any]] = []
    started = time.monotonic()
    try:
        while not any(v == wanted for _, v in seen):
            assert not expired(started, 30), f"read_committed stuck at {seen}"
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append((message.offset(), message.value()))
    finally:
        consumer.close()
    return seen


def test_a_hanging_transaction_is_found_and_aborted(rb: RunningBroker) -> None:
    """A transaction written without the coordinator (raw transactional produce: no
    coordinator will ever end it) holds read_committed consumers back; find-hanging names
    it, and not a live confluent-kafka transaction; abort by its start offset lets the
    consumers past it."""
    topic, txn_id = f"hang-{uuid.uuid4().hex[:6]}", f"live-{uuid.uuid4().hex[:6]}"
    rb.call(rb.broker.metadata.create_topic, topic, 2, 1, {})
    raw = TxnClient(rb.port)
    producer = ck.Producer({"bootstrap.servers": rb.bootstrap, "transactional.id": txn_id})
    try:
        assert raw.produce(topic, txn_batch(-1, -1, -1, tag="before")).error_code == 0
        pid, epoch = raw.init_producer_id()
        assert raw.produce(topic, txn_batch(pid, epoch, 0, 3, tag="hanging"),
                           transactional_id="gone").error_code == 0  # offsets 1-3
        assert raw.latest(topic, read_committed=True) == 1
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, b"live", partition=1)
        producer.flush(30)

        described = _odradek(rb, "describe-producers", "--topic", topic, "--partition", "0")
        assert described.returncode == 0, described.stderr
        [row] = [r for r in _rows(described.stdout) if r["PRODUCER-ID"] == str(pid)]
        assert row["CURRENT-TRANSACTION-START-OFFSET"] == "1"
        assert row["PRODUCER-EPOCH"] == str(epoch) and row["LAST-SEQUENCE"] == "2"

        broker_id = str(rb.broker.broker_id)
        found = _odradek(rb, "find-hanging", "--broker-id", broker_id,
                         "--max-transaction-timeout", "0")
        assert found.returncode == 0, found.stderr
        mine = [r for r in _rows(found.stdout) if r["TOPIC"] == topic]  # not partition 1's
        assert [(r["PARTITION"], r["PRODUCER-ID"], r["START-OFFSET"]) for r in mine] == [
            ("0", str(pid), "1")]
        not_yet = _odradek(rb, "find-hanging", "--broker-id", broker_id)
        assert topic not in not_yet.stdout  # open for less than 15 minutes

        missing = _odradek(rb, "abort", "--topic", topic, "--partition", "0",
                           "--start-offset", "2")
        assert missing.returncode == 1 and "no open transaction" in missing.stderr
        aborted = _odradek(rb, "abort", "--topic", topic, "--partition", "0",
                           "--start-offset", "1")
        assert aborted.returncode == 0, aborted.stderr
        assert raw.produce(topic, txn_batch(-1, -1, -1, tag="after")).error_code == 0
        seen = _read_committed(rb, topic, b"after--1")
        assert [v for _, v in seen] == [b"before--1", b"after--1"]
        again = _odradek(rb, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip() == "no hanging transactions"
    finally:
        raw.close()
        producer.abort_transaction(30)
