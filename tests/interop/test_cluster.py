"""Acceptance: three brokers in cluster mode over a real ZooKeeper, driven by real clients.

The contract (docs/architecture.md, "Cluster mode over ZooKeeper"): brokers register in
``/brokers/ids``, one is controller (``/controller``, ``/controller_epoch``), a topic's
partitions are spread over the brokers, every client works bootstrapping from any one
broker, the controller fails over within the session timeout, a restarted broker leads its
partitions again, a live broker's id cannot be taken, group coordinators live on any
broker, and a replication factor above the live brokers is refused (replication itself:
test_replication.py).

All tests share one module-scoped cluster (:func:`tests.interop._cluster.cluster3`); a
broker a test kills or stops is restarted before the next test.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import selectors
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from odradek.client.connection import BrokerConnection, ClientError
from odradek.client.groups import GroupsClient
from tests._deadlines import expired, slowness

from ._broker import BrokerProcess, BrokerStartError, java_client, kcat, kcat_path, start_broker
from ._cluster import SESSION_TIMEOUT_MS, Cluster, cluster3, cluster3_shared, wait_for

__all__ = ["cluster3", "cluster3_shared"]  # the fixtures, used by name

pytestmark = pytest.mark.interop

PARTITIONS = 6
PER_PARTITION = 10
RECORDS = PARTITIONS * PER_PARTITION
BROKER_IDS = (1, 2, 3)
# How long a client round trip may take to read everything back: long enough for a rolling
# restart of the cluster under a loaded machine (test_replication.py runs one meanwhile);
# a round trip that works ends as soon as it has every record.
CONSUME_DEADLINE_S = 90


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def describe_cluster(bootstrap: str) -> Any:
    client = admin(bootstrap)  # held: a collected client fails its futures with _DESTROY
    return client.describe_cluster(request_timeout=15).result(20)


def metadata(bootstrap: str, topic: str | None = None) -> Any:
    return admin(bootstrap).list_topics(topic=topic, timeout=15)


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """``{partition: leader}`` as broker ``bootstrap`` sees it ({} if unknown)."""
    t = metadata(bootstrap, topic).topics.get(topic)
    if t is None or t.error is not None:
        return {}
    return {p.id: p.leader for p in t.partitions.values()}


def create_topic(cluster: Cluster, topic: str, partitions: int = PARTITIONS,
                 via: int = 1) -> dict[int, int]:
    """Create ``topic`` (replication factor 1) through broker ``via``; return its leaders
    once every broker's metadata gives every partition a leader (the same one)."""
    from confluent_kafka.admin import NewTopic

    client = admin(cluster.address(via))
    futures = client.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)],
        operation_timeout=30, request_timeout=30)
    futures[topic].result(timeout=60)

    seen: list[dict[int, int]] = []

    def agreed() -> dict[int, int] | None:
        seen[:] = [leaders(cluster.address(i), topic) for i in BROKER_IDS]
        first = seen[0]
        if (len(first) == partitions and all(v >= 0 for v in first.values())
                and all(s == first for s in seen)):
            return first
        return None

    try:
        return cluster.wait_for(agreed, 30, f"every broker agreeing on the leaders of {topic}")
    except AssertionError as exc:
        raise AssertionError(f"{{partition: leader}} seen by brokers {BROKER_IDS}: {seen}\n"
                             f"{exc}") from None


def expected_records() -> dict[int, set[tuple[bytes, bytes]]]:
    return {p: {(f"key-{i}".encode(), f"value-{i}".encode())
                for i in range(p, RECORDS, PARTITIONS)} for p in range(PARTITIONS)}


# ---------------------------------------------------------------- clients: produce / consume


