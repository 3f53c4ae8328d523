"""Transactions on a three-broker cluster (``__transaction_state`` and the topics with
replication factor 3): the transaction coordinator killed -9 in the middle of a
transaction, and right after a commit was acknowledged. The new coordinator (the new
leader of the id's ``__transaction_state`` partition) loads the state the old one
replicated, resumes the markers of a prepared commit, and read_committed consumers see
every committed record exactly once and no aborted one."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.client.connection import BrokerConnection, ClientError
from tests._deadlines import describe, expired, slowness

from ._cluster import Cluster, running_cluster
from ._transactions import bounded, read_to_end, txn_producer

pytestmark = pytest.mark.interop

DEADLINE_S = 90.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("txn-cluster"), overrides={
        "offsets.topic.replication.factor": 3,
        "offsets.topic.num.partitions": 3,
        "transaction.state.log.replication.factor": 3,
        "transaction.state.log.min.isr": 2,
        "transaction.state.log.num.partitions": 3,
        "group.initial.rebalance.delay.ms": 0,
    }) as c:
        yield c


def coordinator_of(cluster: Cluster, txn_id: str, key_type: int = 1,
                   other_than: int | None = None) -> int:
    """The broker FindCoordinator names for transactional id ``txn_id`` (a group id with
    ``key_type`` 0), asked of any live broker; with ``other_than``, once it names
    another broker than that one."""
    async def ask() -> int | None:
        for broker_id in sorted(cluster.live_ids()):
            try:
                conn = await BrokerConnection.open(cluster.address(broker_id), timeout=5)
            except (ClientError, OSError):
                continue
            try:
                from kio.schema.find_coordinator.v4 import request as fc

                response: Any = await conn.send(fc.FindCoordinatorRequest(
                    key_type=key_type, coordinator_keys=(txn_id,)))
            finally:
                await conn.close()
            [found] = response.coordinators
            if found.error_code == ErrorCode.none and int(found.node_id) != other_than:
                return int(found.node_id)
        return None

    return cluster.wait_for(lambda: asyncio.run(ask()), 30, f"a coordinator for {txn_id}")


# librdkafka's send_offsets_to_transaction looks the group coordinator up again only when
# one of the producer's broker connections comes up or goes down (librdkafka #5511): once
# the coordinator it cached was killed and has left the metadata, nothing else wakes it
# and the call blocks past its timeout (#5456) until some connection changes. Closing
# idle connections makes one change within this long. (A run under load blocked 10
# minutes, until a broker closed an idle connection of the producer's.)
IDLE_CLOSE_MS = 10000


def producer(cluster: Cluster, txn_id: str) -> Any:
    return txn_producer(cluster.bootstrap, txn_id, DEADLINE_S,
                        **{"transaction.timeout.ms": 60000,
                           "connections.max.idle.ms": IDLE_CLOSE_MS})


def test_the_coordinator_killed_mid_transaction_and_after_a_commit(cluster: Cluster) -> None:
    topic = f"txn-out-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, 3, 3, {"min.insync.replicas": "2"})
    txn_id = f"failover-{uuid.uuid4().hex[:6]}"
    p = producer(cluster, txn_id)
    expected: dict[int, list[bytes]] = {i: [] for i in range(3)}

    def send(tag: str, n: int = 12, keep: bool = True) -> None:
        for i in range(n):
            value = f"{tag}-{i}".encode()
            p.produce(topic, value=value, partition=i % 3)
            if keep:
                expected[i % 3].append(value)

    p.begin_transaction()
    send("first")
    p.commit_transaction(DEADLINE_S)

    # killed mid-transaction: the new coordinator knows the open transaction
    first = coordinator_of(cluster, txn_id)
    p.begin_transaction()
    send("second")
    p.flush(DEADLINE_S)
    cluster.kill9(first)
    p.commit_transaction(DEADLINE_S)
    second = coordinator_of(cluster, txn_id)
    assert second != first
    cluster.start(first)

    # killed right after a commit was acknowledged: its markers may still be in flight
    p.begin_transaction()
    send("third")
    p.commit_transaction(DEADLINE_S)
    cluster.kill9(second)
    # an aborted transaction next, through whichever coordinator takes over
    p.begin_transaction()
    send("aborted", keep=False)
    p.flush(DEADLINE_S)
    p.abort_transaction(DEADLINE_S)
    p.begin_transaction()
    send("fourth")
    p.commit_transaction(DEADLINE_S)
    cluster.start(second)

    assert read_to_end(cluster.bootstrap, topic, "read_committed", 3, DEADLINE_S) == expected


def leader_of(cluster: Cluster, topic: str, partition: int) -> int:
    from confluent_kafka.admin import AdminClient

    def known() -> int | None:
        md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, 10)
        leader = md.topics[topic].partitions[partition].leader
        return leader if leader in cluster.live_ids() else None

    return cluster.wait_for(known, 30, f"a leader of {topic}-{partition}")


def test_consume_transform_produce_exactly_once_across_kills(cluster: Cluster) -> None:
    """A loop reads an input topic and writes f(record) with its input offsets in the
    transaction while the transaction coordinator, then an output partition's leader, are
    killed -9 and restarted. The committed output is f(input), each once, in order."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    source, sink = f"ctp-in-{uuid.uuid4().hex[:6]}", f"ctp-out-{uuid.uuid4().hex[:6]}"
    for topic in (source, sink):
        cluster.create_topic(topic, 2, 3, {"min.insync.replicas": "2"})
    n = 300
    plain = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(n):
        plain.produce(source, value=str(i).encode(), partition=i % 2)
    assert plain.flush(DEADLINE_S) == 0
    group, txn_id = f"ctp-{uuid.uuid4().hex[:6]}", f"ctp-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.subscribe([source])
    p = producer(cluster, txn_id)
    killed: list[int] = []

    def rewind() -> None:
        """Back to the committed offsets: what the aborted transaction read is read again."""
        assignment = consumer.assignment()
        if assignment:
            for tp in consumer.committed(assignment, DEADLINE_S):
                consumer.seek(TopicPartition(source, tp.partition, max(tp.offset, 0)))

    def committed_total() -> int:
        offsets = consumer.committed([TopicPartition(source, q) for q in range(2)], DEADLINE_S)
        return sum(max(tp.offset, 0) for tp in offsets)

    def abandon(error: Any) -> None:
        """Abort the transaction; a new incarnation (which fences the old one) when the
        producer failed fatally."""
        nonlocal p
        while not error.fatal():
            try:
                p.abort_transaction(DEADLINE_S)
                return
            except KafkaException as exc:
                error = exc.args[0]
                assert not expired(started, 3 * DEADLINE_S), f"abort_transaction: {error}"
        p = producer(cluster, txn_id)

    started = time.monotonic()
    done = 0
    try:
        while done < n:
            assert not expired(started, 3 * DEADLINE_S), \
                f"{done} of {n} committed in {describe(started, 3 * DEADLINE_S)}; killed {killed}"
            if not killed and done >= n // 3:
                victim = coordinator_of(cluster, txn_id)
                cluster.kill9(victim)
                killed.append(victim)
            elif len(killed) == 1 and done >= 2 * n // 3:
                cluster.start(killed[0])
                victim = leader_of(cluster, sink, 0)
                cluster.kill9(victim)
                killed.append(victim)
            batch = [m for m in consumer.consume(20, 0.5) if not m.error()]
            if not batch:
                continue
            offsets = consumer.position(consumer.assignment())
            group_metadata = consumer.consumer_group_metadata()
            try:
                p.begin_transaction()
                for msg in batch:
                    p.produce(sink, value=b"f(" + msg.value() + b")", partition=msg.partition())
                # the whole wait's end as the machine's slowness now has it (a blocked
                # call cannot be asked again later)
                bounded(functools.partial(p.send_offsets_to_transaction, offsets,
                                          group_metadata, DEADLINE_S),
                        started + 3 * DEADLINE_S * slowness(),
                        f"send_offsets_to_transaction ({done} of {n} committed; killed {killed})")
            except KafkaException as exc:
                # the offsets may be missing from the transaction (even on a retriable
                # error): committing it would write the batch twice
                abandon(exc.args[0])
                rewind()
                continue
            try:
                p.commit_transaction(DEADLINE_S)
            except KafkaException as exc:
                error = exc.args[0]
                if error.retriable() and not error.txn_requires_abort():
                    # the commit's outcome is known once it is retried
                    try:
                        p.commit_transaction(DEADLINE_S)
                    except KafkaException as again:
                        abandon(again.args[0])
                else:
                    abandon(error)
                rewind()
            done = committed_total()
    finally:
        consumer.close()
        for broker_id in killed:
            if not cluster.alive(broker_id):
                cluster.start(broker_id)
    out = read_to_end(cluster.bootstrap, sink, "read_committed", 2, DEADLINE_S)
    for q in range(2):
        assert out[q] == [f"f({i})".encode() for i in range(q, n, 2)], (q, killed)


