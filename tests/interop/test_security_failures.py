"""Authentication that fails, and the broker staying healthy: a wrong password, an unknown
user, a client certificate from another CA, a plaintext client on a TLS port, requests
before authentication, SASL out of turn; the failure delay; re-authentication
(KIP-368); the SaslHandshake v0 flow (raw tokens)."""

from __future__ import annotations

import logging
import socket
import struct
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v1.request import MetadataRequest
from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as HandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest as HandshakeV1

from odradek.protocol.errors import ErrorCode
from odradek.testing import RunningBroker
from tests._deadlines import expired
from tests.protocol.wire import decode_response, request_frame

from ._security import (
    USERS,
    Certs,
    bootstrap,
    confluent_settings,
    secure_broker,
    server,
    stats,
)

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningBroker, Certs]]:
    with secure_broker(tmp_path_factory.mktemp("security-failures"),
                       **{"metrics.listener": "http://127.0.0.1:0"}) as pair:
        yield pair


def _attempt(broker: RunningBroker, certs: Certs, listener: str, **settings: str) -> list[Any]:
    """Produce one record with these settings; the client's errors (empty: it worked)."""
    errors: list[Any] = []

    def on_error(error: KafkaError) -> None:
        errors.append(error)

    conf = {"bootstrap.servers": bootstrap(broker, listener), "message.timeout.ms": 1500,
            "error_cb": on_error, **settings}
    producer = Producer(conf)
    producer.produce("failures", b"x")
    left = producer.flush(10)
    if left:
        errors.append(f"{left} message(s) not delivered")
    return errors


def _works(broker: RunningBroker, certs: Certs, listener: str, mechanism: str = "PLAIN") -> None:
    assert _attempt(broker, certs, listener, **confluent_settings(
        certs, listener, mechanism)) == []


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize(("user", "password"), [("alice", "wrong-password"),
                                                ("nobody", "nobody-password")],
                         ids=["wrong-password", "unknown-user"])
def test_bad_credentials_fail_and_the_broker_stays_healthy(
    secure: tuple[RunningBroker, Certs], caplog: pytest.LogCaptureFixture, listener: str,
    mechanism: str, user: str, password: str,
) -> None:
    broker, certs = secure
    before = stats(broker, listener)["failed"]
    with caplog.at_level(logging.DEBUG, logger="odradek"):
        errors = _attempt(broker, certs, listener, **confluent_settings(
            certs, listener, mechanism, user=user, password=password))
    auth = [e for e in errors if isinstance(e, KafkaError)
            and e.code() == KafkaError._AUTHENTICATION]
    assert auth, errors
    expected = ("Authentication failed: Invalid username or password" if mechanism == "PLAIN"
                else "Authentication failed during authentication due to invalid credentials "
                     f"with SASL mechanism {mechanism}")
    assert expected in auth[0].str()
    assert stats(broker, listener)["failed"] > before
    assert password not in caplog.text and password not in auth[0].str()
    _works(broker, certs, listener, mechanism)  # a good client still gets in


