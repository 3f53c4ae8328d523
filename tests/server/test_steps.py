"""Bounded steps: a handler's long loop gives the event loop back every STEP elements."""

from __future__ import annotations

import asyncio
from typing import Any

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.registry import RequestContext
from odradek.protocol.send import Send
from odradek.server.handlers._entities import make
from odradek.server.handlers._steps import STEP, Steps
from odradek.server.handlers.metadata import metadata
from odradek.testing import RunningBroker
from tests.server.test_admin_protocol import req


def test_a_long_loop_lets_other_tasks_run_every_step() -> None:
    turns: list[int] = []

    async def other() -> None:
        while True:
            turns.append(done)
            await asyncio.sleep(0)

    async def handler() -> None:
        nonlocal done
        steps = Steps()
        for _ in range(STEP * 4):
            done += 1
            await steps.tick()

    async def main() -> None:
        task = asyncio.ensure_future(other())
        await asyncio.sleep(0)  # the other task starts
        await handler()
        task.cancel()

    done = 0
    asyncio.run(main())
    # the other task ran once at the start and once after each full step, never between
    assert turns == [0, STEP, 2 * STEP, 3 * STEP, 4 * STEP]


def test_ticks_of_many_elements_count_as_many() -> None:
    turns = 0

    async def other() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    async def main() -> None:
        task = asyncio.ensure_future(other())
        await asyncio.sleep(0)
        steps = Steps()
        for _ in range(6):
            await steps.tick(STEP // 2)  # two ticks make a step
        task.cancel()

    asyncio.run(main())
    assert turns == 1 + 3


def _suspensions(coro: Any) -> tuple[int, Any]:
    """Drive a handler that awaits only bare yields (asyncio.sleep(0)) by hand: how many
    times it gave the loop back, and its answer."""
    count = 0
    try:
        while True:
            coro.send(None)
            count += 1
    except StopIteration as done:
        return count, done.value


def test_a_metadata_answer_of_many_partitions_is_built_in_steps(
    shared_broker: RunningBroker,
) -> None:
    broker = shared_broker.broker
    for i in range(3):
        shared_broker.call(broker.metadata.create_topic, f"steps-{i}", 300, 1, {})
    m = req("metadata", 12)
    request = make(m.MetadataRequest, topics=None, allow_auto_topic_creation=False,
                   include_topic_authorized_operations=False)
    ctx = RequestContext(1, "steps", int(ApiKey.METADATA), 12, ("127.0.0.1", 1), "c")

    def run() -> tuple[int, Any]:
        return _suspensions(metadata(broker.services, ctx, request))

    suspended, answer = shared_broker.call(run)
    assert suspended >= 900 // STEP
    assert isinstance(answer, Send)
