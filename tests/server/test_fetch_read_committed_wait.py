"""A read_committed long poll waits on the last stable offset, not the high watermark
(issue 46, item 4; Kafka's DelayedFetch reads to the LSO under FetchTxnCommitted).

While a real transactional producer (confluent-kafka) keeps writing into a transaction it
leaves open, every append moves the high watermark but not the LSO: a read_committed Fetch
(max_wait 500 ms, min_bytes 1) must sleep its max_wait out rather than answer empty at each
append (a consumer spinning beside an open transaction). Its commit must still wake it."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Hashable, Iterator

import confluent_kafka as ck
import pytest

from odradek.client.routing import ClusterAdmin
from odradek.server.purgatory import DelayedStableBytes
from odradek.storage import TopicPartition
from odradek.testing import RunningBroker, running_broker
from tests._deadlines import expired

WINDOW_S = 2.0
MAX_WAIT_MS = 500


def _max_answers(window: float) -> float:
    """Empty answers a long poll that sleeps its max_wait out may give in ``window``
    seconds, 4 to spare (2 s: 8); a fetch woken by every append answers ~100 in 2 s."""
    return window / (MAX_WAIT_MS / 1000) + 4


@pytest.fixture(scope="module")
def rb() -> Iterator[RunningBroker]:
    with running_broker() as broker:
        yield broker


def test_a_read_committed_long_poll_waits_for_the_lso(rb: RunningBroker) -> None:
    topic = f"rc-wait-{uuid.uuid4().hex[:6]}"
    rb.call(rb.broker.metadata.create_topic, topic, 1, 1, {})
    producer = ck.Producer({"bootstrap.servers": rb.bootstrap, "linger.ms": 0,
                            "transactional.id": f"rc-wait-{uuid.uuid4().hex[:6]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"open-0", partition=0)
    producer.flush(30)
    stop = threading.Event()
    written = [1]

    def keep_writing() -> None:  # appends into the open transaction every 20 ms
        while not stop.wait(0.02):
            producer.produce(topic, b"open-%d" % written[0], partition=0)
            producer.flush(30)
            written[0] += 1

    async def scenario() -> tuple[int, int, float, float, int]:
        admin = await ClusterAdmin.connect(rb.bootstrap, client_id="rc-wait")
        try:
            answers = 0
            began = time.monotonic()
            while True:
                out = await admin.fetch_partitions(topic, {0: 0}, max_wait_ms=MAX_WAIT_MS,
                                                   isolation_level=1)
                assert out[0].error_code == 0 and not out[0].records
                answers += 1
                # The window lasts until the appends far outnumber the answers a poll
                # sleeping its max_wait out may give (two a second), however slowly a
                # loaded machine appends: a fixed 2 s window saw too few appends to tell.
                window = time.monotonic() - began
                if window >= WINDOW_S and written[0] > 2 * _max_answers(window):
                    break
                assert not expired(began, 4 * WINDOW_S), (
                    f"only {written[0]} appends in {window:.1f} s")
            appended = written[0]
            stop.set()
            await asyncio.to_thread(writer.join)
            # the commit wakes a parked read_committed fetch
            started = time.monotonic()
            fetch = asyncio.ensure_future(admin.fetch_partitions(
                topic, {0: 0}, max_wait_ms=20_000, isolation_level=1))
            await asyncio.to_thread(producer.commit_transaction, 30)
            out = await fetch
            return (answers, appended, window, time.monotonic() - started,
                    len(out[0].records))
        finally:
            await admin.close()

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        answers, appended, window, woken_after, size = asyncio.run(scenario())
    finally:
        stop.set()
        writer.join()
    assert appended > 2 * _max_answers(window), f"only {appended} appends in the window"
    assert answers <= _max_answers(window), (
        f"{answers} empty answers to a read_committed long poll in {window:.1f} s "
        f"beside {appended} appends")
    assert size > 0 and woken_after < 15, (size, woken_after)


def test_delayed_stable_bytes_counts_bytes_once_the_lso_moves() -> None:
    """The purgatory operation alone: appends under an unmoved LSO are held back, the
    LSO's move credits them (and completes the fetch once they reach min_bytes)."""
    lso: dict[Hashable, int] = {"p": 10, "q": 0}
    op = DelayedStableBytes(["p", "q"], threshold=100, accumulated=0,
                            last_stable_offset=lso.__getitem__)
    for _ in range(5):
        op.try_complete(40, "p")  # appends into an open transaction: the HW moves
    assert not op.satisfied() and not op.done.is_set()
    lso["p"] = 20  # its commit
    op.try_complete(1, "p")
    assert op.satisfied() and op.done.is_set()
    other = DelayedStableBytes(["q"], threshold=100, accumulated=0,
                               last_stable_offset=lso.__getitem__)
    lso["q"] = 5
    other.try_complete(30, "q")  # a non-transactional append moves both
    assert not other.satisfied()
    lso["q"] = 9
    other.try_complete(70, "q")
    assert other.done.is_set()
    # bytes already above the LSO when it parked (written before the fetch came) count at
    # the LSO's move, though the event itself (the commit marker) brings only a few
    early = DelayedStableBytes(["p"], threshold=100, accumulated=0,
                               last_stable_offset=lso.__getitem__,
                               unstable_bytes=lambda _key: 150)
    early.try_complete(10, "p")
    assert not early.satisfied()
    lso["p"] = 30
    early.try_complete(1, "p")
    assert early.done.is_set()


def test_a_commit_wakes_a_read_committed_fetch_for_the_bytes_it_made_stable(
    rb: RunningBroker,
) -> None:
    """A transaction's data written before the fetch parked counts once its commit moves
    the LSO: Kafka's DelayedFetch measures the bytes below the LSO, so a consumer with a
    large fetch.min.bytes gets a committed transaction at once, not after its max wait
    (the commit marker alone is far below fetch.min.bytes)."""
    topic = f"rc-min-{uuid.uuid4().hex[:6]}"
    rb.call(rb.broker.metadata.create_topic, topic, 1, 1, {})
    producer = ck.Producer({"bootstrap.servers": rb.bootstrap, "linger.ms": 5,
                            "transactional.id": f"rc-min-{uuid.uuid4().hex[:6]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(100):
        producer.produce(topic, b"v" * 1000, b"k%d" % i, partition=0)
    producer.flush(30)  # 100 KB in the open transaction, before any fetch
    consumer = ck.Consumer({
        "bootstrap.servers": rb.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
        "isolation.level": "read_committed", "enable.auto.commit": False,
        "fetch.min.bytes": 50_000, "fetch.wait.max.ms": 20_000,
    })
    consumer.assign([ck.TopicPartition(topic, 0, 0)])
    tp = TopicPartition(topic, 0)
    received: list[bytes] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set() and len(received) < 100:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                received.append(message.value() or b"")

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        started = time.monotonic()
        while rb.call(rb.broker.fetch_purgatory.watching, tp) == 0:  # the fetch parked
            assert not expired(started, 15), "the read_committed fetch never parked"
            stop.wait(0.01)
        committed = time.monotonic()
        producer.commit_transaction(30)
        poller.join(15)
        woken_after = time.monotonic() - committed
    finally:
        stop.set()
        poller.join()
        consumer.close()
    assert len(received) == 100 and woken_after < 10, (len(received), woken_after)
