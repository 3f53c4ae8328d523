"""Acceptance: preferred leaders come back (ElectLeaders, ``odradek leader-election``,
auto leader rebalance) and racks keep partitions available, on real 3- and 4-broker
clusters over a real ZooKeeper, driven by real clients.

The preferred-leader tests share one module-scoped cluster with
``auto.leader.rebalance.enable=false`` (so that only the election asked for moves
leadership); each stops the preferred leader of a partition, restarts it, waits until it
is back in the ISR, then asks for the election with one client: confluent-kafka's
``AdminClient.elect_leaders``, the Java ``Admin.electLeaders``, the ``odradek
leader-election`` command line. The auto rebalance and rack tests run clusters of their own.

Where a broker only has to be away (a preferred leader that no longer leads, a follower
out of the ISR), it is stopped (SIGTERM: its controlled shutdown moves leadership and the
ISR at once); a kill -9 would wait out its ZooKeeper session first, and failover after a
crash is test_replication.py's and test_cluster.py's subject. Where the loss itself is the
subject (the whole ISR of the unclean election's partition, a whole rack) brokers are
killed -9.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.client.admin import Admin, TopicDescription
from odradek.client.connection import BrokerConnection, ClientError, request_class
from tests._zygote import run as run_odradek

from ._broker import java_client, odradek_executable, start_broker
from ._cluster import Cluster, running_cluster, wait_for

pytestmark = pytest.mark.interop

PARTITIONS = 3
RECORDS = 30
ELECTION_NOT_NEEDED = 84
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_CONTROLLER = 41
INVALID_REQUEST = 42
REPO = Path(__file__).resolve().parents[2]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def partitions(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """``{partition: (leader, replicas, isr)}`` as a live broker sees it ({} if unknown)."""
    t = admin(bootstrap).list_topics(topic=topic, timeout=15).topics.get(topic)
    if t is None or t.error is not None:
        return {}
    return {p.id: (p.leader, list(p.replicas), sorted(p.isrs)) for p in t.partitions.values()}


def broker_view(cluster: Cluster, broker_id: int,
                topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """``{partition: (leader, replicas, isr)}`` as broker ``broker_id`` itself answers
    Metadata ({} if it does not know the topic or cannot be reached)."""
    async def ask() -> list[TopicDescription]:
        async with await BrokerConnection.open(cluster.address(broker_id)) as conn:
            return await Admin(conn).metadata([topic])

    try:
        described = asyncio.run(ask())
    except (ClientError, OSError):
        return {}
    return {p.partition: (p.leader, list(p.replicas), sorted(p.isr))
            for t in described if t.name == topic and t.error == "none"
            for p in t.partitions if p.error == "none"}


def live_bootstrap(cluster: Cluster) -> str:
    return ",".join(cluster.address(b) for b in sorted(cluster.brokers) if cluster.alive(b))


def create_topic(cluster: Cluster, topic: str, rf: int = 3, n: int = PARTITIONS,
                 configs: dict[str, str] | None = None) -> dict[int, list[int]]:
    """Create ``topic``; return its assignment once every replica is in every ISR and the
    preferred replica leads everywhere."""
    # retried while a broker just restarted by the previous test is not in every live list
    cluster.create_topic(topic, n, rf, configs)

    def settled_on(broker_id: int) -> dict[int, list[int]] | None:
        found = broker_view(cluster, broker_id, topic)
        if len(found) != n or any(
            leader != replicas[0] or isr != sorted(replicas)
            for leader, replicas, isr in found.values()
        ):
            return None
        return {p: replicas for p, (_, replicas, _) in found.items()}

    def settled() -> dict[int, list[int]] | None:
        # every live broker's own view: each applies the states on its own watch, and the
        # tests ask a given broker (the controller's answer to ElectLeaders is its view)
        views = [settled_on(b) for b in sorted(cluster.brokers) if cluster.alive(b)]
        return views[0] if views and all(v is not None and v == views[0] for v in views) \
            else None

    return cluster.wait_for(settled, 60, f"{topic}: every replica in sync, preferred leaders")


def produce(bootstrap: str, topic: str, count: int, tag: str, n: int = PARTITIONS) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": 60000})
    errors: list[Any] = []
    for i in range(count):
        producer.produce(topic, value=f"{tag}-{i}".encode(), partition=i % n,
                         on_delivery=lambda err, _msg: err and errors.append(err))
    assert producer.flush(90) == 0
    assert errors == []


def consume_all(bootstrap: str, topic: str, expected: int,
                n: int = PARTITIONS) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("g"),
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(n)])
        values: list[bytes] = []

        def enough() -> bool:
            # what is there at once (one record a poll, each followed by wait_for's pause,
            # took 3 s for 60 records)
            for msg in consumer.consume(expected - len(values), 0.5):
                if msg.error() is None:
                    values.append(msg.value())
            return len(values) >= expected

        wait_for(enough, 60, f"{expected} records of {topic}")
        return values
    finally:
        consumer.close()


def stop(cluster: Cluster, broker_id: int) -> None:
    """Stop ``broker_id`` (SIGTERM: its controlled shutdown moves its leaderships and
    takes it out of the ISRs before it unregisters; its clean exit within a bound is
    test_controlled_shutdown.py's subject, the waits after it here hold either way)."""
    cluster.stop(broker_id)


def bounce_preferred(cluster: Cluster, topic: str, partition: int) -> int:
    """Stop the preferred leader of ``topic-partition``, wait for another leader, restart
    it and wait until it is back in the ISR of every partition; returns its id."""
    assignment = partitions(live_bootstrap(cluster), topic)
    victim = assignment[partition][1][0]
    stop(cluster, victim)
    cluster.wait_for(
        lambda: (p := partitions(live_bootstrap(cluster), topic).get(partition))
        and p[0] not in (victim, -1),
        30, f"a new leader of {topic}-{partition}")
    produce(live_bootstrap(cluster), topic, RECORDS, f"while-{victim}-down")
    cluster.start(victim)
    cluster.wait_for(
        lambda: (found := partitions(live_bootstrap(cluster), topic))
        and all(isr == sorted(replicas) for _, replicas, isr in found.values()),
        60, f"broker {victim} back in every ISR of {topic}")
    assert partitions(live_bootstrap(cluster), topic)[partition][0] != victim
    return victim


def preferred_lead(cluster: Cluster, topic: str) -> bool:
    found = partitions(live_bootstrap(cluster), topic)
    return bool(found) and all(leader == replicas[0] for leader, replicas, _ in found.values())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("elect"), 3,
                         {"auto.leader.rebalance.enable": False}) as c:
        yield c


