"""The broker's network layer alone over TLS and plaintext: its CPU per GB, tree by tree.

How it works: for each source tree (this checkout, and others with ``--tree``, e.g. a
``git worktree`` of the base commit), a child process with that tree's ``src/`` first on
the path runs a :class:`~odradek.server.network.KafkaServer` (one SSL or PLAINTEXT
listener, TLS 1.3 with a trustme certificate) whose only API is a test Heartbeat v4:

- *fetch*: the request answers an 8 MiB file region (a partition fetch's shape: the
  region is ``sendfile``d on plaintext, read and encrypted in chunks over TLS);
- *produce*: 1 MB requests (a ``decode`` hook takes the frame without parsing it), four
  in flight, each answered at once.

A client in another process (Python's blocking ``ssl`` socket) sends the requests and
reads the answers; after a warm-up of a tenth of the bytes, the server process's user +
system CPU (``getrusage``) over ``--megabytes`` is divided by the bytes. No storage, no
handlers, no librdkafka: only the transport, framing and writer that the TLS cells of
bench/peers.py go through, so the figure is steadier than those cells' on a shared
machine. Trees and cases alternate within each round; the table gives the median and
range of ``--rounds``.

    .venv/bin/python bench/tls_transport.py --tree .bench-tmp/odradek-<sha> [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import multiprocessing
import os
import resource
import socket
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REGION = 8 * 1024 * 1024
PRODUCE_BYTES = 1_000_000
IN_FLIGHT = 4
CASES = ("fetch SSL", "fetch PLAINTEXT", "produce SSL", "produce PLAINTEXT")


def _child(case: str, megabytes: int) -> None:
    """Serve one case in this process (the tree's ``src`` is on the path) and print its
    figures as one JSON line."""
    import trustme
    from kio.schema.heartbeat.v4.request import HeartbeatRequest
    from kio.schema.heartbeat.v4.response import HeartbeatResponse
    from kio.static.primitive import i32
    from produce_requests import request_frame

    from odradek.protocol.codec import decode_request
    from odradek.protocol.errors import ErrorCode
    from odradek.protocol.registry import HandlerRegistry
    from odradek.protocol.send import FileRegion, Send
    from odradek.server.network import KafkaServer
    from odradek.server.network.security import ListenerSecurity

    mode, protocol = case.split()
    ca = trustme.CA()
    fd, path = tempfile.mkstemp()
    os.write(fd, os.urandom(REGION))
    os.unlink(path)
    fetch = request_frame(HeartbeatRequest(group_id="fetch", generation_id=i32(1),  # type: ignore[arg-type]
                                           member_id="m"), 1)
    produce = request_frame(HeartbeatRequest(group_id="p" * PRODUCE_BYTES,  # type: ignore[arg-type]
                                             generation_id=i32(1), member_id="m"), 2)
    per = REGION if mode == "fetch" else len(produce)
    count = max(1, megabytes * 1024 * 1024 // per)

    async def handler(ctx: Any, request: Any) -> Any:
        if request is None:  # a produce-sized request, not parsed
            return HeartbeatResponse(error_code=ErrorCode.none,
                                     throttle_time=datetime.timedelta(0))
        return Send([b"\x00\x00", FileRegion(fd, 0, REGION)])

    def decode(frame: Any, offset: int, version: int) -> Any:
        return None if len(frame) > 100_000 else decode_request(12, version, frame, offset)

    async def serve() -> dict[str, float]:
        registry = HandlerRegistry()
        registry.register(12, 4, 4, handler, decode=decode)
        security = ListenerSecurity()
        if protocol == "SSL":
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ca.issue_cert("127.0.0.1").configure_cert(context)
            security = ListenerSecurity(name="SSL", protocol="SSL", ssl_context=context)
        server = KafkaServer(registry, "127.0.0.1", 0, security=security)
        await server.start()
        loop = asyncio.get_running_loop()
        args = (server.port, ca if protocol == "SSL" else None, fetch if mode == "fetch"
                else produce, mode)
        warm = multiprocessing.Process(target=_client, args=(*args, max(2, count // 10)))
        warm.start()
        await loop.run_in_executor(None, warm.join)
        before, started = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
        loop_before = time.thread_time()  # this thread runs the event loop
        run = multiprocessing.Process(target=_client, args=(*args, count))
        run.start()
        await loop.run_in_executor(None, run.join)
        after, wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - started
        loop_cpu = time.thread_time() - loop_before
        await server.stop(timeout=2)
        gb = count * per / 1e9
        user = after.ru_utime - before.ru_utime
        system = after.ru_stime - before.ru_stime
        return {"cpu": (user + system) / gb, "user": user / gb, "loop": loop_cpu / gb,
                "mb_s": gb * 1000 / wall}

    print(json.dumps(asyncio.run(serve())))


def _client(port: int, ca: Any, request: bytes, mode: str, count: int) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    if ca is not None:
        context = ssl.create_default_context()
        ca.configure_trust(context)
        sock = context.wrap_socket(sock, server_hostname="127.0.0.1")
    buffer = bytearray(4 * 1024 * 1024)

    def read_frame() -> None:
        head = b""
        while len(head) < 4:
            got = sock.recv(4 - len(head))
            if not got:
                raise ConnectionError("the server closed the connection")
            head += got
        (left,) = struct.unpack(">i", head)
        while left:
            got = sock.recv_into(buffer, min(left, len(buffer)))
            if not got:
                raise ConnectionError("the server closed the connection")
            left -= got

    in_flight = 0
    for _ in range(count):
        sock.sendall(request)
        in_flight += 1
        if in_flight == (1 if mode == "fetch" else IN_FLIGHT):
            read_frame()
            in_flight -= 1
    for _ in range(in_flight):
        read_frame()
    sock.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--tree", action="append", type=Path, default=[],
                        help="another source tree to measure beside this checkout")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--megabytes", type=int, default=512)
    parser.add_argument("--cases", default=",".join(CASES),
                        help=f"a comma-separated subset of {', '.join(CASES)}")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.megabytes)
        return 0
    trees = [ROOT, *(t.resolve() for t in args.tree)]
    cases = [c for c in CASES if c in args.cases.split(",")]
    figures: dict[tuple[Path, str], list[dict[str, float]]] = {}
    for _ in range(args.rounds):
        for case in cases:
            for tree in trees:
                env = dict(os.environ, PYTHONPATH=f"{tree / 'src'}{os.pathsep}{ROOT / 'bench'}")
                out = subprocess.run([sys.executable, __file__, "--child", case,
                                      "--megabytes", str(args.megabytes)], env=env,
                                     capture_output=True, text=True, timeout=600)
                if out.returncode:
                    print(out.stderr, file=sys.stderr)
                    return 1
                figures.setdefault((tree, case), []).append(json.loads(out.stdout))
    print(f"Python {sys.version.split()[0]}, {ssl.OPENSSL_VERSION}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
          f"{time.strftime('%Y-%m-%d %H:%M:%S')}, {args.megabytes} MiB a case, "
          f"median of {args.rounds} (range)\n")
    print("| case | tree | server CPU s/GB | of which user | event-loop thread CPU s/GB | MB/s |"
          "\n|---|---|---:|---:|---:|---:|")
    for case in cases:
        for tree in trees:
            runs = figures[(tree, case)]

            def stat(key: str, runs: list[dict[str, float]] = runs) -> str:
                values = [r[key] for r in runs]
                return (f"{statistics.median(values):.3f} ({min(values):.3f}-"
                        f"{max(values):.3f})" if key != "mb_s"
                        else f"{statistics.median(values):.0f}")

            name = "this checkout" if tree == ROOT else str(tree.relative_to(ROOT)
                                                             if tree.is_relative_to(ROOT)
                                                             else tree)
            print(f"| {case} | {name} | {stat('cpu')} | {stat('user')} | {stat('loop')} | "
                  f"{stat('mb_s')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
