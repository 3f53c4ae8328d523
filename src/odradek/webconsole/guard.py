"""The console's door: who may use it, from which page, under which host name (issue 49).

How it works. The console acts on the cluster with the rights of its ``--command-config``
(usually an admin's), so every request passes, in this order:

1. **Host check** (DNS rebinding). The ``Host`` header, port aside, must name one of the
   addresses the console is bound to (a loopback bind also answers to ``localhost``; a
   wildcard bind to the machine's loopback names and host name) or an ``--allowed-host``;
   anything else gets 400. A page on ``evil.example`` whose name the attacker re-points
   to 127.0.0.1 still sends ``Host: evil.example``.
2. **Origin check.** A request that may change something (any method but GET and HEAD)
   carrying an ``Origin`` (or, without one, a ``Referer``) must come from the console's own
   scheme and host; ``Origin: null`` (sandboxed frames, data: pages) is refused; 403.
3. **Login.** With a password (``--password-file``), every path but ``/login`` and
   ``/static/`` needs a session: pages redirect to the login page, ``/api/`` answers 401,
   anything else 403. The password is compared as SHA-256 digests with
   :func:`hmac.compare_digest` (constant time, length hidden); a wrong one answers after
   :data:`LOGIN_FAILURE_DELAY_S`, one at a time, so guesses run at most one a second.
   A session is a random id held in memory (so logout ends it on the server, and a restart
   ends them all), sent as the cookie ``<id>.<HMAC-SHA256 of the id>`` under a random
   per-process key: HttpOnly, SameSite=Strict, Secure when the console serves TLS, named
   after the console's port (:func:`cookie_name`).
4. **CSRF token** (in the app, :func:`odradek.webconsole.app.create_app`): every
   state-changing form carries ``csrf_token``, the HMAC of the session id under the same
   key, and a POST without the right one gets 403 before the handler reads anything else.
   Without login (``--no-login``, loopback only) the token is the HMAC of a fixed
   anonymous session: a page elsewhere still cannot read it.
5. **Read-only** (``--read-only``): no form is rendered and every state-changing route
   answers 403 (logging out excepted).

Every answer also carries ``X-Frame-Options: DENY`` and ``frame-ancestors 'none'``, so no
other page can frame the console's forms (clickjacking).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import secrets
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The session cookie's name, followed by the console's port: browsers share cookies
#: between the ports of a host, and two consoles on one host must not log each other out.
SESSION_COOKIE = "odradek_console_session"
#: A session ends this long after its login, used or not (the charts poll every 5 s, so an
#: idle timeout would never fire while a page is open).
SESSION_LIFETIME_S = 12 * 3600
#: Live sessions kept at most; the oldest goes first (each needs the password to make).
MAX_SESSIONS = 256
#: A wrong password is answered after this long, one at a time (a brute-force brake).
LOGIN_FAILURE_DELAY_S = 1.0
#: The session of every request when login is off (``--no-login``).
ANONYMOUS = "anonymous"
#: Methods that change nothing (the only ones routed to read handlers).
SAFE_METHODS = frozenset({"GET", "HEAD"})
#: Paths served without a session.
PUBLIC_PATHS = ("/login", "/static/")
#: Headers added to every answer (no framing by other pages).
FRAME_HEADERS = ((b"x-frame-options", b"DENY"),
                 (b"content-security-policy", b"frame-ancestors 'none'"),
                 (b"x-content-type-options", b"nosniff"),
                 (b"referrer-policy", b"same-origin"))


class ConsoleSetupError(Exception):
    """The console was asked to start unlocked, or its password file is unusable."""


def is_loopback(host: str) -> bool:
    """``host`` is a loopback address or ``localhost`` (names are not resolved)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_password_file(path: str) -> bytes:
    """The password in ``path`` (its first line, without the line end)."""
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise ConsoleSetupError(f"cannot read the password file {path}: "
                                f"{exc.strerror or exc}") from None
    lines = text.splitlines()
    password = lines[0] if lines else b""
    if not password.strip():
        raise ConsoleSetupError(f"the password file {path} is empty")
    return password


def host_name(header: str) -> str:
    """The host part of a ``Host`` header value, lower case, without port or brackets."""
    value = header.strip().lower()
    if value.startswith("["):  # [::1]:8080
        return value[1:value.find("]")] if "]" in value else value
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


