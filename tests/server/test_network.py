"""The network layer over real sockets (odradek.server.network).

The server runs on 127.0.0.1, port 0, with ApiVersions plus a fake test API: Heartbeat
(key 12), whose ``group_id`` tells the handler what to do ("sleep:0.3", "none", "raise",
"crash", "send", "block", anything else answers at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import importlib
import os
import struct
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.heartbeat.v0.request import HeartbeatRequest as HeartbeatRequestV0
from kio.schema.heartbeat.v0.response import HeartbeatResponse as HeartbeatResponseV0
from kio.schema.heartbeat.v4.request import HeartbeatRequest as HeartbeatRequestV4
from kio.schema.heartbeat.v4.response import HeartbeatResponse as HeartbeatResponseV4
from kio.static.primitive import i32

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.registry import HandlerRegistry, RequestContext
from odradek.protocol.send import FileRegion, Send
from odradek.server.handlers.api_versions import register_api_versions
from odradek.server.network import KafkaServer, NetworkConfig
from odradek.server.network import writer as response_writer
from odradek.server.network.eager import start_eagerly
from tests._own import server_descriptors
from tests.protocol.wire import decode_response, raw_header, request_frame

TIMEOUT = 10.0


class FakeApi:
    """State shared between the fake Heartbeat handler and a test."""

    def __init__(self) -> None:
        self.completed: list[str] = []
        self.gate = asyncio.Event()
        self.started = 0
        fd, self.path = tempfile.mkstemp()
        os.write(fd, b"xx\x00\x10yy")  # bytes 2..3 = error code 16 (NOT_COORDINATOR)
        self.fd = fd

    def close(self) -> None:
        os.close(self.fd)
        os.unlink(self.path)

    async def handler(self, ctx: RequestContext, request: Any) -> Any:
        self.started += 1
        action = request.group_id
        if action.startswith("sleep:"):
            await asyncio.sleep(float(action.split(":", 1)[1]))
        elif action == "block":
            await self.gate.wait()
        elif action == "none":
            self.completed.append(action)
            return None
        elif action == "raise":
            raise KafkaError(ErrorCode.rebalance_in_progress)
        elif action == "crash":
            raise RuntimeError("boom")
        elif action == "send":
            # error_code int16 = 0x0010, half from memory, half from the file.
            return Send([b"\x00", FileRegion(self.fd, 3, 1)])
        elif action.startswith("regions:"):  # the error code, then N copies of the file
            count = int(action.split(":", 1)[1])
            size = os.fstat(self.fd).st_size
            return Send([b"\x00\x10", *(FileRegion(self.fd, 0, size) for _ in range(count))])
        elif action == "beyond":  # a region past the end of the file
            size = os.fstat(self.fd).st_size
            return Send([b"\x00\x10", FileRegion(self.fd, 0, size + 100_000)])
        self.completed.append(action)
        return _heartbeat_response(ctx.api_version, ErrorCode.none)


def _heartbeat_response(version: int, code: ErrorCode) -> Any:
    if version == 0:
        return HeartbeatResponseV0(error_code=code)
    return HeartbeatResponseV4(error_code=code, throttle_time=datetime.timedelta(0))


def _heartbeat(action: str, version: int = 4) -> Any:
    if version == 0:
        return HeartbeatRequestV0(group_id=action, generation_id=i32(1), member_id="m")  # type: ignore[arg-type]
    return HeartbeatRequestV4(group_id=action, generation_id=i32(1), member_id="m")  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def running(
    config: NetworkConfig | None = None,
) -> AsyncIterator[tuple[KafkaServer, FakeApi]]:
    api = FakeApi()
    registry = HandlerRegistry()
    register_api_versions(registry)
    registry.register(
        ApiKey.HEARTBEAT,
        0,
        4,
        api.handler,
        error_response=lambda ctx, req, code: _heartbeat_response(ctx.api_version, code),
    )
    server = KafkaServer(registry, "127.0.0.1", 0, config=config)
    await server.start()
    try:
        yield server, api
    finally:
        api.gate.set()
        await server.stop(timeout=5)
        api.close()


def run(test: Callable[[], Awaitable[None]]) -> None:
    async def with_timeout() -> None:
        await asyncio.wait_for(test(), TIMEOUT)

    asyncio.run(with_timeout())


def _peer_port(transport: Any) -> int | None:
    peer = transport.get_extra_info("peername")
    return peer[1] if peer else None


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, port: int) -> Client:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def read_frame(self) -> bytes | None:
        """The next response payload, or None when the server closed the connection."""
        try:
            prefix = await self.reader.readexactly(4)
            (size,) = struct.unpack(">i", prefix)
            return await self.reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionResetError):
            return None

    async def call(self, request: Any, correlation_id: int) -> Any:
        await self.send(request_frame(request, correlation_id))
        payload = await self.read_frame()
        assert payload is not None, "connection closed"
        corr, response = decode_response(payload, request.__api_key__, request.__version__)
        assert corr == correlation_id
        return response

    async def closed_by_server(self) -> bool:
        return await asyncio.wait_for(self.read_frame(), 5) is None

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


def _api_versions_v3() -> ApiVersionsRequest:
    return ApiVersionsRequest(client_software_name="odradek-tests", client_software_version="0.1")


def test_api_versions_v3_raw_socket() -> None:
    async def test() -> None:
        async with running() as (server, _):
            client = await Client.connect(server.port)
            response = await client.call(_api_versions_v3(), 1)
            assert response.error_code == ErrorCode.none
            table = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            assert table == {12: (0, 4), 18: (0, 4)}
            await client.close()

    run(test)


def test_pipelined_responses_keep_request_order() -> None:
    async def test() -> None:
        async with running() as (server, api):
            client = await Client.connect(server.port)
            requests = [
                (_heartbeat("sleep:0.3"), 1),
                (_heartbeat("fast-a"), 2),
                (_heartbeat("none", version=0), 3),  # no response at all
                (_heartbeat("fast-b", version=0), 4),
                (_api_versions_v3(), 5),
                (_heartbeat("sleep:0.1"), 6),
            ]
            await client.send(b"".join(request_frame(r, c) for r, c in requests))
            seen = []
            for request, corr in requests:
                if corr == 3:
                    continue
                payload = await client.read_frame()
                assert payload is not None
                got, response = decode_response(
                    payload, request.__api_key__, request.__version__
                )
                seen.append(got)
                assert response.error_code == ErrorCode.none
            assert seen == [1, 2, 4, 5, 6]
            # Handlers ran concurrently: the fast ones finished before the slow ones.
            assert api.completed.index("fast-a") < api.completed.index("sleep:0.3")
            assert api.completed.index("sleep:0.1") < api.completed.index("sleep:0.3")
            await client.close()

    run(test)



def test_finished_responses_go_out_together_but_never_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pipelined requests whose handlers finish together are written in one send; those
    before a slow handler are written before the writer waits for it."""
    writes: list[int] = []
    ours: set[int] = set()  # the client's port: a broker another test left running in
    real = response_writer._write_all  # this process writes through the patch too

    def counting(transport: Any, ready: list[Any]) -> int:
        if _peer_port(transport) in ours:
            writes.append(len(ready))
        return real(transport, ready)

    monkeypatch.setattr(response_writer, "_write_all", counting)

    async def test() -> None:
        async with running() as (server, api):
            client = await Client.connect(server.port)
            ours.add(client.writer.get_extra_info("sockname")[1])
            requests = [(_heartbeat(f"fast-{i}"), i) for i in range(10)]
            requests.append((_heartbeat("block"), 10))
            requests += [(_heartbeat(f"fast-{i}"), i) for i in range(11, 15)]
            await client.send(b"".join(request_frame(r, c) for r, c in requests))
            seen = []
            for request, corr in requests:
                if corr == 10:
                    # the ten fast answers came while the slow handler still waits on its
                    # gate (not by a wall-clock bound, which a loaded machine can pass)
                    assert not api.gate.is_set() and "block" not in api.completed
                    api.gate.set()
                payload = await client.read_frame()
                assert payload is not None
                got, _ = decode_response(payload, request.__api_key__, request.__version__)
                seen.append(got)
            assert seen == list(range(15))
            assert sum(writes) == 15 and max(writes) > 1
            await client.close()

    run(test)


