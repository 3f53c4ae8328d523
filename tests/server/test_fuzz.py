"""Hostile input over many connections to a real broker: it stays healthy.

Seeded and bounded (a fixed seed list, a few thousand frames; see tests/server/fuzzing.py
for the corpus and the mutations; bench/fuzz.py is the long run). Afterwards: the broker's
loop is alive, a confluent-kafka producer and consumer round trip works, the records
produced before the fuzzing read back byte for byte, the log dir is online, descriptors
return to where they were, and no handler failed with an unexpected exception.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.static.primitive import i8, i32

from odradek.client.connection import BrokerConnection
from odradek.testing import RunningBroker, running_broker
from tests._deadlines import expired
from tests._own import server_descriptors
from tests.server.fuzzing import FuzzStats, client_frames, fuzz, sample_frames, served_versions

SEEDS = (1, 2, 3, 4, 5)
FRAMES_PER_SEED = 1000
PRECIOUS = "precious-before-fuzzing"
OVERRIDES = {
    # Mutated Metadata requests must not create topics; CreateTopics still may (counted).
    "auto.create.topics.enable": "false",
    "max.broker.partitions": "1000",
}


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes, list[Any]]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 2})
    for key, value, headers in records:
        producer.produce(topic, key=key, value=value, headers=headers, partition=0)
    assert producer.flush(30) == 0


def _consume(bootstrap: str, topic: str, count: int) -> list[tuple[bytes, bytes, list[Any]]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[bytes, bytes, list[Any]]] = []
    started = time.monotonic()
    try:
        while len(got) < count and not expired(started, 30):
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append((message.key(), message.value(), list(message.headers() or [])))
    finally:
        consumer.close()
    return got


def _records(seed: int, count: int) -> list[tuple[bytes, bytes, list[Any]]]:
    rng = random.Random(seed)
    return [
        (rng.randbytes(rng.randrange(1, 20)), rng.randbytes(rng.randrange(0, 3000)),
         [("h", rng.randbytes(rng.randrange(0, 10)))])
        for _ in range(count)
    ]


def _topics(broker: RunningBroker) -> set[str]:
    return set(broker.call(lambda: list(broker.broker.metadata.topics)))


@pytest.fixture
def broker() -> Any:
    with running_broker(overrides=OVERRIDES) as running:
        for name, partitions, configs in (("corpus-a", 3, {}),
                                          ("corpus-b", 1, {"cleanup.policy": "compact"}),
                                          ("samples", 1, {}), (PRECIOUS, 1, {})):
            running.call(running.broker.metadata.create_topic, name, partitions, 1, configs)
        yield running


def test_broker_stays_healthy_under_fuzzing(
    broker: RunningBroker, caplog: pytest.LogCaptureFixture
) -> None:
    precious = _records(7, 200)
    _produce(broker.bootstrap, PRECIOUS, precious)
    corpus = client_frames() + sample_frames(served_versions(broker.broker.registry))
    topics_before = _topics(broker)
    fds_before = len(server_descriptors(broker.port, broker.data_dir))

    stats = FuzzStats()
    with caplog.at_level(logging.INFO):
        for seed in SEEDS:
            stats.merge(asyncio.run(fuzz(broker.port, corpus, seed, FRAMES_PER_SEED)))

        # The broker's loop is alive and answers.
        assert broker.call(lambda: broker.loop.is_running())
        # The records produced before the fuzzing read back byte for byte.
        assert _consume(broker.bootstrap, PRECIOUS, len(precious)) == precious
        # A new round trip works (auto-creation is off: the topic is made first).
        broker.call(broker.broker.metadata.create_topic, "after-fuzzing", 1, 1, {})
        fresh = _records(8, 50)
        _produce(broker.bootstrap, "after-fuzzing", fresh)
        assert _consume(broker.bootstrap, "after-fuzzing", len(fresh)) == fresh

    assert stats.frames >= len(SEEDS) * FRAMES_PER_SEED
    assert stats.closed_by_broker > 0 and stats.answered > 0
    log_manager = broker.broker.log_manager
    assert broker.call(lambda: log_manager.online_dirs) == log_manager.log_dirs
    # Topics: only CreateTopics frames may have made some, never Metadata.
    created = _topics(broker) - topics_before - {"after-fuzzing"}
    assert len(created) <= stats.api_keys[19] * 2, (created, stats.api_keys[19])
    # Every fuzzing connection is gone and its descriptor with it (the broker may hold a
    # few more files for the topics CreateTopics made: three per partition at most).
    started = time.monotonic()
    while broker.call(lambda: len(broker.broker.servers[0].connections)) and (
        not expired(started, 10)
    ):
        time.sleep(0.05)
    partitions = broker.call(lambda: sum(
        len(t.partitions) for name, t in broker.broker.metadata.topics.items()
        if name in created))
    assert len(server_descriptors(broker.port, broker.data_dir)) <= fds_before + 3 * partitions + 16
    # Handlers still parked are legitimate long waits the fuzzer asked for (a Fetch with a
    # wild max_wait, a JoinGroup waiting out its rebalance timeout): end them, so that the
    # broker's shutdown does not wait the shutdown timeout for them.
    server = broker.broker.servers[0]
    broker.call(lambda: [task.cancel() for task in server.handler_tasks])
    # No handler failed with an unexpected exception. Only the broker's own records count:
    # the worker's process may hold another test's client still retrying a broker that
    # test stopped (kafka-python logs its refused connections as errors), which says
    # nothing of this broker.
    own = [r for r in caplog.records if r.name.split(".")[0] == "odradek"]
    tracebacks = [r for r in own if r.exc_info is not None]
    assert not tracebacks, "\n".join(
        f"{r.name}: {r.getMessage()}\n{logging.Formatter().formatException(r.exc_info)}"
        for r in tracebacks[:5] if r.exc_info
    )
    errors = [r.getMessage() for r in own if r.levelno >= logging.ERROR]
    assert not errors, errors[:10]


# -- what the fuzzer found in handlers ----------------------------------------------------


async def _send(broker: RunningBroker, request: Any, timeout: float = 5.0) -> Any:
    conn = await BrokerConnection.open(broker.bootstrap)
    try:
        return await asyncio.wait_for(conn.send(request), timeout)
    finally:
        await conn.close()


def test_delete_topics_with_neither_name_nor_id_is_an_invalid_request(
    shared_broker: RunningBroker,
) -> None:
    """A null name and a zero topic id hit an assertion (UNKNOWN_SERVER_ERROR and a
    traceback); Kafka answers INVALID_REQUEST, and so for both a name and an id."""
    from kio.schema.delete_topics.v6 import request as m

    request = m.DeleteTopicsRequest(
        topics=(m.DeleteTopicState(name=None, topic_id=uuid.UUID(int=0)),),
        timeout=datetime.timedelta(seconds=5),
    )
    response = asyncio.run(_send(shared_broker, request))
    assert response.responses[0].error_code == ErrorCode.invalid_request
    assert response.responses[0].error_message == "Neither topic name nor id were specified."
    both = m.DeleteTopicsRequest(
        topics=(m.DeleteTopicState(name="x", topic_id=uuid.uuid4()),),
        timeout=datetime.timedelta(seconds=5),
    )
    response = asyncio.run(_send(shared_broker, both))
    assert response.responses[0].error_code == ErrorCode.invalid_request


def test_a_fetch_of_no_partitions_is_answered_at_once(shared_broker: RunningBroker) -> None:
    """It waited out its whole max_wait (the fuzzer sent 24 days, and shutdown then waited
    for it); Kafka's ReplicaManager.fetchMessages answers at once."""
    from kio.schema.fetch.v12 import request as m

    request = m.FetchRequest(
        replica_id=BrokerId(-1), max_wait=datetime.timedelta(seconds=4), min_bytes=i32(1),
        max_bytes=i32(1 << 20), isolation_level=i8(0), session_id=i32(0),
        session_epoch=i32(-1), topics=(), forgotten_topics_data=(), rack_id="",
    )
    response = asyncio.run(_send(shared_broker, request, timeout=1.5))
    assert response.error_code == ErrorCode.none
