"""One consume cell of bench/peers.py, several rounds, with where the records lie kept.

Usage: ``.venv/bin/python bench/consume_layout.py [--brokers odradek,tansu,odradek@REF]
[--layout sticky|even|W0:W1:...] [--rounds R] [--reads K] [--messages N]
[--partitions P] [--codec lz4] [--trace]``

Each round starts every broker fresh (the order rotating between rounds), produces N
records of 100 B (acks=1, 1 MB batches, the codec) to a topic of P partitions and reads
them back K times with rdkafka_performance and bench/peers.py's consumer settings. The
layout decides where the records go: ``sticky`` is the default partitioner, as in
peers.py's produce cells (each batch on a partition drawn at random, so every broker gets
another layout); ``even`` is N/P records produced to each partition (one producer run a
partition); ``W0:W1:...`` weights give partition i a share Wi / sum(W). Printed per read:
records/s (rdkafka_performance's clock: from the first message to the last), the share
of partition 0 (the first the client decodes) and the broker's CPU seconds. With
``--trace`` each read runs with librdkafka's ``debug=fetch,protocol`` and prints, per
Fetch answer, its size and round trip as librdkafka saw them, and how many milliseconds
passed from the first records enqueued (the clock's start) to the last.

Why: the lz4 consume cells of peers.py swung between 0.75x and 1.62x of Tansu from run
to run with the broker at 0.1 CPU s/GB (bench/README.md, "lz4 consume cells").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from collections import defaultdict
from datetime import datetime

import peers  # bench/peers.py: brokers, load generator, consumer settings

ANSWER = re.compile(r"Received FetchResponse \(v\d+, (\d+) bytes, CorrId \d+, rtt ([\d.]+)ms")
ENQUEUE = re.compile(r"^%7\|([\d.]+)\|CONSUME\|.*Enqueue (\d+) message", re.M)


def _watermarks(broker: peers.Broker, topic: str, partitions: int) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition  # type: ignore[attr-defined]

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "layout"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)]
    finally:
        consumer.close()


def _produce(broker: peers.Broker, topic: str, n: int, partitions: int, layout: str,
             codec: str) -> None:
    if layout == "sticky":
        res = peers.produce(broker, topic, n, "1", 1_000_000, codec, None)
        if res.error:
            raise RuntimeError(res.error)
        return
    weights = [1.0] * partitions if layout == "even" else [float(w) for w in layout.split(":")]
    if len(weights) != partitions:
        raise ValueError(f"{len(weights)} weights for {partitions} partitions")
    for p, w in enumerate(weights):
        res = peers.produce(broker, topic, int(n * w / sum(weights)), "1", 1_000_000, codec, p)
        if res.error:
            raise RuntimeError(res.error)


def _traced_read(broker: peers.Broker, topic: str, n: int, partitions: int) -> dict[str, object]:
    """One read with librdkafka's fetch and protocol debug: rate, answers, decode window."""
    props = {**peers.CONSUMER_X, "debug": "fetch,protocol"}
    args = ["-C", "-t", topic, "-b", broker.bootstrap, "-o", "beginning", "-c", str(n), "-e",
            *peers._xargs(props)]
    for p in range(partitions):
        args += ["-p", str(p)]
    cpu0 = broker.cpu()
    proc = subprocess.run([str(peers.PERF), "-u", "-i", "100000", *args],
                          capture_output=True, text=True, timeout=max(120.0, n / 10000))
    text = proc.stdout + proc.stderr
    row = peers._table_row(text)
    enq = [(float(t), int(c)) for t, c in ENQUEUE.findall(text)]
    return {
        "rate": row.get("msgs", 0) / (row["elapsed"] / 1000) if row.get("elapsed") else 0.0,
        "cpu": broker.cpu() - cpu0,
        "answers": [(int(size), float(rtt)) for size, rtt in ANSWER.findall(text)],
        "enqueue_span_ms": (enq[-1][0] - enq[0][0]) * 1000 if enq else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--brokers", default="odradek,tansu")
    parser.add_argument("--layout", default="even")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reads", type=int, default=3)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--codec", default="lz4")
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--out", default="", help="append one JSON line a read to this file")
    args = parser.parse_args(argv)
    brokers = [b for b in args.brokers.split(",") if b]
    for b in brokers:
        if b.startswith("odradek@"):
            peers.SPECS[b] = peers.odradek_at(b.split("@", 1)[1])
        elif b not in peers.SPECS:
            parser.error(f"unknown broker {b}")
    peers.ensure_tools(need_venv=any(b in peers.PEERS for b in brokers))
    peers.WORK.mkdir(parents=True, exist_ok=True)
    rates: dict[str, list[float]] = defaultdict(list)
    out = open(args.out, "a") if args.out else None  # noqa: SIM115 (closed below)
    try:
        for r in range(args.rounds):
            k = r % len(brokers)
            for name in brokers[k:] + brokers[:k]:
                broker = peers.Broker(peers.SPECS[name], peers.WORK / f"{name}-layout")
                try:
                    peers.create_topic(broker, "layout", args.partitions)
                    _produce(broker, "layout", args.messages, args.partitions, args.layout,
                             args.codec)
                    hw = _watermarks(broker, "layout", args.partitions)
                    for i in range(args.reads):
                        if args.trace:
                            got = _traced_read(broker, "layout", sum(hw), args.partitions)
                        else:
                            res = peers.consume(broker, "layout", sum(hw), args.partitions)
                            got = {"rate": res.rate, "cpu": res.cpu, "error": res.error}
                        got.update(round=r, read=i, broker=name, layout=args.layout,
                                   share0=hw[0] / sum(hw), load=os.getloadavg()[0])
                        rate = float(got["rate"])  # type: ignore[arg-type]
                        rates[name].append(rate)
                        answers = " ".join(f"{s // 1000}KB/{t:.1f}ms"
                                           for s, t in got.get("answers", []))  # type: ignore[attr-defined]
                        span = (f" decode {got['enqueue_span_ms']:.0f} ms"
                                if args.trace else "")
                        print(f"{datetime.now():%H:%M:%S} round {r} {name:16s} read {i} "
                              f"{rate / 1e6:5.2f}M records/s  partition 0 "
                              f"{got['share0']:.2f}  load {got['load']:.1f}{span}  {answers}",
                              flush=True)
                        if out:
                            out.write(json.dumps(got) + "\n")
                finally:
                    broker.stop()
                    shutil.rmtree(broker.data, ignore_errors=True)
    finally:
        if out:
            out.close()
    for name, seen in rates.items():
        print(f"{name:16s} median {statistics.median(seen) / 1e6:.2f}M records/s over "
              f"{len(seen)} reads: {' '.join(f'{x / 1e6:.2f}' for x in seen)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
