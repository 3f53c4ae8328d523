"""The test brokers forked from a zygote (tests/_zygote.py) are processes as
``subprocess.Popen`` would give: their own session, their directory and output files, a
kill -9 seen as -9 once reaped, a clean stop as 0, a failed start's exit status and
message; a broker whose environment the zygote cannot give is started as before."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests import _zygote
from tests._deadlines import expired
from tests.interop._broker import (
    BrokerStartError,
    odradek_executable,
    refusing_address,
    start_broker,
)

pytestmark = pytest.mark.interop


def _ppid_and_pgid(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[1]), int(fields[2])


def _metadata_answered(port: int) -> bool:
    """An ApiVersions request (v0) gets an answer of the same correlation id."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        body = (18).to_bytes(2, "big") + (0).to_bytes(2, "big") + (7).to_bytes(4, "big")
        body += (-1).to_bytes(2, "big", signed=True)  # no client id
        s.sendall(len(body).to_bytes(4, "big") + body)
        size = int.from_bytes(s.recv(4), "big")
        answer = b""
        while len(answer) < size:
            answer += s.recv(size - len(answer))
    return answer[:4] == (7).to_bytes(4, "big")


def test_a_forked_broker_is_a_process_of_its_own(tmp_path: Path) -> None:
    forks = _zygote.zygote()
    assert forks is not None, "ODRADEK_TEST_FORK=0 in this run: nothing forked to test"
    broker = start_broker(tmp_path)
    try:
        assert isinstance(broker.proc, _zygote.ForkedProcess)
        ppid, pgid = _ppid_and_pgid(broker.pid)
        assert ppid != os.getpid()  # the zygote's child, not this process's
        assert pgid == broker.pid  # a session and process group of its own
        assert os.readlink(f"/proc/{broker.pid}/cwd") == str(broker.log_dir)
        assert _metadata_answered(broker.port)
        assert broker.returncode is None and broker.alive()
    finally:
        code = broker.stop()
    assert code == 0, broker.describe()
    assert "stopped cleanly" in broker.stdout() + broker.stderr(), broker.describe()
    assert not Path(f"/proc/{broker.pid}").exists()  # reaped: no zombie left


def test_a_forked_broker_killed_9_is_seen_so_and_restarts_on_its_log(tmp_path: Path) -> None:
    broker = start_broker(tmp_path)
    data, port = broker.data_dir, broker.port
    assert broker.kill9() == -signal.SIGKILL
    assert not Path(f"/proc/{broker.pid}").exists()
    again = start_broker(tmp_path, data_dir=data, port=port)  # the port is free again
    try:
        assert again.port == port and _metadata_answered(port)
    finally:
        again.stop()


def test_a_failed_start_gives_its_status_and_message(tmp_path: Path) -> None:
    with pytest.raises(BrokerStartError, match="exited during startup") as failed:
        start_broker(tmp_path, overrides={"num.partitions": "zero"})
    assert "num.partitions" in str(failed.value)


def test_a_broker_with_another_python_path_is_started_as_before(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, (str(tmp_path), os.environ.get("PYTHONPATH"))))}
    broker = start_broker(tmp_path, env=env)
    try:
        assert not isinstance(broker.proc, _zygote.ForkedProcess)
        assert _ppid_and_pgid(broker.pid)[0] == os.getpid()
    finally:
        broker.stop()


def test_a_command_run_forked_answers_as_one_run_by_subprocess(tmp_path: Path) -> None:
    exe = str(odradek_executable())
    with refusing_address() as refused:
        argv = [exe, "topics", "--list", "--bootstrap-server", refused]
        forks = _zygote.zygote()
        assert forks is not None and forks.accepts(argv, dict(os.environ))  # forked
        forked = _zygote.run(argv, timeout=60)
        spawned = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                                 check=False)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        spawned.returncode, spawned.stdout, spawned.stderr)
    assert forked.returncode == 1 and "cannot reach" in forked.stderr
    with start_broker(tmp_path) as broker:
        produced = _zygote.run([exe, "produce", "--topic", "z", "-b", broker.bootstrap],
                               input="one\ntwo\n", cwd=tmp_path, timeout=60)
        assert produced.returncode == 0, produced.stderr
        consumed = _zygote.run([exe, "consume", "--topic", "z", "--from-beginning",
                                "--max-messages", "2", "-b", broker.bootstrap], timeout=60)
        assert (consumed.returncode, consumed.stdout) == (0, "one\ntwo\n"), consumed.stderr
        with pytest.raises(subprocess.TimeoutExpired):  # waits for a third, is killed
            _zygote.run([exe, "consume", "--topic", "z", "--from-beginning",
                         "--max-messages", "3", "-b", broker.bootstrap], timeout=3)


