"""Pieces of the broker's shutdown (odradek.server.broker): each step is bounded, and a
step that never returns does not hold the process (it runs on a daemon thread)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from odradek.server.broker import Broker, _in_daemon_thread


def bounded(what: str, fn: Any, timeout: float) -> Any:
    async def run() -> Any:
        # _bounded_step uses nothing of the broker but its log
        return await Broker._bounded_step(object.__new__(Broker), what, _in_daemon_thread(fn),
                                          timeout)

    return asyncio.run(run())


def test_a_step_that_finishes_returns_its_result() -> None:
    assert bounded("a quick step", lambda: 42, 5.0) == 42


def test_a_step_that_hangs_is_given_up_and_its_thread_is_a_daemon() -> None:
    never = threading.Event()
    threads: list[threading.Thread] = []

    def hang() -> None:
        threads.append(threading.current_thread())
        never.wait()

    assert bounded("a step that hangs", hang, 0.2) is None
    assert threads and threads[0].daemon and threads[0].is_alive()
    never.set()  # let it go (the process would not wait for it anyway)


def test_a_step_that_fails_raises_its_error() -> None:
    def fail() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        bounded("a failing step", fail, 5.0)