def produce_confluent(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for p, records in expected_records().items():
        for key, value in records:
            producer.produce(topic, value=value, key=key, partition=p)
    assert producer.flush(30) == 0


def consume_confluent(bootstrap: str, topic: str) -> dict[int, set[tuple[bytes, bytes]]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("g"),
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got: dict[int, set[tuple[bytes, bytes]]] = {p: set() for p in range(PARTITIONS)}
    started = time.monotonic()
    try:
        while sum(map(len, got.values())) < RECORDS and not expired(started, CONSUME_DEADLINE_S):
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got[msg.partition()].add((msg.key(), msg.value()))
    finally:
        consumer.close()
    return got


def roundtrip_confluent(bootstrap: str, topic: str) -> dict[int, set[tuple[bytes, bytes]]]:
    produce_confluent(bootstrap, topic)
    return consume_confluent(bootstrap, topic)


def roundtrip_kafka_python(bootstrap: str, topic: str) -> dict[int, set[tuple[bytes, bytes]]]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import UnknownBrokerIdError

    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), linger_ms=5)
    for p, records in expected_records().items():
        for key, value in records:
            producer.send(topic, key=key, value=value, partition=p)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False)
    parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    got: dict[int, set[tuple[bytes, bytes]]] = {p: set() for p in range(PARTITIONS)}
    started = time.monotonic()
    try:
        while sum(map(len, got.values())) < RECORDS and not expired(started, CONSUME_DEADLINE_S):
            try:
                polled = consumer.poll(timeout_ms=500)
            except UnknownBrokerIdError:
                # kafka-python 3.0 picks a partition's leader for its offset reset, awaits,
                # and then looks the broker up in metadata refreshed meanwhile: a leader
                # restarting (no longer listed) escapes poll() as this error. The answers
                # were right (Metadata never names a leader it does not list); the
                # application retries, as for any error of a broker going away.
                continue
            for tp, msgs in polled.items():
                got[tp.partition].update((m.key, m.value) for m in msgs)
    finally:
        consumer.close()
    return got


async def stop_aiokafka_consumer(consumer: Any) -> None:
    """``consumer.stop()``, riding out the CancelledError aiokafka raises from it itself
    (aio-libs/aiokafka#647, still so in 0.14): its fetcher's ``close`` cancels a fetch
    request that failed (a broker restarting) and sleeps ``retry_backoff_ms`` before the
    next, then awaits it unguarded, and the rest of ``stop()`` (the other fetches, the
    client's connections) is left undone: done here. Raised again when this task is the
    one cancelled."""
    try:
        await consumer.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        # what stop() did not reach: the fetches left, the client's connections
        for left in consumer._fetcher._pending_tasks:
            left.cancel()
        await asyncio.gather(*consumer._fetcher._pending_tasks, return_exceptions=True)
        await consumer._client.close()


def roundtrip_aiokafka(bootstrap: str, topic: str) -> dict[int, set[tuple[bytes, bytes]]]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.errors import KafkaError

    async def run() -> dict[int, set[tuple[bytes, bytes]]]:
        # acks=all, as the other clients' defaults: aiokafka's own default, acks=1, lets a
        # leader handing its leadership over (a rolling restart) acknowledge records no
        # follower has yet, and they are gone once it follows (as in Kafka; see
        # test_replication's acks=1 test).
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
        await producer.start()
        try:
            async def send(key: bytes, value: bytes, p: int) -> None:
                # aiokafka raises retriable errors (a broker restarting: NodeNotReady) to
                # the application, which retries them, as its documentation says.
                started = time.monotonic()
                while True:
                    try:
                        await (await producer.send(topic, key=key, value=value, partition=p))
                        return
                    except KafkaError as exc:
                        if not exc.retriable or expired(started, CONSUME_DEADLINE_S):
                            raise
                        await asyncio.sleep(0.1)

            await asyncio.gather(*(send(key, value, p)
                                   for p, records in expected_records().items()
                                   for key, value in records))
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        got: dict[int, set[tuple[bytes, bytes]]] = {p: set() for p in range(PARTITIONS)}
        try:
            parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(parts)
            await consumer.seek_to_beginning(*parts)
            started = time.monotonic()
            while (sum(map(len, got.values())) < RECORDS
                   and not expired(started, CONSUME_DEADLINE_S)):
                batches = await consumer.getmany(timeout_ms=500)
                for tp, msgs in batches.items():
                    got[tp.partition].update((m.key or b"", m.value or b"") for m in msgs)
        finally:
            await stop_aiokafka_consumer(consumer)  # a fetch may be backing off (a roll)
        return got

    return asyncio.run(run())


