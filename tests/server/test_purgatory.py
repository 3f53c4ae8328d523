"""The purgatory (odradek.server.purgatory): operations parked under keys, completed by
events on those keys or by their timeout, never by polling."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from odradek.server.purgatory import DelayedBytes, DelayedCondition, Purgatory
from tests._deadlines import describe, expired

T = TypeVar("T")
LONG = 10.0  # seconds: never reached when things work


def _run(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(asyncio.wait_for(main(), 30))


async def _until(condition: Callable[[], bool], what: str) -> None:
    started = time.monotonic()
    while not condition():
        if expired(started, LONG):
            raise AssertionError(f"timed out waiting for {what}: {describe(started, LONG)}")
        await asyncio.sleep(0.001)


async def _park(
    purgatory: Purgatory, op: DelayedBytes | DelayedCondition, timeout_s: float = LONG
) -> asyncio.Task[bool]:
    task = asyncio.create_task(purgatory.park(op, timeout_s))
    await _until(lambda: all(op in purgatory.watched.get(k, ()) for k in op.keys),
                 "the operation to park")
    return task


def test_delayed_bytes_alone() -> None:
    op = DelayedBytes(["k"], threshold=10, accumulated=4)
    assert not op.satisfied()
    op.try_complete(5)
    assert not op.done.is_set() and op.accumulated == 9
    op.try_complete(1)
    assert op.done.is_set() and op.satisfied()


def test_delayed_bytes_completes_at_the_threshold() -> None:
    async def main() -> None:
        purgatory = Purgatory()
        op = DelayedBytes(["a"], threshold=100)
        task = await _park(purgatory, op)
        assert purgatory.parked == 1 and purgatory.watching("a") == 1
        purgatory.notify("a", 60)
        purgatory.notify("b", 60)  # another key: not counted
        await asyncio.sleep(0)
        assert not task.done() and op.accumulated == 60
        purgatory.notify("a", 40)
        assert await task
        assert op.accumulated == 100
        assert purgatory.parked == 0 and purgatory.watching("a") == 0

    _run(main)


def test_wait_with_enough_already_returns_at_once() -> None:
    async def main() -> None:
        purgatory = Purgatory()
        assert await purgatory.wait(["a"], threshold=10, accumulated=10, timeout_s=LONG)
        assert purgatory.watching("a") == 0

    _run(main)


def test_delayed_condition_completes_when_it_holds() -> None:
    async def main() -> None:
        purgatory = Purgatory()
        state = {"high_watermark": 0}
        checks = 0

        def passed() -> bool:
            nonlocal checks
            checks += 1
            return state["high_watermark"] > 5

        task = asyncio.create_task(purgatory.wait_until(["tp"], passed, LONG))
        await _until(lambda: purgatory.watching("tp") == 1, "the operation to park")
        before = checks
        purgatory.notify("tp")  # an event, the condition does not hold
        await asyncio.sleep(0)
        assert not task.done() and checks == before + 1
        state["high_watermark"] = 6
        await asyncio.sleep(0.01)
        assert not task.done()  # no event, no check: nothing polls
        purgatory.notify("tp")
        assert await task
        assert purgatory.watching("tp") == 0

    _run(main)


def test_condition_holding_at_once_does_not_park() -> None:
    async def main() -> None:
        purgatory = Purgatory()
        assert await purgatory.wait_until(["tp"], lambda: True, LONG)
        assert purgatory.parked == 0

    _run(main)


def test_timeouts_return_false_and_clean_up() -> None:
    async def main() -> None:
        purgatory = Purgatory()
        started = time.monotonic()
        assert not await purgatory.wait(["a", "b"], 10, 0, 0.02)
        assert not await purgatory.wait_until(["a"], lambda: False, 0.02)
        assert time.monotonic() - started >= 0.03
        assert purgatory.watching("a") == purgatory.watching("b") == purgatory.parked == 0

    _run(main)


def test_timeout_reports_a_condition_that_came_true_without_an_event() -> None:
    async def main() -> None:
        purgatory = Purgatory()
        flag = [False]
        task = asyncio.create_task(purgatory.wait_until(["k"], lambda: flag[0], 0.05))
        await _until(lambda: purgatory.watching("k") == 1, "the operation to park")
        flag[0] = True
        assert await task  # the answer is the condition at the end, not how it ended

    _run(main)


def test_zero_timeout_never_parks() -> None:
    async def main() -> None:
        purgatory = Purgatory()
        assert not await purgatory.wait(["a"], 10, 0, 0)
        assert not await purgatory.wait_until(["a"], lambda: False, -1)
        assert purgatory.watching("a") == 0

    _run(main)


def test_max_parked_completes_new_operations_at_once() -> None:
    async def main() -> None:
        purgatory = Purgatory(max_parked=2)
        first = await _park(purgatory, DelayedBytes(["a"], 1))
        second = await _park(purgatory, DelayedBytes(["a"], 1))
        assert purgatory.parked == 2
        started = time.monotonic()
        assert not await purgatory.wait(["a"], 1, 0, LONG)  # full: answers what it has
        assert await purgatory.wait(["a"], 1, 1, LONG)
        assert await purgatory.wait_until(["a"], lambda: True, LONG)
        assert time.monotonic() - started < LONG / 2
        assert purgatory.watching("a") == 2
        purgatory.notify("a", 1)
        assert await first and await second
        assert purgatory.parked == 0
        # Room again: a new operation parks.
        third = await _park(purgatory, DelayedBytes(["a"], 1))
        purgatory.notify("a", 1)
        assert await third

    _run(main)


def test_wake_all_completes_every_operation_on_the_key() -> None:
    async def main() -> None:
        purgatory = Purgatory()
        ops = [DelayedBytes(["tp"], 100), DelayedBytes(["tp", "other"], 100)]
        condition = DelayedCondition(["tp"], lambda: False)
        elsewhere = DelayedBytes(["other"], 100)
        tasks = [await _park(purgatory, op) for op in (*ops, condition)]
        unrelated = await _park(purgatory, elsewhere)
        purgatory.wake_all("tp")
        assert await asyncio.gather(*tasks) == [False, False, False]  # woken, not satisfied
        assert purgatory.watching("tp") == 0
        assert purgatory.watching("other") == 1 and not unrelated.done()
        purgatory.wake_all("nobody")  # no operation: nothing happens
        purgatory.notify("other", 100)
        assert await unrelated
        assert purgatory.parked == 0

    _run(main)


def test_many_keys_per_operation() -> None:
    async def main() -> None:
        purgatory = Purgatory()
        fetch = DelayedBytes(["a", "b", "c"], threshold=30)
        task = await _park(purgatory, fetch)
        assert [purgatory.watching(k) for k in "abc"] == [1, 1, 1]
        purgatory.notify("a", 10)
        purgatory.notify("c", 10)
        await asyncio.sleep(0)
        assert not task.done()
        purgatory.notify("b", 10)  # bytes of every key count toward one threshold
        assert await task
        assert [purgatory.watching(k) for k in "abc"] == [0, 0, 0]
        assert purgatory.watched == {}

        produce = asyncio.create_task(purgatory.wait_until(["x", "y"], lambda: True, LONG))
        assert await produce

    _run(main)


def test_several_operations_on_one_key_complete_independently() -> None:
    async def main() -> None:
        purgatory = Purgatory()
        small, large = DelayedBytes(["k"], 10), DelayedBytes(["k"], 50)
        small_task, large_task = await _park(purgatory, small), await _park(purgatory, large)
        assert purgatory.watching("k") == 2
        purgatory.notify("k", 20)
        assert await small_task
        assert purgatory.watching("k") == 1 and not large_task.done()
        purgatory.notify("k", 30)
        assert await large_task
        assert purgatory.watching("k") == 0

    _run(main)


def test_cancelled_operation_cleaned_up() -> None:
    async def main() -> None:
        purgatory = Purgatory()
        task = await _park(purgatory, DelayedBytes(["k"], 10))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert purgatory.watching("k") == 0 and purgatory.parked == 0

    _run(main)


def test_notify_without_watchers_is_cheap_and_harmless() -> None:
    purgatory = Purgatory()
    purgatory.notify("k", 10)
    assert purgatory.watching("k") == 0 and purgatory.watched == {}


def test_shutdown_completes_every_parked_operation_and_parks_none_after() -> None:
    """Kafka's shutdown does not wait out a long poll: every operation parked (on keys or
    none) completes at once, judged as its timeout would judge it, and one parked after
    the shutdown completes at once too."""
    async def main() -> None:
        purgatory = Purgatory()
        fetch = DelayedBytes(["a"], threshold=100, accumulated=10)
        produce = DelayedCondition(["a", "b"], lambda: False)
        keyless = DelayedBytes([], threshold=100)
        tasks = [await _park(purgatory, op) for op in (fetch, produce)]
        tasks.append(asyncio.create_task(purgatory.park(keyless, LONG)))
        await _until(lambda: purgatory.parked == 3, "three operations to park")
        started = time.monotonic()
        purgatory.shutdown()
        assert await asyncio.gather(*tasks) == [False, False, False]  # not satisfied
        assert purgatory.parked == 0 and purgatory.watched == {}
        assert not await purgatory.wait(["a"], 100, 0, LONG)
        assert await purgatory.wait(["a"], 100, 100, LONG)  # what it has, as before
        assert time.monotonic() - started < LONG / 2
        assert purgatory.parked == 0

    _run(main)