@pytest.fixture
def cluster3(cluster: Cluster) -> Cluster:
    cluster.restore()
    return cluster


# ---- ElectLeaders through confluent-kafka's AdminClient --------------------------------
def test_confluent_elect_leaders_moves_leadership_back(cluster3: Cluster) -> None:
    from confluent_kafka import ElectionType, KafkaError, TopicPartition

    topic = unique("elect")
    assignment = create_topic(cluster3, topic)
    produce(cluster3.bootstrap, topic, RECORDS, "before")
    victim = bounce_preferred(cluster3, topic, 0)

    client = admin(cluster3.bootstrap)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    result = client.elect_leaders(ElectionType.PREFERRED, tps).result(60)
    for tp, outcome in result.items():
        if assignment[tp.partition][0] == victim:
            assert outcome is None, (tp, outcome)
        else:  # its preferred replica was never away
            assert isinstance(outcome, KafkaError), (tp, outcome)
            assert outcome.code() == ELECTION_NOT_NEEDED
    cluster3.wait_for(lambda: preferred_lead(cluster3, topic), 30, "preferred leaders")

    # Once more: nothing to do; an unknown partition is named as such.
    again = client.elect_leaders(
        ElectionType.PREFERRED, [*tps, TopicPartition(topic, 99)]).result(60)
    codes = {tp.partition: e.code() for tp, e in again.items()}
    assert codes == {**dict.fromkeys(range(PARTITIONS), ELECTION_NOT_NEEDED),
                     99: UNKNOWN_TOPIC_OR_PARTITION}
    # Nothing acknowledged was lost on the way.
    values = consume_all(cluster3.bootstrap, topic, 2 * RECORDS)
    assert len(values) == 2 * RECORDS and len(set(values)) == 2 * RECORDS


