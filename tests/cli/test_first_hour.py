"""Issue 19, "the first hour": what a newcomer trips over, run as a newcomer would, through
the real ``odradek`` command in a subprocess (exit code and output)."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tests._deadlines import describe, expired
from tests._zygote import run as run_odradek
from tests.interop._broker import REPO, free_port, odradek_executable

from odradek.client.connection import BrokerConnection, ClientError

CLI_TIMEOUT_S = 60.0


def odradek(*args: str, stdin: str | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_odradek([str(odradek_executable()), *args],
                          input=stdin, cwd=cwd, timeout=CLI_TIMEOUT_S)


@contextmanager
def tcp_server(on_connect: Callable[[socket.socket], None]) -> Iterator[int]:
    """A listening socket on a free port; each accepted connection is handed to
    ``on_connect`` in a thread. Yields the port."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            held.append(conn)
            on_connect(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        listener.close()
        for conn in held:
            conn.close()


#: the client gives a silent peer 10 s (BrokerConnection.open); an answer known at once
#: must come back well before that, start-up of the command included
SILENCE_TIMEOUT_S = 10.0


def timed(*args: str) -> subprocess.CompletedProcess[str]:
    started = time.monotonic()
    res = odradek(*args)
    assert time.monotonic() - started < SILENCE_TIMEOUT_S, "waited for a timeout"
    return res


def _answer_http(conn: socket.socket) -> None:
    conn.settimeout(5)
    conn.recv(1024)
    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    conn.close()


def test_topics_list_against_something_that_is_not_a_kafka_broker_says_why() -> None:
    """`topics list -b` at a closed port, at an HTTP server, at a server that hangs up: the
    reason, at once (not after the 10 s a silent peer is given)."""
    port = free_port()
    res = timed("topics", "list", "-b", f"127.0.0.1:{port}")
    assert res.returncode == 1
    assert res.stderr == (f"odradek: cannot reach 127.0.0.1:{port}: connection refused "
                          "(is a broker listening there?)\n")
    with tcp_server(_answer_http) as http_port:
        res = timed("topics", "list", "-b", f"127.0.0.1:{http_port}")
    assert res.returncode == 1
    assert res.stderr.startswith(
        f"odradek: cannot reach 127.0.0.1:{http_port}: not a Kafka broker: it answered "
        "b'HTTP/1.1 400 Bad Request"), res.stderr
    with tcp_server(lambda conn: conn.close()) as closing_port:
        res = timed("topics", "list", "-b", f"127.0.0.1:{closing_port}")
    assert res.returncode == 1
    assert res.stderr == (
        f"odradek: cannot reach 127.0.0.1:{closing_port}: the connection was closed without "
        "an answer to ApiVersions: the listener probably wants TLS or SASL (give the "
        "client's settings with --command-config: security.protocol, sasl.mechanism, ...), "
        "or it is not a Kafka broker\n")


def test_a_silent_peer_is_reported_as_such_after_the_timeout() -> None:
    silent = r"^no answer to ApiVersions within 0.5 s \(not a Kafka broker\?\)$"
    with tcp_server(lambda conn: None) as port, pytest.raises(ClientError, match=silent):
        asyncio.run(BrokerConnection.open(f"127.0.0.1:{port}", timeout=0.5))


def readme_commands(after: str) -> list[str]:
    """The ``odradek`` lines of the first ``sh`` block after the line holding ``after`` in
    README.md, as written, with ``# comments`` dropped."""
    text = (REPO / "README.md").read_text()
    block = text[text.index(after):].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].rstrip() for line in block.splitlines()
            if ".venv/bin/odradek " in line]


def run_as_written(line: str, bootstrap: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """One README line run by bash in ``cwd`` (where ``.venv`` is the repo's), pointed at
    the test's broker (the README's commands take the default 127.0.0.1:9092), with
    ``TMPDIR`` at ``cwd``'s sibling ``tmp`` (the README writes its example files there)."""
    return subprocess.run(["bash", "-c", f"{line} --bootstrap-server {bootstrap}"],
                          capture_output=True, text=True, cwd=cwd, timeout=CLI_TIMEOUT_S,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src"),
                               "TMPDIR": str(cwd.parent / "tmp")}, check=False)


