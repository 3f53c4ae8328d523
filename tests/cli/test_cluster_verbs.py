"""The ``odradek`` verbs on a three-broker cluster, through the real command in a subprocess.

A topic of 3 partitions with replication factor 3 has a leader on each broker, so a tool
that spoke only to its bootstrap broker would be refused by two partitions out of three.
Every verb that sends partition-level or group requests is run against one broker's
address, then again after the leader of a partition is killed -9 (the command started
before the controller has moved leadership, so it meets NOT_LEADER_OR_FOLLOWER or a dead
connection and must refresh its metadata and retry), and a consumer is kept running
while a leader dies under it.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from tests._zygote import run as run_odradek
from tests.interop._broker import REPO, odradek_executable
from tests.interop._cluster import Cluster, cluster3, cluster3_shared

__all__ = ["cluster3", "cluster3_shared"]  # the fixtures, used by name

CLI_TIMEOUT_S = 120.0
TOPIC_PARTITIONS = 3


def odradek(*args: str, stdin: str | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_odradek([str(odradek_executable()), *args],
                          input=stdin, cwd=cwd, timeout=CLI_TIMEOUT_S)


def ok(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    res = odradek(*args, stdin=stdin)
    assert res.returncode == 0, (args, res.stdout, res.stderr[-3000:])
    return res


def leaders(cluster: Cluster, topic: str) -> dict[int, int]:
    """{partition: leader id} as the cluster's metadata has it now."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=15)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


def lines(n: int, start: int = 0) -> str:
    return "".join(f"k{i}:v{i}\n" for i in range(start, start + n))


def consumed(bootstrap: str, topic: str, *extra: str) -> list[str]:
    res = ok("consume", "--topic", topic, "--from-beginning", "--timeout-ms", "3000",
             "-b", bootstrap, *extra)
    return res.stdout.splitlines()


def spread_topic(cluster: Cluster, topic: str) -> None:
    """``topics create`` with 3 partitions, RF 3, through broker 1; wait until each
    partition has a leader and the leaders are on different brokers (preferred)."""
    ok("topics", "create", "--topic", topic, "--partitions", str(TOPIC_PARTITIONS),
       "--replication-factor", "3", "-b", cluster.address(1))
    cluster.wait_for(lambda: len(set(leaders(cluster, topic).values()) - {-1}) == 3, 30,
                     f"{topic}'s partitions led by three brokers")


def test_produce_consume_and_offsets_follow_the_leaders(cluster3: Cluster) -> None:
    """Through broker 1 alone: produce (keyed, so every partition gets records), consume
    every partition, and the group verbs wherever the coordinator is."""
    topic = "spread"
    spread_topic(cluster3, topic)
    one = cluster3.address(1)
    sent = ok("produce", "--topic", topic, "--key-separator", ":", "-b", one,
              stdin=lines(30))
    assert sent.stderr == f"Sent 30 records to {topic}.\n"
    got = consumed(one, topic, "--print-key", "--key-separator", ":")
    assert sorted(got) == sorted(lines(30).splitlines())
    per_partition = consumed(one, topic, "--print-offset")
    assert {line.split(":", 1)[0] for line in per_partition} == {"0", "1", "2"}
    for p in range(TOPIC_PARTITIONS):  # --partition and --offset: ListOffsets at the leader
        alone = ok("consume", "--topic", topic, "--partition", str(p), "--offset", "earliest",
                   "--timeout-ms", "2000", "-b", one)
        assert alone.stdout.count("\n") == sum(1 for x in per_partition
                                               if x.startswith(f"{p}:"))

    group = "spread-group"
    ok("consume", "--topic", topic, "--group", group, "--from-beginning",
       "--max-messages", "30", "-b", one)
    for address in (cluster3.address(i) for i in (1, 2, 3)):  # coordinator found from any
        listed = ok("groups", "list", "-b", address)
        assert group in listed.stdout.split(), (address, listed.stdout)
        described = ok("groups", "describe", "--group", group, "-b", address)
        rows = [r.split() for r in described.stdout.splitlines() if r.startswith(topic)]
        assert len(rows) == 3 and all(r[4] == "0" for r in rows), described.stdout
    exported = ok("groups", "export-offsets", "--group", group, "-b", one)
    assert sum(int(r.split(",")[2]) for r in exported.stdout.splitlines()) == 30
    reset = ok("groups", "reset-offsets", "--group", group, "--topic", topic,
               "--to-earliest", "--execute", "-b", one)
    assert "Committed new offsets for 3 partitions" in reset.stdout
    lagging = ok("groups", "describe", "--group", group, "-b", cluster3.address(2))
    rows = [r.split() for r in lagging.stdout.splitlines() if r.startswith(topic)]
    assert sum(int(r[4]) for r in rows) == 30, lagging.stdout
    deleted = ok("groups", "delete", "--group", group, "-b", cluster3.address(3))
    assert deleted.stdout == f"Deleted group {group}.\n"


