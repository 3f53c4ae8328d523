"""Partition creation is bounded by what a broker can hold (the fuzzing outage).

A CreatePartitions to 8,000 partitions used to be answered OK, then the broker ran out of
open files at about 6,600 logs: the log dir went offline, every partition with it, and the
broker could not restart. Now the broker refuses creations beyond
``max.broker.partitions``, which it lowers to what its open-files limit allows, with
POLICY_VIOLATION, and keeps serving. Real broker processes under a low ``RLIMIT_NOFILE``,
driven by confluent-kafka's AdminClient.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from tests.interop._broker import BrokerProcess, start_broker

pytestmark = pytest.mark.interop

OPEN_FILES = 1000
# (1000 - 256 kept aside - 3 * 128 for old segments held open) // 3 files per log
LIMIT = 120
TIMEOUT = 30.0


def _create(admin: AdminClient, name: str, partitions: int) -> None:
    admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=TIMEOUT)[name].result(
        TIMEOUT
    )


def _grow(admin: AdminClient, name: str, count: int) -> None:
    admin.create_partitions([NewPartitions(name, count)], request_timeout=TIMEOUT)[
        name
    ].result(TIMEOUT)


def _policy_violation(excinfo: pytest.ExceptionInfo[KafkaException]) -> str:
    error = excinfo.value.args[0]
    assert error.name() == "POLICY_VIOLATION", error
    return str(error.str())


def _round_trip(bootstrap: str, topic: str, value: bytes) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    producer.produce(topic, value, partition=0)
    assert producer.flush(TIMEOUT) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen: list[bytes] = []
        while value not in seen:
            message = consumer.poll(TIMEOUT)
            assert message is not None, f"nothing read from {topic}"
            assert message.error() is None, message.error()
            seen.append(message.value())
    finally:
        consumer.close()


def test_creations_past_the_open_files_limit_are_refused_and_the_broker_stays_up(
    tmp_path: Path,
) -> None:
    broker = start_broker(tmp_path, open_files_limit=OPEN_FILES)
    try:
        bootstrap = f"127.0.0.1:{broker.port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        _create(admin, "grow", 1)
        _round_trip(bootstrap, "grow", b"before")

        # The admin call of the outage: refused as a whole, nothing created.
        with pytest.raises(KafkaException) as excinfo:
            _grow(admin, "grow", 8000)
        assert "open-files limit" in _policy_violation(excinfo)
        with pytest.raises(KafkaException) as excinfo:
            _create(admin, "too-big", 500)
        _policy_violation(excinfo)

        # In steps: accepted until the limit, then refused, never an offline log dir.
        # (__consumer_offsets took 50 of them at the first consumer.)
        _create(admin, "spare", 8)
        count = 1
        refused = False
        while not refused:
            try:
                _grow(admin, "grow", count + 10)
                count += 10
            except KafkaException as e:
                assert e.args[0].name() == "POLICY_VIOLATION", e
                refused = True
        assert LIMIT - 50 - 8 - 10 < count <= LIMIT - 50 - 8
        _round_trip(bootstrap, "grow", b"at-the-limit")
        with pytest.raises(KafkaException) as excinfo:
            _create(admin, "small", 10)  # fewer than 10 are left
        _policy_violation(excinfo)

        # Room comes back when a topic is deleted.
        admin.delete_topics(["spare"], request_timeout=TIMEOUT)["spare"].result(TIMEOUT)
        _create(admin, "small", 4)
        _round_trip(bootstrap, "small", b"after")
    finally:
        broker.stop()

    # The broker restarts on that data under the same limit and serves what it held.
    again: BrokerProcess = start_broker(
        tmp_path, data_dir=broker.data_dir, open_files_limit=OPEN_FILES
    )
    try:
        _round_trip(f"127.0.0.1:{again.port}", "grow", b"after-restart")
    finally:
        again.stop()