def test_the_readme_walkthroughs_run_as_written(tmp_path: Path) -> None:
    """"Five minutes with it" (Odradek's tools, then kcat), then the consumer groups
    walkthrough: every command of the README, as written, exits 0; the group made by
    ``consume --group`` has committed every record (lag 0), which the later commands move,
    export, import and delete."""
    from tests.interop._broker import start_broker

    five_minutes = readme_commands("In another, with the tools in `.venv/bin`:")
    groups = readme_commands("`odradek groups` (Kafka's `kafka-consumer-groups.sh`)")
    assert len(five_minutes) == 4 and len(groups) == 8, (five_minutes, groups)
    assert "--group my-app" in groups[0] and groups[0].startswith(".venv/bin/odradek consume")
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "tmp").mkdir()
    (work / ".venv").symlink_to(REPO / ".venv")
    with start_broker(tmp_path) as broker:
        results = []
        for line in five_minutes + groups:
            res = run_as_written(line, broker.bootstrap, work)
            assert res.returncode == 0, (line, res.stdout, res.stderr)
            results.append(res)
            if line == groups[1]:  # groups describe, right after consume --group
                described = run_as_written(groups[2], broker.bootstrap, work)
        text = (REPO / "README.md").read_text()
        kcat_block = text[text.index("or with kcat"):].split("```sh\n", 1)[1].split("```")[0]
        kcat_lines = [line.replace("127.0.0.1:9092", broker.bootstrap)
                      for line in kcat_block.splitlines() if line.strip()]
        assert len(kcat_lines) == 2, kcat_lines
        for line in kcat_lines:
            res = subprocess.run(["bash", "-c", line], capture_output=True, text=True,
                                 cwd=work, timeout=CLI_TIMEOUT_S, check=False)
            assert res.returncode == 0, (line, res.stderr)
        assert "k1 v1" in " ".join(res.stdout.split()), res.stdout  # partition offset key value
        consumed = results[2]
        assert sorted(consumed.stdout.splitlines()) == ["alice\thello", "bob\thi"]
        assert consumed.stderr.endswith("Processed a total of 2 messages\n")
        group_consumed = results[4]
        assert sorted(group_consumed.stdout.splitlines()) == ["hello", "hi"]
        assert group_consumed.stderr.endswith("Processed a total of 2 messages\n")
        assert "my-app" in results[5].stdout  # groups list
        rows = [line.split() for line in described.stdout.splitlines() if "greetings" in line]
        header = next(line.split() for line in described.stdout.splitlines()
                      if "LAG" in line)
        assert sum(int(row[header.index("CURRENT-OFFSET")]) for row in rows) == 2, rows
        assert all(row[header.index("LAG")] == "0" for row in rows), described.stdout
        assert (tmp_path / "tmp" / "my-app.csv").read_text().count("greetings,") == len(rows)
        assert not list(work.glob("*.csv"))  # nothing left in the working directory


def _default_stop_signals() -> None:
    """In the child before exec: SIGINT and SIGTERM at their defaults, whatever the test
    run inherited (a shell's background job ignores SIGINT, and an ignored signal stays
    ignored across exec)."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("group", [None, "ctrl-c-group"])
def test_ctrl_c_ends_consume_with_kafkas_summary(tmp_path: Path, group: str | None,
                                                 signame: str) -> None:
    """Stopped with Ctrl-C (SIGINT) or SIGTERM, `odradek consume` (with and without
    --group) prints "Processed a total of N messages" as Kafka's console consumer does,
    and exits 128 + the signal's number (130, 143), as Kafka's does."""
    import signal

    from tests.interop._broker import start_broker

    sig = signal.Signals[signame]
    with start_broker(tmp_path) as broker:
        sent = odradek("produce", "--topic", "t", "-b", broker.bootstrap, stdin="one\n")
        assert sent.returncode == 0, sent.stderr
        extra = ["--group", group] if group else []
        proc = subprocess.Popen(
            [str(odradek_executable()), "consume", "--topic", "t", "--from-beginning",
             "-b", broker.bootstrap, *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(REPO / "src")},
            preexec_fn=_default_stop_signals,
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "one\n"  # blocks until the record is printed
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=CLI_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 128 + sig, err
    assert err.endswith("Processed a total of 1 messages\n"), err
    assert "Traceback" not in err


def test_consume_group_takes_no_partition_or_offset() -> None:
    res = odradek("consume", "--topic", "t", "--group", "g", "--partition", "0")
    assert res.returncode == 2  # a usage error, as argparse's own
    assert res.stderr == ("odradek: --group takes no --partition or --offset: the group "
                          "assigns partitions and keeps the offsets\n")


def _log_lines(text: str) -> list[str]:
    """The messages of the broker's log lines (after ``LEVEL logger:``), with the level."""
    out = []
    for line in text.splitlines():
        parts = line.split(" ", 4)  # date time LEVEL logger: message
        if len(parts) == 5 and parts[3].endswith(":"):
            out.append(f"{parts[2]} {parts[4]}")
    return out


