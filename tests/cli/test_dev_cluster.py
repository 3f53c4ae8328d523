"""``odradek dev-cluster``: the real command in a subprocess, a real ZooKeeper and brokers.

It prints the table and the bootstrap string, every broker's Metadata lists all of them
(one cluster), Ctrl-C (SIGINT to its process group, as a terminal sends it) stops
everything within seconds and exits 0, replicated topics or not, without a SIGKILL; a
broker killed -9 is reported and the rest keep running, ``dev-cluster restart`` brings it
back, and a new dev-cluster on the data dir of one stopped with a broker dead starts; a
broker that cannot start fails the start.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests._deadlines import expired
from tests.interop._broker import REPO, odradek_executable

from odradek.cli import main
from odradek.cluster.local_zookeeper import port_free

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
#: Ctrl-C on a healthy cluster, replicated topics included: every broker stops cleanly
STOP_HEALTHY_S = 12.0


def _ephemeral_start() -> int:
    """Where the kernel's ephemeral ports begin (Linux's ip_local_port_range)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port_run(count: int) -> int:
    """The first of ``count`` consecutive loopback ports that were free a moment ago,
    below the ephemeral range: a port in it can be taken between this check and the
    brokers' bind by any connection's local port or any port-0 bind of another test (a
    whole run once saw a dev-cluster broker refused its port so)."""
    top = max(_ephemeral_start(), 12000)
    for _ in range(200):
        base = random.randrange(10000, top - count)
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
        started = time.monotonic()
        while text not in self.stdout():
            if self.process.poll() is not None or expired(started, timeout):
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
    with dev_cluster_on(tmp_path, tmp_path / "dc", *args) as run:
        yield run


@contextlib.contextmanager
def dev_cluster_on(tmp_path: Path, data_dir: Path, *args: str) -> Iterator[DevClusterRun]:
    """``odradek dev-cluster --data-dir data_dir``, its output in ``tmp_path``."""
    out, err = tmp_path / "dev-cluster.stdout", tmp_path / "dev-cluster.stderr"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            [str(odradek_executable()), "dev-cluster", "--data-dir", str(data_dir),
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


def odradek(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(odradek_executable()), *args], capture_output=True, text=True,
                          input=stdin, timeout=STOP_TIMEOUT_S * 4, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src")})


def wait_until(condition: Callable[[], object], timeout: float, what: str) -> None:
    started = time.monotonic()
    while not condition():
        assert not expired(started, timeout), f"timed out waiting for {what}"
        time.sleep(0.1)


def replicated_topic(bootstrap: str, topic: str = "replicated") -> None:
    made = odradek("topics", "create", "--topic", topic, "--partitions", "3",
                   "--replication-factor", "3", "-b", bootstrap)
    assert made.returncode == 0, made.stderr
    sent = odradek("produce", "--topic", topic, "-b", bootstrap,
                   stdin="".join(f"r{i}\n" for i in range(30)))
    assert sent.returncode == 0, sent.stderr


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
            waiting = time.monotonic()
            while (seen := metadata_brokers(address)) != everyone:
                assert not expired(waiting, 15), f"{address} lists {seen}\n{run.describe()}"
                time.sleep(0.1)
        replicated_topic(addresses[0])
        pids = run.pids()
        started = time.monotonic()
        assert run.interrupt() == 0, run.describe()
        assert time.monotonic() - started < STOP_HEALTHY_S, run.describe()
        assert "SIGKILL" not in run.stderr(), run.describe()
        assert all(pid_gone(pid) for pid in pids), run.describe()
        assert "stopped" in run.stdout()
    for broker_id in (1, 2, 3):
        log = (tmp_path / "dc" / "logs" / f"broker-{broker_id}.log").read_text()
        assert "stopped cleanly" in log, log[-2000:]


def test_sasl_ssl_cluster_serves_a_client_with_the_printed_settings(tmp_path: Path) -> None:
    """``--security sasl_ssl``: the brokers replicate over SASL_SSL, confluent-kafka with the
    printed librdkafka settings produces (acks=all) and consumes in a group, the odradek
    tools take the printed ``--command-config``; no password is printed; Ctrl-C stops it."""
    import confluent_kafka as ck

    from odradek.client.security import load_client_properties

    base = free_port_run(2)
    bootstrap = f"127.0.0.1:{base},127.0.0.1:{base + 1}"
    with dev_cluster(tmp_path, "--brokers", "2", "--base-port", str(base),
                     "--security", "sasl_ssl") as run:
        run.wait_for_output("ready:")
        out = run.stdout()
        command_config = out.split("odradek tools:   --command-config ", 1)[1].split()[0]
        librdkafka = out.split("confluent-kafka: the settings of ", 1)[1].split()[0]
        settings = load_client_properties(librdkafka)
        assert settings["security.protocol"] == "SASL_SSL"
        assert settings["sasl.password"] not in out + run.stderr()
        security = tmp_path / "dc" / "security"
        for name in ("ca.key", "broker.pem", "users.properties", "broker.properties",
                     "client.properties", "librdkafka.properties"):
            assert (security / name).stat().st_mode & 0o077 == 0, name
        made = odradek("topics", "create", "--topic", "secure", "--partitions", "2",
                       "--replication-factor", "2", "-b", bootstrap,
                       "--command-config", command_config)
        assert made.returncode == 0, made.stderr + run.describe()
        producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", **settings})
        for i in range(20):
            producer.produce("secure", f"r{i}".encode(), partition=i % 2)
        assert producer.flush(30) == 0, run.describe()
        consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "secure-group",
                                "auto.offset.reset": "earliest", **settings})
        consumer.subscribe(["secure"])
        got: list[bytes] = []
        started = time.monotonic()
        while len(got) < 20:
            assert not expired(started, 60), f"consumed {got}\n{run.describe()}"
            got += [m.value() for m in consumer.consume(20, 1.0) if m.error() is None]
        consumer.close()
        assert sorted(got) == sorted(f"r{i}".encode() for i in range(20))
        described = odradek("topics", "describe", "--topic", "secure", "-b", bootstrap,
                            "--command-config", command_config)
        assert "Isr: 1,2" in described.stdout or "Isr: 2,1" in described.stdout, \
            described.stdout + described.stderr
        assert "authorization: ACLs on" in out
        refused_then_allowed_by_an_acl(bootstrap, command_config, settings, run)
        assert run.interrupt() == 0, run.describe()
        assert "SIGKILL" not in run.stderr(), run.describe()
        assert "stopped" in run.stdout()
    for broker_id in (1, 2):  # nothing failed to authenticate, dev-cluster's probes neither
        log = (tmp_path / "dc" / "logs" / f"broker-{broker_id}.log").read_text()
        assert "Failed authentication" not in log, log[-3000:]