def test_an_aiokafka_consumer_stopped_while_a_fetch_backs_off_stops(tmp_path: Any) -> None:
    """What :func:`stop_aiokafka_consumer` rides out: the broker goes away under a long
    poll, the fetch fails and backs off (10 s here), and the consumer is stopped then. A
    bare ``stop()`` raises CancelledError there (a whole run's rolling-restart round trip
    failed so, issue 51); the helper stops it."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    async def fetch_backing_off(bootstrap: str, stop_broker: Callable[[], Any]) -> Any:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, retry_backoff_ms=10_000,
                                    fetch_max_wait_ms=30_000)
        await consumer.start()
        consumer.assign([TopicPartition("backoff", 0)])
        await consumer.seek_to_beginning()
        await consumer.getmany(timeout_ms=200)  # a long poll is in flight now
        await asyncio.to_thread(stop_broker)
        started = time.monotonic()
        while not any(t.get_coro().__name__ == "_proc_fetch_request"  # a fetch's task,
                      and getattr(t.get_coro().cr_await, "__name__", "") == "sleep"  # backing off
                      for t in consumer._fetcher._pending_tasks if not t.done()):
            assert not expired(started, 30), "no fetch backing off after the broker left"
            await asyncio.sleep(0.05)
        return consumer

    for stop in ("bare", "helper"):
        with start_broker(tmp_path / stop) as broker:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept till answered
            admin.create_topics([NewTopic("backoff", 1, 1)])["backoff"].result(30)

            async def main(how: str = stop, gone: BrokerProcess = broker) -> None:
                consumer = await fetch_backing_off(gone.bootstrap, gone.stop)
                if how == "bare":
                    with pytest.raises(asyncio.CancelledError):
                        await consumer.stop()
                else:
                    await stop_aiokafka_consumer(consumer)

            asyncio.run(main())


def roundtrip_kcat(bootstrap: str, topic: str) -> dict[int, set[tuple[bytes, bytes]]]:
    kcat_exe = kcat_path()
    if kcat_exe is None:
        pytest.fail("kcat is not installed: run `make test` (scripts/install-java-client)")
    for p, records in expected_records().items():
        lines = "".join(f"{k.decode()}:{v.decode()}\n" for k, v in sorted(records))
        kcat("-b", bootstrap, "-P", "-t", topic, "-p", str(p), "-K", ":", input=lines)
    # Read until every record is in, counting distinct records: not to the first end of
    # partition (-e), since while leadership moves a new leader's high watermark can lag
    # until its followers fetch (as in Kafka) and librdkafka reports the end of a
    # partition at that high watermark; nor a count of messages (-c), since a producer
    # without idempotence retrying a batch a leader handing over had already replicated
    # writes it twice (at least once, as Kafka), and the duplicates would fill the count.
    proc = subprocess.Popen(
        [kcat_exe, "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-J", "-q", "-u"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    got: dict[int, set[tuple[bytes, bytes]]] = {p: set() for p in range(PARTITIONS)}
    started = time.monotonic()
    pending = b""
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            while (sum(map(len, got.values())) < RECORDS
                   and not expired(started, CONSUME_DEADLINE_S)):
                if not selector.select(timeout=0.5):
                    continue
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break  # kcat exited
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    if line.strip():
                        msg = json.loads(line)
                        got[msg["partition"]].add((msg["key"].encode(),
                                                   msg["payload"].encode()))
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
    return got


def roundtrip_java(bootstrap: str, topic: str) -> dict[int, set[tuple[bytes, bytes]]]:
    """The Java client produces RECORDS keyed records (its default partitioner spreads them)
    and counts them back; the records themselves are then read with confluent-kafka."""
    java = java_client()
    res = java(bootstrap, "produce", topic, RECORDS)
    assert res.ok, res.describe()
    res = java(bootstrap, "consume-count", topic, RECORDS)
    assert res.ok, res.describe()
    assert res.summary["count"] == RECORDS, res.describe()
    return consume_confluent(bootstrap, topic)


ROUNDTRIPS: dict[str, Callable[[str, str], dict[int, set[tuple[bytes, bytes]]]]] = {
    "confluent-kafka": roundtrip_confluent,
    "kafka-python": roundtrip_kafka_python,
    "aiokafka": roundtrip_aiokafka,
    "kcat": roundtrip_kcat,
    "java": roundtrip_java,
}


# ---------------------------------------------------------------- the tests


def test_three_brokers_form_a_cluster(cluster3: Cluster) -> None:
    expected = {i: cluster3.address(i) for i in BROKER_IDS}
    assert cluster3.live_ids() == set(BROKER_IDS)
    for i in BROKER_IDS:
        cluster3.wait_for(
            lambda i=i: {b.id: f"{b.host}:{b.port}"  # type: ignore[misc]
                         for b in metadata(cluster3.address(i)).brokers.values()} == expected,
            15, f"broker {i}'s Metadata listing all three brokers")
    controller_id, epoch = cluster3.wait_controller()
    assert controller_id in BROKER_IDS and epoch >= 1
    for i in BROKER_IDS:
        described = describe_cluster(cluster3.address(i))
        assert described.controller is not None, f"broker {i}: DescribeCluster has no controller"
        assert described.controller.id == controller_id, (i, described.controller)
        assert {n.id for n in described.nodes} == set(BROKER_IDS)
        assert metadata(cluster3.address(i)).controller_id == controller_id


def test_six_partitions_spread_over_three_brokers(cluster3: Cluster) -> None:
    topic = unique("spread")
    by_partition = create_topic(cluster3, topic)
    assert Counter(by_partition.values()) == {1: 2, 2: 2, 3: 2}, by_partition
    md = metadata(cluster3.address(2), topic).topics[topic]
    for p in md.partitions.values():
        assert p.replicas == [p.leader] and p.isrs == [p.leader], p
    # ZooKeeper holds the same: the assignment and each partition's state
    raw = cluster3.zk_get(f"/brokers/topics/{topic}")
    assert raw is not None, f"/brokers/topics/{topic} missing"
    assignment = json.loads(raw)["partitions"]
    assert {int(p): r for p, r in assignment.items()} == {p: [b] for p, b in by_partition.items()}
    for p, leader in by_partition.items():
        state = cluster3.zk_get(f"/brokers/topics/{topic}/partitions/{p}/state")
        assert state is not None and json.loads(state)["leader"] == leader


@pytest.mark.parametrize("client", list(ROUNDTRIPS))
def test_every_client_produces_and_consumes_from_one_bootstrap_broker(
    cluster3: Cluster, client: str
) -> None:
    via = 1 + list(ROUNDTRIPS).index(client) % 3  # each broker is some client's bootstrap
    topic = unique(f"rt-{client}")
    create_topic(cluster3, topic, via=via)
    got = ROUNDTRIPS[client](cluster3.address(via), topic)
    everything = set().union(*got.values())
    if client == "java":  # its own partitioner chose the partitions
        assert everything == set().union(*expected_records().values()), got
        assert len([p for p, r in got.items() if r]) > 1, "every record in one partition"
    else:
        assert got == expected_records(), {p: len(r) for p, r in got.items()}


def test_killing_the_controller_elects_another_with_a_higher_epoch(cluster3: Cluster) -> None:
    old_id, old_epoch = cluster3.wait_controller()
    killed_at = time.monotonic()
    cluster3.kill9(old_id)
    session_s = SESSION_TIMEOUT_MS / 1000

    def new_controller() -> tuple[int, int] | None:
        cid, epoch = cluster3.controller()
        if cid is not None and cid != old_id and epoch is not None and epoch > old_epoch:
            return cid, epoch
        return None

    new_id, new_epoch = cluster3.wait_for(new_controller, 2 * session_s + 10,
                                          f"a controller other than {old_id}")
    elapsed = time.monotonic() - killed_at
    # the session expires within its timeout; the election is then one ZooKeeper multi.
    # The 3 s beside the session (ZooKeeper's expiry, the watch, the election, this poll)
    # grow with the machine's slowness, at most to 12 s: 18 s in all, still short of a
    # session the brokers did not ask for (Kafka's default zookeeper.session.timeout.ms,
    # 18 s, would not pass).
    margin = 3 * slowness()
    assert elapsed < session_s + margin, (
        f"failover took {elapsed:.1f} s (session {session_s} s, margin {margin:.1f} s)")
    assert new_id in set(BROKER_IDS) - {old_id}
    survivor = cluster3.address(new_id)
    cluster3.wait_for(
        lambda: describe_cluster(survivor).controller.id == new_id, 15,
        f"DescribeCluster naming {new_id}")
    # the killed broker comes back as an ordinary broker; the controller stays
    cluster3.start(old_id)
    assert cluster3.controller() == (new_id, new_epoch)


def test_a_stale_controller_resumed_after_a_takeover_changes_nothing(cluster3: Cluster) -> None:
    """Seed 000's zombie controller: SIGSTOP the controller until another takes over, lose
    a broker meanwhile (decisions to take), SIGCONT the old one. Every write a controller
    makes is fenced by the version of /controller_epoch, so nothing the old one could still
    try lands: every state and notification written since the takeover carries the new
    epoch, the old broker resigns and rejoins as an ordinary broker."""
    topic = unique("stale")
    by_partition = create_topic(cluster3, topic)
    old_id, old_epoch = cluster3.wait_controller()
    old_broker = cluster3.brokers[old_id]
    session_s = SESSION_TIMEOUT_MS / 1000
    cluster3.sigstop(old_id)
    try:
        def taken_over() -> tuple[int, int] | None:
            cid, epoch = cluster3.controller()
            ok = cid not in (None, old_id) and epoch is not None and epoch > old_epoch
            return (cid, epoch) if ok else None  # type: ignore[return-value]

        new_id, new_epoch = cluster3.wait_for(taken_over, 2 * session_s + 10,
                                              f"a controller other than {old_id}")
        _, takeover = cluster3.zk.get("/controller_epoch")
        victim = next(i for i in BROKER_IDS if i not in (old_id, new_id))
        lost = sorted(p for p, b in by_partition.items() if b == victim)
        cluster3.kill9(victim)

        def offline_by_new_controller() -> bool:
            for p in lost:
                raw = cluster3.zk_get(f"/brokers/topics/{topic}/partitions/{p}/state")
                state = json.loads(raw) if raw else {}
                if state.get("leader") != -1 or state.get("controller_epoch") != new_epoch:
                    return False
            return True

        cluster3.wait_for(offline_by_new_controller, 2 * session_s + 10,
                          f"partitions {lost} of broker {victim} offline, by epoch {new_epoch}")
    finally:
        cluster3.sigcont(old_id)
    cluster3.wait_for(lambda: "resigns as controller" in old_broker.stderr(), 2 * session_s + 10,
                      f"broker {old_id} resigning")
    cluster3.wait_for(lambda: cluster3.registered(old_id), 30, f"broker {old_id} back")
    assert cluster3.controller() == (new_id, new_epoch)
    # Nothing written after the takeover carries the old epoch.
    for p in by_partition:
        raw, stat = cluster3.zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")
        if stat.mzxid > takeover.mzxid:
            assert json.loads(raw)["controller_epoch"] == new_epoch
    for name in cluster3.zk.get_children("/partition_state_notification"):
        raw, stat = cluster3.zk.get(f"/partition_state_notification/{name}")
        if stat.czxid > takeover.mzxid:
            assert json.loads(raw)["controller_epoch"] == new_epoch, name


def test_a_paused_broker_loses_its_registration_and_gets_it_back(cluster3: Cluster) -> None:
    controller_id, _ = cluster3.wait_controller()
    paused = next(i for i in (3, 2, 1) if i != controller_id)
    cluster3.sigstop(paused)
    try:
        # paused longer than its session: ZooKeeper expires it and its ephemeral node goes
        cluster3.wait_for(lambda: not cluster3.registered(paused),
                          2 * SESSION_TIMEOUT_MS / 1000 + 10, f"broker {paused} expired")
    finally:
        cluster3.sigcont(paused)
    # resumed, it sees its session expired and registers again on a new one
    cluster3.wait_for(lambda: cluster3.registered(paused), 30, f"broker {paused} back")
    others = [cluster3.address(i) for i in BROKER_IDS if i != paused]
    cluster3.wait_for(
        lambda: all(paused in metadata(a).brokers for a in others), 15,
        f"the other brokers listing {paused} again")


def test_a_restarted_broker_takes_its_partitions_back(cluster3: Cluster) -> None:
    topic = unique("restart")
    by_partition = create_topic(cluster3, topic)
    produce_confluent(cluster3.address(1), topic)
    controller_id = cluster3.controller()[0]
    victim = next(i for i in (3, 2, 1) if i != controller_id)  # no failover mixed in
    survivor = cluster3.address(next(i for i in BROKER_IDS if i != victim))
    its_partitions = sorted(p for p, b in by_partition.items() if b == victim)
    assert len(its_partitions) == 2
    cluster3.kill9(victim)
    # with replication factor 1 nobody else holds the data: the partitions go offline
    cluster3.wait_for(
        lambda: all(leaders(survivor, topic).get(p) == -1 for p in its_partitions),
        2 * SESSION_TIMEOUT_MS / 1000 + 10, f"partitions {its_partitions} offline")
    cluster3.start(victim)
    cluster3.wait_for(
        lambda: all(leaders(cluster3.address(i), topic) == by_partition for i in BROKER_IDS),
        30, f"broker {victim} leading {its_partitions} again")
    assert consume_confluent(survivor, topic) == expected_records()


def test_a_second_broker_with_a_live_id_is_refused(cluster3: Cluster) -> None:
    root = cluster3.root / unique("duplicate")
    overrides = cluster3.broker_overrides(2)
    process: BrokerProcess | None = None
    try:
        try:
            process = start_broker(root, data_dir=root / "data", overrides=overrides)
        except BrokerStartError as exc:
            message = str(exc)  # exited during start-up, as it should
        else:  # it listened before registering: it must exit on its own anyway
            started = process
            wait_for(lambda: not started.alive(), 30, "the duplicate broker to exit")
            message = started.describe()
        assert re.search(r"returncode=[1-9]", message), message
        assert re.search(r"broker\.id 2 .*(already|in use)", message), message
    finally:
        if process is not None:
            process.kill9()
    assert cluster3.alive(2) and cluster3.registered(2)
    stored = cluster3.zk_get("/brokers/ids/2")
    assert stored is not None
    assert str(cluster3.ports[2]) in json.loads(stored)["endpoints"][0]


def find_coordinator(bootstrap: str, group: str) -> int:
    async def ask() -> int:
        async with await BrokerConnection.open(bootstrap) as conn:
            node_id, _, _ = await GroupsClient(conn).find_coordinator(group)
            return node_id

    def attempt() -> int | None:
        try:
            return asyncio.run(ask())
        except ClientError:  # COORDINATOR_NOT_AVAILABLE while __consumer_offsets is created
            return None

    return wait_for(attempt, 30, f"a coordinator for {group}")


def test_a_group_coordinated_by_another_broker_survives_its_restart(cluster3: Cluster) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    bootstrap = cluster3.address(1)
    topic = unique("grp")
    create_topic(cluster3, topic)
    group, coordinator = next(
        (g, c) for g in (unique("group") for _ in range(50))
        if (c := find_coordinator(bootstrap, g)) != 1
    )
    producer = Producer({"bootstrap.servers": bootstrap})

    def produce(start: int, count: int) -> None:
        for i in range(start, start + count):
            producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(),
                             partition=i % PARTITIONS)
        assert producer.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
    consumer.subscribe([topic])

    def consume(count: int, timeout: float = 60) -> list[bytes]:
        values: list[bytes] = []
        started = time.monotonic()
        while len(values) < count and not expired(started, timeout):
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            values.append(msg.value() or b"")
        assert len(values) == count, f"read {len(values)} of {count}"
        consumer.commit(asynchronous=False)
        return values

    try:
        produce(0, 30)
        assert sorted(consume(30)) == sorted(f"v{i}".encode() for i in range(30))
        cluster3.stop(coordinator)
        cluster3.start(coordinator)
        produce(30, 30)
        assert sorted(consume(30)) == sorted(f"v{i}".encode() for i in range(30, 60))
        committed = consumer.committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=15)
        assert sum(tp.offset for tp in committed) == 60, committed
    finally:
        consumer.close()
    assert find_coordinator(cluster3.address(2), group) == coordinator


def test_a_replication_factor_above_the_live_brokers_is_refused(cluster3: Cluster) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    topic = unique("rf4")
    client = admin(cluster3.address(2))
    futures = client.create_topics(
        [NewTopic(topic, num_partitions=3, replication_factor=4)], request_timeout=15)
    with pytest.raises(KafkaException) as raised:
        futures[topic].result(timeout=30)
    error = raised.value.args[0]
    assert error.code() == KafkaError.INVALID_REPLICATION_FACTOR, error
    assert "4" in error.str() and "3" in error.str(), error.str()
    assert topic not in metadata(cluster3.address(1)).topics


def set_cluster_default(bootstrap: str, key: str, value: str | None) -> None:
    """IncrementalAlterConfigs on the BROKER resource "" (the cluster-wide default), which
    confluent-kafka's AdminClient cannot name; SET, or DELETE with None."""
    from kio.schema.incremental_alter_configs.v1 import request as m
    from kio.static.primitive import i8

    async def send() -> Any:
        conn = await BrokerConnection.open(bootstrap)
        try:
            return await conn.send(m.IncrementalAlterConfigsRequest(
                resources=(m.AlterConfigsResource(
                    resource_type=i8(4), resource_name="",
                    configs=(m.AlterableConfig(
                        name=key, config_operation=i8(0 if value is not None else 1),
                        value=value),)),),
                validate_only=False))
        finally:
            await conn.close()

    response = asyncio.run(send())
    assert response.responses[0].error_code == 0, response