def test_send_offsets_once_the_group_coordinator_left_the_cluster(cluster: Cluster) -> None:
    """The group coordinator a transactional producer cached is killed -9 and leaves the
    metadata (librdkafka then decommissions it). send_offsets_to_transaction still
    returns: librdkafka waits for a connection of the producer's to change before it
    looks the coordinator up again (librdkafka #5511), which the producer's
    ``connections.max.idle.ms`` brings about; without it the call blocks for good."""
    from confluent_kafka import Consumer, KafkaException, Producer

    topic = f"so-in-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    plain = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(4):
        plain.produce(topic, value=str(i).encode())
    assert plain.flush(DEADLINE_S) == 0
    group, txn_id = f"so-{uuid.uuid4().hex[:6]}", f"so-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    p = producer(cluster, txn_id)
    started = time.monotonic()
    killed = None
    try:
        read: list[Any] = []
        while not read:
            assert not expired(started, DEADLINE_S), \
                f"nothing consumed in {describe(started, DEADLINE_S)}"
            read = [m for m in consumer.consume(4, 0.5) if not m.error()]

        def send_offsets(timeout_s: float) -> None:
            offsets = consumer.position(consumer.assignment())
            bounded(functools.partial(p.send_offsets_to_transaction, offsets,
                                      consumer.consumer_group_metadata(), timeout_s),
                    time.monotonic() + timeout_s + 30, "send_offsets_to_transaction")

        p.begin_transaction()
        send_offsets(DEADLINE_S)  # the producer caches the group coordinator
        p.commit_transaction(DEADLINE_S)
        killed = coordinator_of(cluster, group, key_type=0)
        cluster.kill9(killed)
        coordinator_of(cluster, group, key_type=0, other_than=killed)
        cluster.wait_for(lambda: killed not in p.list_topics(timeout=10).brokers, 30,
                         f"the producer's metadata without broker {killed}")
        p.begin_transaction()
        # The idle close wakes the call only if a connection is still open when it starts;
        # a metadata request now and then opens one otherwise (each is a change either way).
        stop = threading.Event()

        def poke() -> None:
            while not stop.wait(IDLE_CLOSE_MS / 1000 + 2):
                with contextlib.suppress(KafkaException):
                    p.list_topics(timeout=5)

        poker = threading.Thread(target=poke, daemon=True)
        poker.start()
        try:
            send_offsets(10)
        except KafkaException as exc:  # an error is an answer too (the group may rebalance)
            assert not exc.args[0].fatal(), exc
        finally:
            stop.set()
            poker.join(10)
    finally:
        consumer.close()
        if killed is not None and not cluster.alive(killed):
            cluster.start(killed)


