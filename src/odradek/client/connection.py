"""One connection to a broker: send kio requests, receive their responses, pipelined.

How it works: each request gets the next correlation id and is written with the request
header version its schema asks for (v2 when flexible, else v1); a reader task reads size-
prefixed frames and resolves the waiting future by correlation id. The first exchange is
ApiVersions, so later calls can pick the highest version both sides speak
(:meth:`BrokerConnection.version`). Response frames are bounded by ``max_frame_size``.
With a :class:`~odradek.client.security.ClientSecurity` the socket is wrapped in TLS and,
on a SASL listener, the connection authenticates right after ApiVersions (SaslHandshake
v1, then SaslAuthenticate with PLAIN's one message or SCRAM's two), as Kafka's clients do;
a failed authentication is a :class:`ClientError` with the broker's message.

Re-authentication (KIP-368): when SaslAuthenticate (v1+) answers a session lifetime (the
broker's ``connections.max.reauth.ms``), a timer re-authenticates the open connection
at a random point between 85 % and 95 % of it, as the Java client does (spread, so that
a broker's connections do not all renew at once): new requests wait meanwhile, those
already sent are answered in order before the SaslHandshake's answer, and the same
exchange runs again. ``reauthentications`` counts them; a failed one closes the
connection with its error, as an expired session would have.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import random
import ssl
import struct
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from odradek.client.security import PLAINTEXT, ClientSecurity
from odradek.protocol.errors import InvalidRequestError
from odradek.protocol.primitives import skip_tagged_fields
from odradek.protocol.wire_guard import check_body
from odradek.security.sasl import SaslAuthenticationError, ScramClient

_SIZE = struct.Struct(">i")
API_VERSIONS_KEY = 18


class ClientError(Exception):
    """A failed exchange; ``error_code`` is the Kafka error code when the broker sent one."""

    def __init__(self, message: str, error_code: int | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code


def _closed_before_api_versions(protocol: str) -> ClientError:
    """The peer closed before answering ApiVersions: a TLS or SASL listener does that to a
    client that speaks neither (it is the usual reason), a non-Kafka server too."""
    if protocol == "PLAINTEXT":
        return ClientError(
            "the connection was closed without an answer to ApiVersions: the listener "
            "probably wants TLS or SASL (give the client's settings with --command-config: "
            "security.protocol, sasl.mechanism, ...), or it is not a Kafka broker")
    return ClientError("the connection was closed without an answer to ApiVersions "
                       f"(security.protocol={protocol}: does the listener speak it? "
                       "not a Kafka broker?)")


class BrokerConnection:
    def __init__(
        self, host: str, port: int, client_id: str = "odradek-client",
        max_frame_size: int = 256 * 1024 * 1024,
        security: ClientSecurity | None = None,
    ) -> None:
        self.security = security or PLAINTEXT
        self.host = host
        self.port = port
        self.client_id = client_id
        self.max_frame_size = max_frame_size
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, tuple[asyncio.Future[Any], int, int]] = {}
        self._ids = itertools.count(1)
        self._task: asyncio.Task[None] | None = None
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._answered = False  # a first response frame arrived: the peer speaks Kafka
        # Why the connection ended (the reader saw it close), or None while it is open:
        # a request sent after that fails at once instead of waiting for an answer that
        # cannot come.
        self._closed: ClientError | None = None
        # KIP-368: set while requests may be sent (cleared during a re-authentication)
        self._sendable = asyncio.Event()
        self._sendable.set()
        self._reauth_timer: asyncio.TimerHandle | None = None
        self._reauth_task: asyncio.Task[None] | None = None
        self.reauthentications = 0  # successful re-authentications of this connection

    @classmethod
    async def open(cls, bootstrap: str, timeout: float = 10.0, **kw: Any) -> BrokerConnection:
        """Connect and exchange ApiVersions. Every failure is a :class:`ClientError` that
        says why: refused, timed out, or not a Kafka broker (it closed the connection or
        answered something that is not a Kafka response); refusals and wrong answers
        fail at once, only silence waits for ``timeout``."""
        host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
        conn = cls(host or "127.0.0.1", int(port), **kw)
        try:
            await asyncio.wait_for(conn.connect(), timeout)
        except TimeoutError:
            connected = conn._writer is not None
            await conn.close()
            if not connected:
                raise ClientError(f"timed out connecting after {timeout:g} s") from None
            raise ClientError(f"no answer to ApiVersions within {timeout:g} s "
                              "(not a Kafka broker?)") from None
        except ClientError:
            await conn.close()
            raise
        return conn

    @classmethod
    async def open_any(cls, servers: list[str], timeout: float = 10.0,
                       **kw: Any) -> BrokerConnection:
        """:meth:`open` on the first of ``servers`` that answers, as a client bootstraps;
        a :class:`ClientError` naming each server's failure when none does."""
        errors = []
        for server in servers:
            try:
                return await cls.open(server, timeout, **kw)
            except (ClientError, OSError, TimeoutError) as exc:
                errors.append(f"{server}: {exc}")
        raise ClientError("cannot reach any bootstrap server: " + "; ".join(errors))

    async def connect(self) -> None:
        context = self.security.ssl_context
        try:
            if context is None:
                self._reader, self._writer = await asyncio.open_connection(
                    self.host, self.port)
            else:
                self._reader, self._writer = await asyncio.open_connection(
                    self.host, self.port, ssl=context, server_hostname=self.host)
        except ConnectionRefusedError as exc:
            raise ClientError("connection refused (is a broker listening there?)") from exc
        except ssl.SSLError as exc:
            raise ClientError(f"TLS handshake failed: {exc.reason or exc}") from exc
        except OSError as exc:
            raise ClientError(exc.strerror or str(exc)) from exc
        self._task = asyncio.create_task(self._read_loop())
        module = __import__("kio.schema.api_versions.v3.request", fromlist=["ApiVersionsRequest"])
        response = await self.send(
            module.ApiVersionsRequest(client_software_name="odradek",
                                      client_software_version="0.1.0")
        )
        self.api_versions = {
            int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys
        }
        if self.security.sasl:
            await self._authenticate()

    async def _authenticate(self) -> None:
        """SaslHandshake v1 and SaslAuthenticate (KIP-152); then the next re-authentication
        is scheduled if the session has a lifetime (KIP-368)."""
        security = self.security
        handshake = request_class("sasl_handshake", 1, "SaslHandshakeRequest")
        answer = await self._send(handshake(mechanism=security.mechanism))
        if answer.error_code != 0:
            raise ClientError(f"SASL mechanism {security.mechanism} refused "
                              f"(the broker enables {', '.join(answer.mechanisms)})",
                              int(answer.error_code))
        version = self.version(36, (0, 2))
        authenticate = request_class("sasl_authenticate", version, "SaslAuthenticateRequest")

        lifetime_ms = 0

        async def step(token: bytes) -> bytes:
            nonlocal lifetime_ms
            response = await self._send(authenticate(auth_bytes=token))
            if response.error_code != 0:
                raise ClientError(f"authentication failed: {response.error_message}",
                                  int(response.error_code))
            lifetime = getattr(response, "session_lifetime", None)  # v1+
            if lifetime is not None:
                lifetime_ms = int(lifetime.total_seconds() * 1000)
            return bytes(response.auth_bytes)

        if security.mechanism == "PLAIN":
            await step(f"\0{security.username}\0{security.password}".encode())
        else:
            scram = ScramClient(security.mechanism, security.username, security.password)
            server_first = await step(scram.client_first())
            try:
                server_final = await step(scram.client_final(server_first))
                scram.verify_server_final(server_final)
            except SaslAuthenticationError as exc:
                raise ClientError(f"authentication failed: {exc}") from None
        if lifetime_ms > 0:
            delay = lifetime_ms * random.uniform(0.85, 0.95) / 1000
            self._reauth_timer = asyncio.get_running_loop().call_later(
                delay, self._begin_reauthentication)

    def _begin_reauthentication(self) -> None:
        self._reauth_timer = None
        if not self.closed:
            self._reauth_task = asyncio.ensure_future(self._reauthenticate())

    async def _reauthenticate(self) -> None:
        """KIP-368: the same exchange again on the open connection, new requests held."""
        self._sendable.clear()
        try:
            await self._authenticate()
        except (ClientError, OSError) as exc:
            code = exc.error_code if isinstance(exc, ClientError) else None
            self._fail(ClientError(f"re-authentication failed: {exc}", code))
            return
        finally:
            self._sendable.set()
        self.reauthentications += 1

    def _fail(self, error: ClientError) -> None:
        """The connection cannot go on: fail what waits, and close the socket."""
        if self._closed is None:
            self._closed = error
        for future, _, _ in self._pending.values():
            if not future.done():
                future.set_exception(error)
        self._pending.clear()
        if self._writer is not None:
            self._writer.close()

    @property
    def closed(self) -> bool:
        """The connection is gone (closed by us, or the reader saw it end)."""
        return self._writer is None or self._closed is not None

    def version(self, api_key: int, ours: tuple[int, int]) -> int:
        """Highest version of ``api_key`` in both ``ours`` and the broker's range."""
        theirs = self.api_versions.get(api_key)
        if theirs is None or theirs[1] < ours[0] or theirs[0] > ours[1]:
            raise ClientError(f"the broker does not serve API {api_key} in {ours}")
        return min(ours[1], theirs[1])

    async def send(self, request: Any, expect_response: bool = True) -> Any:
        if not self._sendable.is_set():  # re-authenticating (KIP-368)
            await self._sendable.wait()
        return await self._send(request, expect_response)

    async def _send(self, request: Any, expect_response: bool = True) -> Any:
        if self._writer is None:
            raise ClientError("not connected")
        if self._closed is not None:
            raise self._closed
        correlation_id = next(self._ids)
        header_type = request.__header_schema__
        buf = io.BytesIO()
        buf.write(b"\0\0\0\0")
        entity_writer(header_type)(buf, header_type(
            request_api_key=i16(request.__api_key__),
            request_api_version=i16(request.__version__),
            correlation_id=i32(correlation_id),
            client_id=self.client_id,
        ))
        entity_writer(type(request))(buf, request)
        frame = buf.getbuffer()
        _SIZE.pack_into(frame, 0, len(frame) - 4)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if expect_response:
            self._pending[correlation_id] = (
                future, int(request.__api_key__), int(request.__version__)
            )
        self._writer.write(bytes(frame))
        await self._writer.drain()
        if not expect_response:
            return None
        return await future

    async def _read_loop(self) -> None:
        assert self._reader is not None
        try:
            while True:
                head = await self._reader.readexactly(4)
                (size,) = _SIZE.unpack(head)
                if size < 4 or size > self.max_frame_size:
                    if not self._answered:  # the first answer: ApiVersions
                        more = await _read_some(self._reader)
                        raise ClientError(f"not a Kafka broker: it answered {head + more!r}")
                    raise ClientError(f"invalid response size {size}")
                payload = await self._reader.readexactly(size)
                self._answered = True
                (correlation_id,) = _SIZE.unpack_from(payload)
                entry = self._pending.pop(correlation_id, None)
                if entry is None:
                    raise ClientError(f"response for unknown correlation id {correlation_id}")
                future, api_key, version = entry
                response_type = load_response_schema(api_key, version)
                offset = 4
                if response_type.__flexible__ and api_key != API_VERSIONS_KEY:
                    offset = _after_header_tags(payload, offset)  # response header v1
                try:
                    check_body(response_type, payload, offset)  # kio aborts on huge arrays
                    entity, _ = entity_reader(response_type)(payload, offset)
                except Exception as exc:
                    future.set_exception(ClientError(f"cannot decode response: {exc}"))
                    continue
                if not future.done():
                    future.set_result(entity)
        except (asyncio.IncompleteReadError, ConnectionError, ClientError) as exc:
            if isinstance(exc, ClientError):
                error = exc
            elif self._answered:
                error = ClientError(f"connection to {self.host}:{self.port} closed")
            else:
                error = _closed_before_api_versions(self.security.protocol)
            if self._closed is None:
                self._closed = error
            error = self._closed
            for future, _, _ in self._pending.values():
                if not future.done():
                    future.set_exception(error)
            self._pending.clear()

    async def close(self) -> None:
        if self._reauth_timer is not None:
            self._reauth_timer.cancel()
            self._reauth_timer = None
        if self._reauth_task is not None and not self._reauth_task.done():
            self._reauth_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reauth_task
        for future, _, _ in self._pending.values():
            if not future.done():
                future.set_exception(ClientError("connection closed"))
        self._pending.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()
            self._writer = None

    async def __aenter__(self) -> BrokerConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def _read_some(reader: asyncio.StreamReader) -> bytes:
    """Up to 60 more bytes already sent, to show what a non-Kafka server answered."""
    try:
        return await asyncio.wait_for(reader.read(60), 0.2)
    except (TimeoutError, ConnectionError):
        return b""


def _after_header_tags(payload: bytes, pos: int) -> int:
    try:
        return skip_tagged_fields(payload, pos, len(payload))
    except (IndexError, InvalidRequestError) as exc:
        raise ClientError("malformed tagged fields in a response header") from exc


def request_class(api: str, version: int, name: str) -> Any:
    module = __import__(f"kio.schema.{api}.v{version}.request", fromlist=[name])
    return getattr(module, name)


__all__ = ["BrokerConnection", "ClientError", "load_request_schema", "request_class"]
