"""Re-authentication (KIP-368, issue 47 item 6) with ``connections.max.reauth.ms``: the
broker closes a connection whose session ended only when a request other than
SaslHandshake / SaslAuthenticate arrives after it (requests in flight are answered);
Odradek's own client re-authenticates before its session ends, as librdkafka and the Java
client do; with no session lifetime, re-authentication is refused (ILLEGAL_SASL_STATE).
Over real sockets, against an in-process broker."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.metadata.v1.request import MetadataRequest
from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from odradek.client.connection import BrokerConnection, ClientError
from odradek.client.security import ClientSecurity
from odradek.protocol.errors import ErrorCode
from odradek.server.network import KafkaServer
from odradek.testing import RunningBroker, running_broker
from tests._deadlines import expired
from tests.protocol.wire import decode_response, request_frame

JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        'user_alice="alice-secret";')
LIFETIME_MS = 1500
SECURITY = ClientSecurity(protocol="SASL_PLAINTEXT", mechanism="PLAIN", username="alice",
                          password="alice-secret")


def _broker(**extra: str) -> Any:
    return running_broker(overrides={
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS, **extra})


@pytest.fixture(scope="module")
def reauth() -> Iterator[RunningBroker]:
    with _broker(**{"connections.max.reauth.ms": str(LIFETIME_MS)}) as broker:
        yield broker


@pytest.fixture(scope="module")
def no_reauth() -> Iterator[RunningBroker]:
    with _broker() as broker:
        yield broker


def _sasl(broker: RunningBroker) -> KafkaServer:
    return next(s for s in broker.broker.servers if s.security.name == "SASL_PLAINTEXT")


def _read_frame(sock: socket.socket) -> bytes | None:
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        data += chunk
    return data[4:]


def _call(sock: socket.socket, request: Any, key: int, version: int, cid: int) -> Any:
    sock.sendall(request_frame(request, cid))
    payload = _read_frame(sock)
    assert payload is not None, "connection closed"
    got, response = decode_response(payload, key, version)
    assert got == cid
    return response


def _authenticate(sock: socket.socket, cid: int) -> Any:
    assert _call(sock, SaslHandshakeRequest(mechanism="PLAIN"), 17, 1, cid).error_code == 0
    response = _call(sock, SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"),
                     36, 1, cid + 1)
    assert response.error_code == ErrorCode.none
    return response


def _wait_past(deadline: float) -> None:
    """Wait until the monotonic clock passes ``deadline`` (a session's end)."""
    while time.monotonic() <= deadline:
        time.sleep(min(0.05, max(deadline - time.monotonic(), 0.001)))


def test_an_expired_session_is_closed_at_its_next_request_not_before(
    reauth: RunningBroker,
) -> None:
    stats = _sasl(reauth).security.stats
    killed = stats.expired_connections_killed
    with socket.create_connection(("127.0.0.1", _sasl(reauth).port), timeout=15) as sock:
        authenticated = time.monotonic()
        assert _authenticate(sock, 1).session_lifetime.total_seconds() == 1.5
        _wait_past(authenticated + LIFETIME_MS / 1000 + 0.3)
        # still open: a re-authentication after the end is accepted, then served
        _authenticate(sock, 3)
        assert _call(sock, MetadataRequest(topics=None), 3, 1, 5).brokers
        authenticated = time.monotonic()
        _wait_past(authenticated + LIFETIME_MS / 1000 + 0.3)
        sock.sendall(request_frame(MetadataRequest(topics=None), 6))
        assert _read_frame(sock) is None  # a request after the end: closed, unanswered
    assert stats.expired_connections_killed == killed + 1


def test_no_reauthentication_without_a_session_lifetime(no_reauth: RunningBroker) -> None:
    with socket.create_connection(("127.0.0.1", _sasl(no_reauth).port), timeout=15) as sock:
        assert _authenticate(sock, 1).session_lifetime.total_seconds() == 0
        again = _call(sock, SaslHandshakeRequest(mechanism="PLAIN"), 17, 1, 3)
        assert again.error_code == ErrorCode.illegal_sasl_state
        assert _call(sock, MetadataRequest(topics=None), 3, 1, 4).brokers  # still served


def test_the_own_client_reauthenticates_before_its_session_ends(
    reauth: RunningBroker,
) -> None:
    stats = _sasl(reauth).security.stats
    before = stats.successful_reauthentication

    async def run() -> int:
        conn = await BrokerConnection.open(f"127.0.0.1:{_sasl(reauth).port}",
                                           security=SECURITY)
        try:
            started = time.monotonic()
            module = __import__("kio.schema.metadata.v1.request", fromlist=["x"])
            while conn.reauthentications < 2 and not expired(started, 20):
                # requests keep going across the re-authentications, pipelined
                answers = await asyncio.gather(*(conn.send(module.MetadataRequest(topics=None))
                                                 for _ in range(5)))
                assert all(a.brokers for a in answers)
                await asyncio.sleep(0.05)
            return conn.reauthentications
        finally:
            await conn.close()

    try:
        done = asyncio.run(run())
    except ClientError as e:
        raise AssertionError(f"the connection failed: {e}") from e
    assert done >= 2
    assert stats.successful_reauthentication - before >= 2


def test_a_failed_reauthentication_is_counted_as_such(reauth: RunningBroker) -> None:
    """Kafka's Selector: a failure on a connection that has authenticated before is a
    failed re-authentication (failed-reauthentication-total), not a failed
    authentication; a successful one records its latency (reauthentication-latency-*)."""
    stats = _sasl(reauth).security.stats
    failed, failed_reauth = stats.failed, stats.failed_reauthentication
    latencies = stats.reauthentication_latency_count
    with socket.create_connection(("127.0.0.1", _sasl(reauth).port), timeout=15) as sock:
        _authenticate(sock, 1)
        _authenticate(sock, 3)  # a successful re-authentication: its latency recorded
        assert stats.reauthentication_latency_count == latencies + 1
        assert 0 <= stats.reauthentication_latency_max_ms < 15_000
        assert _call(sock, SaslHandshakeRequest(mechanism="PLAIN"), 17, 1, 5).error_code == 0
        wrong = _call(sock, SaslAuthenticateRequest(auth_bytes=b"\0alice\0wrong"), 36, 1, 6)
        assert wrong.error_code == ErrorCode.sasl_authentication_failed
        assert _read_frame(sock) is None  # then closed
    assert stats.failed_reauthentication == failed_reauth + 1
    assert stats.failed == failed
