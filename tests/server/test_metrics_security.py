"""Locking the metrics page (``metrics.listener``): TLS (``https://``, the
``metrics.ssl.*`` keys, mutual TLS), HTTP basic auth from ``metrics.basic.auth.file`` as a
Prometheus scrape config's ``basic_auth`` sends it, loopback for an empty host, and the
start-up refusals. A real broker serves the page; it is read over real sockets with
urllib and parsed with ``prometheus_client``'s own text parser; certificates are made
here with trustme."""

from __future__ import annotations

import base64
import http.client
import logging
import socket
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from email.message import Message
from pathlib import Path

import pytest
import trustme
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from prometheus_client.parser import text_string_to_metric_families

from odradek.server.config import parse_metrics_listener
from odradek.testing import RunningBroker, running_broker

USER, PASSWORD = "prometheus", "s3cret-scrape-pw"
TOPIC = "locked-metrics"


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def pki(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("metrics-tls")
    ca.issue_cert("localhost", "127.0.0.1").private_key_and_cert_chain_pem.write_to_path(
        str(d / "server.pem"))
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    ca.issue_cert("scraper", common_name="scraper").private_key_and_cert_chain_pem \
        .write_to_path(str(d / "client.pem"))
    users = d / "users"
    users.write_text(f"# who may scrape\n{USER}:{PASSWORD}\n\nother:pw:with:colons\n")
    users.chmod(0o600)
    return {p.name: p for p in d.iterdir()}


def client_context(ca: trustme.CA, cert: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    if cert is not None:
        ctx.load_cert_chain(str(cert))
    return ctx


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def get(url: str, context: ssl.SSLContext | None = None,
        authorization: str | None = None) -> tuple[int, Message, str]:
    """(status, headers, body) of a GET; a 401 is an answer, not an exception."""
    request = urllib.request.Request(url)
    if authorization is not None:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.headers, exc.read().decode()


def families(text: str) -> dict[str, set[frozenset[tuple[str, str]]]]:
    """metric family name -> the label sets of its samples."""
    out: dict[str, set[frozenset[tuple[str, str]]]] = {}
    for family in text_string_to_metric_families(text):
        out.setdefault(family.name, set()).update(
            frozenset(s.labels.items()) for s in family.samples)
    return out


def secured(pki: dict[str, Path], **extra: str) -> dict[str, str]:
    return {
        "metrics.listener": "https://127.0.0.1:0",
        "metrics.ssl.keystore.location": str(pki["server.pem"]),
        "metrics.basic.auth.file": str(pki["users"]),
        **{k.replace("_", "."): v for k, v in extra.items()},
    }


@pytest.fixture(scope="module")
def broker(pki: dict[str, Path]) -> Iterator[RunningBroker]:
    with running_broker(overrides=secured(pki)) as running:
        yield running


def metrics_url(broker: RunningBroker) -> str:
    server = broker.broker.metrics_server
    assert server is not None
    return server.url


# -- TLS and basic auth ---------------------------------------------------------------------
def test_scrape_over_tls_with_basic_auth(broker: RunningBroker, ca: trustme.CA) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    producer.produce(TOPIC, b"v")
    assert producer.flush(30) == 0

    url = metrics_url(broker)
    assert url.startswith("https://127.0.0.1:")
    status, _, text = get(url, client_context(ca), basic(USER, PASSWORD))
    assert status == 200
    found = families(text)
    assert frozenset({("topic", TOPIC)}) in found["kafka_server_brokertopicmetrics_bytesin"]
    assert "process_cpu_seconds" in found
    # a password with colons in it: the first colon ends the user name
    status, _, _ = get(url, client_context(ca), basic("other", "pw:with:colons"))
    assert status == 200


@pytest.mark.parametrize("authorization", [
    None,  # no credentials
    basic(USER, "wrong"),
    basic(USER, PASSWORD + "x"),
    basic("nobody", PASSWORD),
    basic(USER.upper(), PASSWORD),
    "Bearer " + PASSWORD,
    "Basic not-base64!",
    "Basic " + base64.b64encode(b"no-colon").decode(),
    "Basic " + base64.b64encode(b"\xff\xfe:\xff").decode(),
])
def test_wrong_or_missing_credentials_get_401(
    broker: RunningBroker, ca: trustme.CA, authorization: str | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG):
        status, headers, text = get(metrics_url(broker), client_context(ca), authorization)
    assert status == 401
    assert headers["WWW-Authenticate"] == 'Basic realm="odradek metrics"'
    assert "kafka_" not in text
    assert PASSWORD not in caplog.text


def test_plain_http_to_the_tls_port_fails(broker: RunningBroker, ca: trustme.CA) -> None:
    url = metrics_url(broker).replace("https://", "http://")
    with pytest.raises((http.client.HTTPException, OSError)):
        get(url, authorization=basic(USER, PASSWORD))
    # and the page is still served to those who speak TLS
    status, _, _ = get(metrics_url(broker), client_context(ca), basic(USER, PASSWORD))
    assert status == 200


def test_a_client_that_never_handshakes_holds_no_one_up(
    broker: RunningBroker, ca: trustme.CA
) -> None:
    """The handshake runs in the connection's own thread: a TCP connection that sends
    nothing (or a slow scraper) does not stop the accept loop, as a listening socket
    wrapped in TLS would."""
    server = broker.broker.metrics_server
    assert server is not None
    with socket.create_connection(("127.0.0.1", server.port), timeout=10):
        done: list[int] = []
        thread = threading.Thread(target=lambda: done.append(
            get(server.url, client_context(ca), basic(USER, PASSWORD))[0]), daemon=True)
        thread.start()
        thread.join(20)
        assert done == [200]


def test_mutual_tls(pki: dict[str, Path], ca: trustme.CA) -> None:
    overrides = secured(pki, metrics_ssl_truststore_location=str(pki["ca.pem"]),
                        metrics_ssl_client_auth="required")
    with running_broker(overrides=overrides) as running:
        url = metrics_url(running)
        with pytest.raises((ssl.SSLError, OSError, http.client.HTTPException)):
            get(url, client_context(ca), basic(USER, PASSWORD))
        status, _, _ = get(url, client_context(ca, pki["client.pem"]), basic(USER, PASSWORD))
        assert status == 200


# -- where it listens ---------------------------------------------------------------------
def test_an_empty_host_binds_loopback() -> None:
    assert parse_metrics_listener("http://:9404") == ("http", "127.0.0.1", 9404)
    assert parse_metrics_listener("https://[::1]:9404") == ("https", "::1", 9404)
    with running_broker(overrides={"metrics.listener": "http://:0"}) as running:
        server = running.broker.metrics_server
        assert server is not None
        assert server.address == "127.0.0.1"
        assert server.url == f"http://127.0.0.1:{server.port}/metrics"
        status, _, text = get(server.url)
        assert status == 200 and "process_cpu_seconds" in families(text)


def test_an_open_page_on_all_addresses_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="odradek.server.metrics"), \
            running_broker(overrides={"metrics.listener": "http://0.0.0.0:0"}):
        pass
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
                and r.name == "odradek.server.metrics"]
    assert len(warnings) == 1
    for word in ("0.0.0.0", "topic", "group", "user", "client id", "TLS",
                 "metrics.basic.auth.file"):
        assert word in warnings[0]


