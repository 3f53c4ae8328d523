"""The eager start: run a handler up to its first wait inside dispatch, without a task.

How it works: :func:`start_eagerly` sends ``None`` into the coroutine, which runs until it
first waits, as Python 3.12's eager tasks (``asyncio.eager_task_factory``) do. Most
handlers (Produce, Metadata, ListOffsets, ...) never wait: they finish in that first step
and come back as a done future, with no task, loop callback or loop turn of their own. A
handler that does wait (a Fetch for ``min_bytes``, a JoinGroup) is handed to a task
through :class:`_Started`, which gives the task the future the coroutine was waiting on,
so it goes on from where it stopped. The saving is measured in bench/README.md
("Produce requests"); Python 3.12's ``eager_task_factory`` would do the same once the
project requires 3.12.

:func:`resume` finishes awaiting a coroutine that was stepped by hand (the metered
handlers of :mod:`odradek.server.network.metering`): PEP 380's expansion of
``yield from``.

Kafka has no counterpart: its request handler threads run a request to completion, and
the purgatory parks what has to wait. Here the event loop is the handler pool.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

__all__ = ["resume", "start_eagerly"]

T = TypeVar("T")


def start_eagerly(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]
) -> asyncio.Future[T]:
    """Run ``coro`` now, up to its first suspension: a done future if it finished (or
    failed) there, else a task that goes on from the future it waits on."""
    try:
        waiting_on = coro.send(None)
    except StopIteration as stop:
        done: asyncio.Future[T] = loop.create_future()
        done.set_result(stop.value)
        return done
    except Exception as exc:
        failed: asyncio.Future[T] = loop.create_future()
        failed.set_exception(exc)
        return failed
    return loop.create_task(_Started(coro, waiting_on))


@types.coroutine
def resume(coro: Coroutine[Any, Any, Any], waiting_on: Any) -> Generator[Any, Any, Any]:
    """Finish awaiting ``coro``, already run up to its first wait on ``waiting_on``
    (PEP 380's expansion of ``yield from``)."""
    while True:
        try:
            value = yield waiting_on
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            try:
                waiting_on = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
            continue
        try:
            waiting_on = coro.send(value)
        except StopIteration as stop:
            return stop.value


class _Started(Coroutine[Any, Any, T]):
    """A coroutine that already ran its first step, for a task to drive on: the task's
    first ``send`` gets what the coroutine yielded then (the future it waits on)."""

    __slots__ = ("_coro", "_first", "_first_pending")

    def __init__(self, coro: Coroutine[Any, Any, T], first: Any) -> None:
        self._coro = coro
        self._first = first
        self._first_pending = True

    def send(self, value: Any) -> Any:
        if self._first_pending:
            self._first_pending = False
            return self._first
        return self._coro.send(value)

    def throw(self, *args: Any) -> Any:
        self._first_pending = False
        return self._coro.throw(*args)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, T]:
        raise TypeError("a started handler is driven by its task, not awaited")
