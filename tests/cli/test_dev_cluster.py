"""``odradek dev-cluster``: the real command in a subprocess, a real ZooKeeper and brokers.

It prints the table and the bootstrap string, every broker's Metadata lists all of them
(one cluster), Ctrl-C (SIGINT to its process group, as a terminal sends it) stops
everything and exits 0; a broker that dies is reported with its log and the rest stopped.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.interop._broker import REPO, odradek_executable

from odradek.cli import main
from odradek.cluster.local_zookeeper import port_free

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


def free_port_run(count: int) -> int:
    """The first of ``count`` consecutive loopback ports that were free a moment ago."""
    for _ in range(200):
        base = random.randrange(20000, 60000 - count)
        if all(port_free(p) for p in range(base, base + count)):
            return base
    raise AssertionError(f"no run of {count} free ports found")


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie still answers kill(0): it has exited, only its parent has not reaped it yet
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    return True


@dataclass
class DevClusterRun:
    process: subprocess.Popen[bytes]
    stdout_path: Path
    stderr_path: Path

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def describe(self) -> str:
        return (f"exit={self.process.poll()}\n--- stdout ---\n{self.stdout()}\n"
                f"--- stderr ---\n{self.stderr()[-4000:]}")

    def wait_for_output(self, text: str, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.stdout():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"dev-cluster never printed {text!r}\n{self.describe()}")
            time.sleep(0.05)

    def table(self) -> dict[str, list[str]]:
        """``{"zookeeper": row, "1": row, ...}`` from the printed table."""
        rows: dict[str, list[str]] = {}
        for line in self.stdout().splitlines():
            cells = line.split()
            if cells and cells[0] == "zookeeper":
                rows["zookeeper"] = cells
            elif cells and cells[0] == "broker":
                rows[cells[1]] = cells
        return rows

    def pids(self) -> list[int]:
        return [int(row[3]) for row in self.table().values()]

    def interrupt(self) -> int:
        os.killpg(self.process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        return self.process.wait(STOP_TIMEOUT_S)


@contextlib.contextmanager
def dev_cluster(tmp_path: Path, *args: str) -> Iterator[DevClusterRun]:
    out, err = tmp_path / "dev-cluster.stdout", tmp_path / "dev-cluster.stderr"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            [str(odradek_executable()), "dev-cluster", "--data-dir", str(tmp_path / "dc"),
             *args],
            stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(REPO / "src")},
        )
    run = DevClusterRun(process, out, err)
    try:
        yield run
    finally:
        pids = run.pids()
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for pid in pids:  # whatever it failed to stop: never leave a process behind
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def metadata_brokers(bootstrap: str) -> dict[int, str]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15)
    return {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}


def test_starts_prints_the_table_serves_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    base = free_port_run(3)
    with dev_cluster(tmp_path, "--brokers", "3", "--base-port", str(base),
                     "--override", "zookeeper.session.timeout.ms=6000") as run:
        run.wait_for_output("ready:")
        table = run.table()
        assert set(table) == {"zookeeper", "1", "2", "3"}, run.describe()
        addresses = [f"127.0.0.1:{base + i}" for i in range(3)]
        assert f"bootstrap: {','.join(addresses)}" in run.stdout()
        assert table["zookeeper"][2].endswith("/odradek")
        for broker_id, address in enumerate(addresses, start=1):
            row = table[str(broker_id)]
            assert row[2] == address
            assert row[4] == str(tmp_path / "dc" / f"broker-{broker_id}")
            assert Path(row[5]).is_file()
        everyone = dict(enumerate(addresses, start=1))
        for address in addresses:  # one cluster: every broker lists all three
            deadline = time.monotonic() + 15
            while (seen := metadata_brokers(address)) != everyone:
                assert time.monotonic() < deadline, f"{address} lists {seen}\n{run.describe()}"
                time.sleep(0.1)
        pids = run.pids()
        assert run.interrupt() == 0, run.describe()
        assert all(pid_gone(pid) for pid in pids), run.describe()
        assert "stopped" in run.stdout()
    for broker_id in (1, 2, 3):
        log = (tmp_path / "dc" / "logs" / f"broker-{broker_id}.log").read_text()
        assert "stopped cleanly" in log, log[-2000:]


def test_a_dead_broker_is_reported_and_the_rest_stopped(tmp_path: Path) -> None:
    base = free_port_run(2)
    with dev_cluster(tmp_path, "--brokers", "2", "--base-port", str(base)) as run:
        run.wait_for_output("ready:")
        pids = run.pids()
        os.kill(int(run.table()["2"][3]), signal.SIGKILL)
        assert run.process.wait(STOP_TIMEOUT_S) == 1, run.describe()
        assert "broker 2" in run.stderr() and "broker-2.log" in run.stderr(), run.describe()
        assert "odradek" in run.stderr().split("broker-2.log", 1)[1]  # the log's tail
        assert all(pid_gone(pid) for pid in pids), run.describe()


def test_per_broker_keys_cannot_be_overridden() -> None:
    with pytest.raises(SystemExit, match=r"broker\.id is set per broker"):
        main.main(["dev-cluster", "--override", "broker.id=7"])


def test_a_taken_port_is_refused_before_starting_anything(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(SystemExit, match=f"port\\(s\\) {port} in use"):
            main.main(["dev-cluster", "--brokers", "1", "--base-port", str(port),
                       "--data-dir", str(tmp_path / "dc")])
    assert not (tmp_path / "dc").exists()
