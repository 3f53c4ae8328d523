"""The streaming source's driver side rides out a leader killed -9 under it: the next
``latestOffset`` answers (from the new leader) instead of failing the query.

Found by ``test_mirror_cluster.py``: the driver's watermark query, sent through the
cached librdkafka consumer to the leader just killed, waited out the whole
``kafka.default.api.timeout.ms`` and the query failed ("Failed to get watermark offsets:
Local: Timed out"). No Spark session is needed: the reader's driver methods are called
as Spark calls them, against a real two-broker cluster on a real ZooKeeper."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from odradek.spark.options import parse_read_options
from odradek.spark.source import OdradekStreamReader
from tests._deadlines import describe, expired
from tests.interop._cluster import Cluster, running_cluster

TOPIC = "leader-loss"
RECORDS = 200


def state(cluster: Cluster, partition: int) -> dict[str, Any]:
    raw = cluster.zk_get(f"/brokers/topics/{TOPIC}/partitions/{partition}/state")
    return json.loads(raw) if raw else {"leader": -1, "isr": []}


def test_latest_offset_answers_after_the_leader_is_killed(tmp_path: Path) -> None:
    with running_cluster(tmp_path, 2, {"replica.lag.time.max.ms": 5000}) as cluster:
        cluster.create_topic(TOPIC, 2, config={"min.insync.replicas": "1"},
                             replica_assignment=[[1, 2], [2, 1]])
        cluster.wait_for(lambda: all(len(state(cluster, q)["isr"]) == 2 for q in (0, 1)),
                         60, "both replicas in sync")
        p = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(RECORDS):
            p.produce(TOPIC, f"v{i}".encode(), partition=i % 2)
        assert p.flush(60) == 0
        reader = OdradekStreamReader(parse_read_options(
            {"kafka.bootstrap.servers": cluster.bootstrap, "subscribe": TOPIC,
             "startingOffsets": "earliest"}, streaming=True))
        try:
            start = reader.initialOffset()
            before = reader.latestOffset(start, ReadAllAvailable())
            assert before == {TOPIC: {"0": RECORDS // 2, "1": RECORDS // 2}}
            victim = state(cluster, 0)["leader"]
            cluster.kill9(victim)  # the reader's client still knows it as the leader
            started = time.monotonic()
            after = reader.latestOffset(start, ReadAllAvailable())
            took = time.monotonic() - started
            assert after == before  # acks=all: nothing acknowledged is gone
            assert state(cluster, 0)["leader"] not in (-1, victim)
            assert took < 30, took  # within kafka.default.api.timeout.ms
        finally:
            reader.stop()


def test_unknown_partition_from_librdkafka_is_ridden_out(tmp_path: Path) -> None:
    """librdkafka's watermark query fails UNKNOWN_PARTITION at once, without asking the
    broker, when its cached metadata gives the partition no leader (a leader killed and
    its election under way: whole run Q31 failed the mirror's query on it) or does not
    list it. For a partition the discovery has just listed, that is a reason to ask again
    with a new client (TransientSparkError), not to fail the query."""
    from odradek.spark import client as kc
    from odradek.testing import running_broker

    with running_broker(data_dir=tmp_path) as rb:
        rb.call(rb.broker.metadata.create_topic, TOPIC, 1, 1, {})
        consumer = ck.Consumer({"bootstrap.servers": rb.bootstrap, "group.id": "wm"})
        try:
            assert kc.watermarks(consumer, [(TOPIC, 0)], 5000) == {(TOPIC, 0): (0, 0)}
            try:
                kc.watermarks(consumer, [(TOPIC, 7)], 2000)  # cached, no such partition
            except kc.TransientSparkError as exc:
                assert "Unknown partition" in str(exc)
            else:
                raise AssertionError("UNKNOWN_PARTITION did not raise")
        finally:
            consumer.close()


def test_watermarks_anew_asks_again_with_a_new_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a task's range check and the mirror's replay fence use: a partition that
    librdkafka's answer does not show yet (here: not created yet; in Q31, a leader lost)
    is asked for again through a new consumer, until it shows or the timeout passes."""
    from confluent_kafka.admin import AdminClient, NewPartitions  # type: ignore[attr-defined]

    from odradek.spark import client as kc
    from odradek.testing import running_broker

    built: list[dict[str, str]] = []
    real_consumer = kc.consumer

    def counting(client: dict[str, str], extra: dict[str, Any] | None = None) -> Any:
        if threading.current_thread().name == "anew":  # only the query under test
            built.append(client)
        return real_consumer(client, extra)

    monkeypatch.setattr(kc, "consumer", counting)
    with running_broker(data_dir=tmp_path) as rb:
        rb.call(rb.broker.metadata.create_topic, TOPIC, 1, 1, {})
        conf = {"bootstrap.servers": rb.bootstrap}
        # gives up at its timeout: with librdkafka's "Unknown partition" when its metadata
        # came in time, or its own "Timed out" when a loaded machine's first connection
        # and metadata took the whole 1.5 s (a whole run, 2026-11-29)
        with pytest.raises(kc.TransientSparkError, match=r"Unknown partition|Timed out"):
            kc.watermarks_anew(conf, [(TOPIC, 1)], 1500)
        got: dict[tuple[str, int], tuple[int, int]] = {}
        worker = threading.Thread(
            target=lambda: got.update(kc.watermarks_anew(conf, [(TOPIC, 1)], 60_000)),
            name="anew")
        worker.start()
        try:
            started = time.monotonic()
            while len(built) < 2 and not expired(started, 30):  # one attempt failed
                time.sleep(0.02)
            assert len(built) >= 2, f"{built} after {describe(started, 30)}"
            admin = AdminClient(conf)
            admin.create_partitions([NewPartitions(TOPIC, 2)])[TOPIC].result(30)
        finally:
            worker.join(60)
        assert got == {(TOPIC, 1): (0, 0)}