def test_elect_leaders_all_partitions_and_errors(cluster3: Cluster) -> None:
    """``null`` partitions (every partition), NOT_CONTROLLER from another broker, UNCLEAN
    with live leaders (nothing to do) and an unknown election type, over the wire with our
    own client."""
    topic = unique("elect-all")
    create_topic(cluster3, topic)
    controller, _ = cluster3.wait_controller()
    other = next(b for b in sorted(cluster3.brokers) if b != controller)

    async def elect(broker: int, election_type: int, names: list[str] | None) -> Any:
        cls = request_class("elect_leaders", 2, "ElectLeadersRequest")
        tp_cls = request_class("elect_leaders", 2, "TopicPartitions")
        async with await BrokerConnection.open(cluster3.address(broker)) as conn:
            return await conn.send(cls(
                election_type=election_type,
                topic_partitions=None if names is None else tuple(
                    tp_cls(topic=n, partitions=tuple(range(PARTITIONS))) for n in names),
                timeout=datetime.timedelta(seconds=30)))

    every = asyncio.run(elect(controller, 0, None))
    assert every.error_code == 0
    mine = [r for r in every.replica_election_results if r.topic == topic]
    assert len(mine) == 1
    assert sorted((p.partition_id, p.error_code) for p in mine[0].partition_result) == [
        (p, ELECTION_NOT_NEEDED) for p in range(PARTITIONS)]

    elsewhere = asyncio.run(elect(other, 0, [topic]))
    assert elsewhere.error_code == NOT_CONTROLLER
    assert {p.error_code for r in elsewhere.replica_election_results
            for p in r.partition_result} == {NOT_CONTROLLER}

    unclean = asyncio.run(elect(controller, 1, [topic]))
    assert unclean.error_code == 0
    assert {p.error_code for r in unclean.replica_election_results
            for p in r.partition_result} == {ELECTION_NOT_NEEDED}

    unknown = asyncio.run(elect(controller, 5, [topic]))
    assert unknown.error_code == INVALID_REQUEST
    assert {p.error_code for r in unknown.replica_election_results
            for p in r.partition_result} == {INVALID_REQUEST}


def test_unclean_election_brings_an_offline_partition_back(cluster3: Cluster) -> None:
    """KIP-460: a partition whose whole ISR is gone comes back led by an out-of-sync
    replica when an UNCLEAN election is asked for, losing what only the ISR held, as Kafka
    documents; without it (unclean.leader.election.enable=false) it stays offline."""
    from confluent_kafka import ElectionType, TopicPartition

    topic = unique("unclean")
    (first, second), = create_topic(cluster3, topic, rf=2, n=1).values()
    bystander = next(b for b in (1, 2, 3) if b not in (first, second))
    produce(cluster3.bootstrap, topic, RECORDS, "kept", n=1)
    stop(cluster3, second)  # out of the ISR: what follows is written without it
    cluster3.wait_for(lambda: partitions(live_bootstrap(cluster3), topic)[0][2] == [first],
                      30, f"ISR of {topic} down to {first}")
    produce(live_bootstrap(cluster3), topic, RECORDS, "only-on-the-leader", n=1)
    cluster3.kill9(first)
    cluster3.wait_for(lambda: partitions(cluster3.address(bystander), topic)[0][0] == -1,
                      30, f"{topic} offline")
    cluster3.start(second)
    client = admin(live_bootstrap(cluster3))
    tp = TopicPartition(topic, 0)
    # Not in the ISR: a preferred election cannot bring it back, an unclean one does.
    preferred = client.elect_leaders(ElectionType.PREFERRED, [tp]).result(60)
    assert preferred[tp] is not None
    assert partitions(cluster3.address(bystander), topic)[0][0] == -1
    unclean = client.elect_leaders(ElectionType.UNCLEAN, [tp]).result(60)
    assert unclean[tp] is None, unclean
    cluster3.wait_for(lambda: partitions(live_bootstrap(cluster3), topic)[0][0] == second,
                      30, f"{second} leading {topic}")
    # Writable again; what only the lost ISR held is gone (offsets 30.. are "after-*").
    produce(live_bootstrap(cluster3), topic, RECORDS, "after", n=1)
    values = consume_all(live_bootstrap(cluster3), topic, 2 * RECORDS, n=1)
    assert values == [f"{tag}-{i}".encode() for tag in ("kept", "after")
                      for i in range(RECORDS)]


