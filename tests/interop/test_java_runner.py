"""The Java client's runner (tests/interop/_broker.py ``java_client()``): one server JVM
for a test process's runs (issue 51), its runs answered as a fresh JVM's were.

Runners of the tests' own (not the test process's), real JVMs, and the test program's
``selftest`` mode or usage errors: no broker needed.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from tests._deadlines import expired

from ._broker import JavaClientRunner, JavaServerGone, compile_java_client

pytestmark = pytest.mark.interop


def new_runner() -> Iterator[JavaClientRunner]:
    classes, jars = compile_java_client()
    r = JavaClientRunner(classes, jars, make_archive=False)
    try:
        yield r
    finally:
        r.close()
        assert r.server_pid is None


#: a runner for the tests that leave its server as it was (one JVM for them all)
shared = pytest.fixture(scope="module", name="shared")(new_runner)
#: a runner of the test's own, for the tests that kill or stop its server
runner = pytest.fixture(name="runner")(new_runner)


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended and been reaped (or is a zombie of no one)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_gone(pid: int, seconds: float = 30.0) -> None:
    started = time.monotonic()
    while not gone(pid):
        assert not expired(started, seconds), f"the server JVM {pid} is still there"
        time.sleep(0.05)


def test_a_usage_error_answers_2_and_the_server_answers_the_next_run(
    shared: JavaClientRunner,
) -> None:
    res = shared("127.0.0.1:1", "no-such-mode", "t")
    assert res.returncode == 2, res.describe()
    assert "OdradekInterop: unknown mode no-such-mode" in res.stderr
    assert res.stdout == "" and res.summary == {}
    pid = shared.server_pid
    assert pid is not None
    res = shared("127.0.0.1:1", "group-consume", "t", "only-a-group")
    assert res.returncode == 2 and "group-consume needs <group> <expected>" in res.stderr
    res = shared("127.0.0.1:1", "selftest", "t", "sleep:0", props={"client.id": "x"})
    assert res.ok and res.summary["selftest"] == "sleep:0", res.describe()
    assert shared.server_pid == pid


def test_a_bad_client_property_is_a_usage_error(shared: JavaClientRunner) -> None:
    res = shared("127.0.0.1:1", "selftest", "t", "sleep:0", "-Xnoequals")
    assert res.returncode == 2 and "bad client property -Xnoequals" in res.stderr


def test_arguments_arrive_whole(shared: JavaClientRunner) -> None:
    odd = "a b\tc\nd é \\ \"q\""
    res = shared("127.0.0.1:1", "selftest", odd, "sleep:0")
    assert res.ok and res.summary["topic"] == odd, res.describe()


def test_a_run_past_its_timeout_kills_the_server_and_the_next_run_gets_a_new_one(
    runner: JavaClientRunner,
) -> None:
    runner("127.0.0.1:1", "selftest", "t", "sleep:0")
    pid = runner.server_pid
    assert pid is not None
    with pytest.raises(AssertionError, match=r"Java client timed out after 1\.5 s: .*selftest"):
        runner("127.0.0.1:1", "selftest", "t", "sleep:60000", timeout=1.5)
    wait_gone(pid)
    assert runner.server_pid is None
    res = runner("127.0.0.1:1", "selftest", "t", "sleep:0")
    assert res.ok, res.describe()
    assert runner.server_pid not in (None, pid)


def test_a_server_that_dies_under_a_run_fails_it_and_the_next_run_gets_a_new_one(
    runner: JavaClientRunner,
) -> None:
    with pytest.raises(JavaServerGone, match=r"server JVM ended \(exit 9\)"):
        runner("127.0.0.1:1", "selftest", "t", "halt", timeout=60)
    res = runner("127.0.0.1:1", "selftest", "t", "sleep:0")
    assert res.ok, res.describe()


def test_a_killed_server_is_replaced_before_the_next_run(runner: JavaClientRunner) -> None:
    runner("127.0.0.1:1", "selftest", "t", "sleep:0")
    pid = runner.server_pid
    assert pid is not None
    os.kill(pid, 9)
    started = time.monotonic()
    while runner.server_pid == pid:
        assert not expired(started, 30), "the killed server still counts as alive"
        time.sleep(0.05)
    res = runner("127.0.0.1:1", "selftest", "t", "sleep:0")
    assert res.ok, res.describe()


def test_a_finished_runs_threads_do_not_write_into_a_later_run(
    shared: JavaClientRunner,
) -> None:
    res = shared("127.0.0.1:1", "selftest", "t", "leftover:3000")
    assert res.ok, res.describe()
    # the leftover thread writes every 10 ms while this run sleeps
    res = shared("127.0.0.1:1", "selftest", "t", "sleep:500")
    assert res.ok, res.describe()
    assert "leftover" not in res.stdout + res.stderr, res.describe()


def test_the_server_exits_when_its_stdin_closes(runner: JavaClientRunner) -> None:
    runner("127.0.0.1:1", "selftest", "t", "sleep:0")
    server = runner._server
    assert server is not None and server.proc.stdin is not None
    server.proc.stdin.close()
    assert server.proc.wait(timeout=30) == 0


def test_runs_with_jvm_args_get_a_jvm_of_their_own(shared: JavaClientRunner) -> None:
    shared("127.0.0.1:1", "selftest", "t", "sleep:0")
    pid = shared.server_pid
    res = shared("127.0.0.1:1", "selftest", "t", "sleep:0", jvm_args=["-Xmx64m"])
    assert res.ok and "-Xmx64m" in res.argv and "--serve" not in res.argv, res.describe()
    res = shared("127.0.0.1:1", "no-such-mode", "t", jvm_args=["-Xmx64m"])
    assert res.returncode == 2 and "unknown mode" in res.stderr
    assert shared.server_pid == pid


class _Interrupted(Exception):
    pass


def test_a_run_interrupted_while_waiting_does_not_answer_the_next(
        runner: JavaClientRunner) -> None:
    """An exception out of the wait for a run's answer (pytest-timeout's signal method, a
    Ctrl-C) ends the server, as it ended a fresh JVM: the next run gets its own answer,
    not the interrupted run's."""
    runner("127.0.0.1:1", "selftest", "first", "sleep:0")

    def interrupt(signum: int, frame: object) -> None:
        raise _Interrupted

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        with pytest.raises(_Interrupted):
            runner("127.0.0.1:1", "selftest", "interrupted", "sleep:3000")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    res = runner("127.0.0.1:1", "selftest", "next", "sleep:0")
    assert res.summary.get("topic") == "next", res.describe()


def test_a_server_started_while_many_files_are_open(runner: JavaClientRunner) -> None:
    """The reply pipe's descriptor may be above select()'s 1023 (a test holding sockets
    and logs; the open-files limit is far higher)."""
    held = [os.open("/dev/null", os.O_RDONLY) for _ in range(1100)]
    try:
        res = runner("127.0.0.1:1", "selftest", "many-files", "sleep:0")
        assert res.ok, res.describe()
    finally:
        for fd in held:
            os.close(fd)
