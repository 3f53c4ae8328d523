"""Issue 19, "the first hour": what a newcomer trips over, run as a newcomer would, through
the real ``odradek`` command in a subprocess (exit code and output)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tests.interop._broker import REPO, free_port, odradek_executable

from odradek.client.connection import BrokerConnection, ClientError

CLI_TIMEOUT_S = 60.0


def odradek(*args: str, stdin: str | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([str(odradek_executable()), *args], capture_output=True, text=True,
                          input=stdin, env=env, cwd=cwd, timeout=CLI_TIMEOUT_S, check=False)


@contextmanager
def tcp_server(on_connect: Callable[[socket.socket], None]) -> Iterator[int]:
    """A listening socket on a free port; each accepted connection is handed to
    ``on_connect`` in a thread. Yields the port."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            held.append(conn)
            on_connect(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        listener.close()
        for conn in held:
            conn.close()


#: the client gives a silent peer 10 s (BrokerConnection.open); an answer known at once
#: must come back well before that, start-up of the command included
SILENCE_TIMEOUT_S = 10.0


def timed(*args: str) -> subprocess.CompletedProcess[str]:
    started = time.monotonic()
    res = odradek(*args)
    assert time.monotonic() - started < SILENCE_TIMEOUT_S, "waited for a timeout"
    return res


def _answer_http(conn: socket.socket) -> None:
    conn.settimeout(5)
    conn.recv(1024)
    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    conn.close()


def test_topics_list_against_something_that_is_not_a_kafka_broker_says_why() -> None:
    """`topics list -b` at a closed port, at an HTTP server, at a server that hangs up: the
    reason, at once (not after the 10 s a silent peer is given)."""
    port = free_port()
    res = timed("topics", "list", "-b", f"127.0.0.1:{port}")
    assert res.returncode == 1
    assert res.stderr == (f"odradek: cannot reach 127.0.0.1:{port}: connection refused "
                          "(is a broker listening there?)\n")
    with tcp_server(_answer_http) as http_port:
        res = timed("topics", "list", "-b", f"127.0.0.1:{http_port}")
    assert res.returncode == 1
    assert res.stderr.startswith(
        f"odradek: cannot reach 127.0.0.1:{http_port}: not a Kafka broker: it answered "
        "b'HTTP/1.1 400 Bad Request"), res.stderr
    with tcp_server(lambda conn: conn.close()) as closing_port:
        res = timed("topics", "list", "-b", f"127.0.0.1:{closing_port}")
    assert res.returncode == 1
    assert res.stderr == (
        f"odradek: cannot reach 127.0.0.1:{closing_port}: the connection was closed without "
        "an answer to ApiVersions (not a Kafka broker?)\n")


def test_a_silent_peer_is_reported_as_such_after_the_timeout() -> None:
    silent = r"^no answer to ApiVersions within 0.5 s \(not a Kafka broker\?\)$"
    with tcp_server(lambda conn: None) as port, pytest.raises(ClientError, match=silent):
        asyncio.run(BrokerConnection.open(f"127.0.0.1:{port}", timeout=0.5))