def test_api_versions_unknown_version_gets_v0_error_response() -> None:
    async def test() -> None:
        async with running() as (server, _):
            client = await Client.connect(server.port)
            # A future ApiVersions v99: flexible header, a body we cannot parse.
            payload = raw_header(18, 99, 7, "future-client", flexible=True) + b"\x99\x98junk"
            await client.send(struct.pack(">i", len(payload)) + payload)
            answer = await client.read_frame()
            assert answer is not None
            corr, response = decode_response(answer, 18, 0, header_version=0)
            assert corr == 7
            assert response.error_code == ErrorCode.unsupported_version
            table = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            assert table[18] == (0, 4)
            # The connection stays usable: the client retries with a version we serve.
            response = await client.call(_api_versions_v3(), 8)
            assert response.error_code == ErrorCode.none
            await client.close()

    run(test)


def _bad_inputs() -> dict[str, bytes]:
    good_v3 = request_frame(_api_versions_v3(), 1)
    return {
        "truncated_header": struct.pack(">i", 5) + b"\x00\x12\x00\x03\x00",
        "truncated_body": struct.pack(">i", len(good_v3) - 7) + good_v3[4:-3],
        "oversized_frame": struct.pack(">i", 2 * 1024 * 1024) + b"\x00" * 64,
        "negative_size": struct.pack(">i", -4),
        "unknown_api_key": struct.pack(">i", 10) + raw_header(999, 0, 1, None, flexible=False),
        "unserved_api_key": request_frame(
            ApiVersionsRequest(client_software_name="a", client_software_version="b"), 1
        ).replace(b"\x00\x12\x00\x03", b"\x00\x03\x00\x0c", 1),  # Metadata v12, not served
        "unsupported_version": struct.pack(">i", 10) + raw_header(12, 99, 1, None, False),
        "http": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    }