def refused_then_allowed_by_an_acl(bootstrap: str, command_config: str,
                                   admin: dict[str, str], run: DevClusterRun) -> None:
    """The secured dev-cluster has the authorizer on: a user added by the admin can do
    nothing (produce, create a topic) until an ACL allows it, then exactly that."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    added = odradek("configs", "--entity-type", "users", "--entity-name", "newcomer",
                    "--alter", "--add-config", "SCRAM-SHA-512=[password=newcomer-secret]",
                    "-b", bootstrap, "--command-config", command_config)
    assert added.returncode == 0, added.stderr + run.describe()
    newcomer = {**admin, "sasl.username": "newcomer", "sasl.password": "newcomer-secret"}

    def produce_one() -> ck.KafkaError | None:
        errors: list[ck.KafkaError | None] = []
        producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                "message.timeout.ms": 10000, **newcomer})
        producer.produce("secure", b"from the newcomer", partition=0,
                         on_delivery=lambda err, _msg: errors.append(err))
        producer.flush(30)
        assert len(errors) == 1, run.describe()
        return errors[0]

    refused = produce_one()
    assert refused is not None
    assert refused.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, refused
    admin_client = AdminClient({"bootstrap.servers": bootstrap, **newcomer})
    created = admin_client.create_topics([NewTopic("newcomers", 1, 1)])
    with contextlib.suppress(ck.KafkaException):
        created["newcomers"].result(30)
        raise AssertionError("a user without ACLs created a topic")
    allowed = odradek("acls", "--add", "--allow-principal", "User:newcomer", "--producer",
                      "--topic", "secure", "-b", bootstrap, "--command-config",
                      command_config)
    assert allowed.returncode == 0, allowed.stderr + run.describe()
    started = time.monotonic()  # every broker follows the ACL change
    while (error := produce_one()) is not None:
        assert not expired(started, 30), f"{error}\n{run.describe()}"


def test_a_killed_broker_is_reported_the_rest_run_and_restart_brings_it_back(
    tmp_path: Path,
) -> None:
    base = free_port_run(3)
    addresses = [f"127.0.0.1:{base + i}" for i in range(3)]
    with dev_cluster(tmp_path, "--brokers", "3", "--base-port", str(base)) as run:
        run.wait_for_output("ready:")
        replicated_topic(addresses[0])
        pids = run.pids()
        os.kill(int(run.table()["2"][3]), signal.SIGKILL)
        wait_until(lambda: "broker 2" in run.stderr(), STOP_TIMEOUT_S, "the report")
        report = run.stderr()
        assert f"broker 2 ({addresses[1]}) exited with signal SIGKILL" in report, report
        assert "restart --broker 2" in report and "broker-2.log" in report, report
        assert run.process.poll() is None, run.describe()
        others = [pid for pid in pids if pid != int(run.table()["2"][3])]
        assert not any(pid_gone(pid) for pid in others), run.describe()
        # the others serve the topic once its leaders have moved
        res = odradek("consume", "--topic", "replicated", "--from-beginning",
                      "--timeout-ms", "3000", "-b", addresses[0])
        assert res.returncode == 0 and len(res.stdout.splitlines()) == 30, res.stderr
        restarted = odradek("dev-cluster", "restart", "--broker", "2",
                            "--data-dir", str(tmp_path / "dc"))
        assert restarted.returncode == 0, (restarted.stderr, run.describe())
        assert restarted.stdout.startswith("restarted broker 2: pid "), restarted.stdout
        wait_until(lambda: metadata_brokers(addresses[0]) == dict(
            enumerate(addresses, start=1)), 30, "broker 2 back in the metadata")
        assert run.interrupt() == 0, run.describe()


def test_restart_without_a_running_dev_cluster_says_so(tmp_path: Path) -> None:
    res = odradek("dev-cluster", "restart", "--broker", "1", "--data-dir", str(tmp_path))
    assert res.returncode == 1
    assert res.stderr.startswith(f"odradek dev-cluster: no dev-cluster runs on {tmp_path}")


def test_a_new_dev_cluster_starts_on_the_data_dir_of_one_with_a_dead_broker(
    tmp_path: Path,
) -> None:
    """Broker 2 killed -9, then Ctrl-C at once (its session still alive, and saved with
    ZooKeeper's data): the next dev-cluster on that data dir clears the registration and
    starts, with the topic and its records."""
    base = free_port_run(3)
    # A session that outlives the stop, however slow the machine: with dev-cluster's 6 s
    # the killed broker's registration could expire before ZooKeeper stops, leaving
    # nothing for the next start to clear.
    with dev_cluster(tmp_path, "--brokers", "3", "--base-port", str(base),
                     "--override", "zookeeper.session.timeout.ms=60000") as run:
        run.wait_for_output("ready:")
        replicated_topic(f"127.0.0.1:{base}")
        os.kill(int(run.table()["2"][3]), signal.SIGKILL)
        wait_until(lambda: "broker 2" in run.stderr(), STOP_TIMEOUT_S, "the report")
        assert run.interrupt() == 0, run.describe()
    again = tmp_path / "again"
    again.mkdir()
    with dev_cluster_on(again, tmp_path / "dc", "--brokers", "3",
                        "--base-port", str(base)) as run:
        run.wait_for_output("ready:")
        assert "cleared the registration of broker 2" in run.stdout(), run.describe()
        res = odradek("consume", "--topic", "replicated", "--from-beginning",
                      "--timeout-ms", "3000", "-b", f"127.0.0.1:{base + 1}")
        assert res.returncode == 0 and len(res.stdout.splitlines()) == 30, res.stderr
        assert run.interrupt() == 0, run.describe()


def test_a_broker_that_cannot_start_fails_the_start(tmp_path: Path) -> None:
    base = free_port_run(2)
    with dev_cluster(tmp_path, "--brokers", "2", "--base-port", str(base),
                     "--override", "num.partitions=many") as run:
        assert run.process.wait(START_TIMEOUT_S) == 1, run.describe()
        assert "exited with status 2" in run.stderr(), run.describe()
        assert "num.partitions" in run.stderr(), run.describe()


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


def readme_block(after: str) -> list[str]:
    """The command lines of the first ``sh`` block after the line holding ``after`` in
    README.md, as written, ``# comments`` dropped."""
    text = (REPO / "README.md").read_text()
    block = text[text.index(after):].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].rstrip() for line in block.splitlines() if line.strip()]


