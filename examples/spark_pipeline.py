"""A worked Spark pipeline over Odradek, runnable with one command:

    .venv/bin/python examples/spark_pipeline.py [--bootstrap-server 127.0.0.1:9092]

It starts its own broker (odradek.testing, free port, temporary directory), or with
``--bootstrap-server`` uses a running one (then the topics get a suffix of this run,
``events-<id>``, so earlier runs do not count), creates an
``events`` topic (3 partitions) and a compacted ``totals`` topic, produces purchase events,
then runs a Structured Streaming aggregation (total and count per user) from ``events`` to
``totals`` in two rounds with the same checkpoint — more events arrive between the rounds —
and finally reads ``totals`` back as a batch DataFrame, latest value per key.

``main(argv, spark)`` takes an existing session too (tests/spark/test_example.py runs it
with the test suite's shared session against a broker of its own).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import random
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import confluent_kafka as ck
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    NewTopic,
)
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

import odradek.spark  # noqa: F401  (before the session: PYSPARK_PYTHON, see the README)
from odradek.testing import running_broker

#: librdkafka's log lines go through logging instead of raw to stderr
CLIENT_LOG = logging.getLogger("spark_pipeline.librdkafka")

USERS = ["ada", "bob", "cy", "dee", "eve"]


def produce_events(bootstrap: str, topic: str, n: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                            "logger": CLIENT_LOG})
    sums: dict[str, float] = {}
    for _ in range(n):
        user = rng.choice(USERS)
        amount = round(rng.uniform(1, 100), 2)
        sums[user] = sums.get(user, 0.0) + amount
        producer.produce(topic, json.dumps({"user": user, "amount": amount}), user)
    assert producer.flush(30) == 0
    return sums


@contextlib.contextmanager
def broker(bootstrap: str | None) -> Iterator[str]:
    """The running broker at ``bootstrap``, else one of our own for the run."""
    if bootstrap is not None:
        yield bootstrap
        return
    with running_broker() as own:
        yield own.bootstrap


def main(argv: Sequence[str] | None = None, spark: Any = None) -> None:
    """Run the pipeline; with ``spark`` given, in that session (left running)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help="a running broker (default: start one for this run)")
    args = parser.parse_args(argv)
    own_session = spark is None
    if own_session:
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("odradek-pipeline")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
    try:
        pipeline(spark, args.bootstrap_server)
    finally:
        if own_session:
            spark.stop()


def pipeline(spark: Any, bootstrap: str | None) -> None:
    suffix = f"-{uuid.uuid4().hex[:8]}" if bootstrap else ""
    events_topic, totals_topic = f"events{suffix}", f"totals{suffix}"
    with broker(bootstrap) as boot, tempfile.TemporaryDirectory(prefix="odradek-pipeline-") as tmp:
        work = Path(tmp)
        print(f"broker {boot}: topics {events_topic}, {totals_topic}")
        admin = AdminClient({"bootstrap.servers": boot,
                             "logger": CLIENT_LOG})  # type: ignore[dict-item]
        futures = admin.create_topics(
            [
                NewTopic(events_topic, 3, 1),
                NewTopic(totals_topic, 1, 1, config={"cleanup.policy": "compact"}),
            ]
        )
        for f in futures.values():
            f.result(30)
        del admin, futures  # closed now, not after the broker has stopped

        schema = "user string, amount double"
        events = (
            spark.readStream.format("odradek")  # found automatically: module pyspark_odradek
            .option("kafka.bootstrap.servers", boot)
            .option("subscribe", events_topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "500")
            .load()
            .select(F.from_json(F.col("value").cast("string"), schema).alias("e"))
            .select("e.*")
        )
        totals = events.groupBy("user").agg(
            F.round(F.sum("amount"), 2).alias("total"), F.count("*").alias("purchases")
        )
        query = (
            totals.select(
                F.col("user").alias("key"),
                F.to_json(F.struct("user", "total", "purchases")).alias("value"),
            )
            .writeStream.format("odradek")
            .outputMode("complete")  # Python data sources: append or complete
            .option("kafka.bootstrap.servers", boot)
            .option("topic", totals_topic)
            .option("checkpointLocation", str(work / "checkpoint"))
        )

        expected = produce_events(boot, events_topic, 1000, seed=1)
        query.trigger(availableNow=True).start().awaitTermination(300)
        print("round 1 done: 1000 events aggregated")
        for user, amount in produce_events(boot, events_topic, 700, seed=2).items():
            expected[user] = expected.get(user, 0.0) + amount
        query.trigger(availableNow=True).start().awaitTermination(300)
        print("round 2 done: 700 more events aggregated")

        by_key = Window.partitionBy("key").orderBy(F.col("offset").desc())
        latest = (
            spark.read.format("odradek")
            .option("kafka.bootstrap.servers", boot)
            .option("subscribe", totals_topic)
            .load()
            .withColumn("rank", F.row_number().over(by_key))
            .where("rank = 1")
            .select(F.col("key").cast("string").alias("user"), F.col("value").cast("string"))
            .orderBy("user")
        )
        rows = latest.collect()
        for r in rows:
            print(f"{r.user:>4}  {r.value}")
        got = {r.user: json.loads(r.value)["total"] for r in rows}
        assert set(got) == set(expected), (got, expected)
        assert all(abs(got[u] - round(expected[u], 2)) < 0.05 for u in got), (got, expected)
        print("totals match the events produced")


if __name__ == "__main__":
    main()
