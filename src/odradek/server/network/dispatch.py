"""Dispatch: from a frame to its handler's answer, in bytes, on the in-flight queue.

How it works: this is Kafka's ``RequestChannel`` request path and the frame of
``KafkaApis.handle``, for one connection:

1. *Route.* The first 8 bytes of a frame give key, version and correlation id; the
   registry says who serves it. An unknown key, a malformed header or body (a null where
   the schema forbids one included) or an unsupported version is refused (see
   :meth:`~odradek.server.network.reader.RequestReader.refuse`: the connection closes
   once the earlier requests are answered), except ApiVersions at an unsupported
   version, which gets the v0 UNSUPPORTED_VERSION answer (KIP-511).
   :class:`~odradek.protocol.registry.RequestContext` carries the header fields, the peer,
   the connection (the handler's channel, for throttling), the authenticated principal
   and the listener's name.
2. *Start.* The handler starts at once, eagerly (:mod:`odradek.server.network.eager`):
   one that never waits finishes inside dispatch, one that waits goes on as a task, so
   a slow Fetch does not hold up a Metadata behind it. Registrations marked ``serial`` first
   wait for every earlier request of the connection (Kafka's channel muting), for APIs
   whose execution order matters; the last serial request already waited for all before
   it, so a new one waits only for it and the requests started since: O(1) a request.
3. *Handle.* :meth:`Dispatcher._handle` awaits the handler, metered
   (:mod:`odradek.server.network.metering`) when it is timed or charged to a quota: a
   handler charged, or timed after waiting for earlier requests, is driven by hand by
   :func:`~odradek.server.network.metering.metered`; one only timed and started eagerly
   has its times noted around it. Then it encodes the answer: a kio response entity is encoded, a
   :class:`~odradek.protocol.send.Send` gets a size prefix, ``None`` means no answer.
4. *Fail.* A handler that fails is answered, not dropped (Kafka's
   ``sendErrorOrCloseConnection``): a :class:`~odradek.protocol.errors.KafkaError` with
   its code and message, any other exception with UNKNOWN_SERVER_ERROR after its
   traceback is logged. The answer comes from
   :func:`~odradek.protocol.error_response.build_error_response` (Kafka's
   ``getErrorResponse``), or from the registration's own ``error_response``
   (ApiVersions). The connection is closed only when there is no answer to send: Produce
   with acks=0, as in Kafka, or an answer that cannot be built or encoded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.codec import decode_request, encode_body, request_header_version, schema
from odradek.protocol.error_response import build_error_response
from odradek.protocol.errors import (
    ErrorCode,
    KafkaError,
    RemoteProtocolError,
    UnsupportedVersionError,
)
from odradek.protocol.headers import (
    encode_response,
    encode_response_prefix,
    parse_request_header,
    peek_request,
)
from odradek.protocol.registry import (
    GENERIC_ERROR_RESPONSE,
    Channel,
    HandlerRegistry,
    Registration,
    RequestContext,
)
from odradek.protocol.send import Send
from odradek.server.client_quotas import ClientQuotaManager
from odradek.server.handlers.api_versions import unsupported_version_response
from odradek.server.network.eager import start_eagerly
from odradek.server.network.inflight import (
    Close,
    InFlight,
    InFlightRequests,
    Outcome,
    TimedInFlight,
)
from odradek.server.network.metering import metered, note_first_wait, quota_applies

if TYPE_CHECKING:
    from odradek.server.broker_stats import RequestStats

__all__ = ["Dispatcher"]

# One logger for the whole network layer (its records have always been named so).
log = logging.getLogger("odradek.server.network")

_API_VERSIONS: Final = int(ApiKey.API_VERSIONS)
_PRODUCE: Final = int(ApiKey.PRODUCE)


class Dispatcher:
    """Starts one connection's requests and queues their answers in arrival order."""

    __slots__ = ("_channel", "_connection_id", "_listener_name", "_loop", "_peer", "_quota",
                 "_refuse", "_registry", "_requests", "_serial_barrier", "_since_barrier",
                 "_stats", "_track", "principal")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        registry: HandlerRegistry,
        requests: InFlightRequests,
        channel: Channel,
        peer: tuple[str, int],
        connection_id: str,
        refuse: Callable[[str, str], None],
        track: Callable[[asyncio.Future[Any]], None],
        stats: RequestStats | None,
        quota: ClientQuotaManager | None,
        listener_name: str = "PLAINTEXT",
        principal: str = "User:ANONYMOUS",
    ) -> None:
        self._loop = loop
        self._registry = registry
        self._requests = requests
        self._channel = channel  # handed to handlers: what they may ask of the connection
        self._peer = peer
        self._connection_id = connection_id
        self._refuse = refuse  # stop reading, close after the requests before this one
        self._track = track  # the server's set of running handler tasks
        self._stats = stats  # request metrics (metrics.listener set), else None
        self._quota = quota  # request_percentage (KIP-124)
        self._listener_name = listener_name  # the listener the connection came in on
        # The authenticated caller (KafkaPrincipal form); SASL sets it once it succeeds.
        self.principal = principal
        self._serial_barrier: asyncio.Future[Outcome] | None = None
        self._since_barrier: set[asyncio.Future[Outcome]] = set()

    def dispatch(self, frame: bytearray | bytes) -> None:
        """Decode ``frame``, start its handler and queue the request (or refuse it)."""
        received_ns = time.monotonic_ns()
        try:
            api_key, api_version, correlation_id = peek_request(frame)
        except RemoteProtocolError as e:
            self._refuse("malformed request header", str(e))
            return
        try:
            registration = self._registry.lookup(api_key, api_version)
        except UnsupportedVersionError as e:
            if api_key == _API_VERSIONS:
                self._answer_unsupported_api_versions(frame, api_version, correlation_id)
            else:
                self._refuse("unsupported version", f"{e} (correlation id {correlation_id})")
            return
        except RemoteProtocolError as e:  # unknown API key
            self._refuse("unknown API key", f"{e} (correlation id {correlation_id})")
            return
        api_schema = schema(api_key, api_version)
        try:
            header = parse_request_header(frame, api_schema.request_header_version)
            if registration.decode is not None:  # gets the mutable frame itself
                request = registration.decode(frame, header.size, api_version)
            else:
                request = decode_request(api_key, api_version, frame, header.size)
        except RemoteProtocolError as e:
            self._refuse("malformed request", f"{e} (correlation id {correlation_id})")
            return
        ctx = RequestContext(
            correlation_id=correlation_id,
            client_id=header.client_id,
            api_key=api_key,
            api_version=api_version,
            peer=self._peer,
            connection_id=self._connection_id,
            header_version=header.header_version,
            received_ns=received_ns,
            size=(size := len(frame)),
            channel=self._channel,
            principal=self.principal,
            listener_name=self._listener_name,
        )
        timing = (None if self._stats is None
                  else TimedInFlight(size, api_key, api_version, received_ns))
        # Start the handler (eagerly unless it must wait for earlier requests) and queue
        # the request (inline: this runs for every request).
        prior: list[asyncio.Future[Outcome]] = []
        if registration.serial:
            barrier = self._serial_barrier
            if barrier is not None and not barrier.done():
                prior.append(barrier)
            if self._since_barrier:
                prior.extend(self._since_barrier)
        # Only a Produce keeps its frame (its records) while its handler runs: it stays
        # charged to the pool until then, as Kafka's requiresDelayedAllocation; any other
        # request's charge ended when the reader handed its frame over. Behind earlier
        # requests, _handle charges it once they are done; started eagerly, it is charged
        # only if its handler waits (a first step that finishes the handler runs with no
        # reader able to look at the pool, so its charge would be seen by none).
        task: asyncio.Future[Outcome]
        if prior:
            pooled = size if api_key == _PRODUCE and self._requests.pool is not None else 0
            task = self._loop.create_task(
                self._handle(registration, ctx, request, prior, timing, pooled))
            done = False
        else:
            task = start_eagerly(self._loop,
                                 self._handle(registration, ctx, request, prior, timing))
            done = task.done()
            if not done:
                if timing is not None:
                    note_first_wait(timing)
                if api_key == _PRODUCE and self._requests.pool is not None:
                    self._charge_while_running(task, size)
        if registration.serial:
            self._serial_barrier = task
            if self._since_barrier:
                self._since_barrier = set()
        elif not done:
            # Done tasks leave at once: a finished response (and the descriptors its
            # file regions own) must not be kept alive by this bookkeeping.
            self._since_barrier.add(task)
            task.add_done_callback(self._since_barrier.discard)
        if not done:
            self._track(task)
        entry: InFlight
        if timing is None:
            entry = InFlight(task, size)
        else:
            timing.task = task
            entry = timing
        # InFlightRequests.push, inline; the writer waits on wakeup only once it found the
        # queue empty, so a request behind others need not set it.
        requests = self._requests
        requests.bytes += size
        entries = requests.entries
        entries.append(entry)
        if len(entries) == 1:
            requests.wakeup.set()

    def _answer_unsupported_api_versions(
        self, frame: bytes | bytearray, api_version: int, correlation_id: int
    ) -> None:
        # The body cannot be parsed, but the header can: its version follows the request
        # version's flexibility (clamped to the versions kio knows).
        try:
            parse_request_header(frame, request_header_version(_API_VERSIONS, api_version))
        except RemoteProtocolError as e:
            self._refuse(
                "malformed request header",
                f"malformed ApiVersions request at an unsupported version: {e}",
            )
            return
        response = unsupported_version_response(self._registry)
        answer = encode_response(correlation_id, response, header_version=0)
        self._requests.push_done(self._loop, answer)

    async def _handle(
        self,
        registration: Registration,
        ctx: RequestContext,
        request: Any,
        prior: list[asyncio.Future[Outcome]],
        timing: TimedInFlight | None,
        pooled: int = 0,
    ) -> Outcome:
        """The request's life in its handler: wait for the earlier requests it must
        follow, run the handler (metered when timed or charged), encode its answer or
        its error's. ``pooled``: the bytes charged to the request memory pool while the
        handler runs (a Produce's frame), not while it waits for earlier requests."""
        if prior:
            await asyncio.wait(prior)
        if pooled:
            self._pool_used(pooled)
        quota = self._quota
        try:
            charged = (quota if quota is not None and quota.active
                       and quota_applies(ctx, request) else None)
            if charged is None and (timing is None or not prior):
                # Run directly: not metered, or only timed and started eagerly, whose
                # first step's end the dispatcher notes (metering.note_first_wait).
                if timing is not None:
                    timing.started = time.monotonic_ns()
                result = await registration.handler(ctx, request)
                if timing is not None:
                    timing.done = time.monotonic_ns()
                    code = getattr(result, "error_code", 0)  # a top-level error code
                    if code:
                        timing.error = int(code)
            else:  # charged to a quota, or timed after waiting for earlier requests
                result = await metered(registration.handler, ctx, request, timing, charged)
        except KafkaError as e:
            if timing is not None:
                timing.done = time.monotonic_ns()
                timing.error = int(e.code)
            return self._error_outcome(registration, ctx, request, e.code, e)
        except Exception as e:
            if timing is not None:
                timing.done = time.monotonic_ns()
                timing.error = int(ErrorCode.unknown_server_error)
            log.exception(
                "handler for API %s v%s failed (connection %s, correlation id %s)",
                ctx.api_key,
                ctx.api_version,
                ctx.connection_id,
                ctx.correlation_id,
            )
            return self._error_outcome(
                registration, ctx, request, ErrorCode.unknown_server_error, e
            )
        finally:
            if pooled:
                self._pool_used(-pooled)
        return self._encode(ctx, result)

    def _pool_used(self, change: int) -> None:
        """Charge (or, negative, give back) bytes of the request memory pool; the
        connections waiting for them are woken from the loop, not inside this dispatch."""
        pool = self._requests.pool
        assert pool is not None
        pool.used += change
        if change < 0 and pool.waiting:
            self._loop.call_soon(pool.wake_waiting)

    def _charge_while_running(self, task: asyncio.Future[Outcome], size: int) -> None:
        """A Produce started eagerly whose handler waits: its frame is charged to the
        pool until the handler ends (the task is done, or cancelled with the
        connection)."""
        self._pool_used(size)
        task.add_done_callback(lambda _: self._pool_used(-size))

    def _error_outcome(
        self,
        registration: Registration,
        ctx: RequestContext,
        request: Any,
        code: ErrorCode,
        error: BaseException,
    ) -> Outcome:
        # Kafka's sendErrorOrCloseConnection: the request's error response, or closing the
        # connection when there is none (Produce acks=0) or it cannot be built.
        try:
            response = GENERIC_ERROR_RESPONSE
            if registration.error_response is not None:
                response = registration.error_response(ctx, request, code)
            if response is GENERIC_ERROR_RESPONSE:
                message = error.message if isinstance(error, KafkaError) else None
                response = build_error_response(
                    ctx.api_key, ctx.api_version, request, code, message
                )
        except Exception as e:
            log.exception("error response to API %s failed", ctx.api_key)
            return Close(f"cannot build error response: {e!r}")
        if response is None:
            return Close(
                f"handler for API {ctx.api_key} v{ctx.api_version} failed with no response "
                f"to carry the error: {error!r}"
            )
        return self._encode(ctx, response)

    def _encode(self, ctx: RequestContext, result: Any) -> Outcome:
        if result is None:
            return None
        api_schema = schema(ctx.api_key, ctx.api_version)
        header_version = api_schema.response_header_version
        if isinstance(result, Send):
            prefix = encode_response_prefix(ctx.correlation_id, header_version, result.size)
            return (prefix, result)
        if type(result) is not api_schema.response_type:
            return Close(
                f"handler for API {ctx.api_key} v{ctx.api_version} returned "
                f"{type(result).__name__}, expected {api_schema.response_type.__name__}"
            )
        try:
            body = encode_body(result)
        except Exception as e:
            log.exception("cannot encode response to API %s", ctx.api_key)
            return Close(f"cannot encode response: {e!r}")
        return encode_response_prefix(ctx.correlation_id, header_version, len(body)) + body
