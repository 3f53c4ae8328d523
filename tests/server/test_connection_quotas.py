"""Connection limits (odradek.server.connection_quotas): the sans-I/O counts and delays,
then each limit over real sockets against a KafkaServer."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from odradek.server.config import BrokerConfig, ConfigError
from odradek.server.connection_quotas import (
    INT_MAX,
    ConnectionLimits,
    ConnectionQuotas,
    parse_per_ip_overrides,
)
from odradek.server.network import NetworkConfig
from tests._deadlines import expired
from tests.server.test_network import Client, run, running

API_VERSIONS = ApiVersionsRequest(client_software_name="q", client_software_version="1")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# -- sans-I/O -----------------------------------------------------------------------------


def test_defaults_are_kafkas_no_limits() -> None:
    quotas = ConnectionQuotas()
    for _ in range(1000):
        assert quotas.inc("127.0.0.1") is None
        assert quotas.accept_delay() == 0.0
    assert quotas.slot_available()
    assert quotas.total == 1000
    config = BrokerConfig.from_raw({})
    for key in ("max.connections", "max.connections.per.ip", "max.connection.creation.rate"):
        assert config[key] == INT_MAX
    assert config["max.connections.per.ip.overrides"] == ""


def test_per_ip_limit_and_overrides() -> None:
    limits = ConnectionLimits(max_connections_per_ip=2,
                              max_connections_per_ip_overrides={"10.0.0.9": 0, "::1": 3})
    quotas = ConnectionQuotas(limits)
    assert quotas.inc("10.0.0.1") is None
    assert quotas.inc("10.0.0.1") is None
    assert quotas.inc("10.0.0.1") == 2
    assert quotas.get("10.0.0.1") == 2  # the refused one is not counted
    assert quotas.inc("10.0.0.9") == 0
    assert [quotas.inc("0:0::1") for _ in range(4)] == [None, None, None, 3]
    quotas.dec("10.0.0.1")
    assert quotas.inc("10.0.0.1") is None


def test_broker_wide_limit_frees_a_slot_on_release() -> None:
    quotas = ConnectionQuotas(ConnectionLimits(max_connections=2))
    released: list[int] = []
    quotas.add_release_listener(lambda: released.append(quotas.total))
    quotas.inc("a")
    assert quotas.slot_available()
    quotas.inc("b")
    assert not quotas.slot_available()
    quotas.dec("a")
    assert quotas.slot_available()
    assert released == [1]
    with pytest.raises(ValueError):
        quotas.dec("a")


def test_creation_rate_allows_a_burst_then_spaces_accepts() -> None:
    clock = Clock()
    quotas = ConnectionQuotas(ConnectionLimits(max_connection_creation_rate=10), clock)
    assert [quotas.accept_delay() for _ in range(10)] == [0.0] * 10
    delays = []
    for _ in range(20):  # the acceptor waits each delay before asking again
        delay = quotas.accept_delay()
        delays.append(delay)
        clock.now += delay
    assert delays == pytest.approx([0.1] * 20)
    clock.now += 5.0  # quiet: the bucket refills to one second's worth, no more
    assert [quotas.accept_delay() for _ in range(10)] == [0.0] * 10
    assert quotas.accept_delay() == pytest.approx(0.1)


def test_creation_rate_delay_is_capped_at_the_quota_window() -> None:
    clock = Clock()
    quotas = ConnectionQuotas(ConnectionLimits(max_connection_creation_rate=0), clock)
    for _ in range(3):
        delay = quotas.accept_delay()
        assert delay == 1.0
        clock.now += delay


def test_overrides_parse_and_validate() -> None:
    assert parse_per_ip_overrides("") == {}
    assert parse_per_ip_overrides("host1:5, 10.0.0.1:0,[::1]:7") == {
        "host1": 5, "10.0.0.1": 0, "::1": 7,
    }
    for bad in ("host1", "host1:x", "host1:-1", ":3"):
        with pytest.raises(ValueError):
            parse_per_ip_overrides(bad)
    with pytest.raises(ConfigError, match=r"max\.connections\.per\.ip\.overrides"):
        BrokerConfig.from_raw({"max.connections.per.ip.overrides": "h:z"})
    with pytest.raises(ConfigError, match=r"max\.connections"):
        BrokerConfig.from_raw({"max.connections": "-1"})
    with pytest.raises(ConfigError, match=r"max\.connection\.creation\.rate"):
        BrokerConfig.from_raw({"max.connection.creation.rate": "-1"})
    with pytest.raises(ConfigError, match="zero only if"):
        BrokerConfig.from_raw({"max.connections.per.ip": "0"})
    config = BrokerConfig.from_raw(
        {"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "127.0.0.1:4"}
    )
    assert config["max.connections.per.ip"] == 0


# -- over real sockets --------------------------------------------------------------------


async def _answers(client: Client, correlation_id: int) -> bool:
    response = await client.call(API_VERSIONS, correlation_id)
    return bool(response.api_keys)


async def _wait_for(condition: object, deadline_s: float = 5.0) -> None:
    assert callable(condition)
    started = time.monotonic()
    while not condition():
        assert not expired(started, deadline_s), "condition not met in time"
        await asyncio.sleep(0.005)


def test_per_ip_limit_closes_the_new_connection_and_frees_on_close(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def test() -> None:
        config = NetworkConfig(max_connections_per_ip=2)
        async with running(config) as (server, _):
            first = await Client.connect(server.port)
            second = await Client.connect(server.port)
            assert await _answers(first, 1) and await _answers(second, 1)
            third = await Client.connect(server.port)  # accepted by TCP, then closed
            assert await third.closed_by_server()
            assert await _answers(first, 2) and await _answers(second, 2)  # untouched
            await first.close()
            await _wait_for(lambda: server.quotas.get("127.0.0.1") == 1)
            fourth = await Client.connect(server.port)
            assert await _answers(fourth, 1)
            for client in (second, third, fourth):
                await client.close()

    with caplog.at_level(logging.INFO, logger="odradek.server.network"):
        run(test)
    rejected = [r for r in caplog.records if "configured maximum of 2" in r.getMessage()]
    assert len(rejected) == 1


def test_per_ip_override_wins_over_the_default() -> None:
    async def test() -> None:
        config = NetworkConfig(
            max_connections_per_ip=0, max_connections_per_ip_overrides={"127.0.0.1": 1}
        )
        async with running(config) as (server, _):
            first = await Client.connect(server.port)
            assert await _answers(first, 1)
            second = await Client.connect(server.port)
            assert await second.closed_by_server()
            await first.close()
            await second.close()

    run(test)


def test_max_connections_makes_new_connections_wait_for_a_slot() -> None:
    """Kafka's Acceptor blocks at max.connections: the new connection is not refused, it
    waits in the listen backlog and is served once another one closes."""

    async def test() -> None:
        async with running(NetworkConfig(max_connections=2)) as (server, _):
            first = await Client.connect(server.port)
            second = await Client.connect(server.port)
            assert await _answers(first, 1) and await _answers(second, 1)
            waiting = await Client.connect(server.port)  # the kernel completes the handshake
            answer = asyncio.ensure_future(_answers(waiting, 1))
            done, _ = await asyncio.wait({answer}, timeout=0.3)
            assert not done, "a third connection was served beyond max.connections=2"
            assert len(server.connections) == 2
            assert await _answers(second, 2)  # existing ones untouched
            await first.close()
            assert await asyncio.wait_for(answer, 5)
            for client in (second, waiting):
                await client.close()
            await _wait_for(lambda: server.quotas.total == 0)

    run(test)


def test_creation_rate_delays_accepting() -> None:
    async def test() -> None:
        rate = 20
        async with running(NetworkConfig(max_connection_creation_rate=rate)) as (server, _):
            start = time.monotonic()
            clients = []
            for i in range(rate + 10):  # a second's burst, then 10 more at 1/rate apart
                client = await Client.connect(server.port)
                assert await _answers(client, i)
                clients.append(client)
            elapsed = time.monotonic() - start
            assert elapsed >= 10 / rate * 0.9, elapsed
            assert len(server.connections) == rate + 10  # delayed, none dropped
            for client in clients:
                await client.close()

    run(test)


def test_limits_are_plumbed_from_the_broker_config() -> None:
    from odradek.testing import running_broker

    overrides = {"max.connections.per.ip": "1"}
    with running_broker(overrides=overrides) as broker:
        limits = broker.broker.servers[0].quotas.limits
        assert limits.max_connections_per_ip == 1

        async def check() -> None:
            first = await Client.connect(broker.port)
            assert await _answers(first, 1)
            second = await Client.connect(broker.port)
            assert await second.closed_by_server()
            for client in (first, second):
                with contextlib.suppress(Exception):
                    await client.close()

        asyncio.run(check())


def test_accept_goes_on_after_running_out_of_descriptors(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EMFILE at accept (the process is out of descriptors) is logged, summarised, and
    accepting resumes: the waiting connection is served once descriptors are back."""
    import errno
    import socket

    real_accept = socket.socket.accept
    failures = 0

    ours: set[int] = set()  # socket.accept is process-wide: other tests' brokers accept too

    def out_of_descriptors(self: socket.socket) -> Any:
        nonlocal failures
        if self.getsockname()[1] in ours and failures < 5:
            failures += 1
            raise OSError(errno.EMFILE, "Too many open files")
        return real_accept(self)

    async def test() -> None:
        async with running() as (server, _):
            ours.add(server.port)
            monkeypatch.setattr(socket.socket, "accept", out_of_descriptors)
            client = await Client.connect(server.port)
            assert await _answers(client, 1)
            assert failures == 5
            await client.close()

    with caplog.at_level(logging.INFO, logger="odradek.server.network"):
        run(test)
    lines = [r.getMessage() for r in caplog.records if "Too many open files" in r.getMessage()]
    assert len(lines) == 1
    summaries = [r.getMessage() for r in caplog.records if "accepting failed" in r.getMessage()]
    assert len(summaries) == 1
    assert summaries[0].startswith("accepting failed 4 more times on 127.0.0.1:")