def test_verbs_retry_while_a_killed_leader_is_replaced(cluster3: Cluster) -> None:
    """Kill -9 the leader of partition 0, then at once (before the controller has moved
    leadership) produce to every partition and read them back through a surviving broker;
    and a bootstrap list whose first broker is the dead one."""
    topic = "moving"
    spread_topic(cluster3, topic)
    ok("produce", "--topic", topic, "--key-separator", ":", "-b", cluster3.address(1),
       stdin=lines(30))
    victim = leaders(cluster3, topic)[0]
    survivor = next(b for b in (1, 2, 3) if b != victim)
    cluster3.kill9(victim)
    sent = ok("produce", "--topic", topic, "--key-separator", ":",
              "-b", cluster3.address(survivor), stdin=lines(30, start=30))
    assert sent.stderr == f"Sent 30 records to {topic}.\n"
    assert victim not in leaders(cluster3, topic).values()
    both = f"{cluster3.address(victim)},{cluster3.address(survivor)}"
    got = consumed(both, topic, "--print-key", "--key-separator", ":")
    assert sorted(got) == sorted(lines(60).splitlines())
    for p in range(TOPIC_PARTITIONS):
        ok("consume", "--topic", topic, "--partition", str(p), "--offset", "latest",
           "--timeout-ms", "500", "-b", both)


def test_a_running_consumer_follows_a_leader_killed_under_it(cluster3: Cluster) -> None:
    """`consume` (no group) reads on while the leader of a partition dies and another
    takes over: every record produced before and after the kill is printed once."""
    topic = "under-consumer"
    spread_topic(cluster3, topic)
    bootstrap = cluster3.address(1)
    ok("produce", "--topic", topic, "--key-separator", ":", "-b", bootstrap, stdin=lines(30))
    victim = next(b for p, b in sorted(leaders(cluster3, topic).items()) if b != 1)
    proc = subprocess.Popen(
        [str(odradek_executable()), "consume", "--topic", topic, "--from-beginning",
         "--max-messages", "60", "--timeout-ms", "90000", "-b", bootstrap],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )
    try:
        assert proc.stdout is not None
        first = [proc.stdout.readline() for _ in range(30)]
        cluster3.kill9(victim)
        started = time.monotonic()
        ok("produce", "--topic", topic, "--key-separator", ":", "-b", bootstrap,
           stdin=lines(30, start=30))
        out, err = proc.communicate(timeout=CLI_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    printed = [line.rstrip("\n") for line in first] + out.splitlines()
    assert sorted(printed) == sorted(f"v{i}" for i in range(60)), err
    assert err.endswith("Processed a total of 60 messages\n"), err
    assert time.monotonic() - started < CLI_TIMEOUT_S


def test_topic_and_config_verbs_through_any_broker(cluster3: Cluster) -> None:
    """Cluster-wide verbs answer through whichever broker is the bootstrap one: a
    topic's config set through each broker is seen through the others, and partitions
    added through one are led and writable."""
    topic = "configured"
    spread_topic(cluster3, topic)
    for i, broker_id in enumerate((1, 2, 3)):
        address = cluster3.address(broker_id)
        ok("configs", "--entity-type", "topics", "--entity-name", topic, "--alter",
           "--add-config", f"retention.ms={1000000 + i}", "-b", address)
        for other in (1, 2, 3):
            cluster3.wait_for(lambda other=other, i=i: f"retention.ms={1000000 + i}" in ok(
                "configs", "--entity-type", "topics", "--entity-name", topic, "--describe",
                "-b", cluster3.address(other)).stdout, 30, "the config seen everywhere")
    ok("topics", "alter", "--topic", topic, "--partitions", "4", "-b", cluster3.address(3))
    cluster3.wait_for(lambda: len(leaders(cluster3, topic)) == 4
                      and -1 not in leaders(cluster3, topic).values(), 30,
                      "the new partition led")
    sent = ok("produce", "--topic", topic, "--partition", "3", "-b", cluster3.address(2),
              stdin="x\n")
    assert sent.stderr == f"Sent 1 record to {topic}.\n"