def test_a_spawn_returns_once_the_broker_has_its_session(tmp_path: Path) -> None:
    """As Popen: a kill of the process group at once after the start reaches it."""
    for i in range(5):
        broker = start_broker(tmp_path / str(i), wait=False)
        assert os.getpgid(broker.pid) == broker.pid
        assert broker.kill9() == -signal.SIGKILL
        assert not Path(f"/proc/{broker.pid}").exists()


def test_a_set_up_that_fails_raises_as_popen_does(tmp_path: Path) -> None:
    forks = _zygote.zygote()
    assert forks is not None
    with pytest.raises(OSError, match="FileNotFoundError"):
        forks.spawn([str(odradek_executable()), "--version"], cwd=str(tmp_path / "absent"),
                    env=dict(os.environ), stdout=tmp_path / "out", stderr=tmp_path / "err",
                    session=True)
    done = _zygote.run([str(odradek_executable()), "--version"], timeout=60)
    assert done.returncode == 0 and done.stdout  # the zygote serves on


def test_an_exited_childs_status_is_its_own_when_its_pid_is_given_again(
        tmp_path: Path) -> None:
    """The zygote reaps at once, so the system may give a child's pid to the next one
    before the first's handle has asked: statuses are kept by spawn, not by pid. The
    reuse is forced with ns_last_pid (root)."""
    forks = _zygote.zygote()
    assert forks is not None
    exe = str(odradek_executable())
    for attempt in range(20):
        first = forks.spawn([exe, "--version"], cwd=str(tmp_path), env=dict(os.environ),
                            stdout=tmp_path / "out", stderr=tmp_path / "err", session=True)
        first.wait(30)  # reported: the zygote has reaped it, its pid is free
        first.returncode = None  # asked again below, as a handle that never asked
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(first.pid - 1))
        second = start_broker(tmp_path / str(attempt), wait=False)
        if second.pid == first.pid:
            break
        second.kill9()
    else:
        raise AssertionError("the pid was taken by another process 20 times")
    try:
        assert first.wait(30) == 0
        first.kill()  # a no-op: it has exited
        assert second.alive()
    finally:
        assert second.kill9() == -signal.SIGKILL


def test_a_broker_outlives_its_zygote_and_stops(tmp_path: Path) -> None:
    broker = start_broker(tmp_path / "a")
    forks = _zygote.zygote()
    assert forks is not None and isinstance(broker.proc, _zygote.ForkedProcess)
    os.killpg(forks._proc.pid, signal.SIGKILL)  # the zygote's group: not the broker's
    forks._proc.wait()
    assert broker.alive() and _metadata_answered(broker.port)
    assert broker.stop() is not None  # its status went with the zygote: -9 is said
    assert _zygote._ended(broker.pid)
    again = start_broker(tmp_path / "b")  # a new zygote
    try:
        assert isinstance(again.proc, _zygote.ForkedProcess) and again.alive()
    finally:
        again.stop()


def test_a_zygote_that_does_not_answer_is_dropped_and_the_broker_started_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    forks = _zygote.zygote()
    assert forks is not None
    monkeypatch.setattr(_zygote.Zygote, "ANSWER_S", 1.0)
    os.kill(forks._proc.pid, signal.SIGSTOP)
    broker = start_broker(tmp_path / "a")  # by Popen, once the zygote gave no answer
    try:
        assert not isinstance(broker.proc, _zygote.ForkedProcess)
        assert forks.gone and forks._proc.poll() is not None  # killed, stopped as it was
    finally:
        broker.stop()
    monkeypatch.undo()  # a new zygote's first answer waits for its imports
    after = start_broker(tmp_path / "b")
    try:
        assert isinstance(after.proc, _zygote.ForkedProcess)
    finally:
        after.stop()


def test_a_child_exited_but_not_yet_reported_is_still_running_to_poll(
        tmp_path: Path) -> None:
    """Between a child's exit and the zygote's report of its status (reaped, the line on
    its way), ``poll()`` says None, as Popen's does before it reaps; it said -9, the
    placeholder of a zygote that is gone, and a whole run's test of a refused broker
    read that as its status (issue 51). The zygote is held stopped while the child ends,
    so the child stays a zombie, unreported, until it is let go."""
    forks = _zygote.zygote()
    assert forks is not None
    child = forks.spawn([str(odradek_executable()), "--no-such-option"], cwd=str(tmp_path),
                        env=dict(os.environ), stdout=tmp_path / "out",
                        stderr=tmp_path / "err", session=True)
    os.kill(forks._proc.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        while not _zygote._ended(child.pid):
            assert not expired(started, 60), "the child did not exit"
            time.sleep(0.02)
        assert child.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(0.1)
    finally:
        os.kill(forks._proc.pid, signal.SIGCONT)
    assert child.wait(30) == 2  # a usage error, reported once the zygote runs again
