"""Client quotas in a ZooKeeper cluster: stored under /config/clients (Kafka's layout,
client ids URL-encoded), seen by every broker through its watches, enforced by the broker
that serves the client."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import confluent_kafka

from tests.interop._broker import odradek_executable
from tests.interop._cluster import running_cluster

RATE = 200_000
VALUE = 1000


def configs(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(odradek_executable()), "configs", "--bootstrap-server", address, *args],
        capture_output=True, text=True, timeout=60,
    )


def test_quota_set_through_one_broker_is_enforced_by_another(tmp_path: Path) -> None:
    with running_cluster(tmp_path, size=2, overrides={"quota.window.num": 3}) as cluster:
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
        throttles: list[float] = []
        producer = confluent_kafka.Producer({
            "bootstrap.servers": cluster.address(2), "client.id": client_id,
            "batch.size": 16 * 1024, "linger.ms": 5,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        })
        failed: list[Any] = []
        started = time.monotonic()
        n = 1_500  # 1.5 MB: 0.4 MB in the first window, the rest ~5.5 s at the quota
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
        took = time.monotonic() - started
        assert not failed, failed[:3]
        assert throttles, "broker 2 never throttled the producer"
        assert took >= 4.0, f"1.5 MB at {RATE:,} B/s took {took:.1f} s"

        # removed through broker 2: broker 1 sees it gone
        done = configs(cluster.address(2), "--entity-type", "clients", "--entity-name",
                       client_id, "--alter", "--delete-config", "producer_byte_rate")
        assert done.returncode == 0, done.stderr
        assert cluster.zk_get("/config/clients/zk%20producer%2F1") is None

        def gone_at_1() -> bool:
            out = configs(cluster.address(1), "--entity-type", "clients", "--describe")
            return out.returncode == 0 and out.stdout == ""

        cluster.wait_for(gone_at_1, 30, "broker 1 to see the quota removed")


