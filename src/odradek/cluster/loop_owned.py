"""Containers the event loop owns, and the debug mode that checks who touches them.

How it works (docs/architecture.md, "Threads"): the metadata cache, the hosted partitions
and the rest of the broker's shared state belong to the event loop; a worker thread is
handed a copy of what it needs and its result is applied back on the loop. The loop's
containers are plain dicts made by :func:`loop_dict`. With ``ODRADEK_DEBUG_THREADS=1``
in the environment when this module is imported (the test suite sets it), that function
makes a :class:`LoopOwnedDict` instead: a dict bound to the thread of the event loop
running where it is made (or, made off any loop, to the first thread touching it while
running one), which raises :class:`WrongThreadError` on every read or write from another
thread. Touches before it is bound pass: the broker builds its metadata cache in a worker
at start, and synchronous tests never run a loop. So do touches
from the main thread when the loop runs on another: a broker runs its loop on the main
thread, so that is a test peeking into an in-process broker (``odradek.testing`` runs its
loop in a thread of its own), never a worker. Without the variable the plain ``dict``
class is chosen at construction, so production pays nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["DEBUG", "VARIABLE", "LoopOwnedDict", "WrongThreadError", "debug_wanted",
           "loop_dict", "on_loop"]

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")
#: The longest a worker waits for the loop to run a read for it (on_loop).
ON_LOOP_TIMEOUT_S = 30.0

#: The environment variable that turns the debug mode on (1) or off (0, or unset).
VARIABLE = "ODRADEK_DEBUG_THREADS"


def debug_wanted(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get(VARIABLE, "") not in ("", "0")


#: Whether loop-owned containers made from now on check the thread touching them (read
#: at import; tests/conftest.py sets the variable and this before any broker starts).
DEBUG = debug_wanted()


class WrongThreadError(AssertionError):
    """A loop-owned container touched from a thread other than its event loop's."""


class LoopOwnedDict(dict[K, V]):
    """A dict that may be touched only on the thread of the event loop that first touched
    it (debug mode; see the module's header)."""

    __slots__ = ("_owner",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        on_a_loop = asyncio._get_running_loop() is not None
        self._owner: int | None = threading.get_ident() if on_a_loop else None
        super().__init__(*args, **kwargs)

    def _check(self) -> None:
        current = threading.get_ident()
        owner = self._owner
        if owner == current:
            return
        if owner is None:
            if asyncio._get_running_loop() is not None:
                self._owner = current
            return
        if current == threading.main_thread().ident:
            return  # a test reading an in-process broker's state (see the header)
        raise WrongThreadError(
            f"a loop-owned dict touched from thread {threading.current_thread().name!r}, not "
            "its event loop's: hand the thread a copy and apply its result on the loop "
            "(docs/architecture.md, \"Threads\")")


def _checked(name: str) -> Callable[..., Any]:
    method = getattr(dict, name)

    def checked(self: LoopOwnedDict[Any, Any], *args: Any, **kwargs: Any) -> Any:
        self._check()
        return method(self, *args, **kwargs)

    checked.__name__ = name
    return checked


for _name in ("__getitem__", "__setitem__", "__delitem__", "__contains__", "__iter__",
              "__len__", "__eq__", "__ne__", "__or__", "__ior__", "__reversed__", "get", "pop",
              "popitem", "setdefault", "update", "keys", "values", "items", "clear", "copy"):
    setattr(LoopOwnedDict, _name, _checked(_name))
LoopOwnedDict.__hash__ = None  # type: ignore[assignment]  # as dict's


def loop_dict(items: Mapping[K, V] | None = None) -> dict[K, V]:
    """A loop-owned dict (checked in debug mode) holding ``items``."""
    if DEBUG:
        return LoopOwnedDict(items or {})
    return dict(items) if items else {}


def on_loop(loop: asyncio.AbstractEventLoop | None, fn: Callable[[], T]) -> T:
    """``fn()`` run on ``loop``'s thread, for a worker that needs a copy of loop-owned
    state: at once when called there (or with no loop: before one runs, or in a
    synchronous test), else through ``call_soon_threadsafe``, the worker waiting for the
    result (at most :data:`ON_LOOP_TIMEOUT_S`; TimeoutError then)."""
    if loop is None or loop.is_closed() or asyncio._get_running_loop() is loop:
        return fn()
    done: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        if not done.set_running_or_notify_cancel():
            return
        try:
            done.set_result(fn())
        except BaseException as exc:
            done.set_exception(exc)

    loop.call_soon_threadsafe(run)
    return done.result(ON_LOOP_TIMEOUT_S)
