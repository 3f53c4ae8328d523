"""Bounded steps: a handler that walks a request's arrays gives the event loop back every
:data:`STEP` elements.

How it works: every connection of a broker is served by one event loop, and an admin or
group request may carry tens of thousands of elements (a frame may be
``socket.request.max.bytes``, 100 MiB). Kafka spreads requests over its request handler
threads (``num.io.threads``), so one large request delays only itself; here a handler's
loop over such an array would hold every connection, timer and replica fetch of the
broker until it ends. :class:`Steps` counts the elements a handler has worked on and,
every :data:`STEP` of them, awaits ``asyncio.sleep(0)``: other work runs in between, and
the request's own answer is unchanged. Produce and Fetch, whose per-partition work is the
hot path, are left alone: their partitions are few and their work per partition is
bounded by the bytes they carry.
"""

from __future__ import annotations

import asyncio

__all__ = ["STEP", "Steps"]

#: Elements a handler works on before it gives the loop back.
STEP = 256


class Steps:
    """``await steps.tick()`` once per element (or ``tick(n)`` for n at once)."""

    __slots__ = ("_left",)

    def __init__(self) -> None:
        self._left = STEP

    async def tick(self, n: int = 1) -> None:
        self._left -= n
        if self._left <= 0:
            self._left = STEP
            await asyncio.sleep(0)
