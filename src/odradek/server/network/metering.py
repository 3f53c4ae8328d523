"""Metering a handler: request timings and the request_percentage quota, as one layer.

How it works: both need the same thing, the end of the handler's first step (what it
does before its first wait). :func:`metered` drives that step by hand (a ``send``, then
PEP 380's ``await`` expansion for the rest) and notes it for both. A handler only timed
and started eagerly is not driven by hand: the dispatcher's eager start already runs
exactly that step, so the dispatcher notes its start and end around the handler and the
first wait where the eager start returns (:func:`note_first_wait`); hand-driving costs
a ``StopIteration`` and a coroutine on every request.

- *Request timings* (only with ``request_stats``, i.e. ``metrics.listener`` set; Kafka's
  ``RequestChannel.Metrics``): the handler's start, its first wait (0 if it never
  waited) and its end, on the request's
  :class:`~odradek.server.network.inflight.TimedInFlight`. Start to first wait is Kafka's
  LocalTimeMs, first wait to end RemoteTimeMs (a purgatory, the ISR, a rebalance); the
  writer adds the queue and send times.
- *request_percentage* (KIP-124, Kafka's ``ClientQuotaManager`` for request time): the
  first step's time (all of it for a handler that answers without waiting) is charged to
  the client. Over the quota, the connection is muted at once (KIP-219, through the
  request's channel) and a kio answer carries the throttle time in ``throttle_time``.

A handler that is neither timed nor charged is awaited directly by the dispatcher,
without this layer. Exempt from request_percentage, as in Kafka: ApiVersions, and
followers' fetches (cluster actions).
"""

from __future__ import annotations

import dataclasses
import datetime
import time
import types
from collections.abc import Coroutine
from typing import Any, Final

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.registry import Handler, RequestContext
from odradek.server.client_quotas import (
    NANOS_TO_PERCENTAGE,
    ClientQuotaManager,
    principal_user,
)
from odradek.server.network.eager import resume
from odradek.server.network.inflight import TimedInFlight

__all__ = ["metered", "note_first_wait", "quota_applies", "with_throttle"]

_API_VERSIONS: Final = int(ApiKey.API_VERSIONS)
_FETCH: Final = int(ApiKey.FETCH)


async def metered(
    handler: Handler,
    ctx: RequestContext,
    request: Any,
    timing: TimedInFlight | None,
    quota: ClientQuotaManager | None,
) -> Any:
    """Run ``handler``, driving its first step by hand, noting it on ``timing`` and
    charging it to ``quota`` (either may be None, not both)."""
    now = time.monotonic_ns
    started = now()
    if timing is not None:
        timing.started = started
    coro = handler(ctx, request)
    if type(coro) is not types.CoroutineType and not isinstance(coro, Coroutine):
        return await coro  # not an async def: no step to measure
    first_wait = 0
    try:
        waiting_on = coro.send(None)
    except StopIteration as stop:
        result = stop.value
    else:
        first_wait = now()
        if timing is not None:
            timing.suspended = first_wait
    throttle_ms = 0
    if quota is not None:
        first_step_ns = (first_wait or now()) - started
        throttle_ms = quota.record(ctx.client_id, first_step_ns * NANOS_TO_PERCENTAGE,
                                   user=principal_user(ctx.principal))
        if throttle_ms > 0 and ctx.channel is not None:
            ctx.channel.throttle(throttle_ms)
    if first_wait:
        result = await resume(coro, waiting_on)
    if throttle_ms > 0:
        result = with_throttle(result, throttle_ms)
    if timing is not None:
        timing.done = now()
        code = getattr(result, "error_code", 0)  # a top-level error code
        if code:
            timing.error = int(code)
    return result


def note_first_wait(timing: TimedInFlight) -> None:
    """The dispatcher's eager start returned with the handler waiting: its first step
    ended now (unless the step was driven by hand and noted already)."""
    if not timing.suspended:
        timing.suspended = time.monotonic_ns()


def quota_applies(ctx: RequestContext, request: Any) -> bool:
    """Whether request_percentage applies: not to ApiVersions, nor to followers' fetches
    (Kafka exempts cluster actions)."""
    if ctx.api_key == _API_VERSIONS:
        return False
    if ctx.api_key == _FETCH:
        state = getattr(request, "replica_state", None)
        replica = state.replica_id if state is not None else getattr(request, "replica_id", -1)
        return int(replica) < 0
    return True


def with_throttle(result: Any, throttle_ms: int) -> Any:
    """A kio answer carrying at least ``throttle_ms`` in its ``throttle_time`` (KIP-219);
    other answers (the hot-path writers' bytes) as they are."""
    current = getattr(result, "throttle_time", None)
    wanted = datetime.timedelta(milliseconds=throttle_ms)
    if isinstance(current, datetime.timedelta) and wanted > current:
        return dataclasses.replace(result, throttle_time=wanted)
    return result