def topic_configs_of(bootstrap: str, topic: str) -> dict[str, str | None]:
    """DescribeConfigs of ``topic`` asked of that broker itself (librdkafka's admin client
    would pick any broker)."""
    from kio.schema.describe_configs.v4 import request as m
    from kio.static.primitive import i8

    async def send() -> Any:
        conn = await BrokerConnection.open(bootstrap)
        try:
            return await conn.send(m.DescribeConfigsRequest(
                resources=(m.DescribeConfigsResource(
                    resource_type=i8(2), resource_name=topic, configuration_keys=None),),
                include_synonyms=False, include_documentation=False))
        finally:
            await conn.close()

    (result,) = asyncio.run(send()).results
    assert result.error_code == 0, result
    return {c.name: c.value for c in result.configs}


def test_configs_changed_through_one_broker_reach_every_broker(cluster3: Cluster) -> None:
    """A topic's config and a cluster-wide dynamic broker default, both set through broker
    1, are in force on broker 3: what broker 3's DescribeConfigs answers for the topic
    comes from the configs it layered itself."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    topic = unique("configs")
    create_topic(cluster3, topic)
    through = admin(cluster3.address(1))
    topic_config = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("segment.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    for future in through.incremental_alter_configs([topic_config]).values():
        future.result(timeout=30)
    set_cluster_default(cluster3.address(1), "log.retention.ms", "7200000")
    try:
        def seen_on_broker_3() -> bool:
            configs = topic_configs_of(cluster3.address(3), topic)
            return (configs.get("segment.ms") == "3600000"
                    and configs.get("retention.ms") == "7200000")

        cluster3.wait_for(seen_on_broker_3, 15, "broker 3 applying both changes")
    finally:
        set_cluster_default(cluster3.address(1), "log.retention.ms", None)


def set_topic_config_through(bootstrap: str, topic: str, key: str, value: str) -> int:
    """IncrementalAlterConfigs SET of one topic config sent to that broker itself; the
    answer's error code."""
    from kio.schema.incremental_alter_configs.v1 import request as m
    from kio.static.primitive import i8

    async def send() -> Any:
        conn = await BrokerConnection.open(bootstrap)
        try:
            return await conn.send(m.IncrementalAlterConfigsRequest(
                resources=(m.AlterConfigsResource(
                    resource_type=i8(2), resource_name=topic,
                    configs=(m.AlterableConfig(name=key, config_operation=i8(0),
                                               value=value),)),),
                validate_only=False))
        finally:
            await conn.close()

    return int(asyncio.run(send()).responses[0].error_code)


