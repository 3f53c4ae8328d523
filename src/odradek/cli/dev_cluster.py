"""``odradek dev-cluster --brokers N``: a local ZooKeeper and N brokers, in one command.

What it starts, under ``--data-dir`` (default ``./dev-cluster``)::

    zookeeper/            zoo.cfg and ZooKeeper's data (on --zookeeper-port, default: free)
    broker-<id>/          each broker's log dir
    logs/zookeeper.log    ZooKeeper's log
    logs/broker-<id>.log  each broker's stdout and stderr

Broker ``id`` (1..N) runs ``odradek serve`` with ``broker.id=<id>``,
``listeners=PLAINTEXT://127.0.0.1:<base-port + id - 1>``, ``log.dirs=<data-dir>/broker-<id>``
and ``zookeeper.connect=127.0.0.1:<zk port>/odradek``, and
``offsets.topic.replication.factor`` = min(3, N); ``--override k=v`` goes to every broker.
A second run on the same data dir finds the same topics and records.

It prints a table of what it started and the bootstrap string, waits until every broker
accepts connections, then watches them. Ctrl-C or SIGTERM stops the brokers (SIGTERM, a
grace period, then SIGKILL) and then ZooKeeper, and exits 0. A broker that exits on its
own is reported with the tail of its log; the rest are stopped and the exit status is 1.

Every child runs in its own session (process group): a Ctrl-C in the terminal reaches only
this command, which then stops the brokers before ZooKeeper (brokers that lose ZooKeeper
first would spend their shutdown reconnecting).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any

from odradek.cli._common import parse_pairs, print_table
from odradek.cluster.local_zookeeper import (
    LocalZooKeeper,
    ZooKeeperNotInstalled,
    ZooKeeperStartError,
    port_free,
    start_zookeeper,
)

HOST = "127.0.0.1"
CHROOT = "/odradek"
#: Set per broker by dev-cluster itself; overriding them would break the layout above.
RESERVED_KEYS = ("broker.id", "node.id", "listeners", "advertised.listeners", "log.dirs",
                 "log.dir", "zookeeper.connect")
READY_TIMEOUT_S = 60.0
STOP_GRACE_S = 15.0
POLL_S = 0.1
LOG_TAIL_LINES = 30


@dataclass
class DevBroker:
    broker_id: int
    port: int
    log_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes]
    log_file: IO[bytes]

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    def accepts_connections(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        self.log_file.flush()
        text = self.log_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)


def broker_command(broker_id: int, port: int, log_dir: Path, zookeeper_connect: str,
                   overrides: dict[str, str]) -> list[str]:
    """``python -m odradek.cli.main serve --override ...`` for one broker (this interpreter,
    so the brokers run the same code as this command)."""
    config = {
        "broker.id": str(broker_id),
        "listeners": f"PLAINTEXT://{HOST}:{port}",
        "log.dirs": str(log_dir),
        "zookeeper.connect": zookeeper_connect,
        **overrides,
    }
    argv = [sys.executable, "-m", "odradek.cli.main", "serve"]
    for key, value in config.items():
        argv += ["--override", f"{key}={value}"]
    return argv


class DevCluster:
    def __init__(self, args: argparse.Namespace, overrides: dict[str, str]) -> None:
        self.count: int = args.brokers
        self.base_port: int = args.base_port
        self.zookeeper_port: int | None = args.zookeeper_port
        self.data_dir = Path(args.data_dir).resolve()
        self.stop_grace: float = args.stop_grace
        # __consumer_offsets replicated as Kafka's default (3) where the cluster allows it,
        # so a group survives the loss of its coordinator; a new group's first rebalance
        # not delayed, as config/server.properties for development; --override wins.
        self.overrides = {
            "offsets.topic.replication.factor": str(min(3, self.count)),
            "group.initial.rebalance.delay.ms": "0", **overrides,
        }
        self.zookeeper: LocalZooKeeper | None = None
        self.brokers: list[DevBroker] = []
        self.stopping = threading.Event()

    # ---- start
    def start(self) -> None:
        logs = self.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.zookeeper = start_zookeeper(
            self.data_dir / "zookeeper", port=self.zookeeper_port,
            log_path=logs / "zookeeper.log",
        )
        connect = self.zookeeper.connect_string(CHROOT)
        for broker_id in range(1, self.count + 1):
            port = self.base_port + broker_id - 1
            log_dir = self.data_dir / f"broker-{broker_id}"
            log_dir.mkdir(parents=True, exist_ok=True)
            log_path = logs / f"broker-{broker_id}.log"
            log_file = log_path.open("ab")
            process = subprocess.Popen(
                broker_command(broker_id, port, log_dir, connect, self.overrides),
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.brokers.append(DevBroker(broker_id, port, log_dir, log_path, process, log_file))

    def print_table(self) -> None:
        assert self.zookeeper is not None
        rows: list[list[Any]] = [["WHAT", "ID", "ADDRESS", "PID", "DATA", "LOG"]]
        rows.append(["zookeeper", "-", self.zookeeper.connect_string(CHROOT),
                     self.zookeeper.pid, self.zookeeper.data_dir, self.zookeeper.log_path])
        for b in self.brokers:
            rows.append(["broker", b.broker_id, b.bootstrap, b.process.pid, b.log_dir,
                         b.log_path])
        print_table(rows)
        print(f"bootstrap: {self.bootstrap}", flush=True)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def dead_broker(self) -> DevBroker | None:
        for b in self.brokers:
            if b.process.poll() is not None:
                return b
        return None

    def wait_ready(self, timeout: float) -> DevBroker | None:
        """Wait until every broker accepts connections; return a broker that died, if any.
        Raises TimeoutError; returns early (None) when asked to stop."""
        deadline = time.monotonic() + timeout
        waiting = list(self.brokers)
        while waiting and not self.stopping.is_set():
            dead = self.dead_broker()
            if dead is not None:
                return dead
            waiting = [b for b in waiting if not b.accepts_connections()]
            if waiting and time.monotonic() > deadline:
                names = ", ".join(f"{b.broker_id} ({b.bootstrap})" for b in waiting)
                raise TimeoutError(f"brokers not accepting connections after {timeout:.0f} s: "
                                   f"{names}")
            if waiting:
                self.stopping.wait(POLL_S)
        return None

    def watch(self) -> DevBroker | None:
        """Until asked to stop: return the first broker that exits on its own."""
        while not self.stopping.wait(POLL_S):
            dead = self.dead_broker()
            if dead is not None:
                return dead
        return None

    # ---- stop
    def stop(self) -> None:
        running = [b for b in self.brokers if b.process.poll() is None]
        for b in running:
            b.signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace
        for b in running:
            try:
                b.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"broker {b.broker_id} did not stop in {self.stop_grace:.0f} s: SIGKILL",
                      file=sys.stderr, flush=True)
                b.signal(signal.SIGKILL)
                b.process.wait()
        for b in self.brokers:
            b.signal(signal.SIGKILL)  # a straggler child of the broker's group, if any
            b.log_file.close()
        if self.zookeeper is not None:
            self.zookeeper.stop()


def report_death(broker: DevBroker) -> None:
    print(f"odradek dev-cluster: broker {broker.broker_id} ({broker.bootstrap}) exited with "
          f"status {broker.process.returncode}; the end of {broker.log_path}:\n"
          f"{broker.log_tail()}", file=sys.stderr, flush=True)


def check_args(args: argparse.Namespace) -> dict[str, str]:
    if args.brokers < 1:
        raise SystemExit("odradek dev-cluster: --brokers must be at least 1")
    overrides = parse_pairs(args.override, "override")
    reserved = sorted(set(overrides) & set(RESERVED_KEYS))
    if reserved:
        raise SystemExit(f"odradek dev-cluster: {', '.join(reserved)} is set per broker by "
                         "dev-cluster and cannot be overridden")
    taken = [p for p in range(args.base_port, args.base_port + args.brokers)
             if not port_free(p)]
    if taken:
        raise SystemExit(f"odradek dev-cluster: port(s) {', '.join(map(str, taken))} in use "
                         "(choose another --base-port)")
    return overrides


def run(args: argparse.Namespace) -> int:
    overrides = check_args(args)
    cluster = DevCluster(args, overrides)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        cluster.stopping.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    status = 0
    try:
        try:
            cluster.start()
        except (ZooKeeperNotInstalled, ZooKeeperStartError, OSError) as exc:
            print(f"odradek dev-cluster: {exc}", file=sys.stderr)
            return 1
        cluster.print_table()
        try:
            dead = cluster.wait_ready(args.ready_timeout)
        except TimeoutError as exc:
            print(f"odradek dev-cluster: {exc}", file=sys.stderr, flush=True)
            return 1
        if dead is None and not cluster.stopping.is_set():
            print(f"ready: {len(cluster.brokers)} broker(s) accept connections; "
                  "Ctrl-C stops the cluster", flush=True)
            dead = cluster.watch()
        if dead is not None:
            report_death(dead)
            status = 1
        return status
    finally:
        print("stopping the brokers, then ZooKeeper", flush=True)
        cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        print("stopped", flush=True)


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "dev-cluster", help="a local ZooKeeper and N brokers in cluster mode, until Ctrl-C")
    parser.add_argument("--brokers", type=int, default=3, help="how many brokers (default 3)")
    parser.add_argument("--zookeeper-port", type=int, default=None,
                        help="ZooKeeper's client port (default: a free one)")
    parser.add_argument("--base-port", type=int, default=9092,
                        help="broker 1's port; broker N listens on base+N-1 (default 9092)")
    parser.add_argument("--data-dir", default="./dev-cluster",
                        help="ZooKeeper's data, the brokers' log dirs and the logs "
                             "(default ./dev-cluster)")
    parser.add_argument("--override", action="append", metavar="KEY=VALUE",
                        help="a broker config key for every broker (repeatable)")
    parser.add_argument("--ready-timeout", type=float, default=READY_TIMEOUT_S,
                        help=argparse.SUPPRESS)
    parser.add_argument("--stop-grace", type=float, default=STOP_GRACE_S,
                        help="seconds a broker gets to stop before SIGKILL (default 15)")
    parser.set_defaults(func=run)
