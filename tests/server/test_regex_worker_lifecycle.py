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

import pytest
from kio.schema.errors import ErrorCode

from odradek.coordinator import regex_worker
from odradek.testing import running_broker
from tests._deadlines import expired
from tests.interop._broker import start_broker
from tests.server._requests import one
from tests.server.test_consumer_group_apis import consumer_config, heartbeat, new_group


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
    started = time.monotonic()
    while _state(pid) not in (None, "Z"):
        assert not expired(started, timeout_s), f"regex worker {pid} still runs"
        time.sleep(0.05)


def test_a_broker_killed_leaves_no_regex_worker(tmp_path: Path) -> None:
    with start_broker(tmp_path) as broker:
        response = one(broker, heartbeat(new_group(), "m1", 0, regex="orders-.*"))  # type: ignore[arg-type]
        assert response.error_code == ErrorCode.none, response.error_message
        workers = _workers_of(broker.pid)  # the validating child, the resolving one
        assert workers
        os.kill(broker.pid, signal.SIGKILL)  # the broker alone, not its group
        broker.proc.wait(30)
        for worker in workers:
            _wait_exited(worker, 30)


def test_a_broker_killed_mid_compile_leaves_no_regex_worker(tmp_path: Path) -> None:
    """The worker is compiling an expression RE2 takes seconds over when the broker
    dies: it exits once it finds its broker gone, at the latest when the compile ends."""
    with start_broker(tmp_path) as broker:
        one(broker, heartbeat(new_group(), "m1", 0, regex="warm-up"))  # type: ignore[arg-type]
        answers: list[Any] = []

        def costly() -> None:
            try:
                answers.append(one(broker, heartbeat(  # type: ignore[arg-type]
                    new_group(), "m2", 0, regex="[a-z]{1,1000}" * 40)))
            except Exception as exc:  # the broker dies under it
                answers.append(exc)

        beat = threading.Thread(target=costly)
        beat.start()
        started = time.monotonic()
        # compiling: a worker is on the CPU (R), not waiting on its pipe (S)
        while not any(_state(w) == "R" for w in _workers_of(broker.pid)):
            assert not expired(started, 30) and not answers
            time.sleep(0.01)
        workers = _workers_of(broker.pid)
        os.kill(broker.pid, signal.SIGKILL)
        broker.proc.wait(30)
        beat.join(30)
        for worker in workers:
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
        worker, regex = coordinator.regex_resolver, f"{prefix}-.*"
        # validated once (by another group), so that only the resolution needs the worker
        one(rb, heartbeat(new_group(), "other", 0, regex=regex))
        started = time.monotonic()
        while worker.busy or worker.pid is None:
            assert not expired(started, 60)
            time.sleep(0.01)
        pid, resolutions = worker.pid, worker.requests["resolve"]
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # the kill then lands mid-resolution
        try:
            group = new_group()
            first = one(rb, heartbeat(group, "m1", 0, regex=regex))
            assert first.error_code == ErrorCode.none, first.error_message
            while worker.requests["resolve"] == resolutions:
                assert not expired(started, 60)
                time.sleep(0.01)
        finally:
            os.kill(pid, signal.SIGKILL)
        epoch = first.member_epoch
        # (a failed refresh counts as one: the interval lowered)
        with consumer_config(rb, regex_refresh_interval_ms=0):
            while not coordinator.consumer_groups[group].resolved_regexes:
                assert not expired(started, 60)
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


def _resolving_child(rb: Any) -> int:
    """The pid of the child process that resolves the broker's expressions."""
    coordinator = rb.broker.group_coordinator
    resolver = coordinator.regex_resolver
    pid: int | None = resolver.pid
    assert pid is not None
    return pid


def test_a_long_resolution_does_not_hold_up_other_groups_joining() -> None:
    """A group's resolution that takes long (an expression RE2 matches slowly over many
    long topic names: here the resolving child is stopped mid-resolution, SIGSTOP) does
    not hold up another group's member joining with a new expression: its compile is
    answered meanwhile."""
    with running_broker() as rb:
        coordinator = rb.broker.group_coordinator
        rb.call(rb.broker.metadata.create_topic, f"slow-{uuid.uuid4().hex[:6]}", 1, 1, {})
        slow_group = new_group()
        first = one(rb, heartbeat(slow_group, "m1", 0, regex="(?:[a-z]*a[a-z]{15}){1,8}"))
        assert first.error_code == ErrorCode.none, first.error_message
        started = time.monotonic()
        while not coordinator.consumer_groups[slow_group].resolved_regexes:
            assert not expired(started, 60)
            time.sleep(0.01)
        # a second resolution of the slow group is under way when its child stops
        rb.call(rb.broker.metadata.create_topic, f"slow-{uuid.uuid4().hex[:6]}", 1, 1, {})
        pid = _resolving_child(rb)
        with consumer_config(rb, regex_refresh_interval_ms=0):
            os.kill(pid, signal.SIGSTOP)
            joining: threading.Thread | None = None
            try:
                resolver = coordinator.regex_resolver
                resolutions = resolver.requests["resolve"]
                while resolver.requests["resolve"] == resolutions:
                    assert not expired(started, 60)
                    one(rb, heartbeat(slow_group, "m1", first.member_epoch, owned=None))
                    time.sleep(0.01)
                answers: list[Any] = []
                joining = threading.Thread(target=lambda: answers.append(one(rb, heartbeat(
                    new_group(), "m1", 0, regex=f"fresh-{uuid.uuid4().hex}.*"))))
                joining.start()
                joining.join(60)
                assert [a.error_code for a in answers] == [ErrorCode.none]
            finally:
                os.kill(pid, signal.SIGCONT)
                if joining is not None:
                    joining.join(120)