def run_line(line: str, cwd: Path, bootstrap: str) -> subprocess.CompletedProcess[str]:
    """One README line run by bash in ``cwd``; the tools' lines pointed at the test's
    cluster (the README's take the default 127.0.0.1:9092)."""
    if any(f"odradek {verb} " in line for verb in ("topics", "produce", "consume")):
        line += f" --bootstrap-server {bootstrap}"
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, cwd=cwd,
                          timeout=STOP_TIMEOUT_S * 4, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src")})


def metadata_partitions(bootstrap: str, topic: str) -> list[dict[str, str]]:
    """``topic``'s partitions as :func:`partition_rows` gives them (``Leader``, ``Isr``),
    from a Metadata request (what ``topics describe`` prints); none while the topic or a
    broker does not answer."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=15)
    except KafkaException:
        return []
    found = md.topics.get(topic)
    if found is None or found.error is not None:
        return []
    return [{"Partition": str(p.id), "Leader": str(p.leader),
             "Isr": ",".join(str(b) for b in p.isrs)}
            for p in sorted(found.partitions.values(), key=lambda p: p.id)]


def partition_rows(described: str) -> list[dict[str, str]]:
    """``topics describe``'s partition lines as {field: value}."""
    rows = []
    for line in described.splitlines():
        if "Partition:" in line:
            cells = line.split()
            rows.append({cells[i].rstrip(":"): cells[i + 1] for i in range(0, len(cells) - 1, 2)})
    return rows


