"""The regex worker process (:mod:`odradek.coordinator.regex_worker`): real child
processes, driven over their pipes by the coordinator's asyncio client."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from odradek.coordinator import regex_worker
from odradek.coordinator.regex_worker import RegexTimeout, RegexWorker
from tests._deadlines import expired


def test_validate_and_resolve() -> None:
    async def go() -> None:
        worker = RegexWorker()
        try:
            assert await worker.validate("orders-.*") is None
            assert await worker.validate("orders-[") == (
                "SubscribedTopicRegex `orders-[` is not a valid regular expression: "
                "missing closing ].")
            assert await worker.resolve(["orders-.*", "x"], ["orders-a", "x", "y"]) == {
                "orders-.*": ["orders-a"], "x": ["x"]}
        finally:
            await worker.close()

    asyncio.run(go())


def test_a_costly_regex_is_refused_in_time_and_the_worker_replaced(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(regex_worker, "VALIDATE_TIMEOUT_S", 0.5)

    async def go() -> None:
        worker = RegexWorker()
        try:
            assert await worker.validate("warm") is None  # (the child started)
            pid = worker.pid
            error = await worker.validate("[a-z]{1,1000}" * 60)  # seconds for RE2
            assert worker.pid is None  # killed at the deadline, not waited for
            assert error is not None and error.endswith("not compiled within 0.5 s.")
            # the next request gets a new child
            assert await worker.resolve(["a.*"], ["ab", "b"]) == {"a.*": ["ab"]}
            assert worker.pid not in (None, pid) and worker.started == 2
        finally:
            await worker.close()

    asyncio.run(go())


def test_a_resolution_past_its_deadline_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(regex_worker, "RESOLVE_TIMEOUT_S", 0.3)

    async def go() -> None:
        worker = RegexWorker()
        try:
            with pytest.raises(RegexTimeout):
                await worker.resolve(["[a-z]{1,1000}" * 60], ["a"])
        finally:
            await worker.close()

    asyncio.run(go())


def test_validations_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(regex_worker, "VALIDATED_KEPT", 3)
    monkeypatch.setattr(regex_worker, "VALIDATED_KEPT_CHARS", 1000)

    async def go() -> None:
        worker = RegexWorker()
        try:
            for regex in ("a", "b", "c", "d"):
                await worker.validate(regex)
            assert list(worker._validated) == ["b", "c", "d"]
            await worker.validate("x" * 999)
            assert list(worker._validated) == ["d", "x" * 999]  # 1,000 characters
        finally:
            await worker.close()

    asyncio.run(go())


def test_a_starved_worker_does_not_make_a_valid_regex_invalid(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The deadline is of the child's CPU time, not the wall clock's: a worker that gets
    no CPU (stopped here; a loaded machine, its niceness) past the deadline is waited
    for, and a valid expression is valid once it answers (a loaded run must not make a
    consumer's subscription fatal, nor the verdict stay in the cache)."""
    monkeypatch.setattr(regex_worker, "VALIDATE_TIMEOUT_S", 0.2)

    async def go() -> None:
        worker = RegexWorker()
        try:
            assert await worker.validate("warm") is None
            pid = worker.pid
            assert pid is not None
            os.kill(pid, signal.SIGSTOP)
            try:
                asked = asyncio.ensure_future(worker.validate("orders-.*"))
                started = time.monotonic()
                while worker.overdue == 0:  # past its deadline on the wall clock
                    assert not expired(started, 30) and not asked.done()
                    await asyncio.sleep(0.01)
            finally:
                os.kill(pid, signal.SIGCONT)
            assert await asked is None
            assert worker.pid == pid
        finally:
            await worker.close()

    asyncio.run(go())