# ---- the Java admin client ------------------------------------------------------------
def test_java_admin_elect_leaders(cluster3: Cluster) -> None:
    run = java_client()
    topic = unique("elect-java")
    assignment = create_topic(cluster3, topic)
    victim = bounce_preferred(cluster3, topic, 1)
    res = run(cluster3.bootstrap, "elect-preferred", topic, str(PARTITIONS))
    assert res.ok, res.describe()
    expected = {str(p): "none" if replicas[0] == victim else "ElectionNotNeededException"
                for p, replicas in assignment.items()}
    assert res.summary["elected"] == expected
    cluster3.wait_for(lambda: preferred_lead(cluster3, topic), 30, "preferred leaders")


# ---- odradek leader-election ----------------------------------------------------------
def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_odradek([str(odradek_executable()), *args], timeout=120)


def test_cli_leader_election(cluster3: Cluster, tmp_path: Path) -> None:
    topic = unique("elect-cli")
    assignment = create_topic(cluster3, topic)
    victim = bounce_preferred(cluster3, topic, 2)
    moved = sorted(p for p, replicas in assignment.items() if replicas[0] == victim)

    done = cli("leader-election", "--bootstrap-server", cluster3.bootstrap,
               "--election-type", "preferred", "--topic", topic, "--partition", "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"Successfully completed leader election (PREFERRED) for partitions {topic}-2"]

    # The rest by a JSON file (kafka-leader-election.sh's --path-to-json-file format).
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"partitions": [
        {"topic": topic, "partition": p} for p in range(PARTITIONS)]}))
    rest = cli("leader-election", "--bootstrap-server", cluster3.address(1),
               "--election-type", "PREFERRED", "--path-to-json-file", str(plan))
    assert rest.returncode == 0, rest.stderr
    others = [p for p in range(PARTITIONS) if p not in moved or p == 2]
    not_needed = ", ".join(f"{topic}-{p}" for p in others)
    lines = rest.stdout.splitlines()
    elected = [f"{topic}-{p}" for p in moved if p != 2]
    if elected:
        assert f"Successfully completed leader election (PREFERRED) for partitions " \
               f"{', '.join(elected)}" in lines
    assert f"Valid replica already elected for partitions {not_needed}" in lines
    cluster3.wait_for(lambda: preferred_lead(cluster3, topic), 30, "preferred leaders")

    # Whole cluster; then bad usage is a usage error, an unknown partition an error.
    every = cli("leader-election", "--bootstrap-server", cluster3.bootstrap,
                "--election-type", "preferred", "--all-topic-partitions")
    assert every.returncode == 0, every.stderr
    assert "Valid replica already elected for partitions" in every.stdout
    usage = cli("leader-election", "--bootstrap-server", cluster3.bootstrap,
                "--election-type", "preferred")
    assert usage.returncode == 2
    assert "--all-topic-partitions" in usage.stderr
    unknown = cli("leader-election", "--bootstrap-server", cluster3.bootstrap,
                  "--election-type", "preferred", "--topic", topic, "--partition", "99")
    assert unknown.returncode == 1
    assert f"Error completing leader election (PREFERRED) for partition: {topic}-99: " \
           in unknown.stdout + unknown.stderr


def test_topics_describe_filters(cluster3: Cluster) -> None:
    topic = unique("describe")
    create_topic(cluster3, topic, configs={"min.insync.replicas": "2"})
    shown = cli("topics", "describe", "--bootstrap-server", cluster3.bootstrap,
                "--topic", topic)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count("Isr: ") == PARTITIONS
    under = cli("topics", "describe", "--bootstrap-server", cluster3.bootstrap,
                "--topic", topic, "--under-replicated-partitions")
    assert under.returncode == 0 and under.stdout.strip() == "", under.stdout

    stop(cluster3, 3)
    cluster3.wait_for(
        lambda: (found := partitions(live_bootstrap(cluster3), topic))
        and all(3 not in isr for _, _, isr in found.values()),
        30, "broker 3 out of every ISR")
    live = live_bootstrap(cluster3)
    under = cli("topics", "describe", "--bootstrap-server", live, "--topic", topic,
                "--under-replicated-partitions")
    assert under.returncode == 0, under.stderr
    assert sorted(line.split("Partition: ")[1].split()[0]
                  for line in under.stdout.splitlines()) == [str(p) for p in range(PARTITIONS)]
    at_min = cli("topics", "describe", "--bootstrap-server", live, "--topic", topic,
                 "--at-min-isr-partitions")
    assert at_min.stdout.count("Partition: ") == PARTITIONS, at_min.stdout
    unavailable = cli("topics", "describe", "--bootstrap-server", live, "--topic", topic,
                      "--unavailable-partitions")
    assert unavailable.returncode == 0 and unavailable.stdout.strip() == ""

    stop(cluster3, 2)
    cluster3.wait_for(
        lambda: (found := partitions(live_bootstrap(cluster3), topic))
        and all(isr == [1] for _, _, isr in found.values()),
        30, "ISR down to broker 1")
    below = cli("topics", "describe", "--bootstrap-server", cluster3.address(1),
                "--topic", topic, "--under-min-isr-partitions")
    assert below.stdout.count("Partition: ") == PARTITIONS, below.stdout


