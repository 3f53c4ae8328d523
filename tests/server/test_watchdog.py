"""The event-loop watchdog: a loop held on purpose is noticed while it is held (a WARNING
with the loop thread's stack and the request being handled) and counted afterwards (the
watchdog's numbers and the broker's Prometheus page)."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from odradek.client.admin import Admin
from odradek.client.connection import BrokerConnection
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.registry import RequestContext
from odradek.server.config import BrokerConfig, ConfigError
from odradek.server.watchdog import LoopWatchdog, describe_request
from odradek.testing import RunningBroker, running_broker
from tests._deadlines import expired
from tests.server.test_metrics import scrape, value


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    started = time.monotonic()
    while not (result := check()):
        if expired(started, timeout):
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
    return result


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def _on(loop: asyncio.AbstractEventLoop, fn: Callable[[], Any]) -> Any:
    async def run() -> Any:
        return fn()

    return asyncio.run_coroutine_threadsafe(run(), loop).result(30)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "odradek.server.watchdog" and r.levelno == logging.WARNING]


def _blocked(caplog: pytest.LogCaptureFixture, needle: str) -> list[str]:
    """The 'blocked' warnings that mention ``needle``: a busy machine may add stalls of
    its own (a process waiting for a CPU), which the tests must not take for theirs."""
    return [m for m in _warnings(caplog) if m.startswith("event loop blocked") and needle in m]


def test_a_held_loop_is_logged_with_its_stack_and_request(
    loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture
) -> None:
    watchdog = LoopWatchdog(loop, threshold_ms=100)
    _on(loop, watchdog.start)
    released = threading.Event()

    def a_handler_that_holds_the_loop() -> None:
        ctx = RequestContext(41, "stuck-client", int(ApiKey.METADATA), 12, ("127.0.0.1", 1),
                             "conn-1", size=99)
        assert ctx.client_id
        released.wait(30)  # held until the warning is seen

    with caplog.at_level(logging.WARNING, logger="odradek.server.watchdog"):
        loop.call_soon_threadsafe(a_handler_that_holds_the_loop)
        warning = wait_for("the watchdog's warning",
                           lambda: _blocked(caplog, "stuck-client"))[0]
        held = watchdog.stalls  # counted by the loop itself, once it turns again
        released.set()
        wait_for("the stall to be counted", lambda: watchdog.stalls > held)
    assert "event loop blocked for" in warning
    assert ("METADATA(3) v12 from client id 'stuck-client' (correlation id 41, 99 bytes, "
            "connection conn-1)") in warning
    assert "in a_handler_that_holds_the_loop" in warning  # the loop thread's stack
    assert "released.wait(30)" in warning
    assert watchdog.warnings >= 1
    assert watchdog.stall_seconds >= 0.1 and watchdog.longest_stall_s >= 0.1
    assert any("ran again after a stall" in m for m in _warnings(caplog))
    _on(loop, watchdog.stop)


def test_a_loop_that_turns_is_not_warned_about(
    loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture
) -> None:
    # A threshold no wait for a CPU on a busy machine comes near.
    watchdog = LoopWatchdog(loop, threshold_ms=3000)
    _on(loop, watchdog.start)
    with caplog.at_level(logging.WARNING, logger="odradek.server.watchdog"):
        for _ in range(20):  # short work on the loop, well under the threshold
            _on(loop, lambda: time.sleep(0.01))
        # a full check interval passes with the loop turning: the beat keeps going
        beat = watchdog._last_beat
        wait_for("two more heartbeats", lambda: watchdog._last_beat > beat + watchdog.interval_s)
    # only this watchdog's thread: a broker another test left running has a watchdog too
    mine = [r for r in caplog.records if r.thread == watchdog._thread.ident]
    assert watchdog.stalls == 0 and watchdog.warnings == 0 and not mine
    _on(loop, watchdog.stop)


def test_garbage_collections_are_timed_and_named_in_the_warning(
    loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture
) -> None:
    watchdog = LoopWatchdog(loop, threshold_ms=100)
    _on(loop, watchdog.start)
    gc.collect()  # a real collection, timed through gc.callbacks
    assert watchdog.longest_gc_s > 0
    _on(loop, lambda: None)  # the loop turned since: a stall of that collection is counted
    released = threading.Event()
    started = threading.Event()

    def held_as_if_by_a_collection() -> None:
        # A collection long enough to see cannot be made on demand: its start is told
        # to the watchdog as gc.callbacks would tell it, and the loop held.
        watchdog._on_gc("start", {"generation": 1})
        started.set()
        released.wait(30)
        watchdog._on_gc("stop", {"generation": 1})

    # No real collection may start meanwhile: its callbacks would end the one told; and
    # only the warnings after the told one began count (generation 1: a real full
    # collection above may have been warned about as generation 2).
    gc.disable()
    try:
        with caplog.at_level(logging.WARNING, logger="odradek.server.watchdog"):
            held = watchdog.stalls
            loop.call_soon_threadsafe(held_as_if_by_a_collection)
            assert started.wait(30)
            # The warning taken while the loop is inside the told collection: its stack
            # holds this function. (On a busy machine another stall may be warned about
            # with the loop still in select and the collection told just after the stack
            # was taken; releasing on that one would end the hold before it counted.)
            warning = wait_for("the watchdog's warning", lambda: [
                m for m in _blocked(caplog, "a garbage collection of generation 1")
                if "held_as_if_by_a_collection" in m])[0]
            released.set()
            wait_for("the stall to be counted", lambda: watchdog.stalls > held)
    finally:
        released.set()
        gc.enable()
    assert "a garbage collection of generation 1 has been running for" in warning
    assert watchdog.longest_gc_s >= 0.1
    _on(loop, watchdog.stop)
    assert watchdog._on_gc not in gc.callbacks


def test_no_request_is_described_outside_a_handler() -> None:
    import sys

    assert describe_request(sys._getframe()) == (
        "no request (the loop is not inside a request's handling)")


def test_the_threshold_is_a_config_key() -> None:
    assert BrokerConfig.load(overrides=[])["event.loop.stall.threshold.ms"] == 1000
    off = BrokerConfig.load(overrides=["event.loop.stall.threshold.ms=0"])
    assert off["event.loop.stall.threshold.ms"] == 0
    with pytest.raises(ConfigError):
        BrokerConfig.load(overrides=["event.loop.stall.threshold.ms=-5"])


@pytest.fixture
def broker() -> Iterator[RunningBroker]:
    with running_broker(overrides={"metrics.listener": "http://127.0.0.1:0",
                                   "event.loop.stall.threshold.ms": "200"}) as running:
        yield running


def test_a_broker_held_by_a_handler_warns_and_counts(
    broker: RunningBroker, caplog: pytest.LogCaptureFixture
) -> None:
    """The Metadata handler is wrapped by one that holds the loop for 0.6 s before it
    answers; a real client's Metadata request runs into it."""
    registry = broker.broker.registry
    original = registry.get(ApiKey.METADATA)
    assert original is not None

    async def holding_metadata(ctx: RequestContext, request: Any) -> Any:
        time.sleep(0.6)
        return await original.handler(ctx, request)

    def swap(handler: Any) -> None:  # the registry has no public replace: tests only
        registry._by_key[int(ApiKey.METADATA)] = dataclasses.replace(original, handler=handler)

    broker.call(swap, holding_metadata)

    async def metadata() -> None:
        conn = await BrokerConnection.open(broker.bootstrap, client_id="watched-client")
        try:
            await Admin(conn).metadata([])
        finally:
            await conn.close()

    with caplog.at_level(logging.WARNING, logger="odradek.server.watchdog"):
        asyncio.run(metadata())
        watchdog = broker.broker.watchdog
        assert watchdog is not None
        wait_for("the stall to be counted", lambda: watchdog.stalls >= 1)
    broker.call(swap, original.handler)
    warning = _blocked(caplog, "watched-client")[0]
    assert "METADATA(3)" in warning and "from client id 'watched-client'" in warning
    assert "in holding_metadata" in warning and "time.sleep(0.6)" in warning
    server = broker.broker.metrics_server
    assert server is not None
    samples = scrape(server.url)
    assert value(samples, "odradek_event_loop_stalls_total") >= 1
    assert value(samples, "odradek_event_loop_longest_stall_seconds") >= 0.2
    assert value(samples, "odradek_event_loop_stall_seconds_total") >= 0.2
