"""A worked Spark pipeline over Odradek, runnable with one command:

    .venv/bin/python examples/spark_pipeline.py

It starts its own broker (odradek.testing, free port, temporary directory), creates an
``events`` topic (3 partitions) and a compacted ``totals`` topic, produces purchase events,
then runs a Structured Streaming aggregation (total and count per user) from ``events`` to
``totals`` in two rounds with the same checkpoint — more events arrive between the rounds —
and finally reads ``totals`` back as a batch DataFrame, latest value per key.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
from pathlib import Path

import confluent_kafka as ck
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    NewTopic,
)
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from odradek.testing import running_broker

USERS = ["ada", "bob", "cy", "dee", "eve"]


def produce_events(bootstrap: str, n: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    sums: dict[str, float] = {}
    for _ in range(n):
        user = rng.choice(USERS)
        amount = round(rng.uniform(1, 100), 2)
        sums[user] = sums.get(user, 0.0) + amount
        producer.produce("events", json.dumps({"user": user, "amount": amount}), user)
    assert producer.flush(30) == 0
    return sums


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("odradek-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="odradek-pipeline-"))
    with running_broker() as broker:
        boot = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": boot})
        futures = admin.create_topics(
            [
                NewTopic("events", 3, 1),
                NewTopic("totals", 1, 1, config={"cleanup.policy": "compact"}),
            ]
        )
        for f in futures.values():
            f.result(30)

        schema = "user string, amount double"
        events = (
            spark.readStream.format("odradek")  # found automatically: module pyspark_odradek
            .option("kafka.bootstrap.servers", boot)
            .option("subscribe", "events")
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
            .option("topic", "totals")
            .option("checkpointLocation", str(work / "checkpoint"))
        )

        expected = produce_events(boot, 1000, seed=1)
        query.trigger(availableNow=True).start().awaitTermination(300)
        print("round 1 done: 1000 events aggregated")
        for user, amount in produce_events(boot, 700, seed=2).items():
            expected[user] = expected.get(user, 0.0) + amount
        query.trigger(availableNow=True).start().awaitTermination(300)
        print("round 2 done: 700 more events aggregated")

        by_key = Window.partitionBy("key").orderBy(F.col("offset").desc())
        latest = (
            spark.read.format("odradek")
            .option("kafka.bootstrap.servers", boot)
            .option("subscribe", "totals")
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
    spark.stop()


if __name__ == "__main__":
    main()
