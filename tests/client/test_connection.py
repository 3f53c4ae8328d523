"""BrokerConnection (the broker's own client: replica fetchers, tools) against a real
broker: a request sent after the broker closed the connection fails at once rather than
waiting for an answer that cannot come (a follower's fetcher idle while its leader
restarted used to hang there)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from odradek.client.connection import BrokerConnection, ClientError
from odradek.testing import running_broker
from tests.interop._broker import refusing_address

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


def test_open_any_skips_servers_that_do_not_answer_and_names_each_when_none_does() -> None:
    with refusing_address() as first, refusing_address() as second:
        _open_any([first, second])


def _open_any(dead: list[str]) -> None:
    """``dead``: addresses where connections are refused."""

    async def none_answers() -> str:
        with pytest.raises(ClientError) as info:
            await BrokerConnection.open_any(dead, 5)
        return str(info.value)

    message = asyncio.run(none_answers())
    assert message.startswith("cannot reach any bootstrap server: ")
    assert all(f"{d}: connection refused" in message for d in dead), message

    with running_broker() as broker:
        async def the_live_one() -> int:
            conn = await BrokerConnection.open_any([dead[0], broker.bootstrap], 5)
            try:
                return conn.port
            finally:
                await conn.close()

        assert asyncio.run(the_live_one()) == int(broker.bootstrap.rpartition(":")[2])


def test_a_plaintext_client_of_a_tls_listener_is_told_to_give_its_settings(
        tmp_path: Path) -> None:
    """A TLS listener closes on a client that speaks plain Kafka: the client says that the
    listener probably wants TLS or SASL and where the settings go (--command-config),
    not only "not a Kafka broker?"."""
    import trustme

    ca = trustme.CA()
    keystore = tmp_path / "broker.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(keystore))
    overrides = {"listeners": "SSL://127.0.0.1:0", "inter.broker.listener.name": "SSL",
                 "ssl.keystore.type": "PEM",
                 "ssl.keystore.location": str(keystore)}
    with running_broker(overrides) as broker, pytest.raises(ClientError) as failed:
        asyncio.run(BrokerConnection.open(broker.bootstrap, timeout=30))
    assert "probably wants TLS or SASL" in str(failed.value)
    assert "--command-config" in str(failed.value)