@pytest.mark.parametrize("case", sorted(_bad_inputs()))
def test_bad_input_closes_only_that_connection(case: str) -> None:
    async def test() -> None:
        config = NetworkConfig(socket_request_max_bytes=1024 * 1024)
        async with running(config) as (server, _):
            good = await Client.connect(server.port)
            bad = await Client.connect(server.port)
            assert (await good.call(_heartbeat("before"), 1)).error_code == ErrorCode.none
            await bad.send(_bad_inputs()[case])
            assert await bad.closed_by_server()
            assert (await good.call(_heartbeat("after"), 2)).error_code == ErrorCode.none
            assert len(server.connections) == 1
            await good.close()
            await bad.close()

    run(test)


@pytest.mark.parametrize("case", sorted(_bad_inputs()))
def test_requests_before_a_bad_frame_are_answered_before_the_close(case: str) -> None:
    """Requests pipelined in one write ahead of a frame that cannot be served are each
    answered (a slow one too), and nothing after the bad frame runs: Kafka reads one
    request at a time, so it answers the earlier ones before it meets the bad one."""

    async def test() -> None:
        config = NetworkConfig(socket_request_max_bytes=1024 * 1024)
        async with running(config) as (server, api):
            client = await Client.connect(server.port)
            before = [(_heartbeat("sleep:0.2"), 1), (_heartbeat("first"), 2),
                      (_heartbeat("second", version=0), 3)]
            after = request_frame(_heartbeat("after-the-bad-frame"), 4)
            await client.send(
                b"".join(request_frame(r, c) for r, c in before) + _bad_inputs()[case] + after
            )
            for request, corr in before:
                payload = await client.read_frame()
                assert payload is not None, f"no answer to correlation id {corr}"
                got, response = decode_response(
                    payload, request.__api_key__, request.__version__
                )
                assert got == corr and response.error_code == ErrorCode.none
            assert await client.closed_by_server()
            assert "after-the-bad-frame" not in api.completed
            assert api.completed[-1] in ("first", "second", "sleep:0.2")
            await client.close()

    run(test)


def test_truncated_frame_then_eof_closes() -> None:
    async def test() -> None:
        async with running() as (server, _):
            client = await Client.connect(server.port)
            await client.send(struct.pack(">i", 100) + b"\x00" * 10)
            client.writer.write_eof()
            assert await client.closed_by_server()
            await client.close()

    run(test)


def test_handler_errors_use_error_response() -> None:
    async def test() -> None:
        async with running() as (server, _):
            client = await Client.connect(server.port)
            response = await client.call(_heartbeat("raise"), 1)
            assert response.error_code == ErrorCode.rebalance_in_progress
            response = await client.call(_heartbeat("crash"), 2)
            assert response.error_code == ErrorCode.unknown_server_error
            await client.close()

    run(test)