def test_client_certificate_from_another_ca(secure: tuple[RunningBroker, Certs]) -> None:
    broker, certs = secure
    before = stats(broker, "MTLS")["failed"]
    errors = _attempt(broker, certs, "MTLS", **{
        **confluent_settings(certs, "MTLS"), "ssl.certificate.location": str(certs.other_cert),
        "ssl.key.location": str(certs.other_key)})
    assert any(isinstance(e, KafkaError) and e.code() in (
        KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
        for e in errors), errors
    started = time.monotonic()
    while stats(broker, "MTLS")["failed"] == before and not expired(started, 10):
        time.sleep(0.05)
    assert stats(broker, "MTLS")["failed"] > before
    _works(broker, certs, "MTLS")


def test_no_client_certificate_on_mutual_tls(secure: tuple[RunningBroker, Certs]) -> None:
    broker, certs = secure
    errors = _attempt(broker, certs, "MTLS", **{"security.protocol": "SSL",
                                                "ssl.ca.location": str(certs.ca)})
    assert errors
    _works(broker, certs, "MTLS")


@pytest.mark.parametrize("listener", ["SSL", "SASL_SSL"])
def test_plaintext_client_on_a_tls_port(
    secure: tuple[RunningBroker, Certs], caplog: pytest.LogCaptureFixture, listener: str
) -> None:
    broker, certs = secure
    with caplog.at_level(logging.DEBUG, logger="odradek.server.network"):
        errors = _attempt(broker, certs, listener)  # PLAINTEXT settings
        assert errors
        started = time.monotonic()
        while "SSL handshake failed" not in caplog.text and not expired(started, 10):
            time.sleep(0.05)
    assert "SSL handshake failed" in caplog.text
    # and raw garbage: the handshake fails, the broker goes on
    with socket.create_connection(("127.0.0.1", server(broker, listener).port)) as sock:
        sock.sendall(b"\x00\x00\x00\x10not a tls hello!")
        sock.settimeout(10)
        assert _read_all(sock) == b""
    _works(broker, certs, listener, "SCRAM-SHA-256")


def test_authentications_are_in_the_metrics(secure: tuple[RunningBroker, Certs]) -> None:
    broker, certs = secure
    _works(broker, certs, "SASL_PLAINTEXT")
    _attempt(broker, certs, "SASL_PLAINTEXT", **confluent_settings(
        certs, "SASL_PLAINTEXT", password="wrong"))
    server_ = broker.broker.metrics_server
    assert server_ is not None
    with urllib.request.urlopen(server_.url, timeout=10) as response:
        page = response.read().decode()
    samples = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
               for line in page.splitlines() if line and not line.startswith("#")}
    prefix = "kafka_server_socket_server_metrics_"
    assert samples[f'{prefix}failed_authentication_total{{listener="SASL_PLAINTEXT"}}'] >= 1
    assert samples[f'{prefix}successful_authentication_total{{listener="SASL_PLAINTEXT"}}'] >= 1
    assert "wrong" not in page


# -- raw SASL exchanges ---------------------------------------------------------------------
def _read_all(sock: socket.socket) -> bytes:
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def _read_frame(sock: socket.socket) -> bytes | None:
    header = b""
    while len(header) < 4:
        chunk = sock.recv(4 - len(header))
        if not chunk:
            return None
        header += chunk
    (size,) = struct.unpack(">i", header)
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return body


def _call(sock: socket.socket, request: Any, api_key: int, version: int,
          correlation_id: int = 1) -> Any:
    sock.sendall(request_frame(request, correlation_id))
    payload = _read_frame(sock)
    assert payload is not None, "connection closed"
    corr, response = decode_response(payload, api_key, version)
    assert corr == correlation_id
    return response


def _sasl_socket(broker: RunningBroker) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server(broker, "SASL_PLAINTEXT").port))
    sock.settimeout(15)
    return sock


def _plain_token(user: str, password: str) -> bytes:
    return f"\0{user}\0{password}".encode()


def test_only_api_versions_and_sasl_before_authentication(
    secure: tuple[RunningBroker, Certs]
) -> None:
    broker, certs = secure
    with _sasl_socket(broker) as sock:
        versions = _call(sock, ApiVersionsRequest(client_software_name="t",
                                                  client_software_version="1"), 18, 3)
        assert versions.error_code == ErrorCode.none
        assert {k.api_key for k in versions.api_keys} >= {17, 36, 50, 51}
        sock.sendall(request_frame(MetadataRequest(topics=None), 2))
        assert _read_frame(sock) is None  # closed, unanswered (Kafka's behaviour)
    _works(broker, certs, "SASL_PLAINTEXT")