def test_the_broker_logs_one_line_per_phase_and_warns_only_when_something_is_wrong(
    tmp_path: Path,
) -> None:
    """A new data dir says so (not "unclean shutdown"); the first group join does not log
    a line per __consumer_offsets partition; after kill -9, logs that never held data (and
    those that did) are recovered in one summary line, without a WARNING, and the groups
    in one more; counts are in the right number."""
    from tests.interop._broker import start_broker

    data = tmp_path / "data"
    broker = start_broker(tmp_path, data_dir=data)
    try:
        created = odradek("topics", "create", "--topic", "one", "--partitions", "1",
                          "-b", broker.bootstrap)
        assert created.returncode == 0, created.stderr
        sent = odradek("produce", "--topic", "one", "-b", broker.bootstrap, stdin="a\nb\n")
        assert sent.stderr == "Sent 2 records to one.\n"
        grouped = odradek("consume", "--topic", "one", "--group", "g", "--from-beginning",
                          "--max-messages", "2", "-b", broker.bootstrap)
        assert grouped.returncode == 0, grouped.stderr
        port = int(broker.bootstrap.rsplit(":", 1)[1])
        broker.kill9()
        first = _log_lines(broker.stderr())
    finally:
        broker.stop()
    assert f"INFO new log dir {data}" in first, first
    assert not any("unclean" in line for line in first), first
    assert not any("created log for" in line for line in first), first
    assert "INFO created topic one with 1 partition" in first
    assert [line for line in first if "50 partitions" in line] == [
        "INFO created topic __consumer_offsets with 50 partitions"]
    assert any(line.startswith("INFO group g: generation 1 with 1 member, ") for line in first)
    again = start_broker(tmp_path, data_dir=data, port=port)
    try:
        second = _log_lines(again.stderr())
    finally:
        again.stop()
    recovered = [line for line in second if line.startswith("INFO recovered ")]
    assert len(recovered) == 1, second
    assert re.fullmatch(rf"INFO recovered 51 logs from {re.escape(str(data))} in \d+ ms "
                        r"after an unclean shutdown( \(indexes of \d+ segments? rebuilt\))?",
                        recovered[0]), recovered
    assert not [line for line in second if line.startswith(("WARNING", "ERROR"))], second
    offsets_lines = [line for line in second if "__consumer_offsets" in line]
    assert len(offsets_lines) == 1, second
    assert re.fullmatch(r"INFO loaded 1 group from 50 partitions of __consumer_offsets in "
                        r"\d+ ms", offsets_lines[0]), offsets_lines


