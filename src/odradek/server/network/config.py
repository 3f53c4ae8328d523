"""The network layer's settings, named after Kafka's broker configs, with Kafka's defaults.

How it works: :class:`NetworkConfig` is the part of ``server.properties`` that Kafka's
``SocketServer`` reads (``socket.request.max.bytes``, ``queued.max.requests``,
``connections.max.idle.ms``, the ``max.connections*`` family, ...), as one frozen value the
broker builds from its config and hands to each listener's
:class:`~odradek.server.network.acceptor.KafkaServer`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from odradek.protocol.framing import DEFAULT_MAX_FRAME_SIZE
from odradek.server.connection_quotas import INT_MAX, ConnectionLimits

__all__ = ["DEFAULT_QUEUED_MAX_REQUEST_BYTES", "NetworkConfig"]

DEFAULT_QUEUED_MAX_REQUEST_BYTES = 512 * 1024 * 1024
"""Odradek's ``queued.max.request.bytes`` (Kafka's is -1, unbounded): five maximal
requests, so that no number of connections can make the broker hold more request bytes
than this plus one request (docs/operations.md, "Requests in flight")."""


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    """Network settings, named after Kafka's broker configs, with Kafka's defaults."""

    socket_request_max_bytes: int = DEFAULT_MAX_FRAME_SIZE
    """``socket.request.max.bytes``: largest request frame accepted."""
    queued_max_requests: int = 500
    """``queued.max.requests``: in-flight requests per connection before reading pauses."""
    queued_max_request_bytes: int = DEFAULT_QUEUED_MAX_REQUEST_BYTES
    """``queued.max.request.bytes``: bytes of requests being received or in flight
    broker-wide before reading pauses; -1 (Kafka's default): unbounded."""
    connections_max_idle_ms: int = 600_000
    """``connections.max.idle.ms``: close connections idle this long."""
    socket_send_buffer_bytes: int = 102_400
    """``socket.send.buffer.bytes`` (SO_SNDBUF); -1 keeps the OS default."""
    socket_receive_buffer_bytes: int = 102_400
    """``socket.receive.buffer.bytes`` (SO_RCVBUF); -1 keeps the OS default."""
    write_buffer_high_water_bytes: int = 4 * 1024 * 1024
    """Transport write buffer above which the response writer waits for a drain."""
    shutdown_timeout_ms: int = 30_000
    """How long :meth:`KafkaServer.stop` lets in-flight requests finish."""
    listen_backlog: int = 50
    """``socket.listen.backlog.size``."""
    max_connections: int = INT_MAX
    """``max.connections``: connections held at most; more wait in the backlog (KIP-402)."""
    max_connections_per_ip: int = INT_MAX
    """``max.connections.per.ip``: more from one address are closed at once."""
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    """``max.connections.per.ip.overrides``: per-host maxima, parsed."""
    max_connection_creation_rate: int = INT_MAX
    """``max.connection.creation.rate``: accepts a second, broker-wide (KIP-612)."""
    rejection_log_window_ms: int = 10_000
    """Rejected connections of one cause and host are logged once per window, then counted."""

    def connection_limits(self) -> ConnectionLimits:
        return ConnectionLimits(
            max_connections=self.max_connections,
            max_connections_per_ip=self.max_connections_per_ip,
            max_connections_per_ip_overrides=dict(self.max_connections_per_ip_overrides),
            max_connection_creation_rate=self.max_connection_creation_rate,
        )