def test_send_with_file_region() -> None:
    async def test() -> None:
        async with running() as (server, _):
            client = await Client.connect(server.port)
            response = await client.call(_heartbeat("send", version=0), 1)
            assert response.error_code == ErrorCode.not_coordinator  # 16
            # Framing is intact afterwards.
            assert (await client.call(_heartbeat("next"), 2)).error_code == ErrorCode.none
            await client.close()

    run(test)



def test_a_response_of_many_small_regions_holds_bounded_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Copied file regions go to the transport in slices, with a drain wait when it is
    full, instead of the whole response being read into memory first (a fetch of a
    thousand partitions)."""
    high_water = 256 * 1024
    buffered: list[int] = []
    ours: set[int] = set()
    real = response_writer._write_all

    def watching(transport: Any, ready: list[Any]) -> int:
        left = real(transport, ready)
        if _peer_port(transport) in ours:  # (as in the test above)
            buffered.append(transport.get_write_buffer_size())
        return left

    monkeypatch.setattr(response_writer, "_write_all", watching)

    async def test() -> None:
        config = NetworkConfig(write_buffer_high_water_bytes=high_water)
        async with running(config) as (server, api):
            chunk = bytes(range(256)) * 240  # 60 KiB: copied, not sent with sendfile
            os.ftruncate(api.fd, 0)
            os.pwrite(api.fd, chunk, 0)
            count = 200  # 12 MiB in all
            client = await Client.connect(server.port)
            ours.add(client.writer.get_extra_info("sockname")[1])
            await client.send(request_frame(_heartbeat(f"regions:{count}", version=0), 7))
            await asyncio.sleep(0.3)  # the client does not read yet: the transport fills
            payload = await client.read_frame()
            assert payload is not None
            assert payload[:4] == struct.pack(">i", 7) and payload[4:6] == b"\x00\x10"
            assert payload[6:] == chunk * count
            await client.close()

    run(test)
    assert len(buffered) > 10
    assert max(buffered) <= high_water + response_writer.COALESCE_BYTES + 64 * 1024


def test_large_file_regions_go_out_zero_copy_between_the_other_answers() -> None:
    """Regions larger than COPY_REGION_BYTES are sent by the writer's sendfile loop: a
    pipeline of a small answer, 6 MiB of regions and another small answer arrives whole
    and in order, and the loop's descriptors are closed afterwards."""
    async def test() -> None:
        async with running() as (server, api):
            chunk = bytes(range(256)) * 4096  # 1 MiB
            os.ftruncate(api.fd, 0)
            os.pwrite(api.fd, chunk, 0)
            fds = server_descriptors(server.port)
            client = await Client.connect(server.port)
            await client.send(request_frame(_heartbeat("first"), 1)
                              + request_frame(_heartbeat("regions:6", version=0), 2)
                              + request_frame(_heartbeat("last"), 3))
            first = await client.read_frame()
            assert first is not None and first[:4] == struct.pack(">i", 1)
            payload = await client.read_frame()
            assert payload is not None
            assert payload[:4] == struct.pack(">i", 2) and payload[4:6] == b"\x00\x10"
            assert payload[6:] == chunk * 6
            last = await client.read_frame()
            assert last is not None and last[:4] == struct.pack(">i", 3)
            await client.close()
            await _until(lambda: not server.connections, "the connection's close")
            assert server_descriptors(server.port) == fds

    run(test)


def test_a_region_past_the_end_of_its_file_closes_the_connection() -> None:
    """The size prefix promised bytes the file does not have: the stream cannot stay
    framed, so the connection closes (and the client never reads a whole frame)."""
    async def test() -> None:
        async with running() as (server, api):
            os.ftruncate(api.fd, 0)
            os.pwrite(api.fd, b"z" * (256 * 1024), 0)
            client = await Client.connect(server.port)
            await client.send(request_frame(_heartbeat("beyond", version=0), 1))
            assert await client.closed_by_server()
            await client.close()

    run(test)