def test_a_leader_verifies_with_a_coordinator_on_another_broker(cluster: Cluster) -> None:
    """KIP-890 across brokers: the partition leader asks the coordinator (another broker)
    with AddPartitionsToTxn v4 ``verify_only`` before a producer's first transactional
    batch there; a partition never added is INVALID_TXN_STATE and stays empty."""
    import datetime

    from kio.schema.add_partitions_to_txn.v3 import request as add_v3
    from kio.schema.end_txn.v3 import request as end_v3
    from kio.schema.init_producer_id.v4 import request as init_v4
    from kio.schema.produce.v9 import request as produce_v9
    from kio.static.primitive import i32Timedelta

    from tests.server._raw_client import txn_batch

    txn_id = f"verify-{uuid.uuid4().hex[:6]}"
    coordinator = coordinator_of(cluster, txn_id)
    # The partition's preferred leader is another broker than the coordinator (after the
    # earlier tests' kills every coordinator may sit on one broker: a topic placed at
    # random would often share it).
    others = sorted(b for b in cluster.live_ids() if b != coordinator)
    topic = f"txn-verify-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, config={"min.insync.replicas": "2"},
                         replica_assignment=[[*others, coordinator]])
    leader = cluster.wait_for(
        lambda: others[0] if leader_of(cluster, topic, 0) == others[0] else None, 30,
        f"broker {others[0]} leading {topic}-0")
    assert coordinator != leader

    async def call(broker_id: int, request: Any) -> Any:
        conn = await BrokerConnection.open(cluster.address(broker_id), timeout=10)
        try:
            return await conn.send(request)
        finally:
            await conn.close()

    def produce(pid: int, epoch: int, seq: int) -> Any:
        """The leader's answer, once the leader serves the partition: ZooKeeper names it
        leader before it has read the topic (UNKNOWN_TOPIC_OR_PARTITION) and created its
        log (LEADER_NOT_AVAILABLE), as any client may meet right after a creation."""
        m = produce_v9

        def answered() -> Any:
            response = asyncio.run(call(leader, m.ProduceRequest(
                transactional_id=txn_id, acks=-1,
                timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
                topic_data=(m.TopicProduceData(name=topic, partition_data=(
                    m.PartitionProduceData(index=0, records=txn_batch(pid, epoch, seq)),)),),
            )))
            partition = response.responses[0].partition_responses[0]
            not_yet = (ErrorCode.leader_not_available, ErrorCode.unknown_topic_or_partition,
                       ErrorCode.not_leader_or_follower)
            return None if partition.error_code in not_yet else partition

        return cluster.wait_for(answered, 30, f"broker {leader} serving {topic}-0")

    init = asyncio.run(call(coordinator, init_v4.InitProducerIdRequest(
        transactional_id=txn_id, transaction_timeout=datetime.timedelta(seconds=60),
        producer_id=-1, producer_epoch=-1)))
    assert init.error_code == ErrorCode.none
    pid, epoch = int(init.producer_id), int(init.producer_epoch)
    refused = produce(pid, epoch, 0)
    assert refused.error_code == ErrorCode.invalid_txn_state, refused
    added = asyncio.run(call(coordinator, add_v3.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch, v3_and_below_topics=(
            add_v3.AddPartitionsToTxnTopic(name=topic, partitions=(0,)),))))
    [result] = added.results_by_topic_v3_and_below[0].results_by_partition
    assert result.partition_error_code == ErrorCode.none
    accepted = produce(pid, epoch, 0)
    assert accepted.error_code == ErrorCode.none and accepted.base_offset == 0, accepted
    ended = asyncio.run(call(coordinator, end_v3.EndTxnRequest(
        transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=True)))
    assert ended.error_code == ErrorCode.none
