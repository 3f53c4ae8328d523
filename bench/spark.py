"""Spark connector throughput: rows/s written to and read from a topic by Spark.

Beside, in the same run and the same SparkSession (local[2]): a ``spark.range`` job of the
same row count feeding the same sink, which is what Spark itself costs without any I/O.
Each job ends in the ``noop`` sink so every row is materialised; each runs five times
and the median run is reported. The broker runs as
``odradek serve`` in its own process, with its data under .bench-tmp/.

    .venv/bin/python bench/spark.py [--rows 1000000] [--size 100] [--partitions 2]

Writes bench/results/spark.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent


BROKER_PID: list[int] = []


def _broker_cpu() -> float:
    """CPU seconds (user + system) used so far by the broker process."""
    if not BROKER_PID:
        return 0.0
    fields = Path(f"/proc/{BROKER_PID[0]}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


REPEAT = 5


def _timed(label: str, fn: Any, rows: int, results: list[tuple[str, float, float, float]]) -> None:
    """Run ``fn(i)`` REPEAT times; keep the median run (a warm JVM and warm workers)."""
    runs = []
    for i in range(REPEAT):
        cpu = _broker_cpu()
        t = time.perf_counter()
        fn(i)
        runs.append((time.perf_counter() - t, _broker_cpu() - cpu))
    dt, cpu = sorted(runs)[REPEAT // 2]
    results.append((label, dt, rows / dt, cpu))
    spread = ", ".join(f"{r:.2f}" for r, _ in runs)
    print(f"{label:<60} {dt:8.2f} s {rows / dt:12,.0f} rows/s broker CPU {cpu:.1f} s "
          f"(runs: {spread} s)", flush=True)


@contextmanager
def serve_broker(tmp: Path) -> Iterator[str]:
    """``odradek serve`` in its own process (as deployed), on a free port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data = tempfile.mkdtemp(dir=tmp)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "odradek",
            "serve",
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override",
            f"log.dirs={data}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("broker did not start") from None
                time.sleep(0.2)
        BROKER_PID[:] = [proc.pid]
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=2)
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    import confluent_kafka as ck
    import pyarrow as pa
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        NewTopic,
    )
    from pyspark.sql import SparkSession

    from odradek.spark import client as kc
    from odradek.spark import fetcher
    from odradek.spark.source import OdradekBatchReader, OdradekDataSource, OffsetRange

    class LibrdkafkaReader(OdradekBatchReader):
        """The same plan read through librdkafka (the path kept for TLS/SASL/read_committed):
        one confluent-kafka Message per record, then Arrow."""

        def read(self, partition: Any) -> Iterator[Any]:
            assert isinstance(partition, OffsetRange)
            return kc.read_range(
                self.opts, partition.topic, partition.partition, partition.start, partition.until
            )

    class LibrdkafkaSource(OdradekDataSource):
        @classmethod
        def name(cls) -> str:
            return "odradek_librdkafka"

        def reader(self, schema: Any) -> Any:
            return LibrdkafkaReader(cast(OdradekBatchReader, super().reader(schema)).opts)

    tmp = ROOT / ".bench-tmp"
    tmp.mkdir(exist_ok=True)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("odradek-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(LibrdkafkaSource)
    n, size = args.rows, args.size
    results: list[tuple[str, float, float, float]] = []
    with serve_broker(tmp) as boot:
        admin = AdminClient({"bootstrap.servers": boot})
        topics = ["bench-spark", "bench-warm"] + [f"bench-spark-{i}" for i in range(1, REPEAT)]
        for t in topics:
            admin.create_topics([NewTopic(t, args.partitions, 1)])[t].result(30)
        src = spark.range(n, numPartitions=args.partitions).selectExpr(
            f"cast(rpad(cast(id as string), {size}, 'x') as binary) as value"
        )
        # warm-up: JVM, Python workers, connections
        spark.range(1000).selectExpr("cast(id as string) as value").write.format("odradek").option(
            "kafka.bootstrap.servers", boot
        ).option("topic", "bench-warm").mode("append").save()
        spark.read.format("odradek").option("kafka.bootstrap.servers", boot).option(
            "subscribe", "bench-warm"
        ).load().write.format("noop").mode("overwrite").save()

        _timed(
            f"spark.range({n:,}) -> {size} B value -> noop",
            lambda _: src.write.format("noop").mode("overwrite").save(),
            n,
            results,
        )
        _timed(
            f"write {n:,} x {size} B to a {args.partitions}-partition topic",
            lambda i: (  # each run into its own topic: the reads below read bench-spark
                src.write.format("odradek")
                .option("kafka.bootstrap.servers", boot)
                .option("topic", f"bench-spark-{i}" if i else "bench-spark")
                .mode("append")
                .save()
            ),
            n,
            results,
        )

        def read(fmt: str) -> Any:
            return (
                spark.read.format(fmt)
                .option("kafka.bootstrap.servers", boot)
                .option("subscribe", "bench-spark")
                .load()
                .write.format("noop")
                .mode("overwrite")
                .save()
            )

        _timed(
            f"read {n:,} records -> noop (batches decoded to Arrow in C)",
            lambda _: read("odradek"),
            n,
            results,
        )
        _timed(
            f"read {n:,} records -> noop (librdkafka, a Message per record)",
            lambda _: read("odradek_librdkafka"),
            n,
            results,
        )
        count = (
            spark.read.format("odradek")
            .option("kafka.bootstrap.servers", boot)
            .option("subscribe", "bench-spark")
            .load()
            .count()
        )
        assert count == n, count

        # the readers alone, one partition in this process: the ceiling of a Spark task
        from odradek.spark.options import parse_read_options

        opts = parse_read_options(
            {"kafka.bootstrap.servers": boot, "subscribe": "bench-spark"}, streaming=False
        )
        c = ck.Consumer({"bootstrap.servers": boot, "group.id": "b"})
        low, high = c.get_watermark_offsets(ck.TopicPartition("bench-spark", 0), timeout=10)
        c.close()
        for label, impl in (("C decoder", fetcher.read_range), ("librdkafka", kc.read_range)):
            _timed(
                f"partition 0 ({high - low:,} records) to Arrow in one process, no Spark "
                f"({label})",
                lambda _, impl=impl: sum(
                    b.num_rows for b in impl(opts, "bench-spark", 0, low, high)
                ),
                high - low,
                results,
            )
        _ = pa
    spark.stop()
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, Spark local[2], "
        f"{time.strftime('%Y-%m-%d %H:%M:%S')}",
        "",
        f"Command: `.venv/bin/python bench/spark.py --rows {n} --size {size} "
        f"--partitions {args.partitions}`",
        "",
        "| job | seconds | rows/s | ratio to spark.range | broker CPU s |",
        "|---|---:|---:|---:|---:|",
    ]
    base = results[0][2]
    for label, dt, rate, cpu in results:
        lines.append(f"| {label} | {dt:.2f} | {rate:,.0f} | {rate / base:.2f} | {cpu:.1f} |")
    (out / "spark.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