def test_read_backpressure_bounds_in_flight_requests() -> None:
    async def test() -> None:
        async with running(NetworkConfig(queued_max_requests=2)) as (server, api):
            client = await Client.connect(server.port)
            frames = [request_frame(_heartbeat("block"), i) for i in range(6)]
            await client.send(b"".join(frames))
            await asyncio.sleep(0.2)
            (connection,) = server.connections
            assert connection.in_flight == 2
            assert api.started == 2
            api.gate.set()
            for i in range(6):
                payload = await client.read_frame()
                assert payload is not None
                assert decode_response(payload, 12, 4)[0] == i
            assert api.started == 6
            await client.close()

    run(test)


def test_idle_connections_are_closed() -> None:
    async def test() -> None:
        async with running(NetworkConfig(connections_max_idle_ms=200)) as (server, _):
            client = await Client.connect(server.port)
            assert (await client.call(_heartbeat("x"), 1)).error_code == ErrorCode.none
            assert await client.closed_by_server()
            await client.close()

    run(test)


def test_graceful_shutdown_finishes_in_flight_requests() -> None:
    async def test() -> None:
        async with running() as (server, _):
            port = server.port
            client = await Client.connect(port)
            await client.send(request_frame(_heartbeat("sleep:0.3"), 1))
            await asyncio.sleep(0.05)
            await server.stop(timeout=5)
            payload = await client.read_frame()
            assert payload is not None and decode_response(payload, 12, 4)[0] == 1
            assert await client.closed_by_server()
            with pytest.raises(OSError):
                await asyncio.open_connection("127.0.0.1", port)
            await client.close()

    run(test)


def test_shutdown_timeout_cancels_stuck_handlers() -> None:
    async def test() -> None:
        async with running() as (server, _):
            client = await Client.connect(server.port)
            await client.send(request_frame(_heartbeat("block"), 1))
            await asyncio.sleep(0.05)
            await server.stop(timeout=0.2)
            assert await client.closed_by_server()
            await client.close()

    run(test)


def test_a_shutdown_that_times_out_names_the_connections_it_waited_for(
        caplog: pytest.LogCaptureFixture) -> None:
    async def test() -> None:
        async with running() as (server, _):
            client = await Client.connect(server.port)
            await client.send(request_frame(_heartbeat("block"), 1))
            await asyncio.sleep(0.05)
            with caplog.at_level("WARNING", logger="odradek.server.network"):
                await server.stop(timeout=0.2)
            await client.close()

    run(test)
    [warning] = [r.getMessage() for r in caplog.records if "timed out" in r.getMessage()]
    assert warning.startswith("shutdown timed out after 0.2 s; aborting 1 connections: ")
    assert "-127.0.0.1:" in warning and "1 request(s) in flight" in warning, warning


def test_half_closed_client_gets_its_answers() -> None:
    async def test() -> None:
        async with running() as (server, _):
            client = await Client.connect(server.port)
            frames = [request_frame(_heartbeat("sleep:0.05"), i) for i in range(3)]
            await client.send(b"".join(frames))
            client.writer.write_eof()
            for i in range(3):
                payload = await client.read_frame()
                assert payload is not None and decode_response(payload, 12, 4)[0] == i
            assert await client.closed_by_server()
            await client.close()

    run(test)


def test_a_closed_client_behind_a_parked_request_is_let_go_after_the_idle_time() -> None:
    """A client that sent a request which parks (here: until the gate opens) and closed
    its side does not hold its connection longer than connections.max.idle.ms."""

    async def test() -> None:
        async with running(NetworkConfig(connections_max_idle_ms=300)) as (server, api):
            client = await Client.connect(server.port)
            await client.send(request_frame(_heartbeat("block"), 1))
            client.writer.write_eof()
            assert await client.closed_by_server()
            assert api.started == 1 and not api.gate.is_set()  # closed before its answer
            deadline = asyncio.get_running_loop().time() + 5
            while server.connections or server.quotas.total:
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.01)
            await client.close()

    run(test)