def test_status_defaults_to_data_and_checks_the_broker_with_b(tmp_path: Path) -> None:
    """`odradek status` in the directory of `make serve` reads ./data; with -b it says
    whether the broker answers (exit 1 when it does not)."""
    from tests.interop._broker import start_broker

    broker = start_broker(tmp_path)  # data in tmp_path/data
    try:
        started = time.monotonic()
        while not (tmp_path / "data" / "cleaner-status.json").exists():
            assert not expired(started, 30), f"no cleaner-status.json in {describe(started, 30)}"
            time.sleep(0.1)
        plain = odradek("status", cwd=tmp_path)
        assert plain.returncode == 0, plain.stderr
        assert plain.stdout.startswith("log cleaner: healthy"), plain.stdout
        checked = odradek("status", "-b", broker.bootstrap, cwd=tmp_path)
        assert checked.returncode == 0, checked.stderr
        host, port = broker.bootstrap.rsplit(":", 1)
        assert checked.stdout.startswith(
            f"broker {broker.bootstrap}: up (controller: broker 0 at {host}:{port})\n"
            "log cleaner: healthy"), checked.stdout
    finally:
        broker.stop()
    down = odradek("status", "-b", broker.bootstrap, cwd=tmp_path)
    assert down.returncode == 1
    assert down.stdout.startswith(f"broker {broker.bootstrap}: DOWN (connection refused "
                                  "(is a broker listening there?))\n"), down.stdout
    elsewhere = odradek("status", cwd=tmp_path / "data")
    assert elsewhere.returncode == 2
    assert elsewhere.stderr.startswith("odradek: no cleaner-status.json under ./data")


def test_serve_help_points_at_the_config_keys_and_every_flag_is_explained() -> None:
    """`odradek serve --help` names the example server.properties (which exists, in
    Kafka's layout) and where every key is; every flag of every command has help text."""
    import argparse

    from odradek.cli.main import build_parser

    res = odradek("serve", "--help")
    assert res.returncode == 0
    assert "config/server.properties" in res.stdout
    assert "src/odradek/server/config.py" in res.stdout
    assert (REPO / "config" / "server.properties").read_text().count(
        "############################# ") >= 5  # Kafka's section banners

    def silent_flags(parser: argparse.ArgumentParser, name: str) -> Iterator[str]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for command, sub in action.choices.items():
                    yield from silent_flags(sub, f"{name} {command}")
            elif action.option_strings and not action.help:
                yield f"{name} {action.option_strings[0]}"

    assert list(silent_flags(build_parser(), "odradek")) == []


def test_the_readme_pytest_recipe_survives_ruff_and_takes_broker_config(
    tmp_path: Path,
) -> None:
    """The README's conftest.py line, in a project of its own: ruff's F401 fix leaves it
    as it is, and pytest runs tests on the fixture, its marker and the factory."""
    text = (REPO / "README.md").read_text()
    recipe = text[text.index("# conftest.py\n"):].split("\n\n", 1)[0]
    assert recipe == '# conftest.py\npytest_plugins = ["odradek.testing"]'
    project = tmp_path / "app"
    project.mkdir()
    (project / "conftest.py").write_text(recipe + "\n")
    fixed = subprocess.run([str(REPO / ".venv" / "bin" / "ruff"), "check", "--select", "F401",
                            "--fix", "--isolated", "conftest.py"],
                           cwd=project, capture_output=True, text=True, check=False)
    assert fixed.returncode == 0, fixed.stdout
    assert (project / "conftest.py").read_text() == recipe + "\n"
    (project / "test_app.py").write_text('''
import confluent_kafka
import pytest


def partitions_of(bootstrap, topic):
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, b"x")  # auto-creates the topic
    assert producer.flush(30) == 0
    return len(producer.list_topics(topic, timeout=30).topics[topic].partitions)


def test_default(odradek_broker):
    assert partitions_of(odradek_broker.bootstrap, "t") == 1


@pytest.mark.odradek_broker_config({"num.partitions": "3"})
def test_marker(odradek_broker):
    assert partitions_of(odradek_broker.bootstrap, "t") == 3


def test_factory(odradek_broker_factory):
    a = odradek_broker_factory({"num.partitions": "2"})
    b = odradek_broker_factory()
    assert a.bootstrap != b.bootstrap
    assert partitions_of(a.bootstrap, "t") == 2
    assert partitions_of(b.bootstrap, "t") == 1
''')
    res = subprocess.run(
        [str(REPO / ".venv" / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "--strict-markers", "-W", "error::pytest.PytestUnknownMarkWarning"],
        cwd=project, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "3 passed" in res.stdout, res.stdout
