"""``odradek perf produce`` / ``perf consume`` against librdkafka's rdkafka_performance.

Usage: ``.venv/bin/python bench/perf_tools.py [--messages N] [--rounds R]``

One fresh Odradek broker on loopback (data under a temporary dir); in each round, N
records of 100 bytes are produced to a fresh 1-partition topic by rdkafka_performance
(``-P``, librdkafka defaults) and by ``odradek perf produce --throughput -1`` (librdkafka
defaults, acks=all as both default to), then each topic is consumed back by
rdkafka_performance (``-C -G``, a consumer group, like ours) and by ``odradek perf
consume``. The ratio is ours / theirs in records/s, median over the rounds. The target
(issue 18) is >= 0.8 for 100-byte records: the tool must not be the bottleneck.
rdkafka_performance is built by bench/_tools/build_rdkafka_performance.sh (as for
bench/peers.py).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.interop._broker import start_broker  # noqa: E402

PERF = ROOT / "bench" / "_tools" / "build" / "rdkafka_performance"
ODRADEK = ROOT / ".venv" / "bin" / "odradek"
SIZE = 100


def _row(text: str) -> dict[str, float]:
    """Last row of rdkafka_performance's ``-u`` table, keyed by its header."""
    header: list[str] = []
    row: dict[str, float] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|"):
            continue
        if "elapsed" in cells:
            header = cells
        elif header and len(cells) == len(header):
            try:
                row = {h: float(c) for h, c in zip(header, cells, strict=True)}
            except ValueError:
                continue
    return row


def rdkafka(args: list[str]) -> float:
    """records/s of one rdkafka_performance run (its own elapsed time)."""
    out = subprocess.run([str(PERF), "-u", "-q", *args], capture_output=True, text=True,
                         timeout=600, check=False)
    row = _row(out.stdout + out.stderr)
    count = row.get("dr", 0.0) if "-P" in args else row.get("msgs", 0.0)
    return count / (row["elapsed"] / 1000.0)


def ours_produce(bootstrap: str, topic: str, n: int) -> float:
    out = subprocess.run([str(ODRADEK), "perf", "produce", "-b", bootstrap, "--topic", topic,
                          "--num-records", str(n), "--record-size", str(SIZE),
                          "--throughput", "-1"], capture_output=True, text=True, timeout=600,
                         check=True)
    last = out.stdout.splitlines()[-1]
    m = re.match(r"(\d+) records sent, ([0-9.]+) records/sec", last)
    assert m and int(m[1]) == n, last
    return float(m[2])


def ours_consume(bootstrap: str, topic: str, n: int) -> float:
    out = subprocess.run([str(ODRADEK), "perf", "consume", "-b", bootstrap, "--topic", topic,
                          "--messages", str(n), "--hide-header"], capture_output=True,
                         text=True, timeout=600, check=True)
    cells = out.stdout.splitlines()[-1].split(", ")
    assert int(cells[4]) == n, cells
    return float(cells[9])  # fetch.nMsg.sec: rate once the group has its assignment


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    opts = ap.parse_args()
    if not PERF.exists():
        subprocess.run(["bash", str(ROOT / "bench/_tools/build_rdkafka_performance.sh")],
                       check=True)
    n = opts.messages
    results: dict[str, list[float]] = {k: [] for k in ("rp", "op", "rc", "oc")}
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp, start_broker(Path(tmp)) as broker:
        b = broker.bootstrap
        for r in range(opts.rounds):
            t1, t2 = f"rdk-{r}-{time.time_ns()}", f"ours-{r}-{time.time_ns()}"
            results["rp"].append(rdkafka(["-P", "-t", t1, "-b", b, "-s", str(SIZE),
                                          "-c", str(n)]))
            results["op"].append(ours_produce(b, t2, n))
            results["rc"].append(rdkafka(["-C", "-G", f"g-{t1}", "-t", t1, "-b", b,
                                          "-X", "auto.offset.reset=earliest",
                                          "-c", str(n)]))
            results["oc"].append(ours_consume(b, t2, n))
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"{n:,} x {SIZE} B, 1 partition, median of {opts.rounds} rounds (records/s)")
    print("| tool | rdkafka_performance | odradek perf | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| produce | {med['rp']:,.0f} | {med['op']:,.0f} | {med['op'] / med['rp']:.2f} |")
    print(f"| consume | {med['rc']:,.0f} | {med['oc']:,.0f} | {med['oc'] / med['rc']:.2f} |")
    for k, v in results.items():
        print(k, [round(x) for x in v], file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