def test_serial_registration_runs_requests_one_at_a_time() -> None:
    async def test() -> None:
        log: list[str] = []

        async def slow_then_fast(ctx: RequestContext, request: Any) -> Any:
            log.append(f"start {request.group_id}")
            if request.group_id == "slow":
                await asyncio.sleep(0.2)
            log.append(f"end {request.group_id}")
            return _heartbeat_response(ctx.api_version, ErrorCode.none)

        registry = HandlerRegistry()
        registry.register(ApiKey.HEARTBEAT, 0, 4, slow_then_fast, serial=True)
        async with KafkaServer(registry, "127.0.0.1", 0) as server:
            client = await Client.connect(server.port)
            await client.send(
                request_frame(_heartbeat("slow"), 1) + request_frame(_heartbeat("fast"), 2)
            )
            for i in (1, 2):
                payload = await client.read_frame()
                assert payload is not None and decode_response(payload, 12, 4)[0] == i
            assert log == ["start slow", "end slow", "start fast", "end fast"]
            await client.close()

    run(test)


def _stub_metadata(port: int) -> Callable[[RequestContext, Any], Awaitable[Any]]:
    """A test-only Metadata answer (this broker, no topics) so real clients can bootstrap."""

    async def metadata(ctx: RequestContext, request: Any) -> Any:
        module = importlib.import_module(f"kio.schema.metadata.v{ctx.api_version}.response")
        response_type = module.MetadataResponse
        broker = module.MetadataResponseBroker(node_id=i32(0), host="127.0.0.1", port=i32(port))
        values: dict[str, Any] = {
            "throttle_time": datetime.timedelta(0),
            "brokers": (broker,),
            "cluster_id": "odradek-test",
            "controller_id": i32(0),
            "topics": (),
            "cluster_authorized_operations": i32(-(2**31)),
        }
        names = {f.name for f in dataclasses.fields(response_type)}
        return response_type(**{k: v for k, v in values.items() if k in names})

    return metadata


def test_kafka_python_handshake() -> None:
    kafka_compat = pytest.importorskip("kafka.net.compat")

    async def test() -> None:
        async with running() as (server, _):
            server.registry.register(ApiKey.METADATA, 0, 12, _stub_metadata(server.port))

            def check() -> Any:
                client = kafka_compat.KafkaNetClient(
                    bootstrap_servers=f"127.0.0.1:{server.port}", request_timeout_ms=5000
                )
                try:
                    return client.check_version(timeout_ms=5000)
                finally:
                    client.close()

            version = await asyncio.get_running_loop().run_in_executor(None, check)
            # kafka-python infers a broker version from the advertised API table; with only
            # three APIs it is an old one, but the ApiVersions handshake has completed.
            assert isinstance(version, tuple) and version >= (0, 10)

    run(test)


def test_confluent_kafka_admin_handshake() -> None:
    confluent_admin = pytest.importorskip("confluent_kafka.admin")

    async def test() -> None:
        async with running() as (server, _):
            server.registry.register(ApiKey.METADATA, 0, 12, _stub_metadata(server.port))

            def list_topics() -> Any:
                admin = confluent_admin.AdminClient(
                    {"bootstrap.servers": f"127.0.0.1:{server.port}", "log_level": 3}
                )
                return admin.list_topics(timeout=5)

            metadata = await asyncio.get_running_loop().run_in_executor(None, list_topics)
            assert metadata.cluster_id == "odradek-test"
            assert list(metadata.brokers) == [0]

    run(test)


def test_start_eagerly_runs_a_handler_up_to_its_first_wait() -> None:
    """Handlers that never wait finish inside dispatch, without a task; one that waits
    goes on in a task from where it stopped (futures, bare yields, errors, cancel)."""

    async def test() -> None:
        loop = asyncio.get_running_loop()
        steps: list[str] = []

        async def immediate() -> bytes:
            steps.append("immediate")
            return b"now"

        tasks_before = len(asyncio.all_tasks())
        done = start_eagerly(loop, immediate())
        assert done.done() and done.result() == b"now" and steps == ["immediate"]
        assert len(asyncio.all_tasks()) == tasks_before  # no task was made

        gate: asyncio.Future[bytes] = loop.create_future()

        async def waits() -> bytes:
            steps.append("before")
            await asyncio.sleep(0)  # a bare yield first
            got = await gate
            steps.append("after")
            return got + b"!"

        pending = start_eagerly(loop, waits())
        assert steps[-1] == "before" and not pending.done()
        gate.set_result(b"later")
        assert await pending == b"later!" and steps[-1] == "after"

        async def fails_later() -> bytes:
            await asyncio.sleep(0)
            raise ValueError("boom")

        with pytest.raises(ValueError, match="boom"):
            await start_eagerly(loop, fails_later())

        async def fails_now() -> bytes:
            raise ValueError("at once")

        failed = start_eagerly(loop, fails_now())
        assert failed.done() and isinstance(failed.exception(), ValueError)

        cleaned: list[bool] = []

        async def blocks() -> bytes:
            try:
                await asyncio.Event().wait()
            finally:
                cleaned.append(True)
            return b""

        stuck = start_eagerly(loop, blocks())
        await asyncio.sleep(0)
        stuck.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stuck
        assert cleaned == [True]

    run(test)


