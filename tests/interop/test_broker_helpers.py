"""The interop tests' helpers of tests/interop/_broker.py that need no broker."""

from __future__ import annotations

import errno
import socket

import pytest

from ._broker import refusing_address


def test_a_refusing_address_refuses_and_no_one_else_can_take_it() -> None:
    """What a test that wants "nothing there" needs for as long as it runs: the old
    helper closed its socket before yielding, so another worker's broker could bind the
    port and answer the client the test meant to fail (issue 51)."""
    with refusing_address() as address:
        host, port = address.rsplit(":", 1)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((host, int(port)), timeout=5).close()
        with socket.socket() as other, pytest.raises(OSError) as taken:
            other.bind((host, int(port)))
        assert taken.value.errno == errno.EADDRINUSE
