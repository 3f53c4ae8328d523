"""The metrics page's HTTP server: TLS, HTTP basic auth, and where it listens.

How it works: the page names every topic, consumer group, user and client id the broker
knows (as label values), past the Describe-based hiding of the Kafka protocol, so it can
be locked the way a Prometheus scrape config expects to reach a locked exporter:

- *TLS* (``metrics.listener=https://…``): a server context from the ``metrics.ssl.*``
  keys, built by :func:`odradek.security.tls.server_context` exactly as a broker
  listener's is from ``ssl.*`` (PEM or PKCS12 keystore, truststore and
  ``metrics.ssl.client.auth`` for mutual TLS: a scrape config's ``tls_config``). Each
  accepted connection is handshaken in its own thread, with a deadline: a listening
  socket wrapped in TLS (what ``prometheus_client.start_http_server`` does with a
  certificate) handshakes in the accept loop, where one connection that sends nothing
  stops every scrape.
- *Basic auth* (``metrics.basic.auth.file``, a scrape config's ``basic_auth``): the file
  holds ``user:password`` lines, is read once at start-up, and must not be readable or
  writable by group or others (the broker refuses to start otherwise, saying so). A
  request's credentials are compared with every entry in constant time (SHA-256 digests
  compared with :func:`hmac.compare_digest`, no early exit), so timing tells neither a
  user name nor a password's length; without valid ones the answer is 401 with
  ``WWW-Authenticate: Basic realm="odradek metrics"``. No password is ever logged: a
  refused request logs its address at DEBUG, a bad line of the file its number only.
- *Serving*: ``prometheus_client``'s WSGI app (``make_wsgi_app``) behind the auth check,
  served by ``wsgiref`` with a thread per connection, as ``prometheus_client``'s own
  server does.
- *Where*: an empty host in ``metrics.listener`` is 127.0.0.1 (server/config.py); a page
  bound to another address without both TLS and a login is served, with a WARNING that
  says what it shows.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import logging
import os
import re
import socket
import socketserver
import ssl
import stat
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from odradek.security.tls import TlsConfigError, server_context
from odradek.server.broker_stats import MetricsError

__all__ = [
    "REALM",
    "BasicAuth",
    "MetricsHTTPServer",
    "exposure_warning",
    "load_basic_auth_file",
    "metrics_tls_context",
]

log = logging.getLogger("odradek.server.metrics")

REALM: Final = "odradek metrics"
#: How long an accepted connection may take over its TLS handshake, and then over each
#: read or write: a scraper that stalls releases its thread after this.
CONNECTION_TIMEOUT_S: Final = 30.0
#: The password file is small (a few users): a bigger one is a wrong path.
_MAX_AUTH_FILE_BYTES: Final = 1 << 20

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


# -- basic auth ---------------------------------------------------------------------------
def _digest(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


@dataclass(frozen=True, slots=True)
class BasicAuth:
    """The users of ``metrics.basic.auth.file``, as digests of their names and passwords."""

    entries: tuple[tuple[bytes, bytes], ...]

    def check(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header carries one user's name and password."""
        user, password = _credentials(authorization)
        user_digest, password_digest = _digest(user), _digest(password)
        found = 0
        for entry_user, entry_password in self.entries:  # every entry, no early exit
            found |= (hmac.compare_digest(user_digest, entry_user)
                      & hmac.compare_digest(password_digest, entry_password))
        return bool(found)


def _credentials(authorization: str | None) -> tuple[bytes, bytes]:
    """The user and password of a ``Basic`` header (RFC 7617); two empty ones when it has
    none (checked like any, so a malformed header costs what a wrong password does)."""
    scheme, _, encoded = (authorization or "").strip().partition(" ")
    if scheme.lower() != "basic":
        return b"", b""
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return b"", b""
    user, sep, password = decoded.partition(b":")
    return (user, password) if sep else (b"", b"")