def test_sasl_handshake_on_a_plaintext_listener_is_illegal_state(
    secure: tuple[RunningBroker, Certs]
) -> None:
    broker, _ = secure
    with socket.create_connection(("127.0.0.1", server(broker, "PLAINTEXT").port)) as sock:
        sock.settimeout(15)
        response = _call(sock, HandshakeV1(mechanism="PLAIN"), 17, 1)
        assert response.error_code == ErrorCode.illegal_sasl_state
        authenticate = _call(sock, SaslAuthenticateRequest(auth_bytes=b"x"), 36, 1, 2)
        assert authenticate.error_code == ErrorCode.illegal_sasl_state


def test_unsupported_mechanism_lists_the_enabled_ones(
    secure: tuple[RunningBroker, Certs]
) -> None:
    broker, _ = secure
    with _sasl_socket(broker) as sock:
        response = _call(sock, HandshakeV1(mechanism="GSSAPI"), 17, 1)
        assert response.error_code == ErrorCode.unsupported_sasl_mechanism
        assert response.mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
        assert _read_frame(sock) is None


def test_authenticate_before_handshake_is_illegal_state(
    secure: tuple[RunningBroker, Certs]
) -> None:
    broker, _ = secure
    with _sasl_socket(broker) as sock:
        response = _call(sock, SaslAuthenticateRequest(auth_bytes=b"x"), 36, 1)
        assert response.error_code == ErrorCode.illegal_sasl_state
        assert _read_frame(sock) is None


def test_failed_authentication_is_answered_after_the_delay(
    secure: tuple[RunningBroker, Certs]
) -> None:
    broker, _ = secure
    with _sasl_socket(broker) as sock:
        assert _call(sock, HandshakeV1(mechanism="PLAIN"), 17, 1).error_code == 0
        started = time.monotonic()
        response = _call(sock, SaslAuthenticateRequest(
            auth_bytes=_plain_token("alice", "nope")), 36, 1, 2)
        waited = time.monotonic() - started
        assert response.error_code == ErrorCode.sasl_authentication_failed
        assert response.error_message == "Authentication failed: Invalid username or password"
        assert waited >= 0.1  # connection.failed.authentication.delay.ms, Kafka's 100
        assert _read_frame(sock) is None


def test_authenticated_raw_connection_is_served(secure: tuple[RunningBroker, Certs]) -> None:
    broker, _ = secure
    with _sasl_socket(broker) as sock:
        assert _call(sock, HandshakeV1(mechanism="PLAIN"), 17, 1).error_code == 0
        response = _call(sock, SaslAuthenticateRequest(
            auth_bytes=_plain_token("bob", USERS["bob"])), 36, 1, 2)
        assert response.error_code == ErrorCode.none
        assert response.session_lifetime.total_seconds() == 0  # no connections.max.reauth.ms
        assert "User:bob" in {c.principal for c in server(broker, "SASL_PLAINTEXT").connections}
        metadata = _call(sock, MetadataRequest(topics=None), 3, 1, 3)
        assert [b.port for b in metadata.brokers] == [server(broker, "SASL_PLAINTEXT").port]
        again = _call(sock, HandshakeV1(mechanism="SCRAM-SHA-256"), 17, 1, 4)
        assert again.error_code == ErrorCode.illegal_sasl_state  # another mechanism


def test_sasl_handshake_v0_raw_tokens(secure: tuple[RunningBroker, Certs]) -> None:
    """The pre-KIP-152 flow: after SaslHandshake v0 the tokens go raw, size-prefixed."""
    broker, _ = secure
    with _sasl_socket(broker) as sock:
        handshake = _call(sock, HandshakeV0(mechanism="PLAIN"), 17, 0)
        assert handshake.error_code == ErrorCode.none
        token = _plain_token("alice", USERS["alice"])
        sock.sendall(struct.pack(">i", len(token)) + token)
        assert _read_frame(sock) == b""  # PLAIN's empty answer
        metadata = _call(sock, MetadataRequest(topics=None), 3, 1, 2)
        assert len(metadata.brokers) == 1
    with _sasl_socket(broker) as sock:
        assert _call(sock, HandshakeV0(mechanism="PLAIN"), 17, 0).error_code == 0
        token = _plain_token("alice", "nope")
        sock.sendall(struct.pack(">i", len(token)) + token)
        assert _read_frame(sock) is None  # v0: a failure just closes


