"""Acceptance of issue 15: replication between three brokers over a real ZooKeeper, driven
by real clients.

- A partition leader killed -9 under load: a new leader within the session timeout, no
  acknowledged record lost; the old leader restarts, truncates, catches up, rejoins the
  ISR, and (``auto.leader.rebalance.enable``) leads its preferred partitions again.
- ``min.insync.replicas``: acks=all refused with NOT_ENOUGH_REPLICAS while the ISR is too
  small, acks=1 accepted, acks=all back once the followers return.
- ``unclean.leader.election.enable``: with it, an out-of-sync replica leads and what only
  the lost leader held is gone (counted); without it, the partition waits offline.
- Every client's round trip holds while leadership moves (a rolling restart); an acks=1
  record only the old leader held is gone after it hands over, as in Kafka (why the
  round trips produce with acks=all).
- A compacted topic replicates: a follower that was away fetches the leader's compacted
  log (offsets with gaps) and, leading later, serves the same latest value of every key.
- Reassignment (``odradek reassign``): --execute / --verify / throttles, and --generate's
  proposal carried out.

All tests share one module-scoped cluster (the acks=1 test starts its own brokers, proxied,
with a longer ISR lag, in the module's ZooKeeper); a broker a test kills or stops is
restarted before the next test. A broker is killed -9 where the crash is the test's subject
(the leader under load, the lost leader of an unclean election, the quick restart); where a
test only needs a follower out of the ISR or leadership moved, it is stopped cleanly (a
controlled shutdown does either at once, not after the lag or a session: issue 51).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.exceptions import NoNodeError

from ._broker import STARTUP_TIMEOUT, start_broker
from ._cluster import SESSION_TIMEOUT_MS, Cluster, running_cluster
from .test_cluster import ROUNDTRIPS, expected_records, metadata

pytestmark = pytest.mark.interop

OVERRIDES = {
    "offsets.topic.replication.factor": 3,
    "replica.lag.time.max.ms": 5000,
    "leader.imbalance.check.interval.seconds": 2,
    # every partition moves back to its preferred leader, not only once more than 10 % of
    # a broker's are elsewhere: a busy partition rejoining the ISR after the broker's idle
    # ones would stay where it is (tests/spark/test_mirror_cluster.py says how)
    "leader.imbalance.per.broker.percentage": 0,
    "log.cleaner.backoff.ms": 50,
}


#: how long a restarted broker serves before the roll stops the next one (the
#: leadership-moves test says why)
ROLL_DWELL_S = 1.5


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("replication"), 3, OVERRIDES) as c:
        yield c


@pytest.fixture
def rcluster(cluster: Cluster) -> Cluster:
    cluster.restore()
    return cluster


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def state(cluster: Cluster, topic: str, partition: int) -> dict[str, Any]:
    raw = cluster.zk_get(f"/brokers/topics/{topic}/partitions/{partition}/state")
    return json.loads(raw) if raw else {"leader": -1, "isr": [], "leader_epoch": -1}


def replicas(cluster: Cluster, topic: str) -> dict[int, list[int]]:
    raw = cluster.zk_get(f"/brokers/topics/{topic}")
    assert raw is not None
    return {int(p): r for p, r in json.loads(raw)["partitions"].items()}


def create(cluster: Cluster, topic: str, partitions: int, rf: int,
           config: dict[str, str] | None = None) -> None:
    cluster.create_topic(topic, partitions, rf, config)
    cluster.wait_for(lambda: all(len(state(cluster, topic, p)["isr"]) == rf
                                 for p in range(partitions)), 60, f"{topic} in sync")


def producer(cluster: Cluster, **config: Any) -> Any:
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": cluster.bootstrap, "log_level": 3,
                     "linger.ms": 2, **config})


def send(p: Any, topic: str, values: list[bytes], partition: int = 0) -> list[Any]:
    """Produce ``values`` and flush; the delivery results (errors or offsets)."""
    results: list[Any] = []
    for v in values:
        p.produce(topic, value=v, partition=partition,
                  on_delivery=lambda err, msg: results.append(err or msg.offset()))
    p.flush(60)
    return results


def read_all(cluster: Cluster, topic: str, partition: int = 0) -> list[tuple[int, bytes]]:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    def consumer() -> Any:
        return Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": unique("r"),
                         "enable.auto.commit": False, "log_level": 3})

    errors: list[str] = []

    def high_watermark() -> int | None:
        # a fresh client each attempt: one that saw the partition leaderless (a broker
        # restarting) may keep its stale view for a long while
        c = consumer()
        try:
            return int(c.get_watermark_offsets(TopicPartition(topic, partition), 10)[1]) + 1
        except KafkaException as exc:  # metadata not known yet, or the leader moving
            errors[:] = [str(exc)]
            return None
        finally:
            c.close()

    end = cluster.wait_for(high_watermark, 90, f"the end of {topic}-{partition} "
                                               f"({errors})") - 1
    if end == 0:
        return []
    reader = consumer()
    try:
        reader.assign([TopicPartition(topic, partition, 0)])
        out: list[tuple[int, bytes]] = []

        def more() -> bool:
            for msg in reader.consume(500, 0.5):
                if msg.error() is None:
                    out.append((msg.offset(), msg.value()))
            return bool(out) and out[-1][0] >= end - 1

        cluster.wait_for(more, 60, f"{topic}-{partition} read to {end}")
        return out
    finally:
        reader.close()


def test_leader_killed_under_load_loses_nothing_and_comes_back_as_preferred(
    rcluster: Cluster,
) -> None:
    cluster = rcluster
    topic = unique("kill")
    create(cluster, topic, 1, 3, {"min.insync.replicas": "2"})
    preferred = replicas(cluster, topic)[0][0]
    assert state(cluster, topic, 0)["leader"] == preferred
    p = producer(cluster, acks="all", **{"enable.idempotence": True})
    acked: dict[int, bytes] = {}
    stop = threading.Event()

    def load() -> None:
        i = 0
        while not stop.is_set():
            value = f"r-{i}".encode()
            p.produce(topic, value=value, partition=0,
                      on_delivery=lambda err, msg, v=value: err or acked.__setitem__(
                          msg.offset(), v))
            p.poll(0.002)
            i += 1
        p.flush(60)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    try:
        cluster.wait_for(lambda: len(acked) > 200, 30, "load running")
        epoch = state(cluster, topic, 0)["leader_epoch"]
        cluster.kill9(preferred)
        moved = cluster.wait_for(
            lambda: (s := state(cluster, topic, 0))["leader"] not in (-1, preferred) and s,
            SESSION_TIMEOUT_MS / 1000 + 10, "a new leader")
        assert moved["leader_epoch"] > epoch
        assert preferred not in moved["isr"]
        count = len(acked)
        cluster.wait_for(lambda: len(acked) > count + 200, 30, "producing to the new leader")
        cluster.start(preferred)
        # it truncates, catches up, rejoins the ISR, and leads again (auto rebalance)
        cluster.wait_for(lambda: preferred in state(cluster, topic, 0)["isr"], 60,
                         f"broker {preferred} back in the ISR")
        cluster.wait_for(lambda: state(cluster, topic, 0)["leader"] == preferred, 60,
                         f"broker {preferred} leading again")
        count = len(acked)
        cluster.wait_for(lambda: len(acked) > count + 200, 30, "producing to it again")
    finally:
        stop.set()
        thread.join(90)
    log = dict(read_all(cluster, topic))
    lost = [o for o, v in acked.items() if log.get(o) != v]
    assert not lost, f"{len(lost)} acknowledged records lost or moved, e.g. {lost[:5]}"
    assert len(set(log.values())) == len(log), "a record was written twice"
    # the replicas hold the same bytes
    def same() -> bool:
        logs = {b: b"".join(f.read_bytes() for f in sorted(
            (cluster.data_dir(b) / f"{topic}-0").glob("*.log"))) for b in (1, 2, 3)}
        return len(set(logs.values())) == 1

    cluster.wait_for(same, 60, "the three replicas byte for byte equal")


def test_isr_below_min_insync_refuses_acks_all_and_accepts_acks_1(rcluster: Cluster) -> None:
    from confluent_kafka import KafkaError

    cluster = rcluster
    topic = unique("minisr")
    create(cluster, topic, 1, 3, {"min.insync.replicas": "2"})
    leader = state(cluster, topic, 0)["leader"]
    followers = [b for b in (1, 2, 3) if b != leader]
    # Stopped cleanly: a controlled shutdown takes a follower out of the ISR at once. A
    # follower killed -9 leaves it after the leader's replica.lag.time.max.ms or its
    # session (the quick-restart and leader-kill tests); waiting that out here proved
    # nothing more (issue 51).
    for b in followers:
        cluster.stop(b)
    cluster.wait_for(lambda: state(cluster, topic, 0)["isr"] == [leader], 30,
                     "the ISR shrunk to the leader")

    def leader_knows() -> bool:  # the controller wrote it; the leader learns it next
        t = metadata(cluster.address(leader), topic).topics.get(topic)
        return t is not None and t.partitions[0].isrs == [leader]

    # Until then an acks=all append is accepted and answered
    # NOT_ENOUGH_REPLICAS_AFTER_APPEND, as in Kafka.
    cluster.wait_for(leader_knows, 15, "the leader knowing its ISR shrunk")
    strict = producer(cluster, acks="all", retries=0, **{"message.timeout.ms": 10000})
    (refused,) = send(strict, topic, [b"all"])
    assert isinstance(refused, KafkaError), refused
    assert refused.code() == KafkaError.NOT_ENOUGH_REPLICAS, refused
    (offset,) = send(producer(cluster, acks=1), topic, [b"one"])
    assert isinstance(offset, int), offset
    cluster.restore()  # both followers started side by side
    cluster.wait_for(lambda: len(state(cluster, topic, 0)["isr"]) == 3, 60, "ISR whole again")
    (offset2,) = send(strict, topic, [b"all-again"])
    assert isinstance(offset2, int) and offset2 == offset + 1, offset2
    assert [v for _, v in read_all(cluster, topic)] == [b"one", b"all-again"]


@pytest.mark.parametrize("unclean", [False, True], ids=["clean", "unclean"])
def test_unclean_leader_election_trades_records_for_availability(
    rcluster: Cluster, unclean: bool
) -> None:
    cluster = rcluster
    topic = unique("unclean" if unclean else "clean")
    create(cluster, topic, 1, 2, {"unclean.leader.election.enable": str(unclean).lower(),
                                  "min.insync.replicas": "1"})
    leader = state(cluster, topic, 0)["leader"]
    (follower,) = (b for b in replicas(cluster, topic)[0] if b != leader)
    send(producer(cluster, acks="all"), topic, [b"both-1", b"both-2"])
    # out of the ISR at once (a controlled shutdown), not after the leader's lag: the
    # follower only has to be out of sync; the lost leader below is killed -9
    cluster.stop(follower)
    cluster.wait_for(lambda: state(cluster, topic, 0)["isr"] == [leader], 30,
                     "the ISR shrunk to the leader")
    results = send(producer(cluster, acks="all"), topic, [b"leader-only-1", b"leader-only-2"])
    assert all(isinstance(r, int) for r in results), results
    cluster.kill9(leader)
    cluster.wait_for(lambda: not cluster.registered(leader), SESSION_TIMEOUT_MS / 1000 + 10,
                     f"broker {leader} gone")
    cluster.start(follower)
    if not unclean:
        # offline: the only in-sync replica is gone and the out-of-sync one may not lead
        cluster.wait_for(lambda: cluster.registered(follower), 30, "follower back")
        assert state(cluster, topic, 0)["leader"] == -1
        cluster.start(leader)
        cluster.wait_for(lambda: state(cluster, topic, 0)["leader"] == leader, 30,
                         "the in-sync replica leading again")
        values = [v for _, v in read_all(cluster, topic)]
        assert values == [b"both-1", b"both-2", b"leader-only-1", b"leader-only-2"]
        return
    cluster.wait_for(lambda: state(cluster, topic, 0)["leader"] == follower, 30,
                     "the out-of-sync replica elected")
    (offset,) = send(producer(cluster, acks="all"), topic, [b"after"])
    assert offset == 2  # written over the offsets only the lost leader held
    cluster.start(leader)
    cluster.wait_for(lambda: len(state(cluster, topic, 0)["isr"]) == 2, 60,
                     "the old leader truncated and back in sync")
    values = [v for _, v in read_all(cluster, topic)]
    # As Kafka documents: what only the lost ISR held is gone.
    assert values == [b"both-1", b"both-2", b"after"]
    old_log = b"".join(f.read_bytes() for f in sorted(
        (cluster.data_dir(leader) / f"{topic}-0").glob("*.log")))
    assert b"leader-only" not in old_log  # truncated away on the old leader too


def test_an_acks_1_record_only_the_old_leader_held_is_gone_after_it_hands_over(
    tmp_path: Path, cluster: Cluster,
) -> None:
    """Kafka's acks=1: the leader answers once the record is in its own log. If leadership
    moves before a follower fetched it (a controlled shutdown elects an in-sync follower
    at once), the new leader never had it and the old one truncates it away when it
    follows (KIP-101): acknowledged, yet gone. A round trip that must read back every
    record it sent across leadership moves therefore produces with acks=all (aiokafka's
    producer defaults to acks=1; the other clients of the suite to acks=all)."""
    from odradek.client.admin import Admin
    from odradek.client.connection import BrokerConnection
    from odradek.records.builder import build_batch

    # Long enough that the follower stays in the ISR while it cannot fetch.
    slow = {**OVERRIDES, "replica.lag.time.max.ms": 30000}
    # proxied: each broker is reached (by clients and by the other brokers' fetchers)
    # only through a proxy in front of its listener, which the test can cut. Its own
    # brokers (the lag and the proxies are broker configs), in a chroot of the module's
    # ZooKeeper: no ZooKeeper started for it.
    with running_cluster(tmp_path, 3, slow, proxied=True,
                         zookeeper=cluster.zookeeper) as cluster:
        controller, _ = cluster.wait_controller()
        leader, follower = (b for b in (1, 2, 3) if b != controller)
        topic = unique("acks1")
        cluster.create_topic(topic, 1, replica_assignment=[[leader, follower]])
        cluster.wait_for(lambda: state(cluster, topic, 0)["leader"] == leader, 30,
                         f"broker {leader} leading {topic}")
        p = producer(cluster, acks=1)
        assert send(p, topic, [b"both"]) == [0]
        values = lambda: [v for _, v in read_all(cluster, topic)]  # noqa: E731
        # the high watermark passed it: the follower has it
        cluster.wait_for(lambda: values() == [b"both"], 30, f"broker {follower} has it")
        # The follower fetches nothing more from here on (it stays in the ISR); a client
        # still reaches the leader's own listener and has a record acknowledged.
        cluster.proxies[leader].cut()

        async def produce_to_the_leader_alone() -> int:
            conn = await BrokerConnection.open(f"127.0.0.1:{cluster.ports[leader]}")
            try:
                return await Admin(conn).produce(
                    topic, 0, build_batch([(b"k", b"leader-only")]), acks=1)
            finally:
                await conn.close()

        assert asyncio.run(produce_to_the_leader_alone()) == 1  # acknowledged
        epoch = state(cluster, topic, 0)["leader_epoch"]
        cluster.stop(leader)  # controlled shutdown: the controller elects the follower
        moved = cluster.wait_for(
            lambda: (s := state(cluster, topic, 0))["leader"] == follower and s, 30,
            f"broker {follower} elected")
        assert moved["leader_epoch"] == epoch + 1
        cluster.proxies[leader].heal()
        cluster.wait_for(lambda: values() == [b"both"], 30,
                         "the new leader's log read, without the acknowledged record")
        assert send(p, topic, [b"after"]) == [1]  # the offset the lost record had
        cluster.start(leader)
        cluster.wait_for(lambda: len(state(cluster, topic, 0)["isr"]) == 2, 60,
                         f"broker {leader} following, back in the ISR")
        cluster.wait_for(lambda: values() == [b"both", b"after"], 30, "the log read again")

        def old_log() -> bytes:
            return b"".join(f.read_bytes() for f in sorted(
                (cluster.data_dir(leader) / f"{topic}-0").glob("*.log")))

        cluster.wait_for(lambda: b"after" in old_log(), 30, f"broker {leader} caught up")
        assert b"leader-only" not in old_log()  # truncated on the old leader too


@pytest.mark.parametrize("client", list(ROUNDTRIPS))
def test_every_client_round_trip_holds_while_leadership_moves(
    rcluster: Cluster, client: str
) -> None:
    """A rolling restart (SIGTERM: controlled shutdown, then start) runs during the client's
    round trip on a topic of replication factor 3: each broker's leaderships move away,
    and back once it is in sync (preferred leader election, every 2 s here).

    As operators roll a cluster, the next broker goes only once the restarted one is back
    in every ISR, and not before it has served for :data:`ROLL_DWELL_S`. The dwell is the
    scenario's pace, not a wait for a state: kcat's librdkafka 2.0.2 tries its bootstrap
    brokers one at a time a second apart and exits on "all brokers down" once each has
    refused. A broker here restarts in about a second and a half, so with less than a
    second between one broker's return and the next one's stop, three attempts can meet
    three brokers down in turn (a whole run saw it), as on any cluster rolled that fast."""
    cluster = rcluster
    topic = unique(f"move-{client}")
    create(cluster, topic, 6, 3)
    moves: list[int] = []

    def roll() -> None:
        for broker in (1, 2, 3):
            cluster.stop(broker)
            cluster.start(broker)
            back = time.monotonic()
            cluster.wait_for(lambda: all(len(state(cluster, topic, p)["isr"]) == 3
                                         for p in range(6)), 60, f"{topic} in sync")
            moves.append(broker)
            if broker != 3:
                time.sleep(max(0.0, back + ROLL_DWELL_S - time.monotonic()))

    mover = threading.Thread(target=roll, daemon=True)
    mover.start()  # broker 1 is stopping (handing its leaderships over) from here on
    try:
        got = ROUNDTRIPS[client](cluster.bootstrap, topic)
    finally:
        mover.join(180)
    assert moves == [1, 2, 3], moves
    everything = set().union(*got.values())
    if client == "java":
        assert everything == set().union(*expected_records().values()), got
    else:
        assert got == expected_records(), {p: len(r) for p, r in got.items()}


def test_a_compacted_log_replicates_with_its_gaps(rcluster: Cluster) -> None:
    cluster = rcluster
    topic = unique("compact")
    create(cluster, topic, 1, 2, {
        "cleanup.policy": "compact", "segment.bytes": "2048",
        "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "0",
        "file.delete.delay.ms": "0",
    })
    leader = state(cluster, topic, 0)["leader"]
    (follower,) = (b for b in replicas(cluster, topic)[0] if b != leader)
    # The follower is away (stopped cleanly: out of the ISR at once) while the leader
    # writes and compacts, and leads after a controlled shutdown of the leader: how it
    # left and how leadership moved are not this test's subject, and a kill -9 of each
    # waited out the leader's lag, then a session (issue 51).
    cluster.stop(follower)
    cluster.wait_for(lambda: state(cluster, topic, 0)["isr"] == [leader], 30,
                     "the ISR shrunk to the leader")
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 2,
                  "log_level": 3})
    latest: dict[bytes, bytes] = {}
    for round_ in range(40):
        for k in range(20):
            key, value = f"k{k}".encode(), f"v{round_}-{k}".encode() * 4
            p.produce(topic, key=key, value=value, partition=0)
            latest[key] = value
        p.flush(30)
    produced = 40 * 20

    def compacted_on_leader() -> bool:
        return len(read_all(cluster, topic)) < produced // 2

    cluster.wait_for(compacted_on_leader, 60, "the leader's log compacted")
    before = dict((v, o) for o, v in read_all(cluster, topic))
    cluster.start(follower)  # fetches the compacted log, gaps and all
    cluster.wait_for(lambda: sorted(state(cluster, topic, 0)["isr"]) == sorted(
        [leader, follower]), 60, "the follower back in sync")
    cluster.stop(leader)
    cluster.wait_for(lambda: state(cluster, topic, 0)["leader"] == follower, 30,
                     "the follower leading")
    records = read_all(cluster, topic)
    offsets = [o for o, _ in records]
    assert offsets == sorted(offsets) and offsets[-1] == produced - 1
    served = dict((v, o) for o, v in records)
    # every key's latest value is there, at the offset the old leader had it at
    for value in latest.values():
        assert value in before, value
        assert served.get(value) == before[value], value


def test_reassignment_moves_a_partition_to_other_brokers(rcluster: Cluster,
                                                         tmp_path_factory: Any) -> None:
    import subprocess
    import sys


    cluster = rcluster
    topic = unique("move")
    cluster.create_topic(topic, 1, config={"min.insync.replicas": "2"},
                         replica_assignment=[[1, 2]])
    cluster.wait_for(lambda: sorted(state(cluster, topic, 0)["isr"]) == [1, 2], 30,
                     "both replicas in sync")
    values = [f"m{i}".encode() for i in range(500)]
    assert all(isinstance(r, int) for r in send(producer(cluster, acks="all"), topic, values))
    plan = tmp_path_factory.mktemp("reassign") / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [3, 2], "log_dirs": ["any", "any"]}]}))

    def tool(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "odradek", "reassign", "--bootstrap-server",
             cluster.bootstrap, "--reassignment-json-file", str(plan), *args],
            capture_output=True, text=True, timeout=60)

    started = tool("--execute")
    assert started.returncode == 0, started.stderr
    assert '"replicas": [1, 2]' in started.stdout  # the rollback plan
    assert f"Successfully started partition reassignments for {topic}-0" in started.stdout
    cluster.wait_for(lambda: tool("--verify").returncode == 0, 60, "the move completed")
    assert "is completed" in tool("--verify").stdout
    assert replicas(cluster, topic)[0] == [3, 2]
    final = state(cluster, topic, 0)
    assert final["leader"] in (2, 3) and sorted(final["isr"]) == [2, 3], final
    # broker 1 no longer holds the partition; broker 3 holds the same bytes as broker 2
    cluster.wait_for(lambda: not (cluster.data_dir(1) / f"{topic}-0").exists(), 30,
                     "broker 1's replica deleted")

    def log_of(b: int) -> bytes:
        return b"".join(f.read_bytes()
                        for f in sorted((cluster.data_dir(b) / f"{topic}-0").glob("*.log")))

    cluster.wait_for(lambda: log_of(2) == log_of(3), 30, "the new replica equal to the old")
    assert [v for _, v in read_all(cluster, topic)] == values
    # produce with acks=all against the new replica set
    assert all(isinstance(r, int) for r in send(producer(cluster, acks="all"), topic, [b"x"]))


def test_reassign_generate_proposes_moving_whole_topics_and_the_plan_runs(
    rcluster: Cluster, tmp_path: Path
) -> None:
    """kafka-reassign-partitions.sh --generate: the current assignment of the topics and a
    proposed one on the --broker-list brokers (same partitions and replication factor,
    placed as CreateTopics does), changing nothing; the proposal then runs with
    --execute / --verify."""
    import subprocess
    import sys

    cluster = rcluster
    topic = unique("generate")
    create(cluster, topic, 4, 2)
    before = replicas(cluster, topic)
    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    plan = tmp_path / "plan.json"

    def tool(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "odradek", "reassign", "--bootstrap-server",
             cluster.bootstrap, *args], capture_output=True, text=True, timeout=60)

    def generate(brokers: str, topics: Path = topics_file) -> subprocess.CompletedProcess[str]:
        return tool("--generate", "--topics-to-move-json-file", str(topics),
                    "--broker-list", brokers)

    done = generate("2,3,9")  # an id no broker has is left out, as by Kafka's tool
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    current = json.loads(lines[lines.index("Current partition replica assignment") + 1])
    proposed = json.loads(
        lines[lines.index("Proposed partition reassignment configuration") + 1])
    assert {p["partition"]: p["replicas"] for p in current["partitions"]} == before
    moves = {p["partition"]: p["replicas"] for p in proposed["partitions"]}
    assert sorted(moves) == [0, 1, 2, 3]
    assert all(sorted(r) == [2, 3] for r in moves.values()), moves
    assert sorted(r[0] for r in moves.values()) == [2, 2, 3, 3], moves  # leaders balanced
    assert all(p["log_dirs"] == ["any", "any"] for p in proposed["partitions"])
    assert replicas(cluster, topic) == before  # nothing changed

    plan.write_text(json.dumps(proposed))
    started = tool("--reassignment-json-file", str(plan), "--execute")
    assert started.returncode == 0, started.stderr
    cluster.wait_for(
        lambda: tool("--reassignment-json-file", str(plan), "--verify").returncode == 0, 90,
        "the generated plan carried out")
    assert replicas(cluster, topic) == moves

    # refused with Kafka's reasons
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"version": 1, "topics": [{"topic": unique("nope")}]}))
    assert "not found" in (r := generate("1,2,3", unknown)).stderr and r.returncode == 1
    too_few = generate("3")
    assert too_few.returncode == 1
    assert "replication factor 2 is larger than the 1 available brokers" in too_few.stderr
    twice = generate("2,2")
    assert twice.returncode != 0
    assert "Broker list contains duplicate entries: 2" in twice.stderr


def test_a_throttled_reassignment_copies_at_the_rate_and_verify_lifts_it(
    rcluster: Cluster, tmp_path_factory: Any
) -> None:
    import subprocess
    import sys
    import time

    from confluent_kafka.admin import AdminClient, ConfigResource

    cluster = rcluster
    topic = unique("throttle")
    cluster.create_topic(topic, 1, replica_assignment=[[1]])
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    value = b"x" * 10_000
    assert all(isinstance(r, int)
               for r in send(producer(cluster, acks="all"), topic, [value] * 300))  # ~3 MB
    rate = 400_000
    plan = tmp_path_factory.mktemp("throttle") / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [2]}]}))

    def tool(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "odradek", "reassign", "--bootstrap-server",
             cluster.bootstrap, "--reassignment-json-file", str(plan), *args],
            capture_output=True, text=True, timeout=60)

    started = time.monotonic()
    result = tool("--execute", "--throttle", str(rate))
    assert result.returncode == 0, result.stderr
    assert f"The inter-broker throttle limit was set to {rate} B/s" in result.stdout
    cluster.wait_for(lambda: replicas(cluster, topic)[0] == [2], 120, "the move done")
    took = time.monotonic() - started
    # ~3 MB at 400 KB/s, less the first fetch (1 MB, before anything was measured)
    assert took > 2.0 / 0.4 * 0.8, f"a 3 MB copy throttled to {rate} B/s took {took:.1f} s"
    verify = tool("--verify")
    assert verify.returncode == 0 and "Throttle was removed." in verify.stdout, verify.stdout
    def lifted() -> bool:
        # answered from the answering broker's view of the topic's configs, which learns
        # a change made through another broker from its notification (as a KRaft
        # broker answers from its metadata image)
        configs = admin.describe_configs([ConfigResource("topic", topic)])
        (found,) = [f.result(30) for f in configs.values()]
        return found["follower.replication.throttled.replicas"].value in ("", None)

    cluster.wait_for(lifted, 10, "the topic's throttled replicas removed on every broker")
    assert [v for _, v in read_all(cluster, topic)] == [value] * 300


#: the session of the victim of the quick-restart test: more than the leader's
#: ``replica.lag.time.max.ms`` (5 s) and its ISR check on a loaded machine
VICTIM_SESSION_MS = 14_000


def test_a_broker_killed_and_started_at_once_waits_for_its_old_session(
    rcluster: Cluster,
) -> None:
    """Restarts that wait (issue 30): a broker killed -9 and started again while its old
    session's registration is still in ZooKeeper (with this broker's own endpoints)
    waits, saying so, until ZooKeeper expires that session, then registers and rejoins
    the ISR, instead of refusing to start. The victim runs with a session timeout long
    enough that the restart surely begins before it expires, and that its leader takes it
    out of the ISR before then: the restart is launched right after the kill, while the
    leader's ``replica.lag.time.max.ms`` runs out (the restarted process does not fetch
    before it has registered), so the test waits one session, not the lag and then a
    session (issue 51: 20 s after the lag's 5 s took 52 s in whole runs)."""
    cluster = rcluster
    topic = unique("quick-restart")
    create(cluster, topic, 1, 3)
    controller = cluster.controller()[0]
    # a follower, not the controller: no failover mixed in, and its leader takes it out
    # of the ISR while its old session lives on, so that rejoining is seen
    leader = state(cluster, topic, 0)["leader"]
    victim = next(i for i in (3, 2, 1) if i not in (controller, leader))
    cluster.per_broker[victim] = {"zookeeper.session.timeout.ms": VICTIM_SESSION_MS}

    def owner() -> int | None:
        try:
            return int(cluster.zk.get(f"/brokers/ids/{victim}")[1].ephemeralOwner)
        except NoNodeError:
            return None

    try:
        cluster.stop(victim)  # a clean stop unregisters: restarted with the long session
        cluster.start(victim)
        cluster.wait_for(lambda: victim in state(cluster, topic, 0)["isr"], 60,
                         f"broker {victim} back in the ISR")
        assert all(isinstance(r, int) for r in send(producer(cluster, acks="all"), topic,
                                                    [b"before-1", b"before-2"]))
        old_session = owner()
        cluster.kill9(victim)
        killed = time.monotonic()
        # started at once; ready once registered: after the old session's timeout, at most
        restarted = start_broker(cluster.root, port=cluster.ports[victim],
                                 data_dir=cluster.data_dir(victim),
                                 overrides=cluster.broker_overrides(victim), wait=False)
        cluster.brokers[victim] = restarted
        # replica.lag.time.max.ms (5 s) after the kill, inside the session
        cluster.wait_for(lambda: victim not in state(cluster, topic, 0)["isr"], 15,
                         f"broker {victim} out of the ISR")
        assert owner() == old_session, (  # its session outlives it
            f"the old session ended before the ISR shrank, {time.monotonic() - killed:.1f} s "
            f"after the kill: VICTIM_SESSION_MS too short for this machine")
        restarted.wait_ready(STARTUP_TIMEOUT + VICTIM_SESSION_MS / 1000)
        output = restarted.stderr() + restarted.stdout()
        assert "this broker's own endpoints" in output and "waiting up to" in output, (
            restarted.describe())
        cluster.wait_for(lambda: owner() not in (None, old_session), 30,
                         f"broker {victim} registered by its new session")
        cluster.wait_for(lambda: victim in state(cluster, topic, 0)["isr"], 60,
                         f"broker {victim} back in the ISR after the restart")
        assert all(isinstance(r, int) for r in send(producer(cluster, acks="all"), topic,
                                                    [b"after"]))
        assert [v for _, v in read_all(cluster, topic)] == [b"before-1", b"before-2", b"after"]
    finally:
        # back to the cluster's session timeout for the tests after this one
        cluster.per_broker.pop(victim, None)
        cluster.stop(victim)
        cluster.start(victim)


def test_a_follower_returns_after_the_log_start_passed_its_last_epoch(
    rcluster: Cluster,
) -> None:
    """OffsetForLeaderEpoch for an epoch older than every epoch the leader still caches
    (the log start, moved by DeleteRecords as retention moves it, dropped them) is
    answered with that epoch ending where the first cached epoch begins, as Kafka's
    LeaderEpochFileCache.endOffsetFor does; before, -1/-1, and the follower fell back to
    its high watermark (the rule KIP-101 replaced). The follower that was away through it
    truncates, starts again at the leader's log start, and rejoins the ISR."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient
    from kio.schema.offset_for_leader_epoch.v4 import request as ofle

    from odradek.client.connection import BrokerConnection

    cluster = rcluster
    topic = unique("old-epochs")
    first, second = 1, 2
    cluster.create_topic(topic, 1, config={"min.insync.replicas": "1"},
                         replica_assignment=[[first, second]])
    cluster.wait_for(lambda: sorted(state(cluster, topic, 0)["isr"]) == [1, 2], 30,
                     "both replicas in sync")
    p = producer(cluster, acks="all")
    assert all(isinstance(r, int) for r in send(p, topic, [b"e0-%d" % i for i in range(10)]))
    # epoch 1 on the second replica (a clean stop hands leadership over), then epoch 2
    # on the first again (the preferred leader, moved back once in sync)
    cluster.stop(first)
    cluster.wait_for(lambda: state(cluster, topic, 0)["leader"] == second, 30,
                     "the second replica leading")
    assert all(isinstance(r, int) for r in send(p, topic, [b"e1-%d" % i for i in range(10)]))
    cluster.start(first)
    cluster.wait_for(lambda: (s := state(cluster, topic, 0))["leader"] == first
                     and len(s["isr"]) == 2, 60, "the first replica leading again, in sync")
    # the follower leaves with epochs 0 and 1; epoch 2 is written without it, and the
    # log start moves past where epoch 2 began (offset 20)
    cluster.stop(second)
    cluster.wait_for(lambda: state(cluster, topic, 0)["isr"] == [first], 30,
                     "the second replica out of the ISR")
    assert all(isinstance(r, int) for r in send(p, topic, [b"e2-%d" % i for i in range(10)]))
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 3})
    (deleted,) = admin.delete_records([TopicPartition(topic, 0, 21)]).values()
    assert deleted.result(30).low_watermark == 21

    async def end_of(epoch: int) -> tuple[int, int, int]:
        conn = await BrokerConnection.open(cluster.address(first))
        try:
            answer = await conn.send(ofle.OffsetForLeaderEpochRequest(
                replica_id=-1, topics=(ofle.OffsetForLeaderTopic(topic=topic, partitions=(
                    ofle.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1,
                                                  leader_epoch=epoch),)),)))
        finally:
            await conn.close()
        (found,) = answer.topics[0].partitions
        return int(found.error_code), int(found.leader_epoch), int(found.end_offset)

    # epochs 0 and 1 end where the first epoch still cached (2, from 21) begins
    assert asyncio.run(end_of(1)) == (0, 1, 21)
    assert asyncio.run(end_of(0)) == (0, 0, 21)
    cluster.start(second)
    cluster.wait_for(lambda: sorted(state(cluster, topic, 0)["isr"]) == [1, 2], 60,
                     "the second replica back in the ISR")
    assert all(isinstance(r, int) for r in send(p, topic, [b"e2-last"]))
    # it holds what the leader held: read from it alone, the leader stopped
    cluster.wait_for(lambda: sorted(state(cluster, topic, 0)["isr"]) == [1, 2], 30,
                     "the second replica still in the ISR")
    cluster.stop(first)
    cluster.wait_for(lambda: state(cluster, topic, 0)["leader"] == second, 30,
                     "the second replica leading")
    reader = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": unique("r"),
                       "enable.auto.commit": False, "log_level": 3})
    try:
        reader.assign([TopicPartition(topic, 0, 21)])
        got: list[bytes] = []

        def more() -> bool:
            got.extend(m.value() for m in reader.consume(100, 0.5) if m.error() is None)
            return len(got) >= 10

        cluster.wait_for(more, 60, f"{topic}-0 read from 21")
        assert got == [b"e2-%d" % i for i in range(1, 10)] + [b"e2-last"]
    finally:
        reader.close()
