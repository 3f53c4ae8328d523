"""``odradek dev-cluster --brokers N``: a local ZooKeeper and N brokers, in one command.

What it starts, under ``--data-dir`` (default ``./dev-cluster``)::

    zookeeper/            zoo.cfg and ZooKeeper's data (on --zookeeper-port, default: free)
    broker-<id>/          each broker's log dir
    logs/zookeeper.log    ZooKeeper's log
    logs/broker-<id>.log  each broker's stdout and stderr
    dev-cluster.pid       the running dev-cluster's pid (while it runs)
    run/broker-<id>.pid   each running broker's pid (``kill -9 $(cat ...)`` to try failover)
    control/              restart requests and their answers (``dev-cluster restart``)

Broker ``id`` (1..N) runs ``odradek serve`` with ``broker.id=<id>``,
``listeners=PLAINTEXT://127.0.0.1:<base-port + id - 1>``, ``log.dirs=<data-dir>/broker-<id>``
and ``zookeeper.connect=127.0.0.1:<zk port>/odradek``; every broker gets
``offsets.topic.replication.factor`` = min(3, N) (and
``transaction.state.log.replication.factor``, with ``transaction.state.log.min.isr`` =
min(2, N)), ``group.initial.rebalance.delay.ms=0``
``zookeeper.session.timeout.ms=6000`` (a killed broker is noticed in seconds) and
``controlled.shutdown.retry.backoff.ms=1000`` (see the stop below); ``--override k=v``
goes to every broker and wins. A second run on the same data dir finds
the same topics and records.

It prints a table of what it started and the bootstrap string, waits until every broker
answers Metadata listing all N brokers (accepting connections is not enough: a broker
that has not yet seen the others register would refuse a topic of replication factor N),
then prints ``ready:`` and watches them. A broker that dies before that fails the start
(its log's tail shown, the rest stopped, exit status 1). Once the cluster is ready, a
broker that exits on its own (``kill -9``, a crash) is reported with its exit status and
the tail of its log, and the other brokers and ZooKeeper keep running, as a cluster
does: its partitions fail over when ZooKeeper expires its session.
``odradek dev-cluster restart --broker N`` (same ``--data-dir``) brings it back: it
leaves a request in ``control/`` that the running dev-cluster picks up; a running broker
is stopped first (SIGTERM: a rolling restart). The answer comes when the broker and
every running broker list each other in Metadata again.

Registrations: a broker killed -9 leaves ``/brokers/ids/<id>`` (and ``/controller``, if
it was the controller) in ZooKeeper until its session expires, and ZooKeeper stopped
meanwhile keeps that session in its data for the next start. A broker id a live
registration holds is refused, so dev-cluster deletes the registrations of its own brokers
that it knows are dead: at start (none of its brokers runs yet: their ports are free) and
before a restart (the process has exited).

Ctrl-C or SIGTERM stops the brokers one at a time, the controller last, each with SIGTERM
(controlled shutdown: its leaderships move to the brokers still running, which the
controller does at once), then ZooKeeper, and exits 0. Stopped all at once, each broker
would wait out its controlled shutdown for leaderships that nobody can take. The last one
still has nobody to hand its leaderships to while the in-sync replica sets name the
brokers just stopped, so a dev-cluster's brokers bound that wait to 3 retries of 1 s
(Kafka's default: of 5 s). A broker that does not stop within ``--stop-grace`` seconds is
killed (SIGKILL, said on stderr).

``--security sasl_ssl`` secures the cluster (:mod:`odradek.cli._dev_security`): a CA, the
brokers' certificate, a first SCRAM user ``admin`` and the brokers' own user under
``<data-dir>/security/``; each broker's only listener is ``SASL_SSL://127.0.0.1:<port>``,
also the inter-broker one; the client settings are printed after the table (where they
are: a password is never printed).

Every child runs in its own session (process group): a Ctrl-C in the terminal reaches only
this command, which then stops the brokers before ZooKeeper (brokers that lose ZooKeeper
first would spend their shutdown reconnecting).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING, Any

from odradek.cli import _dev_security
from odradek.cli._common import UsageError, parse_pairs, print_table

if TYPE_CHECKING:
    from odradek.client.security import ClientSecurity
    from odradek.cluster.local_zookeeper import LocalZooKeeper

# odradek.cluster.local_zookeeper is imported where the cluster starts: every ``odradek``
# command builds this sub-command's parser (tests/cli/test_main.py)

HOST = "127.0.0.1"
CHROOT = "/odradek"
#: Set per broker by dev-cluster itself; overriding them would break the layout above.
RESERVED_KEYS = ("broker.id", "node.id", "listeners", "advertised.listeners", "log.dirs",
                 "log.dir", "zookeeper.connect")
READY_TIMEOUT_S = 60.0
#: how long one readiness probe (connect, ApiVersions, Metadata) may take
READY_PROBE_S = 2.0
STOP_GRACE_S = 15.0
POLL_S = 0.1
LOG_TAIL_LINES = 30
PID_FILE = "dev-cluster.pid"
CONTROL_DIR = "control"
RUN_DIR = "run"
#: how long ``dev-cluster restart`` waits for the answer (a stop, a start, readiness)
RESTART_TIMEOUT_S = STOP_GRACE_S + READY_TIMEOUT_S + 15.0


@dataclass
class DevBroker:
    broker_id: int
    port: int
    log_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes]
    log_file: IO[bytes]
    reported: bool = False  # its death was reported

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    def running(self) -> bool:
        return self.process.poll() is None

    def listed_brokers(self, security: ClientSecurity | None) -> set[int]:
        """The broker ids this broker's Metadata answer lists (the brokers whose ZooKeeper
        registration it has seen: those a CreateTopics it answers can place replicas on);
        empty when it does not answer yet."""
        import asyncio

        from odradek.client.admin import Admin
        from odradek.client.connection import BrokerConnection, ClientError

        async def ask() -> set[int]:
            conn = await BrokerConnection.open(self.bootstrap, timeout=READY_PROBE_S,
                                               security=security)
            try:
                return set(await Admin(conn).brokers())
            finally:
                await conn.close()

        try:
            return asyncio.run(asyncio.wait_for(ask(), READY_PROBE_S))
        except (ClientError, OSError, TimeoutError):  # ssl.SSLError included
            return set()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        self.log_file.flush()
        text = self.log_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)


def broker_command(broker_id: int, port: int, log_dir: Path, zookeeper_connect: str,
                   overrides: dict[str, str], protocol: str = "PLAINTEXT",
                   config_file: Path | None = None) -> list[str]:
    """``python -m odradek serve [--config FILE] --override ...`` for one broker
    (this interpreter, so the brokers run the same code as this command); ``protocol``:
    its listener's, ``config_file``: the security settings (secrets stay off the command
    line)."""
    config = {
        "broker.id": str(broker_id),
        "listeners": f"{protocol}://{HOST}:{port}",
        "log.dirs": str(log_dir),
        "zookeeper.connect": zookeeper_connect,
        **overrides,
    }
    argv = [sys.executable, "-m", "odradek", "serve"]
    if config_file is not None:
        argv += ["--config", str(config_file)]
    for key, value in config.items():
        argv += ["--override", f"{key}={value}"]
    return argv


def exit_description(status: int | None) -> str:
    """``status 1``, or ``signal SIGKILL`` for a process a signal ended."""
    if status is not None and status < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-status).name}"
    return f"status {status}"


class DevCluster:
    def __init__(self, args: argparse.Namespace, overrides: dict[str, str]) -> None:
        self.count: int = args.brokers
        self.base_port: int = args.base_port
        self.zookeeper_port: int | None = args.zookeeper_port
        self.data_dir = Path(args.data_dir).resolve()
        self.stop_grace: float = args.stop_grace
        self.ready_timeout: float = args.ready_timeout
        # __consumer_offsets replicated as Kafka's default (3) where the cluster allows it,
        # so a group survives the loss of its coordinator; a new group's first rebalance
        # not delayed, as config/server.properties for development; a killed broker's
        # session expires in seconds, for failover to be watched; a controlled shutdown
        # waits at most 3 s for leaderships to move (the last broker of a cluster that
        # stops has nobody to hand them to); --override wins.
        self.overrides = {
            "offsets.topic.replication.factor": str(min(3, self.count)),
            "transaction.state.log.replication.factor": str(min(3, self.count)),
            "transaction.state.log.min.isr": str(min(2, self.count)),
            "group.initial.rebalance.delay.ms": "0",
            "zookeeper.session.timeout.ms": "6000",
            "controlled.shutdown.retry.backoff.ms": "1000", **overrides,
        }
        self.security: _dev_security.DevSecurity | None = None
        if getattr(args, "security", "plaintext") == "sasl_ssl":
            self.security = _dev_security.prepare(self.data_dir)
        self.zookeeper: LocalZooKeeper | None = None
        self._zk: Any = None  # a KazooClient on the chroot, while ZooKeeper runs
        self._client_security: ClientSecurity | None = None
        self.brokers: dict[int, DevBroker] = {}
        self.stopping = threading.Event()

    @property
    def control_dir(self) -> Path:
        return self.data_dir / CONTROL_DIR

    # ---- start
    def start(self) -> None:
        logs = self.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.control_dir.mkdir(parents=True, exist_ok=True)
        for stale in self.control_dir.iterdir():
            stale.unlink()
        (self.data_dir / PID_FILE).write_text(f"{os.getpid()}\n")
        from odradek.cluster.local_zookeeper import start_zookeeper

        self.zookeeper = start_zookeeper(
            self.data_dir / "zookeeper", port=self.zookeeper_port,
            log_path=logs / "zookeeper.log",
        )
        self.clear_registrations(range(1, self.count + 1), "left by an earlier run")
        if self.security is not None:
            _dev_security.write_scram_users(self.zookeeper.connect_string(CHROOT),
                                            self.security)
        for broker_id in range(1, self.count + 1):
            self.start_broker(broker_id)

    def start_broker(self, broker_id: int) -> DevBroker:
        assert self.zookeeper is not None
        port = self.base_port + broker_id - 1
        log_dir = self.data_dir / f"broker-{broker_id}"
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.data_dir / "logs" / f"broker-{broker_id}.log"
        log_file = log_path.open("ab")
        process = subprocess.Popen(
            broker_command(broker_id, port, log_dir, self.zookeeper.connect_string(CHROOT),
                           self.overrides,
                           "PLAINTEXT" if self.security is None else "SASL_SSL",
                           None if self.security is None else self.security.broker_properties),
            stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        broker = DevBroker(broker_id, port, log_dir, log_path, process, log_file)
        self.brokers[broker_id] = broker
        run_dir = self.data_dir / RUN_DIR
        run_dir.mkdir(exist_ok=True)
        (run_dir / f"broker-{broker_id}.pid").write_text(f"{process.pid}\n")
        return broker

    # ---- ZooKeeper
    def zk(self) -> Any:
        """A kazoo client of the ZooKeeper (opened on first use); the cluster's paths are
        under :data:`CHROOT`, which a fresh ZooKeeper does not have yet."""
        if self._zk is None:
            from kazoo.client import KazooClient

            assert self.zookeeper is not None
            client = KazooClient(hosts=self.zookeeper.connect_string(), timeout=10.0)
            client.start(timeout=15)
            self._zk = client
        return self._zk

    def controller_id(self) -> int | None:
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self.zk().get(f"{CHROOT}/controller")
            return int(json.loads(data)["brokerid"])
        except (NoNodeError, ValueError, KeyError, TypeError):
            return None

    def clear_registrations(self, broker_ids: Any, why: str) -> None:
        """Delete ``/brokers/ids/<id>`` (and ``/controller`` when one of them holds it) of
        brokers of this dev-cluster known to be dead: a session that has not expired yet
        would refuse their restart."""
        from kazoo.exceptions import NoNodeError

        dead = set(broker_ids)
        zk = self.zk()
        for broker_id in sorted(dead):
            with contextlib.suppress(NoNodeError):
                zk.delete(f"{CHROOT}/brokers/ids/{broker_id}")
                print(f"cleared the registration of broker {broker_id} {why} (its ZooKeeper "
                      "session had not expired)", flush=True)
        if self.controller_id() in dead:
            with contextlib.suppress(NoNodeError):
                zk.delete(f"{CHROOT}/controller")

    def print_table(self) -> None:
        assert self.zookeeper is not None
        rows: list[list[Any]] = [["WHAT", "ID", "ADDRESS", "PID", "DATA", "LOG"]]
        rows.append(["zookeeper", "-", self.zookeeper.connect_string(CHROOT),
                     self.zookeeper.pid, self.zookeeper.data_dir, self.zookeeper.log_path])
        for b in self.brokers.values():
            rows.append(["broker", b.broker_id, b.bootstrap, b.process.pid, b.log_dir,
                         b.log_path])
        print_table(rows)
        print(f"bootstrap: {self.bootstrap}", flush=True)
        if self.security is not None:
            print("\n".join(_dev_security.client_lines(self.security, self.bootstrap)),
                  flush=True)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def newly_dead(self) -> DevBroker | None:
        for b in self.brokers.values():
            if not b.running() and not b.reported:
                b.reported = True
                return b
        return None

    @property
    def client_security(self) -> ClientSecurity | None:
        """How the readiness probes connect: as the first user on a secured cluster."""
        from odradek.client.security import client_security, load_client_properties

        if self.security is None:
            return None
        if self._client_security is None:
            self._client_security = client_security(
                load_client_properties(str(self.security.client_properties)))
        return self._client_security

    def not_whole(self, brokers: list[DevBroker]) -> list[DevBroker]:
        """Those of ``brokers`` whose Metadata does not list every running broker yet. A
        broker that accepts connections may not have seen the others register: a
        CreateTopics it answered then would find too few brokers for its replicas."""
        expected = {b.broker_id for b in self.brokers.values() if b.running()}
        return [b for b in brokers
                if not expected <= b.listed_brokers(self.client_security)]

    def wait_ready(self, timeout: float) -> DevBroker | None:
        """Wait until every broker answers Metadata listing every broker; return a broker
        that died, if any. Raises TimeoutError; returns early (None) when asked to stop."""
        deadline = time.monotonic() + timeout
        waiting = list(self.brokers.values())
        while waiting and not self.stopping.is_set():
            dead = self.newly_dead()
            if dead is not None:
                return dead
            waiting = self.not_whole(waiting)
            if waiting and time.monotonic() > deadline:
                names = ", ".join(f"{b.broker_id} ({b.bootstrap})" for b in waiting)
                raise TimeoutError(f"brokers not answering Metadata with all {self.count} "
                                   f"brokers after {timeout:.0f} s: {names}")
            if waiting:
                self.stopping.wait(POLL_S)
        return None

    def watch(self) -> None:
        """Until asked to stop: report brokers that exit on their own, serve restart
        requests."""
        while not self.stopping.wait(POLL_S):
            dead = self.newly_dead()
            if dead is not None:
                report_death(dead, self.data_dir)
            for request in sorted(self.control_dir.glob("restart-*.request")):
                self.serve_restart(request)

    # ---- restart
    def serve_restart(self, request: Path) -> None:
        """Answer one ``dev-cluster restart`` request: ``<id>.answer`` holds ``ok ...`` or
        ``error ...``."""
        broker_id = int(request.name.split("-", 1)[1].split(".", 1)[0])
        answer = request.with_suffix(".answer")
        request.unlink()
        try:
            message = "ok " + self.restart(broker_id)
        except (RuntimeError, TimeoutError, OSError) as exc:
            message = f"error {exc}"
        tmp = answer.with_suffix(".tmp")
        tmp.write_text(message + "\n")
        tmp.rename(answer)

    def restart(self, broker_id: int) -> str:
        broker = self.brokers.get(broker_id)
        if broker is None:
            raise RuntimeError(f"this dev-cluster has no broker {broker_id} "
                               f"(brokers 1-{self.count})")
        if broker.running():
            print(f"restarting broker {broker_id}: stopping it (SIGTERM)", flush=True)
            self.stop_one(broker)
        broker.log_file.close()
        self.clear_registrations([broker_id], "before its restart")
        broker = self.start_broker(broker_id)
        deadline = time.monotonic() + self.ready_timeout
        # Back when it and every running broker list each other in Metadata: it has
        # registered and everyone has seen it (and it has seen them).
        while self.not_whole([b for b in self.brokers.values() if b.running()]):
            if not broker.running():
                broker.reported = True
                raise RuntimeError(f"broker {broker_id} exited at start with "
                                   f"{exit_description(broker.process.returncode)}; "
                                   f"see {broker.log_path}")
            if time.monotonic() > deadline or self.stopping.is_set():
                raise TimeoutError(f"broker {broker_id} not listed by every running broker "
                                   f"after {self.ready_timeout:.0f} s; see {broker.log_path}")
            time.sleep(POLL_S)
        line = (f"restarted broker {broker_id}: pid {broker.process.pid}, at "
                f"{broker.bootstrap}, listed by every running broker")
        print(line, flush=True)
        return line

    # ---- stop
    def stop_one(self, broker: DevBroker) -> None:
        broker.signal(signal.SIGTERM)
        try:
            broker.process.wait(self.stop_grace)
        except subprocess.TimeoutExpired:
            print(f"broker {broker.broker_id} did not stop in {self.stop_grace:.0f} s: "
                  "SIGKILL", file=sys.stderr, flush=True)
            broker.signal(signal.SIGKILL)
            broker.process.wait()
        broker.signal(signal.SIGKILL)  # a straggler child of the broker's group, if any

    def stop_order(self) -> list[DevBroker]:
        """The running brokers, the controller last (it moves the others' leaderships)."""
        running = [b for b in self.brokers.values() if b.running()]
        controller = None
        if self.zookeeper is not None and self.zookeeper.alive():
            with contextlib.suppress(Exception):  # no answer: any order will do
                controller = self.controller_id()
        return sorted(running, key=lambda b: (b.broker_id == controller, b.broker_id))

    def stop(self) -> None:
        for b in self.stop_order():
            self.stop_one(b)
        for b in self.brokers.values():
            b.log_file.close()
        if self._zk is not None:
            with contextlib.suppress(Exception):
                self._zk.stop()
                self._zk.close()
            self._zk = None
        if self.zookeeper is not None:
            self.zookeeper.stop()
        for path in [self.data_dir / PID_FILE, *(self.data_dir / RUN_DIR).glob("*.pid")]:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def report_death(broker: DevBroker, data_dir: Path | None = None) -> None:
    status = exit_description(broker.process.returncode)
    if data_dir is None:
        what = ""
    else:
        what = ("; the other brokers and ZooKeeper keep running, and "
                f"`odradek dev-cluster restart --broker {broker.broker_id} --data-dir "
                f"{data_dir}` brings it back")
    print(f"odradek dev-cluster: broker {broker.broker_id} ({broker.bootstrap}) exited with "
          f"{status}{what}; the end of {broker.log_path}:\n{broker.log_tail()}",
          file=sys.stderr, flush=True)


def check_args(args: argparse.Namespace) -> dict[str, str]:
    if args.brokers < 1:
        raise UsageError("odradek dev-cluster: --brokers must be at least 1")
    overrides = parse_pairs(args.override, "override")
    reserved = sorted(set(overrides) & set(RESERVED_KEYS))
    if reserved:
        raise UsageError(f"odradek dev-cluster: {', '.join(reserved)} is set per broker by "
                         "dev-cluster and cannot be overridden")
    running = running_pid(Path(args.data_dir))
    if running is not None:
        raise SystemExit(f"odradek dev-cluster: a dev-cluster (pid {running}) already runs on "
                         f"{args.data_dir}")
    from odradek.cluster.local_zookeeper import port_free

    taken = [p for p in range(args.base_port, args.base_port + args.brokers)
             if not port_free(p)]
    if taken:
        raise SystemExit(f"odradek dev-cluster: port(s) {', '.join(map(str, taken))} in use "
                         "(choose another --base-port)")
    return overrides


def running_pid(data_dir: Path) -> int | None:
    """The pid of the dev-cluster running on ``data_dir``, or None."""
    try:
        pid = int((data_dir / PID_FILE).read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def run(args: argparse.Namespace) -> int:
    if getattr(args, "verb", None) == "restart":
        return request_restart(args)
    from odradek.cluster.local_zookeeper import ZooKeeperNotInstalled, ZooKeeperStartError

    overrides = check_args(args)
    try:
        cluster = DevCluster(args, overrides)
    except ImportError:
        print("odradek dev-cluster: --security sasl_ssl makes certificates with the "
              "'cryptography' package, which is not installed: pip install 'odradek[tls]'",
              file=sys.stderr)
        return 1

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
        if dead is not None:  # a broker that cannot start: the cluster did not start
            report_death(dead)
            return 1
        if not cluster.stopping.is_set():
            print(f"ready: {len(cluster.brokers)} broker(s), each listing all "
                  f"{len(cluster.brokers)} in Metadata; "
                  "Ctrl-C stops the cluster", flush=True)
            cluster.watch()
        return status
    finally:
        print("stopping the brokers (the controller last), then ZooKeeper", flush=True)
        cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        print("stopped", flush=True)


def request_restart(args: argparse.Namespace) -> int:
    """``dev-cluster restart --broker N``: ask the dev-cluster running on ``--data-dir``
    and print its answer (exit status 1 when it could not restart the broker)."""
    data_dir = Path(args.data_dir)
    pid = running_pid(data_dir)
    if pid is None:
        print(f"odradek dev-cluster: no dev-cluster runs on {data_dir} (start one with "
              f"`odradek dev-cluster --data-dir {data_dir}`)", file=sys.stderr)
        return 1
    control = data_dir / CONTROL_DIR
    answer = control / f"restart-{args.broker}.answer"
    with contextlib.suppress(FileNotFoundError):
        answer.unlink()
    tmp = control / f"restart-{args.broker}.tmp"
    tmp.write_text(f"{os.getpid()}\n")
    tmp.rename(control / f"restart-{args.broker}.request")
    deadline = time.monotonic() + RESTART_TIMEOUT_S
    while not answer.exists():
        if running_pid(data_dir) is None:
            print("odradek dev-cluster: the dev-cluster stopped before answering",
                  file=sys.stderr)
            return 1
        if time.monotonic() > deadline:
            print(f"odradek dev-cluster: no answer from the dev-cluster (pid {pid}) in "
                  f"{RESTART_TIMEOUT_S:.0f} s", file=sys.stderr)
            return 1
        time.sleep(POLL_S)
    outcome, _, message = answer.read_text().strip().partition(" ")
    answer.unlink()
    if outcome != "ok":
        print(f"odradek dev-cluster: {message}", file=sys.stderr)
        return 1
    print(message)
    return 0


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "dev-cluster", help="a local ZooKeeper and N brokers in cluster mode, until Ctrl-C",
        description="Start a local ZooKeeper and N brokers in cluster mode, until Ctrl-C; "
                    "`dev-cluster restart --broker N` (from another terminal) brings a "
                    "broker of the running dev-cluster back, or restarts it.")
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
    parser.add_argument("--security", choices=_dev_security.PROTOCOLS, default="plaintext",
                        help="sasl_ssl: a CA, broker certificates and a first SCRAM user "
                             "under DATA_DIR/security, SASL_SSL listeners (also between "
                             "brokers); prints the client settings (default plaintext)")
    parser.add_argument("--ready-timeout", type=float, default=READY_TIMEOUT_S,
                        help=argparse.SUPPRESS)
    parser.add_argument("--stop-grace", type=float, default=STOP_GRACE_S,
                        help="seconds a broker gets to stop before SIGKILL (default 15)")
    parser.set_defaults(func=run)
    verbs = parser.add_subparsers(dest="verb", required=False, metavar="restart")
    restart = verbs.add_parser(
        "restart", help="start a broker of the running dev-cluster again (a running one is "
                        "stopped first)")
    restart.add_argument("--broker", type=int, required=True, help="the broker's id")
    restart.add_argument("--data-dir", default="./dev-cluster",
                         help="the running dev-cluster's --data-dir (default ./dev-cluster)")
    restart.set_defaults(func=run)