def hosts_for(bind_host: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The host names a console bound to ``bind_host`` answers to, plus ``extra``."""
    names = {host_name(bind_host)} | {host_name(h) for h in extra}
    if is_loopback(bind_host):
        names |= {"localhost", "127.0.0.1", "::1"}
    elif bind_host in ("0.0.0.0", "::", ""):
        names |= {"localhost", "127.0.0.1", "::1", socket.gethostname().lower(),
                  socket.getfqdn().lower()}
    return frozenset(n for n in names if n)


def cookie_name(request: Request) -> str:
    """The session cookie's name for the port the browser reached the console on."""
    port = request.url.port or (443 if request.url.scheme == "https" else 80)
    return f"{SESSION_COOKIE}_{port}"


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


@dataclass
class Guard:
    """The door's settings and its live sessions (one per console process)."""

    #: None: no login (``--no-login``, loopback only).
    password: bytes | None
    #: Host names (lower case, no port) the ``Host`` header may carry.
    allowed_hosts: frozenset[str]
    read_only: bool = False
    #: The console serves TLS: cookies are Secure.
    secure: bool = False
    key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    _sessions: dict[str, float] = field(default_factory=dict, repr=False)
    _failures: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    @property
    def login_required(self) -> bool:
        return self.password is not None

    def _sign(self, purpose: bytes, session: str) -> str:
        return hmac.new(self.key, purpose + b"|" + session.encode(), "sha256").hexdigest()

    # -- login and sessions -------------------------------------------------------------

    def password_matches(self, given: str) -> bool:
        if self.password is None:
            return False
        return hmac.compare_digest(_digest(given.encode()), _digest(self.password))

    async def refuse_login(self) -> None:
        """Hold a wrong password's answer (one at a time)."""
        async with self._failures:
            await asyncio.sleep(LOGIN_FAILURE_DELAY_S)

    def open_session(self) -> str:
        """A new session; returns the cookie value."""
        now = time.monotonic()
        for sid in [s for s, until in self._sessions.items() if until <= now]:
            del self._sessions[sid]
        while len(self._sessions) >= MAX_SESSIONS:
            del self._sessions[next(iter(self._sessions))]
        sid = secrets.token_urlsafe(32)
        self._sessions[sid] = now + SESSION_LIFETIME_S
        return f"{sid}.{self._sign(b'session', sid)}"

    def session_of(self, request: Request) -> str | None:
        """The request's live session id (:data:`ANONYMOUS` without login), or None."""
        if self.password is None:
            return ANONYMOUS
        cookie = request.cookies.get(cookie_name(request), "")
        sid, _, sig = cookie.partition(".")
        if not sid or not hmac.compare_digest(sig, self._sign(b"session", sid)):
            return None
        until = self._sessions.get(sid)
        if until is None or until <= time.monotonic():
            self._sessions.pop(sid, None)
            return None
        return sid

    def close_session(self, sid: str | None) -> None:
        if sid is not None:
            self._sessions.pop(sid, None)

    def set_cookie(self, request: Request, response: Response, value: str) -> None:
        response.set_cookie(cookie_name(request), value, max_age=SESSION_LIFETIME_S, path="/",
                            httponly=True, samesite="strict", secure=self.secure)

    def clear_cookie(self, request: Request, response: Response) -> None:
        response.delete_cookie(cookie_name(request), path="/", httponly=True, samesite="strict",
                               secure=self.secure)

    # -- CSRF ---------------------------------------------------------------------------

    def csrf_for(self, sid: str | None) -> str:
        return self._sign(b"csrf", sid) if sid is not None else ""

    def csrf_ok(self, sid: str | None, token: str) -> bool:
        return sid is not None and bool(token) and hmac.compare_digest(
            token.encode(), self.csrf_for(sid).encode())

    # -- Host and Origin ----------------------------------------------------------------

    def host_ok(self, request: Request) -> bool:
        return host_name(request.headers.get("host", "")) in self.allowed_hosts

    @staticmethod
    def origin_ok(request: Request) -> bool:
        """An ``Origin`` (else a ``Referer``), when sent, is the console's own."""
        origin = request.headers.get("origin")
        if origin is None:
            origin = request.headers.get("referer")
            if origin is None:
                return True
        if origin.strip().lower() == "null":
            return False
        parts = urlsplit(origin.strip())
        return (parts.scheme.lower() == request.url.scheme
                and parts.netloc.lower() == request.headers.get("host", "").strip().lower())

    def refusal(self, request: Request) -> Response | None:
        """Why this request may not reach the app (a response), or None."""
        if not self.host_ok(request):
            return PlainTextResponse("400 Bad Request: this Host header is not one the "
                                     "console serves (see --allowed-host)", 400)
        if request.method not in SAFE_METHODS and not self.origin_ok(request):
            return PlainTextResponse("403 Forbidden: the form comes from another origin", 403)
        path = request.url.path
        if path == "/login" or path.startswith(PUBLIC_PATHS[1]):
            return None
        if self.session_of(request) is not None:
            return None
        if path.startswith("/api/"):
            return JSONResponse({"error": "log in first"}, status_code=401)
        if request.method in SAFE_METHODS:
            target = path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
        return PlainTextResponse("403 Forbidden: log in first", 403)


def local_path(target: str) -> str:
    """``target`` if it is a path on this console, else ``/`` (no open redirect)."""
    if (not target.startswith("/") or target.startswith("//") or "\\" in target
            or any(ord(c) < 0x20 for c in target)):
        return "/"
    return target


class GuardMiddleware:
    """Runs :meth:`Guard.refusal` before the app, and adds :data:`FRAME_HEADERS`."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def framed(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *FRAME_HEADERS]
            await send(message)

        refused = self.guard.refusal(Request(scope))
        if refused is not None:
            await refused(scope, receive, framed)
        else:
            await self.app(scope, receive, framed)