async def _until(condition: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def _no_answer_within(client: Client, seconds: float) -> None:
    """Nothing arrives for ``seconds`` (the bound holds the request back)."""
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(client.reader.readexactly(1), seconds)


def test_queued_max_request_bytes_pauses_every_connection() -> None:
    """queued.max.request.bytes is broker-wide: while one connection's Produce holds the
    pool (its records, while its handler runs: Kafka's requiresDelayedAllocation), another
    connection's request is not read; it is once the Produce is done. Any other request
    gives its bytes back as soon as it is read (a parked Fetch holds nothing of the pool:
    test_request_memory's parked-request tests)."""
    from kio.schema.produce.v9.request import ProduceRequest
    from kio.schema.produce.v9.response import ProduceResponse
    from kio.static.primitive import i16

    async def test() -> None:
        async with running(NetworkConfig(queued_max_request_bytes=1)) as (server, api):
            async def produce(ctx: RequestContext, request: Any) -> Any:
                api.started += 1
                await api.gate.wait()
                return ProduceResponse(responses=(), throttle_time=datetime.timedelta(0))

            server.registry.register(ApiKey.PRODUCE, 9, 9, produce)
            first = await Client.connect(server.port)
            await first.send(request_frame(ProduceRequest(
                transactional_id=None, acks=i16(1), timeout=datetime.timedelta(seconds=5),
                topic_data=()), 1))
            await _until(lambda: api.started == 1, "the blocking Produce")
            assert server.memory_pool is not None and server.memory_pool.exhausted
            second = await Client.connect(server.port)
            await second.send(request_frame(_heartbeat("ok"), 2))
            await _no_answer_within(second, 0.5)
            assert api.completed == []
            api.gate.set()
            assert (await first.read_frame()) is not None
            payload = await second.read_frame()
            assert payload is not None and decode_response(payload, 12, 4)[0] == 2
            await _until(lambda: server.memory_pool is not None
                         and server.memory_pool.used == 0, "the pool to empty")
            await first.close()
            await second.close()

    run(test)


def test_a_connection_holds_at_most_socket_request_max_bytes_in_flight() -> None:
    async def test() -> None:
        frame = request_frame(_heartbeat("block"), 0)
        size = len(frame) - 4  # what the server holds: the frame without its length
        config = NetworkConfig(socket_request_max_bytes=3 * size + 1)
        async with running(config) as (server, api):
            client = await Client.connect(server.port)
            await client.send(b"".join(request_frame(_heartbeat("block"), i) for i in range(6)))
            await _until(lambda: api.started == 4, "four requests")  # 4 x size >= the bound
            await _no_answer_within(client, 0.3)
            assert api.started == 4
            (connection,) = server.connections
            assert connection.in_flight == 4
            api.gate.set()
            for i in range(6):
                payload = await client.read_frame()
                assert payload is not None and decode_response(payload, 12, 4)[0] == i
            assert api.started == 6
            await client.close()

    run(test)


def test_throttle_mutes_the_connection_for_the_throttle_time() -> None:
    """KIP-219: after a handler throttles its connection, the response goes out at once and
    nothing more is read from that connection until the throttle time has passed."""
    async def test() -> None:
        async with running() as (server, _api):
            client = await Client.connect(server.port)
            await client.call(_heartbeat("ok"), 1)
            (connection,) = server.connections
            loop = asyncio.get_running_loop()
            connection.throttle(2000)
            started = loop.time()
            muted = asyncio.ensure_future(client.call(_heartbeat("after"), 2))
            other = await Client.connect(server.port)  # other connections are not muted
            await other.call(_heartbeat("other"), 3)
            assert not muted.done()
            response = await muted
            assert response.error_code == ErrorCode.none
            assert loop.time() - started >= 1.95
            await client.close()
            await other.close()

    run(test)