def test_a_resolution_past_its_budget_is_not_retried_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A group whose resolution timed out (too slow: here its child is stopped past a
    small budget) is not resolved again at its next heartbeat but after the refresh
    interval, as if it had been refreshed: one slow expression does not keep the
    resolving child busy for good."""
    with running_broker() as rb:
        coordinator = rb.broker.group_coordinator
        one(rb, heartbeat(new_group(), "w", 0, regex="warm-up"))
        resolver = coordinator.regex_resolver
        started = time.monotonic()
        while resolver.busy or resolver.requests["resolve"] == 0:
            assert not expired(started, 60)
            time.sleep(0.01)
        pid = _resolving_child(rb)
        resolutions = resolver.requests["resolve"]
        monkeypatch.setattr(regex_worker, "RESOLVE_TIMEOUT_S", 0.2)
        os.kill(pid, signal.SIGSTOP)  # starved: timed out after 15 times the budget
        with consumer_config(rb, regex_refresh_interval_ms=600_000):
            group = new_group()
            first = one(rb, heartbeat(group, "m1", 0, regex="slow-.*"))
            assert first.error_code == ErrorCode.none, first.error_message
            while resolver.requests["resolve"] == resolutions or resolver.busy:
                assert not expired(started, 60)
                time.sleep(0.01)
            assert resolver.pid != pid  # killed at its deadline
            for _ in range(5):
                response = one(rb, heartbeat(group, "m1", first.member_epoch, owned=None))
                assert response.error_code == ErrorCode.none
            assert resolver.requests["resolve"] == resolutions + 1


def test_a_group_reloaded_while_its_regex_is_being_resolved() -> None:
    """The coordinator resigns and is elected again (a failover) while a new member's
    expression is still being resolved (its child stopped meanwhile): the reloaded
    group has the member and no resolution, the late answer of the old refresh lands on
    the reloaded group or a new refresh resolves it, and the member gets its partitions."""
    with running_broker() as rb:
        prefix = f"f{uuid.uuid4().hex[:6]}"
        rb.call(rb.broker.metadata.create_topic, f"{prefix}-a", 2, 1, {})
        info = rb.broker.metadata.get(f"{prefix}-a")
        assert info is not None
        coordinator = rb.broker.group_coordinator
        resolver, regex = coordinator.regex_resolver, f"{prefix}-.*"
        one(rb, heartbeat(new_group(), "other", 0, regex=regex))  # validated, children up
        started = time.monotonic()
        while resolver.busy or resolver.pid is None:
            assert not expired(started, 60)
            time.sleep(0.01)
        pid, resolutions = resolver.pid, resolver.requests["resolve"]
        assert pid is not None
        group = new_group()
        os.kill(pid, signal.SIGSTOP)
        try:
            first = one(rb, heartbeat(group, "m1", 0, regex=regex))
            assert first.error_code == ErrorCode.none, first.error_message
            while resolver.requests["resolve"] == resolutions:
                assert not expired(started, 60)
                time.sleep(0.01)
            partition = coordinator.partition_for(group)
            rb.call(coordinator.on_resigned, partition)
            rb.call(coordinator.on_elected, partition)
            loaded = coordinator.consumer_groups[group]
            assert loaded.members["m1"].subscribed_topic_regex == regex
            assert loaded.resolved_regexes == {}
        finally:
            os.kill(pid, signal.SIGCONT)
        epoch = first.member_epoch
        owned: list[Any] = []
        with consumer_config(rb, regex_refresh_interval_ms=0):
            while True:
                assert not expired(started, 60)
                response = one(rb, heartbeat(group, "m1", epoch, owned=owned))
                assert response.error_code == ErrorCode.none, response.error_message
                epoch = response.member_epoch
                if response.assignment is not None:
                    owned = [(tp.topic_id, list(tp.partitions))
                             for tp in response.assignment.topic_partitions]
                    if owned == [(info.topic_id, [0, 1])]:
                        break
                time.sleep(0.05)


def test_a_resolution_too_large_to_store_is_not_retried_at_every_heartbeat() -> None:
    """A resolution whose ConsumerGroupRegularExpression record is larger than
    ``__consumer_offsets`` takes (max.message.bytes; Kafka cannot write it either) is not
    stored, and is tried again after the refresh interval, not at every heartbeat (each
    try is a resolution of every topic name and a failed append)."""
    with running_broker(overrides={"message.max.bytes": "5000"}) as rb:
        prefix = f"big{uuid.uuid4().hex[:6]}"
        for i in range(30):
            rb.call(rb.broker.metadata.create_topic,
                    f"{prefix}-{i:03d}-" + "x" * 230, 1, 1, {})
        coordinator = rb.broker.group_coordinator
        resolver = coordinator.regex_resolver
        with consumer_config(rb, regex_refresh_interval_ms=600_000):
            group = new_group()
            first = one(rb, heartbeat(group, "m1", 0, regex=f"{prefix}-.*"))
            assert first.error_code == ErrorCode.none, first.error_message
            started = time.monotonic()
            while resolver.requests["resolve"] == 0 or resolver.busy or (
                    group in coordinator._regex_refreshes):
                assert not expired(started, 60)
                time.sleep(0.01)
            epoch = first.member_epoch
            for _ in range(5):
                response = one(rb, heartbeat(group, "m1", epoch, owned=None))
                assert response.error_code == ErrorCode.none, response.error_message
                epoch = response.member_epoch
            assert resolver.requests["resolve"] == 1
            assert coordinator.consumer_groups[group].resolved_regexes == {}
