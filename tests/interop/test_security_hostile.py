"""What a client cannot do to a secured broker (issue 47, item 5), over real sockets: make
the SCRAM credential store's failure an UNKNOWN_SERVER_ERROR answered at once, or
renegotiate TLS 1.2; and a SASL_SSL client's certificate, which the mapping rules do not
judge there."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest as HandshakeV1

from odradek.protocol.errors import ErrorCode
from odradek.server import broker as broker_module
from odradek.testing import RunningBroker
from tests.protocol.wire import decode_response, request_frame

from ._security import Certs, bootstrap, confluent_settings, principals, secure_broker, server

pytestmark = pytest.mark.interop

DEADLINE = 15.0


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningBroker, Certs]]:
    with secure_broker(tmp_path_factory.mktemp("security-hostile")) as pair:
        yield pair


def _read_frame(sock: socket.socket) -> bytes | None:
    data = b""
    while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    return data[4:]


def _call(sock: socket.socket, request: Any, api_key: int, version: int,
          correlation_id: int) -> Any:
    sock.sendall(request_frame(request, correlation_id))
    payload = _read_frame(sock)
    assert payload is not None, "connection closed"
    corr, response = decode_response(payload, api_key, version)
    assert corr == correlation_id
    return response


def test_a_failing_credential_store_is_an_ordinary_failed_authentication(
    secure: tuple[RunningBroker, Certs], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The store cannot be read (ZooKeeper gone, a broken node): Kafka's ScramSaslServer
    answers "credentials could not be obtained" as invalid credentials, after the
    failed-authentication delay, and closes; no UNKNOWN_SERVER_ERROR, no traceback."""
    broker, _ = secure

    def broken(store: Any, mechanism: str, user: str) -> str | None:
        raise OSError("the credential store is unreachable")

    monkeypatch.setattr(broker_module, "scram_credential", broken)
    port = server(broker, "SASL_PLAINTEXT").port
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(DEADLINE)
        assert _call(sock, HandshakeV1(mechanism="SCRAM-SHA-256"), 17, 1, 1
                     ).error_code == ErrorCode.none
        started = time.monotonic()
        answer = _call(sock, SaslAuthenticateRequest(auth_bytes=b"n,,n=alice,r=abcdef"),
                       36, 1, 2)
        waited = time.monotonic() - started
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert answer.error_message == (
            "Authentication failed during authentication due to invalid credentials with "
            "SASL mechanism SCRAM-SHA-256")
        assert waited >= 0.1  # connection.failed.authentication.delay.ms
        assert _read_frame(sock) is None
    assert not [r for r in caplog.records if r.exc_info]


def test_tls_1_2_client_renegotiation_is_refused(secure: tuple[RunningBroker, Certs]) -> None:
    """A client asking for renegotiation (openssl s_client's ``R``) is answered with the
    no_renegotiation alert: a renegotiation per request is a cheap way to make the broker
    burn CPU. (OpenSSL 3 servers refuse it by default; the listener's context refuses it
    with any OpenSSL, see tests/security/test_tls.py.)"""
    broker, certs = secure
    port = server(broker, "SSL").port
    process = subprocess.run(
        ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-tls1_2",
         "-CAfile", str(certs.ca), "-no_ign_eof"],
        input=b"R\n", capture_output=True, timeout=DEADLINE)
    out = process.stdout.decode(errors="replace") + process.stderr.decode(errors="replace")
    assert "Verification: OK" in out and "RENEGOTIATING" in out, out
    assert "no renegotiation" in out, out


def test_on_sasl_ssl_the_certificate_mapping_rules_do_not_judge_the_client(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The principal of a SASL_SSL connection comes from SASL (Kafka's
    SaslServerAuthenticator): a client certificate no mapping rule matches does not close
    the connection."""
    rules = "RULE:^CN=nobody$/nobody/"
    with secure_broker(tmp_path_factory.mktemp("sasl-ssl-rules"), **{
        "listener.name.sasl_ssl.ssl.client.auth": "required",
        "listener.name.sasl_ssl.ssl.principal.mapping.rules": rules,
    }) as (broker, certs):
        errors: list[Any] = []

        def on_error(error: KafkaError) -> None:
            errors.append(error)

        producer = Producer({
            "bootstrap.servers": bootstrap(broker, "SASL_SSL"), "message.timeout.ms": 5000,
            "error_cb": on_error, "ssl.certificate.location": str(certs.client_cert),
            "ssl.key.location": str(certs.client_key),
            **confluent_settings(certs, "SASL_SSL")})
        delivered: list[Any] = []
        producer.produce("sasl-ssl-rules", b"x",
                         on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(DEADLINE) == 0
        assert delivered == [None], errors
        assert errors == []
        assert principals(broker, "SASL_SSL") == {"User:alice"}