def test_the_readme_cluster_section_runs_as_written(tmp_path: Path) -> None:
    """dev-cluster in one terminal; in another the README's lines, as written: a topic
    led by the three brokers, broker 2 killed -9 (its leadership moves, the others serve
    every record), brought back by ``dev-cluster restart`` (in the ISRs again)."""
    terminal_one = readme_block("`logs/*.log`, `run/broker-<id>.pid`). In one terminal:")
    terminal_two = readme_block("In another, a topic with a leader on each broker")
    assert terminal_one == [".venv/bin/odradek dev-cluster --brokers 3"], terminal_one
    assert len(terminal_two) == 9 and terminal_two[3].startswith("kill -9"), terminal_two
    work = tmp_path / "work"
    work.mkdir()
    (work / ".venv").symlink_to(REPO / ".venv")
    base = free_port_run(3)
    bootstrap = f"127.0.0.1:{base}"
    out, err = tmp_path / "dc.stdout", tmp_path / "dc.stderr"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            ["bash", "-c", f"exec {terminal_one[0]} --base-port {base}"], cwd=work,
            stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    run = DevClusterRun(process, out, err)
    try:
        run.wait_for_output("ready:")
        results = {}

        def described() -> list[dict[str, str]]:
            # the brokers' view that `topics describe` prints, polled in-process: each
            # poll as a command cost a Python start-up (issue 51); the README's describe
            # line itself runs once the wait is over, below
            return metadata_partitions(bootstrap, "replicated")

        for i, line in enumerate(terminal_two):
            if i == 4:  # describe after the kill: once the controller has moved leadership
                wait_until(lambda: all(r["Leader"] != "2" and "2" not in r["Isr"].split(",")
                                       for r in described() or [{"Leader": "2"}]),
                           STOP_TIMEOUT_S, "broker 2 out of leaders and ISRs")
            if i == 8:  # describe after the restart: once broker 2 has caught up
                wait_until(lambda: all("2" in r["Isr"].split(",")
                                       for r in described() or [{"Isr": ""}]),
                           STOP_TIMEOUT_S * 2, "broker 2 back in every ISR")
            res = run_line(line, work, bootstrap)
            assert res.returncode == 0, (line, res.stdout, res.stderr, run.describe())
            results[i] = res
        first = partition_rows(results[2].stdout)
        assert sorted(r["Leader"] for r in first) == ["1", "2", "3"], results[2].stdout
        assert "broker 2" in run.stderr() and "SIGKILL" in run.stderr(), run.describe()
        assert sorted(results[6].stdout.split()) == ["1", "2", "3", "4", "5", "6"]
        assert results[7].stdout.startswith("restarted broker 2: pid "), results[7].stdout
        assert run.interrupt() == 0, run.describe()
        assert "did not stop" not in run.stderr(), run.describe()
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            process.wait(STOP_TIMEOUT_S)
        for pid_file in (work / "dev-cluster" / "run").glob("*.pid"):
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)
