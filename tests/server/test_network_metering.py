"""The metering layer alone (odradek.server.network.metering): a handler's first step is
timed and charged to the request_percentage quota, whether it answers at once or waits,
and an answer over the quota carries the throttle time."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.schema.heartbeat.v4.response import HeartbeatResponse

from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import RequestContext
from odradek.server.network.inflight import TimedInFlight
from odradek.server.network.metering import metered, note_first_wait


class FakeQuota:
    """Charges everything and asks for ``throttle_ms`` each time."""

    def __init__(self, throttle_ms: int) -> None:
        self.throttle_ms = throttle_ms
        self.charged: list[tuple[str | None, float]] = []
        self.users: list[str] = []  # the principal's name each charge is for (KIP-55)

    def record(self, client_id: str | None, value: float, user: str = "") -> int:
        self.charged.append((client_id, value))
        self.users.append(user)
        return self.throttle_ms


class FakeChannel:
    def __init__(self) -> None:
        self.throttled: list[int] = []

    def throttle(self, throttle_ms: int) -> None:
        self.throttled.append(throttle_ms)


def _context(channel: FakeChannel) -> RequestContext:
    return RequestContext(correlation_id=1, client_id="c", api_key=12, api_version=4,
                          peer=("127.0.0.1", 1), connection_id="x", channel=channel)


def _answer(code: ErrorCode = ErrorCode.none) -> HeartbeatResponse:
    return HeartbeatResponse(throttle_time=datetime.timedelta(0),  # type: ignore[arg-type]
                             error_code=code)


def test_a_handler_that_answers_at_once_is_timed_and_charged() -> None:
    async def handler(ctx: RequestContext, request: Any) -> Any:
        return _answer(ErrorCode.rebalance_in_progress)

    async def test() -> None:
        timing = TimedInFlight(10, 12, 4, received=1)
        quota, channel = FakeQuota(throttle_ms=0), FakeChannel()
        result = await metered(handler, _context(channel), None, timing, quota)
        assert result.error_code == ErrorCode.rebalance_in_progress
        assert timing.started > 0 and timing.suspended == 0 and timing.done >= timing.started
        assert timing.error == int(ErrorCode.rebalance_in_progress)
        assert len(quota.charged) == 1 and quota.charged[0][0] == "c"
        assert quota.users == ["ANONYMOUS"]  # the request's principal, User:ANONYMOUS
        assert channel.throttled == []

    asyncio.run(test())


def test_a_handler_that_waits_is_charged_its_first_step_and_throttled() -> None:
    async def test() -> None:
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def handler(ctx: RequestContext, request: Any) -> Any:
            await gate
            return _answer()

        timing = TimedInFlight(10, 12, 4, received=1)
        quota, channel = FakeQuota(throttle_ms=250), FakeChannel()
        running = asyncio.ensure_future(metered(handler, _context(channel), None, timing,
                                                quota))
        await asyncio.sleep(0)  # the first step ran, up to the gate
        assert timing.suspended >= timing.started > 0 and timing.done == 0
        assert len(quota.charged) == 1 and channel.throttled == [250]
        gate.set_result(None)
        result = await running
        assert timing.done >= timing.suspended and timing.error == 0
        assert result.throttle_time == datetime.timedelta(milliseconds=250)

    asyncio.run(test())


def test_untimed_requests_are_only_charged() -> None:
    async def handler(ctx: RequestContext, request: Any) -> Any:
        return b"bytes are answered as they are"

    async def test() -> None:
        quota, channel = FakeQuota(throttle_ms=100), FakeChannel()
        result = await metered(handler, _context(channel), None, None, quota)
        assert result == b"bytes are answered as they are"
        assert len(quota.charged) == 1 and channel.throttled == [100]

    asyncio.run(test())


def test_the_first_wait_noted_outside_is_not_noted_twice() -> None:
    timing = TimedInFlight(10, 12, 4, received=1)
    note_first_wait(timing)
    first = timing.suspended
    assert first > 0
    note_first_wait(timing)
    assert timing.suspended == first
