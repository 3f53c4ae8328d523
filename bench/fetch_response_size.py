"""How the broker's fetch response cap (``fetch.max.bytes``) changes a consumer's speed.

How it works: one Odradek broker gets three topics (1, 8 and 10 partitions) of N
100-byte records each (librdkafka's ``rdkafka_performance``, 1 MB batches, no
compression), then is restarted once per cap (``fetch.max.bytes`` is a static config, as
in Kafka) and each topic is consumed from the beginning by ``rdkafka_performance`` with
bench/peers.py's consumer settings (8 MiB per partition, 64 MiB per request asked). The
caps run in interleaved rounds so that a busy moment of this shared machine falls on all
of them alike; the table gives each cap's median records/s, the consumer's CPU seconds
(user + system, from ``RUSAGE_CHILDREN``) and the broker's.

    .venv/bin/python bench/fetch_response_size.py
    .venv/bin/python bench/fetch_response_size.py --records 5000000 --rounds 5 \\
        --caps 57671680,16777216,8388608,4194304

With one partition the request's own 8 MiB per partition is the cap whatever the broker
says, so that row shows the noise of the sitting.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from peers import (
    CONSUMER_X,
    WORK,
    Broker,
    Spec,
    _xargs,
    create_topic,
    ensure_tools,
    produce,
    run_perf,
)

TOPICS = {"c1": 1, "c8": 8, "c10": 10}


@dataclass(frozen=True)
class CappedOdradek(Spec):
    """``odradek serve`` with ``fetch.max.bytes`` set (0: the default)."""

    cap: int = 0

    def argv(self, port: int, data: Path, metrics_port: int = 0) -> list[str]:
        args = super().argv(port, data, metrics_port)
        return args + (["--override", f"fetch.max.bytes={self.cap}"] if self.cap else [])


@dataclass
class Sample:
    records_per_s: float
    client_cpu_s: float
    client_sys_s: float
    broker_cpu_s: float


def consume(broker: Broker, topic: str, partitions: int, records: int) -> Sample:
    args = ["-C", "-t", topic, "-b", broker.bootstrap, "-o", "beginning", "-c", str(records),
            "-e", *_xargs(CONSUMER_X)]
    for p in range(partitions):
        args += ["-p", str(p)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    broker_before = broker.cpu()
    row, out = run_perf(args, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    got, elapsed_s = int(row.get("msgs", 0)), row.get("elapsed", 0) / 1000
    if got < records or not elapsed_s:
        raise SystemExit(f"consumed {got}/{records} of {topic}: {out.strip()[-300:]}")
    system = after.ru_stime - before.ru_stime
    return Sample(records / elapsed_s, after.ru_utime - before.ru_utime + system, system,
                  broker.cpu() - broker_before)


def _mib(cap: int) -> str:
    return "default" if not cap else f"{cap / (1 << 20):g} MiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--records", type=int, default=3_000_000, help="per topic")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--caps", default=f"{55 << 20},{8 << 20},{4 << 20},{2 << 20}",
                        help="fetch.max.bytes values, comma-separated (0: the default)")
    args = parser.parse_args()
    caps = [int(c) for c in args.caps.split(",")]
    ensure_tools(need_venv=False)
    data = WORK / "fetch-response-size"
    shutil.rmtree(data, ignore_errors=True)
    broker = Broker(CappedOdradek("odradek", "disk (page cache)"), data)
    try:
        for topic, partitions in TOPICS.items():
            create_topic(broker, topic, partitions)
            res = produce(broker, topic, args.records, "1", 1_000_000, "none",
                          0 if partitions == 1 else None)
            if res.error:
                raise SystemExit(f"producing {topic}: {res.error}")
    finally:
        broker.stop()
    samples: dict[tuple[str, int], list[Sample]] = {}
    for r in range(args.rounds):
        for cap in caps if r % 2 == 0 else caps[::-1]:
            broker = Broker(CappedOdradek("odradek", "disk (page cache)", cap=cap), data)
            try:
                for topic, partitions in TOPICS.items():
                    s = consume(broker, topic, partitions, args.records)
                    samples.setdefault((topic, cap), []).append(s)
                    print(f"round {r} {_mib(cap):>8} {topic:>3}: {s.records_per_s / 1e6:.2f} M/s "
                          f"client {s.client_cpu_s:.2f} s (sys {s.client_sys_s:.2f}) "
                          f"broker {s.broker_cpu_s:.2f} s", file=sys.stderr, flush=True)
            finally:
                broker.stop()
    shutil.rmtree(data, ignore_errors=True)
    print(f"Command: `.venv/bin/python bench/fetch_response_size.py {' '.join(sys.argv[1:])}`")
    print()
    print("| topic | fetch.max.bytes | records/s (median) | consumer CPU s | of it system | "
          "broker CPU s |")
    print("|---|---:|---:|---:|---:|---:|")
    for topic in TOPICS:
        for cap in caps:
            got = samples[(topic, cap)]
            print(f"| {topic} ({TOPICS[topic]} p) | {_mib(cap)} | "
                  f"{statistics.median(s.records_per_s for s in got) / 1e6:.2f} M | "
                  f"{statistics.median(s.client_cpu_s for s in got):.2f} | "
                  f"{statistics.median(s.client_sys_s for s in got):.2f} | "
                  f"{statistics.median(s.broker_cpu_s for s in got):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
