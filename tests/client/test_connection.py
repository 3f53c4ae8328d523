"""BrokerConnection (the broker's own client: replica fetchers, tools) against a real
broker: a request sent after the broker closed the connection fails at once rather than
waiting for an answer that cannot come (a follower's fetcher idle while its leader
restarted used to hang there)."""

from __future__ import annotations

import asyncio

import pytest

from odradek.client.connection import BrokerConnection, ClientError
from odradek.testing import running_broker

API_VERSIONS = __import__("kio.schema.api_versions.v3.request",
                          fromlist=["ApiVersionsRequest"]).ApiVersionsRequest


def test_a_request_on_a_connection_the_broker_closed_fails_at_once() -> None:
    async def scenario(bootstrap: str, stop: asyncio.Event, stopped: asyncio.Event) -> None:
        conn = await BrokerConnection.open(bootstrap)
        try:
            request = API_VERSIONS(client_software_name="t", client_software_version="1")
            assert (await conn.send(request)).api_keys  # answered while the broker runs
            stop.set()
            await stopped.wait()
            # the reader sees the close; the next request fails instead of hanging
            with pytest.raises(ClientError):
                await asyncio.wait_for(_send_when_closed(conn, request), 30)
        finally:
            await conn.close()

    with running_broker() as broker:
        loop = asyncio.new_event_loop()
        stop, stopped = asyncio.Event(), asyncio.Event()
        task = loop.create_task(scenario(broker.bootstrap, stop, stopped))
        loop.run_until_complete(stop.wait())
    loop.call_soon(stopped.set)  # the broker is stopped: its sockets are closed
    loop.run_until_complete(task)
    loop.close()


async def _send_when_closed(conn: BrokerConnection, request: object) -> None:
    """Send until the connection reports its close: a send racing the reader's EOF may
    still be written into the closing socket (and then fails with it)."""
    while True:
        await conn.send(request)
