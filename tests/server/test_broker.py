"""Pieces of the broker's shutdown (odradek.server.broker): each step is bounded, a
step that never returns does not hold the process (it runs on a daemon thread), and a
request parked in a purgatory is answered rather than waited out."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import socket
import struct
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from kio.static.primitive import i32Timedelta

from odradek.protocol.errors import ErrorCode
from odradek.server.broker import Broker, _in_daemon_thread
from odradek.testing import running_broker
from tests._deadlines import expired
from tests.protocol.wire import decode_response, request_frame


def bounded(what: str, fn: Any, timeout: float) -> Any:
    async def run() -> Any:
        # _bounded_step uses nothing of the broker but its log
        return await Broker._bounded_step(object.__new__(Broker), what, _in_daemon_thread(fn),
                                          timeout)

    return asyncio.run(run())


def test_a_step_that_finishes_returns_its_result() -> None:
    assert bounded("a quick step", lambda: 42, 5.0) == 42


def test_a_step_that_hangs_is_given_up_and_its_thread_is_a_daemon() -> None:
    never = threading.Event()
    threads: list[threading.Thread] = []

    def hang() -> None:
        threads.append(threading.current_thread())
        never.wait()

    assert bounded("a step that hangs", hang, 0.2) is None
    assert threads and threads[0].daemon and threads[0].is_alive()
    never.set()  # let it go (the process would not wait for it anyway)


def test_a_step_that_fails_raises_its_error() -> None:
    def fail() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        bounded("a failing step", fail, 5.0)


def _read_frame(sock: socket.socket) -> bytes | None:
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
        need = 4 if len(data) < 4 else 4 + struct.unpack_from(">i", data)[0]
        chunk = sock.recv(need - len(data))
        if not chunk:
            return None
        data += chunk
    return data[4:]


def test_a_parked_fetch_is_answered_at_shutdown_not_waited_out() -> None:
    """A consumer's long poll (a Fetch parked in the purgatory for its max_wait, 30 s
    here) does not hold the broker's shutdown: the purgatory is shut down first, the
    Fetch answered with what there is (nothing), as its timeout would have, and the
    broker stops within seconds (the network layer otherwise waited its whole
    shutdown timeout, 30 s, for the answer)."""
    from kio.schema.fetch.v12 import request as m

    stopping = ExitStack()
    with contextlib.closing(socket.socket()) as sock, stopping:
        broker = stopping.enter_context(running_broker())
        topic = "long-poll"
        broker.call(broker.broker.metadata.create_topic, topic, 1, 1)
        request = m.FetchRequest(
            cluster_id=None, replica_id=-1,  # type: ignore[arg-type]
            max_wait=i32Timedelta.parse(datetime.timedelta(seconds=30)),
            min_bytes=1, max_bytes=1 << 20, isolation_level=0,  # type: ignore[arg-type]
            session_id=0, session_epoch=-1, forgotten_topics_data=(),  # type: ignore[arg-type]
            rack_id="", topics=(m.FetchTopic(topic=topic, partitions=(  # type: ignore[arg-type]
                m.FetchPartition(partition=0, current_leader_epoch=-1,  # type: ignore[arg-type]
                                 fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                                 partition_max_bytes=1 << 20),)),),
        )
        sock.settimeout(60)
        sock.connect(("127.0.0.1", broker.port))
        sock.sendall(request_frame(request, 7))
        purgatory = broker.broker.fetch_purgatory
        waiting = time.monotonic()
        while broker.call(lambda: purgatory.parked) == 0:
            assert not expired(waiting, 30), "the Fetch never parked"
            time.sleep(0.01)  # polling a condition, with a deadline
        started = time.monotonic()
        stopping.close()  # stops the broker
        took = time.monotonic() - started
        payload = _read_frame(sock)
    assert took < 10, f"the shutdown took {took:.1f} s with a parked Fetch"
    assert payload is not None, "the parked Fetch was not answered"
    correlation_id, response = decode_response(payload, 1, 12)
    assert correlation_id == 7 and response.error_code == ErrorCode.none
    [partition] = response.responses[0].partitions
    assert partition.error_code == ErrorCode.none and not partition.records


def test_the_logs_of_a_deleted_topic_are_removed_off_the_event_loop_at_shutdown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """A deleted topic's partition dirs wait ``file.delete.delay.ms`` (a minute by
    default) before they are removed; a shutdown meanwhile removes them, gigabytes
    maybe, and must not do it on the event loop (it stalled for seconds): the removal
    runs in a worker, and nothing is left behind."""
    caplog.set_level(logging.INFO, logger="odradek.storage.manager")
    with running_broker(data_dir=tmp_path) as broker:
        broker.call(broker.broker.metadata.create_topic, "doomed", 3, 1)
        data = broker.data_dir / "data"
        waiting = time.monotonic()
        while len(list(data.glob("doomed-*"))) < 3:
            assert not expired(waiting, 30), "the topic's logs were never created"
            time.sleep(0.01)  # polling a condition, with a deadline
        broker.call(broker.broker.metadata.delete_topic, "doomed")
        while len(list(data.glob("doomed-*-delete"))) < 3:
            assert not expired(waiting, 30), "the topic's logs were never deleted"
            time.sleep(0.01)
        loop_thread = broker.call(lambda: threading.current_thread().name)
    assert list(data.glob("doomed-*")) == [], "left behind by the shutdown"
    removals = [r for r in caplog.records if r.getMessage().startswith("removed the dirs")]
    assert [r.getMessage() for r in removals] == ["removed the dirs of 3 logs deleted"]
    assert removals[0].threadName != loop_thread, "removed on the event loop"


def _metadata_brokers(port: int) -> list[tuple[int, str, int]]:
    from kio.schema.metadata.v1.request import MetadataRequest

    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request_frame(MetadataRequest(topics=None), 3))
        payload = _read_frame(sock)
    assert payload is not None, "Metadata unanswered"
    _, response = decode_response(payload, 3, 1)
    return [(b.node_id, b.host, b.port) for b in response.brokers]


def test_a_broker_on_port_0_reports_and_advertises_the_ports_it_bound(tmp_path: Path) -> None:
    """``odradek serve`` with every listener (and the metrics endpoint) on port 0: the
    system picks free ports as they are bound, so no test probes a free port and releases
    it for another process to take first. The ports come back in the ready file, and each
    listener's clients are given that listener's bound port in Metadata."""
    import urllib.request

    from tests.interop._broker import start_broker

    with start_broker(tmp_path, overrides={
        "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "metrics.listener": "http://127.0.0.1:0",
    }) as broker:
        ports = broker.ports
        assert set(ports) == {"PLAINTEXT", "INTERNAL"} and 0 not in ports.values()
        assert ports["PLAINTEXT"] != ports["INTERNAL"] and broker.port == ports["PLAINTEXT"]
        for port in ports.values():
            assert _metadata_brokers(port) == [(0, "127.0.0.1", port)]
        assert broker.metrics_url is not None and ":0/" not in broker.metrics_url
        with urllib.request.urlopen(broker.metrics_url, timeout=30) as page:
            assert page.status == 200


def test_a_parked_acks_all_produce_is_answered_at_shutdown_with_an_error_never_success(
) -> None:
    """An acks=all Produce whose records the ISR has not confirmed (a replica that never
    fetches: broker 1 does not exist) is parked for its timeout (30 s); a shutdown answers
    it at once with REQUEST_TIMED_OUT, as the timeout would: never acknowledged as
    written, since the records may be truncated after the leader goes."""
    from kio.schema.produce.v9 import request as m

    from tests.server._raw_client import batch

    stopping = ExitStack()
    with contextlib.closing(socket.socket()) as sock, stopping:
        broker = stopping.enter_context(running_broker())
        topic = "unconfirmed"
        broker.call(broker.broker.metadata.create_topic, topic, -1, -1, None, {0: [0, 1]})
        request = m.ProduceRequest(
            transactional_id=None, acks=-1,  # type: ignore[arg-type]
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
            topic_data=(m.TopicProduceData(name=topic, partition_data=(  # type: ignore[arg-type]
                m.PartitionProduceData(index=0, records=batch(-1, -1, 0)),  # type: ignore[arg-type]
            )),),
        )
        sock.settimeout(60)
        sock.connect(("127.0.0.1", broker.port))
        replicas = broker.broker.replica_manager
        waiting = time.monotonic()

        def leads() -> bool:
            partition = replicas.get_partition(topic, 0)
            return partition is not None and partition.is_leader

        while not broker.call(leads):
            assert not expired(waiting, 30), "the partition's log was never created"
            time.sleep(0.01)  # polling a condition, with a deadline
        correlation_id = 9
        sock.sendall(request_frame(request, correlation_id))
        purgatory = broker.broker.produce_purgatory
        while broker.call(lambda: purgatory.parked) == 0:
            assert not expired(waiting, 30), "the Produce never parked"
            time.sleep(0.01)
        started = time.monotonic()
        stopping.close()  # stops the broker
        took = time.monotonic() - started
        payload = _read_frame(sock)
    assert took < 10, f"the shutdown took {took:.1f} s with a parked Produce"
    assert payload is not None, "the parked Produce was not answered"
    got_id, response = decode_response(payload, 0, 9)
    assert got_id == correlation_id
    [partition] = response.responses[0].partition_responses
    assert partition.error_code == ErrorCode.request_timed_out, partition