def test_loopback_or_locked_does_not_warn(
    pki: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="odradek.server.metrics"):
        with running_broker(overrides={"metrics.listener": "http://127.0.0.1:0"}):
            pass
        with running_broker(overrides={**secured(pki),
                                       "metrics.listener": "https://0.0.0.0:0"}):
            pass
    assert not [r for r in caplog.records if r.name == "odradek.server.metrics"
                and r.levelno >= logging.WARNING]


# -- start-up refusals ----------------------------------------------------------------------
def refused(overrides: dict[str, str]) -> str:
    with pytest.raises(RuntimeError, match="broker failed to start") as info, \
            running_broker(overrides=overrides):
        pass
    return str(info.value)


def test_a_group_readable_password_file_refuses_to_start(
    pki: dict[str, Path], tmp_path: Path
) -> None:
    users = tmp_path / "users"
    users.write_text(f"{USER}:{PASSWORD}\n")
    for mode in (0o640, 0o604, 0o660):
        users.chmod(mode)
        message = refused({"metrics.listener": "http://127.0.0.1:0",
                           "metrics.basic.auth.file": str(users)})
        assert "metrics.basic.auth.file" in message and str(users) in message
        assert "readable or writable by group or others" in message and "chmod 600" in message
        assert PASSWORD not in message


def test_a_bad_password_file_refuses_to_start(tmp_path: Path) -> None:
    missing = refused({"metrics.listener": "http://127.0.0.1:0",
                       "metrics.basic.auth.file": str(tmp_path / "none")})
    assert "metrics.basic.auth.file" in missing and "No such file" in missing
    users = tmp_path / "users"
    users.write_text(f"{USER}:{PASSWORD}\nno-colon-here\n")
    users.chmod(0o600)
    message = refused({"metrics.listener": "http://127.0.0.1:0",
                       "metrics.basic.auth.file": str(users)})
    assert "line 2" in message and "user:password" in message
    assert "no-colon-here" not in message  # it may be a password
    users.write_text("# nobody\n")
    message = refused({"metrics.listener": "http://127.0.0.1:0",
                       "metrics.basic.auth.file": str(users)})
    assert "no user" in message


def test_https_without_a_keystore_refuses_to_start() -> None:
    message = refused({"metrics.listener": "https://127.0.0.1:0"})
    assert "metrics.ssl.keystore.location" in message


def test_tls_keys_without_https_are_refused(pki: dict[str, Path]) -> None:
    message = refused({"metrics.listener": "http://127.0.0.1:0",
                       "metrics.ssl.keystore.location": str(pki["server.pem"])})
    assert "metrics.ssl.keystore.location" in message and "https://" in message
