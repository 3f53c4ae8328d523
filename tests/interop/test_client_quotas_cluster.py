"""Client quotas in a ZooKeeper cluster: stored under /config/clients and /config/users
(Kafka's layout, names URL-encoded; a user's quotas share its node with its SCRAM
credentials), seen by every broker through its watches, enforced by the broker that serves
the client."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest

from tests._zygote import run as run_odradek
from tests.interop._broker import odradek_executable
from tests.interop._cluster import Cluster, running_cluster

RATE = 200_000
VALUE = 1000


def configs(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_odradek(
        [str(odradek_executable()), "configs", "--bootstrap-server", address, *args], timeout=60,
    )


@pytest.fixture(scope="module")
def cluster2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("quota-cluster")
    with running_cluster(root, size=2, overrides={"quota.window.num": 3}) as cluster:
        yield cluster


def produce(cluster: Cluster, broker_id: int, topic: str, client_id: str,
            n: int) -> tuple[list[float], float]:
    """``n`` records of :data:`VALUE` bytes to ``broker_id``; (throttle times seen, seconds)."""
    throttles: list[float] = []
    producer = confluent_kafka.Producer({
        "bootstrap.servers": cluster.address(broker_id), "client.id": client_id,
        "batch.size": 16 * 1024, "linger.ms": 5,
        "throttle_cb": lambda event: throttles.append(event.throttle_time),
    })
    failed: list[Any] = []
    started = time.monotonic()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, b"%08d" % i + b"z" * (VALUE - 8),
                                 on_delivery=lambda err, _msg: failed.append(err)
                                 if err is not None else None)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(120) == 0
    assert not failed, failed[:3]
    return throttles, time.monotonic() - started


def test_quota_set_through_one_broker_is_enforced_by_another(cluster2: Cluster) -> None:
    cluster = cluster2
    topic = f"zq-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=1, replication_factor=1,
                         replica_assignment=[[2]])
    client_id = "zk producer/1"  # a space and a slash: URL-encoded in the path
    done = configs(cluster.address(1), "--entity-type", "clients", "--entity-name",
                   client_id, "--alter", "--add-config", f"producer_byte_rate={RATE}")
    assert done.returncode == 0, done.stderr
    stored = cluster.zk_get("/config/clients/zk%20producer%2F1")
    assert stored is not None
    assert json.loads(stored) == {"version": 1,
                                  "config": {"producer_byte_rate": str(RATE)}}

    expected = f"Quota configs for client-id '{client_id}' are producer_byte_rate={RATE}.0"

    def described_by_2() -> bool:
        out = configs(cluster.address(2), "--entity-type", "clients", "--describe")
        return out.stdout.splitlines() == [expected]

    cluster.wait_for(described_by_2, 30, "broker 2 to see the quota")

    # broker 2 leads the partition: it throttles the producer
    # 1 MB: 0.4 MB in the first window, the rest ~3 s at the quota
    throttles, took = produce(cluster, 2, topic, client_id, 1_000)
    assert throttles, "broker 2 never throttled the producer"
    assert took >= 2.0, f"1 MB at {RATE:,} B/s took {took:.1f} s"

    # removed through broker 2: broker 1 sees it gone
    done = configs(cluster.address(2), "--entity-type", "clients", "--entity-name",
                   client_id, "--alter", "--delete-config", "producer_byte_rate")
    assert done.returncode == 0, done.stderr
    assert cluster.zk_get("/config/clients/zk%20producer%2F1") is None

    def gone_at_1() -> bool:
        out = configs(cluster.address(1), "--entity-type", "clients", "--describe")
        return out.returncode == 0 and out.stdout == ""

    cluster.wait_for(gone_at_1, 30, "broker 1 to see the quota removed")




def test_user_quota_set_through_one_broker_is_enforced_by_another(cluster2: Cluster) -> None:
    """KIP-55 in ZooKeeper: a quota of user ANONYMOUS (a PLAINTEXT client) and one of its
    client ids, set through broker 1, throttle at broker 2 that client id only; a user's
    quota and SCRAM credential share /config/users/<user>."""
    cluster = cluster2
    topic = f"zu-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=1, replication_factor=1, replica_assignment=[[2]])
    user_client = ("--entity-type", "users", "--entity-name", "ANONYMOUS",
                   "--entity-type", "clients", "--entity-name", "zk user/app")
    done = configs(cluster.address(1), *user_client, "--alter", "--add-config",
                   f"producer_byte_rate={RATE}")
    assert done.returncode == 0, done.stderr
    path = "/config/users/ANONYMOUS/clients/zk%20user%2Fapp"
    stored = cluster.zk_get(path)
    assert stored is not None
    assert json.loads(stored) == {"version": 1, "config": {"producer_byte_rate": str(RATE)}}
    expected = (f"Quota configs for user-principal 'ANONYMOUS', client-id 'zk user/app' are "
                f"producer_byte_rate={RATE}.0")

    def described_by_2() -> bool:
        out = configs(cluster.address(2), "--entity-type", "users", "--entity-type",
                      "clients", "--describe")
        return out.stdout.splitlines() == [expected]

    cluster.wait_for(described_by_2, 30, "broker 2 to see the user's quota")
    # 1 MB: 0.4 MB in the first window, the rest ~3 s at the quota
    throttles, took = produce(cluster, 2, topic, "zk user/app", 1_000)
    assert throttles, "broker 2 never throttled the user's client id"
    assert took >= 2.0, f"1 MB at {RATE:,} B/s took {took:.1f} s"
    others, _ = produce(cluster, 2, topic, "zk other app", 400)  # within the first window
    assert not others, "another client id of the user was throttled"

    # a user's quota next to its SCRAM credential in one node; removing it keeps the other
    dave = ("--entity-type", "users", "--entity-name", "dave")
    done = configs(cluster.address(2), *dave, "--alter", "--add-config",
                   "SCRAM-SHA-256=[iterations=4096,password=dave-secret],"
                   "consumer_byte_rate=4096")
    assert done.returncode == 0, done.stderr
    doc = json.loads(cluster.zk_get("/config/users/dave") or b"{}")
    assert doc["config"]["consumer_byte_rate"] == "4096"
    assert doc["config"]["SCRAM-SHA-256"].startswith("salt=")
    done = configs(cluster.address(1), *dave, "--alter", "--delete-config",
                   "consumer_byte_rate")
    assert done.returncode == 0, done.stderr
    doc = json.loads(cluster.zk_get("/config/users/dave") or b"{}")
    assert set(doc["config"]) == {"SCRAM-SHA-256"}

    # removed through broker 2: broker 1 sees it gone, and the emptied nodes go
    done = configs(cluster.address(2), *user_client, "--alter", "--delete-config",
                   "producer_byte_rate")
    assert done.returncode == 0, done.stderr
    assert cluster.zk_get(path) is None
    assert cluster.zk_get("/config/users/ANONYMOUS") is None

    def gone_at_1() -> bool:
        out = configs(cluster.address(1), "--entity-type", "users", "--entity-type",
                      "clients", "--describe")
        return out.returncode == 0 and out.stdout == ""

    cluster.wait_for(gone_at_1, 30, "broker 1 to see the user's quota removed")
