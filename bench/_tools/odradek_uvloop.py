"""Run ``odradek`` on uvloop's event loop, without touching the package.

Usage: ``.venv/bin/python bench/_tools/odradek_uvloop.py serve --override ...``

``ODRADEK_BENCH_LOOP=asyncio`` keeps the default asyncio loop but applies the same
sendfile replacement (below): that variant separates the effect of uvloop from the effect
of not going through asyncio's ``loop.sendfile``.

uvloop lives in the bench venv (bench/_tools/build/venv), not in the project venv: its
site-packages is appended to ``sys.path`` (after the project's own, so nothing the
project has is shadowed). Two adaptations, both outside src/:

- ``KafkaConnection.connection_made`` asserts ``isinstance(transport, asyncio.Transport)``;
  uvloop's ``TCPTransport`` implements the interface without subclassing it. The module's
  ``asyncio`` name is given a view of asyncio whose ``Transport`` also admits uvloop's
  transports (a tuple for ``isinstance``); nothing else in the module changes.
- uvloop has no ``loop.sendfile`` (it inherits ``AbstractEventLoop.sendfile``, which
  raises ``NotImplementedError``). The loop used here supplies the same fallback asyncio
  itself uses when a transport cannot ``sendfile``: read the file region and write it to
  the transport. Fetch therefore copies through user space under uvloop, where the
  default loop uses ``os.sendfile`` (zero copy): consume numbers are not like for like.
"""

from __future__ import annotations

import asyncio
import glob
import os
import sys
import types
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
for site in glob.glob(os.path.join(HERE, "build", "venv", "lib", "python3*", "site-packages")):
    sys.path.append(site)

import uvloop  # noqa: E402
import uvloop.loop  # noqa: E402

CHUNK = 1 << 20


async def _copy_sendfile(self: Any, transport: Any, file: Any, offset: int = 0,
                         count: int | None = None, *, fallback: bool = True) -> int:
    fd = file.fileno()
    total = 0
    remaining = count if count is not None else os.fstat(fd).st_size - offset
    while remaining > 0:
        data = os.pread(fd, min(CHUNK, remaining), offset + total)
        if not data:
            break
        transport.write(data)
        total += len(data)
        remaining -= len(data)
    return total


class _UVLoop(uvloop.Loop):  # type: ignore[misc]
    sendfile = _copy_sendfile


class _CopyLoop(asyncio.SelectorEventLoop):
    sendfile = _copy_sendfile  # type: ignore[assignment]


class _Policy(asyncio.DefaultEventLoopPolicy):
    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        if os.environ.get("ODRADEK_BENCH_LOOP", "uvloop") == "asyncio":
            return _CopyLoop()
        return _UVLoop()


def _patch_network() -> None:
    from odradek.server import network

    view = types.ModuleType("asyncio_uvloop_view")
    view.__dict__.update(asyncio.__dict__)
    view.Transport = (asyncio.Transport, uvloop.loop.TCPTransport,  # type: ignore[attr-defined]
                      uvloop.loop.UnixTransport)
    network.asyncio = view  # type: ignore[attr-defined]


asyncio.set_event_loop_policy(_Policy())
_patch_network()

from odradek.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