# ---- auto.leader.rebalance.enable ------------------------------------------------------
def test_auto_leader_rebalance(tmp_path: Path) -> None:
    with running_cluster(tmp_path, 3, {"auto.leader.rebalance.enable": True,
                                       "leader.imbalance.check.interval.seconds": 1}) as c:
        topic = unique("rebalance")
        assignment = create_topic(c, topic)
        victim = assignment[0][0]
        stop(c, victim)
        c.wait_for(lambda: (p := partitions(live_bootstrap(c), topic).get(0))
                   and p[0] not in (victim, -1), 30, "a new leader of partition 0")
        c.start(victim)
        # No one asks: the controller's imbalance check moves leadership back.
        c.wait_for(lambda: preferred_lead(c, topic), 60, "preferred leaders by auto rebalance")


# ---- racks -------------------------------------------------------------------------------
def test_losing_a_whole_rack_keeps_every_partition_available(tmp_path: Path) -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    with running_cluster(tmp_path, 4, {"auto.leader.rebalance.enable": False},
                         {b: {"broker.rack": r} for b, r in racks.items()}) as c:
        topics = [unique("rack") for _ in range(2)]
        for topic in topics:
            assignment = create_topic(c, topic, rf=2, n=4,
                                      configs={"min.insync.replicas": "1"})
            for replicas in assignment.values():  # one replica in each rack
                assert {racks[b] for b in replicas} == {"a", "b"}, assignment
            produce(c.bootstrap, topic, RECORDS, "both-racks", n=4)
        c.kill9(1)
        c.kill9(2)
        rack_b = ",".join(c.address(b) for b in (3, 4))
        for topic in topics:
            c.wait_for(
                lambda t=topic: (found := partitions(rack_b, t))
                and all(leader in (3, 4) for leader, _, _ in found.values()),
                30, f"{topic}: every partition led in rack b")
            produce(rack_b, topic, RECORDS, "rack-b-only", n=4)
            values = consume_all(rack_b, topic, 2 * RECORDS, n=4)
            assert len(set(values)) == 2 * RECORDS


# ---- a single node -----------------------------------------------------------------------
def test_single_node_elect_leaders_v0(tmp_path: Path) -> None:
    """No controller to ask: the only replica leads already (ELECTION_NOT_NEEDED), at the
    oldest version too (v0: no election type, no top-level error)."""
    with start_broker(tmp_path, overrides={"num.partitions": 2}) as broker:
        from confluent_kafka.admin import NewTopic

        client = admin(broker.bootstrap)
        client.create_topics([NewTopic("solo", 2, 1)])["solo"].result(30)

        async def elect() -> Any:
            cls = request_class("elect_leaders", 0, "ElectLeadersRequest")
            tp_cls = request_class("elect_leaders", 0, "TopicPartitions")
            async with await BrokerConnection.open(broker.bootstrap) as conn:
                return await conn.send(cls(
                    topic_partitions=(tp_cls(topic="solo", partitions=(0, 1, 7)),),
                    timeout=datetime.timedelta(seconds=5)))

        response = asyncio.run(elect())
        assert sorted((p.partition_id, p.error_code)
                      for r in response.replica_election_results
                      for p in r.partition_result) == [
            (0, ELECTION_NOT_NEEDED), (1, ELECTION_NOT_NEEDED),
            (7, UNKNOWN_TOPIC_OR_PARTITION)]
