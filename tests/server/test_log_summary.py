"""RejectionLog (odradek.server.log_summary): one full line, then counts per window."""

from __future__ import annotations

import logging

import pytest

from odradek.server.log_summary import OTHER_HOSTS, RejectionLog, Summary
from tests._own import own_records


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_first_of_each_cause_and_host_is_logged_in_full() -> None:
    log = RejectionLog(10.0, Clock())
    assert log.record("unknown API key", "10.0.0.1")
    assert log.record("unknown API key", "10.0.0.2")
    assert log.record("invalid frame", "10.0.0.1")
    assert not log.record("unknown API key", "10.0.0.1")
    assert not log.record("invalid frame", "10.0.0.1")


def test_repeats_are_summarised_once_the_window_ends() -> None:
    clock = Clock()
    log = RejectionLog(10.0, clock)
    log.record("unknown API key", "127.0.0.1")
    for _ in range(5312):
        log.record("unknown API key", "127.0.0.1")
    clock.now += 9.9
    assert log.due() == []
    assert log.next_due() == 1010.0
    clock.now += 0.1
    [summary] = log.due()
    assert summary == Summary("unknown API key", "127.0.0.1", 5312, 10.0)
    assert summary.message() == (
        "closed 5,312 connections from 127.0.0.1 for 'unknown API key' in the last 10 s"
    )
    assert log.due() == []


def test_a_steady_flood_costs_one_line_per_window() -> None:
    clock = Clock()
    log = RejectionLog(10.0, clock)
    full = 0
    summaries: list[Summary] = []
    for _ in range(60):  # a minute, 100 rejections a second
        for _ in range(100):
            full += log.record("invalid frame", "127.0.0.1")
        clock.now += 1.0
        summaries.extend(log.due())
    assert full == 1
    assert len(summaries) == 6
    assert sum(s.count for s in summaries) == 60 * 100 - 1


def test_after_a_quiet_window_the_next_rejection_is_logged_in_full() -> None:
    clock = Clock()
    log = RejectionLog(10.0, clock)
    assert log.record("unsupported version", "h")
    clock.now += 10.0
    assert log.due() == []  # no repeats: nothing to summarise, and the window is gone
    assert log.next_due() is None
    assert log.record("unsupported version", "h")


def test_the_table_is_bounded_and_other_hosts_are_counted_together() -> None:
    clock = Clock()
    log = RejectionLog(10.0, clock, max_keys=3)
    for i in range(3):
        assert log.record("invalid frame", f"10.0.0.{i}")
    assert log.record("invalid frame", "10.0.0.3")  # no room: a window for other hosts
    for i in range(4, 100):
        assert not log.record("invalid frame", f"10.0.0.{i}")
    clock.now += 10.0
    [summary] = log.due()
    assert summary.host == OTHER_HOSTS
    assert summary.count == 96


def test_flush_reports_open_windows_with_repeats() -> None:
    log = RejectionLog(10.0, Clock())
    log.record("a", "h")
    log.record("a", "h")
    log.record("b", "h")
    assert log.flush() == [Summary("a", "h", 1, 10.0)]
    assert log.next_due() is None
    assert Summary("a", "h", 1, 10.0).message() == (
        "closed 1 connection from h for 'a' in the last 10 s"
    )


# -- used by the network layer --------------------------------------------------------------


def test_bad_input_over_a_thousand_connections_logs_a_bounded_number_of_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each connection is rejected (four causes, one peer host): a handful of lines, not
    a thousand; the counts come out in the summaries when the server stops."""
    import asyncio
    import random
    import struct

    from odradek.server.network import NetworkConfig
    from tests.server.test_network import run, running

    rng = random.Random(20261123)
    bad_inputs = {
        "invalid frame": struct.pack(">i", -7),
        "unknown API key": struct.pack(">ihhih", 10, 9999, 0, 1, 0),
        "unsupported version": struct.pack(">ihhih", 10, 12, 99, 1, 0),
        "malformed request header": struct.pack(">ihh", 4, 12, 4),
    }
    kinds = list(bad_inputs)
    connections = 1000

    async def reject(port: int, payload: bytes) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(payload)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, no answer
        writer.close()

    # One window for the whole run, however long a loaded machine makes it (the default
    # 10 s window could end mid-run and add a summary): the counts come out at the stop.
    config = NetworkConfig(rejection_log_window_ms=3_600_000)

    async def test() -> None:
        async with running(config) as (server, _):
            for start in range(0, connections, 50):
                await asyncio.gather(*(
                    reject(server.port, bad_inputs[rng.choice(kinds)])
                    for _ in range(start, min(start + 50, connections))
                ))

    with caplog.at_level(logging.INFO, logger="odradek.server.network"):
        run(test)
    lines = [r.getMessage() for r in own_records(caplog) if r.levelno >= logging.INFO]
    full = [m for m in lines if m.startswith("closing connection")]
    summaries = [m for m in lines if m.startswith("closed ")]
    assert len(full) == len(kinds), full
    assert len(summaries) == len(kinds), summaries
    assert len(lines) <= 2 * len(kinds) + 2  # and "listening", "stopped"
    counted = sum(int(m.split()[1].replace(",", "")) for m in summaries)
    assert counted + len(full) == connections
