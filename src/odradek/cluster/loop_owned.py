"""Containers the event loop owns, and the debug mode that checks who touches them.

How it works (docs/architecture.md, "Threads"): the metadata cache, the hosted partitions
and the rest of the broker's shared state belong to the event loop; a worker thread is
handed a copy of what it needs and its result is applied back on the loop. The loop's
containers are plain dicts made by :func:`loop_dict`. With ``ODRADEK_DEBUG_THREADS=1``
in the environment when this module is imported (the test suite sets it), that function
makes a :class:`LoopOwnedDict` instead: a dict that binds to the first thread touching it
while running an event loop, and raises :class:`WrongThreadError` on every later read or
write from another thread. Touches before a loop binds it pass: the broker builds its
metadata cache in a worker at start, and synchronous tests never run a loop. Without the
variable the plain ``dict`` class is chosen at construction, so production pays nothing.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["DEBUG", "LoopOwnedDict", "WrongThreadError", "loop_dict"]

K = TypeVar("K")
V = TypeVar("V")

#: Whether loop-owned containers check the thread touching them (read once, at import).
DEBUG = os.environ.get("ODRADEK_DEBUG_THREADS", "") not in ("", "0")


class WrongThreadError(AssertionError):
    """A loop-owned container touched from a thread other than its event loop's."""


class LoopOwnedDict(dict[K, V]):
    """A dict that may be touched only on the thread of the event loop that first touched
    it (debug mode; see the module's header)."""

    __slots__ = ("_owner",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._owner: int | None = None
        super().__init__(*args, **kwargs)

    def _check(self) -> None:
        current = threading.get_ident()
        owner = self._owner
        if owner == current:
            return
        on_a_loop = asyncio._get_running_loop() is not None
        if owner is None:
            if on_a_loop:
                self._owner = current
            return
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
