"""The regex worker's life beside the broker's (:mod:`odradek.coordinator.regex_worker`):
a broker process killed -9 (only it, not its process group: a crash, or ``kill -9
<pid>``) leaves no worker behind, idle or mid-compile; a worker killed -9 mid-resolution
is replaced and the broker keeps answering; brokers started and stopped one after
another in one process leave no worker either."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.testing import running_broker
from tests.interop._broker import start_broker
from tests.server._requests import one
from tests.server.test_consumer_group_apis import heartbeat, new_group


def _state(pid: int) -> str | None:
    """A process's state letter (Z: exited, not reaped), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def _workers_of(parent: int) -> list[int]:
    """The regex workers whose parent is ``parent``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if ppid == parent and b"odradek.coordinator.regex_worker" in cmdline:
            out.append(int(entry))
    return out


def _wait_exited(pid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while _state(pid) not in (None, "Z"):
        assert time.monotonic() < deadline, f"regex worker {pid} still runs"
        time.sleep(0.05)


def test_a_broker_killed_leaves_no_regex_worker(tmp_path: Path) -> None:
    with start_broker(tmp_path) as broker:
        response = one(broker, heartbeat(new_group(), "m1", 0, regex="orders-.*"))  # type: ignore[arg-type]
        assert response.error_code == ErrorCode.none, response.error_message
        (worker,) = _workers_of(broker.pid)
        os.kill(broker.pid, signal.SIGKILL)  # the broker alone, not its group
        broker.proc.wait(30)
        _wait_exited(worker, 30)


def test_a_broker_killed_mid_compile_leaves_no_regex_worker(tmp_path: Path) -> None:
    """The worker is compiling an expression RE2 takes seconds over when the broker
    dies: it exits once it finds its broker gone, at the latest when the compile ends."""
    with start_broker(tmp_path) as broker:
        one(broker, heartbeat(new_group(), "m1", 0, regex="warm-up"))  # type: ignore[arg-type]
        (worker,) = _workers_of(broker.pid)
        answers: list[Any] = []

        def costly() -> None:
            try:
                answers.append(one(broker, heartbeat(  # type: ignore[arg-type]
                    new_group(), "m2", 0, regex="[a-z]{1,1000}" * 40)))
            except Exception as exc:  # the broker dies under it
                answers.append(exc)

        beat = threading.Thread(target=costly)
        beat.start()
        deadline = time.monotonic() + 30
        # compiling: the worker is on the CPU (R), not waiting on its pipe (S)
        while _state(worker) != "R":
            assert time.monotonic() < deadline and not answers
            time.sleep(0.01)
        os.kill(broker.pid, signal.SIGKILL)
        broker.proc.wait(30)
        beat.join(30)
        _wait_exited(worker, 60)


def test_a_worker_killed_mid_resolution_is_replaced() -> None:
    """The worker dies (kill -9) while a group's refresh waits on it: the broker keeps
    answering, the refresh fails (the group keeps what it had), and the group's next
    heartbeat has a new worker resolve its expression."""
    with running_broker() as rb:
        prefix = f"k{uuid.uuid4().hex[:6]}"
        for i in range(3):
            rb.call(rb.broker.metadata.create_topic, f"{prefix}-{i}", 1, 1, {})
        coordinator = rb.broker.group_coordinator
        worker, regex = coordinator.regex_worker, f"{prefix}-.*"
        # validated once (by another group), so that only the resolution needs the worker
        one(rb, heartbeat(new_group(), "other", 0, regex=regex))
        deadline = time.monotonic() + 60
        while worker.busy:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        pid, resolutions = worker.pid, worker.requests["resolve"]
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # the kill then lands mid-resolution
        try:
            group = new_group()
            first = one(rb, heartbeat(group, "m1", 0, regex=regex))
            assert first.error_code == ErrorCode.none, first.error_message
            while worker.requests["resolve"] == resolutions:
                assert time.monotonic() < deadline
                time.sleep(0.01)
        finally:
            os.kill(pid, signal.SIGKILL)
        epoch = first.member_epoch
        while not coordinator.consumer_groups[group].resolved_regexes:
            assert time.monotonic() < deadline
            response = one(rb, heartbeat(group, "m1", epoch, owned=None))
            assert response.error_code == ErrorCode.none, response.error_message
            epoch = response.member_epoch
            time.sleep(0.05)
        assert worker.pid not in (None, pid)
        resolved = coordinator.consumer_groups[group].resolved_regexes
        assert resolved[regex].topics == {f"{prefix}-{i}" for i in range(3)}


def test_brokers_one_after_another_leave_no_regex_worker() -> None:
    pids = []
    for _ in range(3):
        with running_broker() as rb:
            one(rb, heartbeat(new_group(), "m1", 0, regex="a.*"))
            pid = rb.broker.group_coordinator.regex_worker.pid
            assert pid is not None
            pids.append(pid)
    for pid in pids:
        _wait_exited(pid, 30)