def load_basic_auth_file(path: str) -> BasicAuth:
    """Read ``metrics.basic.auth.file``: ``user:password`` lines (the first colon ends the
    user), ``#`` comments and blank lines skipped. MetricsError, naming the key and the
    line number but never a line's text, when it cannot be used."""
    where = f"metrics.basic.auth.file {path!r}"
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise MetricsError(f"{where}: cannot read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise MetricsError(f"{where}: not a regular file")
        if mode & 0o077:
            raise MetricsError(
                f"{where} is readable or writable by group or others (mode "
                f"{stat.S_IMODE(mode):04o}): it holds passwords; chmod 600 it")
        data = f.read(_MAX_AUTH_FILE_BYTES + 1)
    if len(data) > _MAX_AUTH_FILE_BYTES:
        raise MetricsError(f"{where}: larger than {_MAX_AUTH_FILE_BYTES} bytes")
    entries: list[tuple[bytes, bytes]] = []
    for number, raw in enumerate(data.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(b"#"):
            continue
        user, sep, password = line.partition(b":")
        if not sep or not user or not password:
            raise MetricsError(f"{where}: line {number} is not user:password")
        entries.append((_digest(user), _digest(password)))
    if not entries:
        raise MetricsError(f"{where}: no user in it (lines of user:password)")
    return BasicAuth(tuple(entries))


def _unauthorized(start_response: Callable[..., Any]) -> list[bytes]:
    body = b"401 Unauthorized: the metrics page needs a user and password (HTTP basic)\n"
    start_response("401 Unauthorized", [
        ("WWW-Authenticate", f'Basic realm="{REALM}"'),
        ("Content-Type", "text/plain; charset=utf-8"),
        ("Content-Length", str(len(body))),
    ])
    return [body]


def with_basic_auth(app: WSGIApp, auth: BasicAuth) -> WSGIApp:
    """``app`` behind HTTP basic auth: a request without valid credentials gets 401."""

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not auth.check(environ.get("HTTP_AUTHORIZATION")):
            log.debug("metrics page: a request from %s without valid credentials",
                      environ.get("REMOTE_ADDR", "?"))
            return _unauthorized(start_response)
        return app(environ, start_response)

    return guarded


# -- TLS ----------------------------------------------------------------------------------
_SSL_KEY: Final = re.compile(r"(?<![\w.])ssl\.")


def metrics_tls_context(setting: Callable[[str], Any]) -> ssl.SSLContext:
    """The server context of ``metrics.listener=https://…`` from the ``metrics.ssl.*`` keys
    (``setting`` reads a broker config key)."""
    own = ("keystore.type", "keystore.location", "keystore.password", "key.password",
           "truststore.type", "truststore.location", "truststore.password", "client.auth",
           "enabled.protocols")

    def metrics_setting(key: str) -> Any:
        name = key.removeprefix("ssl.")
        return setting(f"metrics.ssl.{name}") if name in own else None

    try:
        return server_context(metrics_setting)
    except TlsConfigError as exc:  # its keys are ssl.*: name the metrics.ssl.* ones
        raise MetricsError(f"metrics.listener https: {_SSL_KEY.sub('metrics.ssl.', str(exc))}"
                           ) from None


# -- the server ---------------------------------------------------------------------------
class _Handler(WSGIRequestHandler):
    """One connection: no access log (a scrape every few seconds), a deadline on I/O."""

    timeout = CONNECTION_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        pass


class MetricsHTTPServer(socketserver.ThreadingMixIn, WSGIServer):
    """``wsgiref``'s server, a thread per connection, TLS handshaken in that thread."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int, app: WSGIApp,
                 tls: ssl.SSLContext | None) -> None:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
        family, _, _, _, address = infos[0]
        self.address_family = family
        self._tls = tls
        super().__init__((str(address[0]), int(address[1])), _Handler)
        self.set_app(app)

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self._tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(CONNECTION_TIMEOUT_S)
        try:
            conn = self._tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:  # plain HTTP, a refused certificate, silence
            log.debug("metrics page: TLS handshake with %s failed: %s", client_address, exc)
            return
        try:
            super().finish_request(conn, client_address)
        finally:
            conn.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("metrics page: connection from %s failed", client_address, exc_info=True)


def start_server(host: str, port: int, app: WSGIApp,
                 tls: ssl.SSLContext | None) -> tuple[MetricsHTTPServer, threading.Thread]:
    """Bind and serve in a daemon thread."""
    server = MetricsHTTPServer(host, port, app, tls)
    thread = threading.Thread(target=server.serve_forever, name="odradek-metrics-http",
                              daemon=True)
    thread.start()
    return server, thread


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def exposure_warning(address: str, tls: bool, auth: bool) -> str | None:
    """The WARNING for a page reachable beyond this host without TLS and a login."""
    if is_loopback(address) or (tls and auth):
        return None
    missing = " and ".join(what for what, on in (
        ("TLS (metrics.listener=https://, metrics.ssl.keystore.location)", tls),
        ("a login (metrics.basic.auth.file)", auth)) if not on)
    return (f"the metrics page listens on {address}, beyond this host, without {missing}: "
            "anyone who reaches it reads the name of every topic, consumer group, user "
            "and client id, with connection counts per listener and the broker's traffic "
            "(docs/operations.md, 'Metrics')")