# -- KIP-368 ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def reauth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningBroker, Certs]]:
    with secure_broker(tmp_path_factory.mktemp("reauth"),
                       **{"connections.max.reauth.ms": "1500"}) as pair:
        yield pair


def test_clients_reauthenticate_and_keep_working(reauth: tuple[RunningBroker, Certs]) -> None:
    broker, certs = reauth
    producer = Producer({"bootstrap.servers": bootstrap(broker, "SASL_SSL"),
                         **confluent_settings(certs, "SASL_SSL", "SCRAM-SHA-256")})
    started = time.monotonic()
    sent = 0
    while stats(broker, "SASL_SSL")["reauth"] < 2 and not expired(started, 20):
        producer.produce("reauth", b"x")
        assert producer.flush(10) == 0
        sent += 1
        time.sleep(0.2)
    assert stats(broker, "SASL_SSL")["reauth"] >= 2, stats(broker, "SASL_SSL")
    producer.produce("reauth", b"last")
    assert producer.flush(10) == 0


def test_session_expiry_closes_a_connection_that_does_not_reauthenticate(
    reauth: tuple[RunningBroker, Certs]
) -> None:
    broker, _ = reauth
    with _sasl_socket(broker) as sock:
        assert _call(sock, HandshakeV1(mechanism="PLAIN"), 17, 1).error_code == 0
        response = _call(sock, SaslAuthenticateRequest(
            auth_bytes=_plain_token("alice", USERS["alice"])), 36, 1, 2)
        assert response.session_lifetime.total_seconds() == 1.5
        ends = time.monotonic() + 1.5
        while time.monotonic() < ends + 0.2:  # past the session's end: still open
            time.sleep(0.05)
        # Kafka closes an expired session at its next request (not a re-authentication)
        sock.sendall(request_frame(MetadataRequest(topics=None), 3))
        assert _read_frame(sock) is None


# -- KIP-554 ------------------------------------------------------------------------------
def test_scram_credentials_admin_errors_and_deletion(secure: tuple[RunningBroker, Certs]) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    broker, certs = secure
    admin = AdminClient({"bootstrap.servers": bootstrap(broker, "PLAINTEXT")})

    def error_of(future: Any) -> Any:
        try:
            future.result(30)
        except KafkaException as exc:
            return exc.args[0]
        return None

    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("carol", ScramCredentialInfo(
            ScramMechanism.SCRAM_SHA_256, 100), b"carol-secret"),
        UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_512),
        UserScramCredentialUpsertion("erin", ScramCredentialInfo(
            ScramMechanism.SCRAM_SHA_256, 8192), b"erin-secret"),
    ])
    too_few = error_of(futures["carol"])
    assert too_few.code() == KafkaError.UNACCEPTABLE_CREDENTIAL and "iterations" in too_few.str()
    assert error_of(futures["dave"]).code() == KafkaError.RESOURCE_NOT_FOUND
    assert error_of(futures["erin"]) is None
    described = admin.describe_user_scram_credentials(["erin"])["erin"].result(30)
    assert [(c.mechanism, c.iterations) for c in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)]
    unknown = admin.describe_user_scram_credentials(["nobody"])["nobody"]
    assert error_of(unknown).code() == KafkaError.RESOURCE_NOT_FOUND
    assert _attempt(broker, certs, "SASL_PLAINTEXT", **confluent_settings(
        certs, "SASL_PLAINTEXT", "SCRAM-SHA-256", user="erin", password="erin-secret")) == []
    # deleted: the next authentication fails
    deleted = admin.alter_user_scram_credentials([
        UserScramCredentialDeletion("erin", ScramMechanism.SCRAM_SHA_256)])["erin"]
    assert error_of(deleted) is None
    assert _attempt(broker, certs, "SASL_PLAINTEXT", **confluent_settings(
        certs, "SASL_PLAINTEXT", "SCRAM-SHA-256", user="erin", password="erin-secret"))
