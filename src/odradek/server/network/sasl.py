"""SASL authentication of one connection (Kafka's ``SaslServerAuthenticator``).

How it works: a connection on a SASL listener starts unauthenticated, with its
:class:`SaslAuthenticator` in front of the dispatcher (the reader's frames go to
:meth:`SaslAuthenticator.gate`):

1. *Gate.* Only ApiVersions, SaslHandshake and SaslAuthenticate pass; any other request
   closes the connection (Kafka's "Unexpected Kafka request of type ... during SASL
   handshake", an ``IllegalSaslStateException``), after the requests before it are
   answered. Until authentication the reader's frames are capped at
   ``sasl.server.max.receive.size``: a size prefix above it closes the connection at
   once, before any of the frame is buffered (Kafka's "Failing SASL authentication due to
   invalid receive size", its fix of CVE-2022-34917), a failed authentication.
2. *Handshake.* The SaslHandshake handler calls :meth:`handshake`: a mechanism not in
   ``sasl.enabled.mechanisms`` is UNSUPPORTED_SASL_MECHANISM (with the enabled list) and
   the connection closes; one out of turn is ILLEGAL_SASL_STATE. After a v0 handshake the
   client sends the mechanism's tokens raw, size-prefixed without a Kafka header (the
   pre-KIP-152 flow): the gate takes them as tokens and answers them the same way.
3. *Authenticate.* The SaslAuthenticate handler calls :meth:`authenticate`, which drives
   the mechanism's state machine (:mod:`odradek.security.sasl`), looking up SCRAM
   credentials through the listener's ``scram_lookup``. A failure is counted, logged
   (never the password) and answered SASL_AUTHENTICATION_FAILED with the mechanism's
   message after ``connection.failed.authentication.delay.ms`` (a brute-force loop waits,
   the broker only holds a timer), then the connection closes. Success sets the
   principal (``User:<name>``), counts, hands the reader back to the dispatcher and
   raises its frame cap to ``socket.request.max.bytes``.
4. *Re-authentication* (KIP-368). With ``connections.max.reauth.ms`` set, SaslAuthenticate
   (v1+) answers the session's lifetime, and the client re-authenticates before it ends
   (a new SaslHandshake v1 and SaslAuthenticate on the open connection, same mechanism
   and principal). When the session ends, nothing is closed yet: the reader's frames go
   through :meth:`SaslAuthenticator.after_expiry`, which lets a re-authentication through
   and closes the connection at any other request, as Kafka's ``Processor`` does
   ("Disconnecting expired channel"), after answering the requests before it: those in
   flight when the session ended are answered. Without a lifetime (0, the default), a
   SaslHandshake after authentication is answered ILLEGAL_SASL_STATE and nothing else
   happens, as Kafka's ``KafkaApis`` answers it. As Kafka's ``Selector`` counts them, a
   failure on a connection that has authenticated before is a failed re-authentication
   (not a failed authentication), and a success records its latency from the SaslHandshake.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Final, NamedTuple, Protocol

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode, RemoteProtocolError
from odradek.protocol.headers import peek_request
from odradek.security.sasl import (
    SCRAM_MECHANISMS,
    PlainServer,
    SaslAuthenticationError,
    ScramCredential,
    ScramServer,
)
from odradek.server.network.inflight import Close, InFlight, InFlightRequests, Outcome
from odradek.server.network.reader import RequestReader
from odradek.server.network.security import ListenerSecurity, SaslSettings

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from odradek.server.network.dispatch import Dispatcher

__all__ = ["SaslAuthenticator", "SaslResult"]

log = logging.getLogger("odradek.server.network")

# What an unauthenticated connection reads from its socket at a time (see
# KafkaConnection.limit_reads): its SASL and ApiVersions requests are small, and a hostile
# size prefix is refused after one such read.
UNAUTHENTICATED_READ_BYTES = 8192

_ALLOWED: Final = frozenset({
    int(ApiKey.API_VERSIONS), int(ApiKey.SASL_HANDSHAKE), int(ApiKey.SASL_AUTHENTICATE),
})
_REAUTHENTICATION: Final = frozenset({
    int(ApiKey.SASL_HANDSHAKE), int(ApiKey.SASL_AUTHENTICATE),
})
_HANDSHAKE, _AUTHENTICATE, _AUTHENTICATED, _FAILED = range(4)


class _Connection(Protocol):
    principal: str
    peer: tuple[str, int]
    connection_id: str
    closing: bool

    def close(self, reason: str, level: int = ..., cause: str | None = None) -> None: ...

    def limit_reads(self, max_bytes: int | None) -> None: ...


class SaslResult(NamedTuple):
    """What one SaslAuthenticate answers."""

    error: ErrorCode
    message: str | None
    token: bytes
    session_lifetime_ms: int


class SaslAuthenticator:
    """One connection's SASL state (see the module's header)."""

    def __init__(
        self,
        connection: _Connection,
        security: ListenerSecurity,
        loop: asyncio.AbstractEventLoop,
        dispatcher: Dispatcher,
        reader: RequestReader,
        requests: InFlightRequests,
        track: Callable[[asyncio.Future[Any]], None],
    ) -> None:
        assert security.sasl is not None
        self._connection = connection
        self._security = security
        self._settings: SaslSettings = security.sasl
        self._loop = loop
        self._dispatcher = dispatcher
        self._reader = reader
        self._requests = requests
        self._track = track
        self._state = _HANDSHAKE
        self.mechanism = ""
        self._machine: PlainServer | ScramServer | None = None
        self._scram_started = False
        self._raw = False  # after a SaslHandshake v0: raw tokens
        self._reauthenticating = False
        self._sessions = 0  # successful authentications on this connection
        self._reauth_began = 0.0  # loop time of the re-authentication's SaslHandshake
        self._expiry: asyncio.TimerHandle | None = None
        reader.set_dispatch(self.gate)
        reader.max_frame_size = self._settings.max_receive_size
        reader.too_large = self._receive_too_large
        connection.limit_reads(UNAUTHENTICATED_READ_BYTES)

    @property
    def authenticated(self) -> bool:
        return self._state == _AUTHENTICATED

    # -- 1. the gate -------------------------------------------------------------------
    def gate(self, frame: bytearray | bytes) -> None:
        """A frame before authentication: a SASL or ApiVersions request goes on, a raw
        token (after a v0 handshake) is answered here, anything else closes."""
        if len(frame) > self._settings.max_receive_size:
            self._fail_now(f"request of {len(frame)} bytes before authentication exceeds "
                           f"sasl.server.max.receive.size={self._settings.max_receive_size}")
            return
        if self._raw:
            self._raw_token(bytes(frame))
            return
        try:
            api_key = peek_request(frame)[0]
        except RemoteProtocolError:
            self._dispatcher.dispatch(frame)  # refused there, as anywhere
            return
        if api_key in _ALLOWED:
            self._dispatcher.dispatch(frame)
            return
        try:
            name = ApiKey(api_key).name
        except ValueError:
            name = str(api_key)
        self._fail_now(f"Unexpected Kafka request of type {name} during SASL handshake.")

    def _receive_too_large(self, size: int) -> None:
        self._fail_now(f"Failing SASL authentication due to invalid receive size: {size} "
                       f"larger than sasl.server.max.receive.size "
                       f"{self._settings.max_receive_size}")

    # -- 2. handshake ------------------------------------------------------------------
    def handshake(self, version: int, mechanism: str) -> tuple[ErrorCode, tuple[str, ...]]:
        """A SaslHandshake: (error, the enabled mechanisms)."""
        enabled = self._settings.mechanisms
        if self._state == _AUTHENTICATED and self._settings.max_reauth_ms <= 0:
            return ErrorCode.illegal_sasl_state, enabled  # no session to renew
        if self._state == _AUTHENTICATED:  # KIP-368: a re-authentication begins
            if version == 0 or mechanism != self.mechanism or self._reauthenticating:
                self._fail_now(f"re-authentication must use SaslHandshake v1 and the same "
                               f"mechanism ({self.mechanism}), got v{version} {mechanism}")
                return ErrorCode.illegal_sasl_state, enabled
            self._reauthenticating = True
            self._reauth_began = self._loop.time()
            self._begin(mechanism)
            return ErrorCode.none, enabled
        if self._state != _HANDSHAKE:
            self._fail_now("SaslHandshake out of turn")
            return ErrorCode.illegal_sasl_state, enabled
        if mechanism not in enabled:
            self._fail_now(f"Unsupported SASL mechanism {mechanism}")
            return ErrorCode.unsupported_sasl_mechanism, enabled
        self._begin(mechanism)
        self._raw = version == 0
        return ErrorCode.none, enabled

    def _begin(self, mechanism: str) -> None:
        self.mechanism = mechanism
        self._scram_started = False
        if mechanism in SCRAM_MECHANISMS:
            self._machine = ScramServer(mechanism)
        else:
            self._machine = PlainServer(self._settings.plain_users)
        self._state = _AUTHENTICATE

    # -- 3. authenticate ---------------------------------------------------------------
    async def authenticate(self, token: bytes) -> SaslResult:
        """A SaslAuthenticate: (error, message, server token, session lifetime ms)."""
        if self._state != _AUTHENTICATE:
            message = ("SaslAuthenticate request received after successful authentication"
                       if self._state == _AUTHENTICATED else
                       "Unexpected SaslAuthenticate request before SaslHandshake")
            self._fail_now(message)
            return SaslResult(ErrorCode.illegal_sasl_state, message, b"", 0)
        try:
            answer = await self._step(token)
        except SaslAuthenticationError as e:
            await self._fail(str(e))
            return SaslResult(ErrorCode.sasl_authentication_failed, str(e), b"", 0)
        lifetime = 0
        if self._machine is not None and self._machine.complete:
            lifetime = self._succeed()
        return SaslResult(ErrorCode.none, None, answer, lifetime)

    async def _step(self, token: bytes) -> bytes:
        machine = self._machine
        if isinstance(machine, PlainServer):
            return machine.evaluate(token)
        assert machine is not None
        if self._scram_started:
            return machine.client_final(token)
        self._scram_started = True
        user = machine.client_first(token)
        lookup = self._settings.scram_lookup
        try:
            stored = await lookup(machine.mechanism, user) if lookup is not None else None
        except Exception as exc:  # the store failing: invalid credentials, as Kafka's
            log.warning("the %s credential of user %r could not be obtained: %s",
                        machine.mechanism, user, exc)
            stored = None
        credential = None
        if stored:
            try:
                credential = ScramCredential.from_text(stored)
            except ValueError:
                log.warning("the stored %s credential of user %r cannot be read",
                            machine.mechanism, user)
        return machine.server_first(credential)

    def _succeed(self) -> int:
        """The client is authenticated: its principal, counted; the session lifetime."""
        machine = self._machine
        assert machine is not None
        principal = f"User:{machine.username}"
        connection, stats = self._connection, self._security.stats
        if self._reauthenticating:
            self._reauthenticating = False
            if principal != connection.principal:
                self._fail_now(f"Cannot change principals during re-authentication from "
                               f"{connection.principal}: {principal}")
                return 0
            stats.note_reauthentication((self._loop.time() - self._reauth_began) * 1000)
        else:
            stats.successful += 1
        self._sessions += 1
        connection.principal = principal
        self._dispatcher.principal = principal
        self._state = _AUTHENTICATED
        self._raw = False
        self._reader.set_dispatch(self._dispatcher.dispatch)
        self._reader.max_frame_size = self._requests.max_bytes  # socket.request.max.bytes
        self._reader.too_large = None
        connection.limit_reads(None)
        lifetime = self._settings.max_reauth_ms
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        if lifetime > 0:
            self._expiry = self._loop.call_later(lifetime / 1000, self._expired)
        log.debug("connection %s authenticated as %s with %s", connection.connection_id,
                  principal, self.mechanism)
        return lifetime

    def _expired(self) -> None:
        """The session ended: from now on a request other than a re-authentication
        closes the connection (checked per frame only from now on)."""
        self._expiry = None
        if self._state == _AUTHENTICATED and not self._reauthenticating:
            self._reader.set_dispatch(self.after_expiry)

    def after_expiry(self, frame: bytearray | bytes) -> None:
        """A frame after the session ended: a re-authentication goes on, anything else
        closes the connection once the requests before it are answered."""
        try:
            api_key = peek_request(frame)[0]
        except RemoteProtocolError:
            api_key = -1
        if api_key in _REAUTHENTICATION:
            self._dispatcher.dispatch(frame)
            return
        self._security.stats.expired_connections_killed += 1
        self._reader.refuse_after_current(
            "expired session",
            f"SASL session of {self._connection.principal} expired (connections.max."
            f"reauth.ms={self._settings.max_reauth_ms}) without re-authentication")

    # -- failures ----------------------------------------------------------------------
    def _fail_now(self, message: str) -> None:
        """Count the failure and close the connection once what is before is answered."""
        if self._state == _FAILED:
            return
        self._state = _FAILED
        if self._sessions:  # as Kafka's Selector: a failure after a success is a re-
            self._security.stats.failed_reauthentication += 1
        else:
            self._security.stats.failed += 1
        peer = self._connection.peer[0]
        self._reader.refuse_after_current(
            "authentication",
            f"Failed {'re-' if self._sessions else ''}authentication with {peer} on "
            f"listener {self._security.name} "
            f"({message})")

    async def _fail(self, message: str) -> None:
        """A failed authentication: counted, the connection closed after the answer, which
        waits ``connection.failed.authentication.delay.ms``."""
        self._fail_now(message)
        delay = self._settings.failed_authentication_delay_ms
        if delay > 0:
            await asyncio.sleep(delay / 1000)

    # -- SaslHandshake v0: raw tokens ----------------------------------------------------
    def _raw_token(self, token: bytes) -> None:
        task = self._loop.create_task(self._answer_raw(token))
        self._track(task)
        self._requests.push(InFlight(task, 0))

    async def _answer_raw(self, token: bytes) -> Outcome:
        try:
            answer = await self._step(token)
        except SaslAuthenticationError as e:
            await self._fail(str(e))
            return Close(f"authentication failed: {e}")
        if self._machine is not None and self._machine.complete:
            self._succeed()
        return len(answer).to_bytes(4, "big") + answer

    def release(self) -> None:
        """The connection is gone."""
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