def test_alters_through_three_brokers_at_once_all_hold(cluster3: Cluster) -> None:
    """Three IncrementalAlterConfigs of one topic, each through another broker, at the same
    moment: each broker applies its change to the overrides stored in ZooKeeper and
    writes them compare-and-set, so none of the three is lost (applied to a broker's own
    view, which has not heard of the other two yet, each would write its key alone)."""
    from concurrent.futures import ThreadPoolExecutor

    topic = unique("alters")
    create_topic(cluster3, topic)
    changes = {1: ("segment.ms", "3600000"), 2: ("retention.ms", "7200000"),
               3: ("max.message.bytes", "2048")}
    with ThreadPoolExecutor(len(changes)) as pool:
        codes = list(pool.map(
            lambda b: set_topic_config_through(cluster3.address(b), topic, *changes[b]),
            changes))
    assert codes == [0, 0, 0]
    wanted = dict(changes.values())

    def all_held_on_every_broker() -> bool:
        return all({k: v for k, v in topic_configs_of(cluster3.address(b), topic).items()
                    if k in wanted} == wanted for b in BROKER_IDS)

    cluster3.wait_for(all_held_on_every_broker, 15, "every broker showing the three changes")


def test_no_zookeeper_round_trip_ran_on_an_event_loop(cluster3: Cluster) -> None:
    """Last in this module, over every broker log its cluster wrote: ZooKeeperStore warns
    when it is called from a running event loop, and none of the requests above (topic
    creation and deletion, configs, auto-creation, the offsets topic, producer ids,
    failovers) made it do so: they run their ZooKeeper work in worker threads."""
    logs = {b.stderr_path.parent for b in cluster3.brokers.values()}
    found = [
        (path.name, line)
        for folder in logs for path in sorted(folder.glob("broker-*.stderr"))
        for line in path.read_text(errors="replace").splitlines()
        if "ZooKeeper call on the event loop" in line
    ]
    assert len(list(next(iter(logs)).glob("broker-*.stderr"))) >= 3
    assert found == []
