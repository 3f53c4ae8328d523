"""Connection limits at accept: Kafka's ``ConnectionQuotas`` (KIP-402, KIP-612).

How it works (sans-I/O: counts and decisions only, the clock injected; the accept loop in
:mod:`odradek.server.network.acceptor` does the waiting):

- ``max.connections`` (broker-wide, KIP-402). While the broker holds that many
  connections, :meth:`ConnectionQuotas.slot_available` is False and the acceptor does not
  accept: new connections wait in the listen backlog until one closes, as Kafka's
  ``waitForConnectionSlot`` blocks its Acceptor thread. Nothing is dropped. (Kafka's
  Acceptor has already accepted the one connection it blocks on; ours waits before
  accepting, so that one waits in the backlog with the others. A connection counts
  until it is closed, including one whose client has gone but whose answer is pending.)
- ``max.connection.creation.rate`` (broker-wide, per second, KIP-612). Before each accept
  the acceptor asks :meth:`ConnectionQuotas.accept_delay` and waits that long. Kafka
  measures the rate with a windowed ``Rate`` sensor and delays the Acceptor by
  ``(rate - limit) / limit * window``, capped at ``quota.window.size.seconds`` (1 s).
  Here a token bucket holding one second's worth of connections, refilled at the limit,
  gives the same long-run rate and the same allowance for a burst up to the limit; the
  delay is capped at 1 s as in Kafka (so a limit of 0 admits one connection a second).
- ``max.connections.per.ip`` and ``max.connections.per.ip.overrides`` ("host:count,…").
  Checked after accept: a connection from an address that already holds its maximum is
  closed at once (Kafka's ``TooManyConnectionsException``, which the Acceptor answers by
  closing the new socket); existing connections are untouched.

Every accepted connection is counted by :meth:`ConnectionQuotas.inc` and released by
:meth:`ConnectionQuotas.dec` when it closes; ``dec`` calls the release listeners so that
an acceptor waiting for a slot wakes up. One instance may be shared by several listeners
of a broker (``KafkaServer(quotas=...)``), making the limits broker-wide across them, as
in Kafka; a server given none has its own. The four limits are dynamic broker configs
(cluster-wide in Kafka): :meth:`ConnectionQuotas.update_limits` applies new ones at runtime.

Addresses are compared as Java's ``InetAddress.getHostAddress()`` writes them
(:func:`host_address`): the acceptor normalises each peer's address once, at accept, and
the overrides' hosts are read the same way, so an IPv4 client of a dual-stack listener
(``::ffff:10.0.0.7`` on the socket) is ``10.0.0.7`` here, in host ACLs and in the logs.

Not implemented: per-listener ``listener.name.X.max.connections`` and per-IP connection
rate quotas (dynamic ``connection_creation_rate`` client quotas of KIP-612).
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

__all__ = ["INT_MAX", "ConnectionLimits", "ConnectionQuotas", "host_address",
           "parse_per_ip_overrides"]

INT_MAX: Final = 2**31 - 1
# quota.window.size.seconds: Kafka never delays the acceptor longer than one quota window.
MAX_THROTTLE_S: Final = 1.0


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The limits, with Kafka's defaults (no limit)."""

    max_connections: int = INT_MAX
    """``max.connections``: connections the broker holds at most."""
    max_connections_per_ip: int = INT_MAX
    """``max.connections.per.ip``: connections one address holds at most."""
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    """``max.connections.per.ip.overrides``: per host or address, wins over the default."""
    max_connection_creation_rate: int = INT_MAX
    """``max.connection.creation.rate``: new connections a second, broker-wide."""


def parse_per_ip_overrides(text: str) -> dict[str, int]:
    """Parse ``max.connections.per.ip.overrides``: ``host:count`` pairs, comma-separated
    (an IPv6 address keeps its colons: the count is after the last one)."""
    overrides: dict[str, int] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host:
            raise ValueError(f"{item!r} is not host:count")
        try:
            value = int(count.strip())
        except ValueError:
            raise ValueError(f"{item!r}: count {count!r} is not an integer") from None
        if value < 0:
            raise ValueError(f"{item!r}: count must be at least 0")
        overrides[host] = value
    return overrides


_GROUPS: Final = struct.Struct(">8H")


def host_address(host: str, scope_id: int = 0) -> str:
    """``host``, an IP address, as Java's ``InetAddress.getHostAddress()`` writes it (what
    Kafka's ACLs, quotas and logs compare): an IPv4-mapped IPv6 address as IPv4 (Java makes
    it an ``Inet4Address``); IPv6 as eight hex groups, lower case, without leading zeros
    and never compressed (``0:0:0:0:0:0:0:1`` for ``::1``), then ``%`` and the scope: the
    numeric ``scope_id`` of a socket address when non-zero, else the zone written in
    ``host``. Anything that is not an address is returned as it is."""
    text, _, zone = host.partition("%")
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv4Address):
        return str(address)
    mapped = address.ipv4_mapped
    if mapped is not None:
        return str(mapped)
    written = ":".join(f"{group:x}" for group in _GROUPS.unpack(address.packed))
    if scope_id:
        return f"{written}%{scope_id}"
    return f"{written}%{zone}" if zone else written


def _address(host: str) -> str:
    """The canonical text of an address (:func:`host_address`); a host name is resolved
    once (as Kafka's ``InetAddress.getByName``), falling back to the name itself."""
    try:
        ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        try:
            return host_address(socket.gethostbyname(host))
        except OSError:
            return host
    return host_address(host)


class ConnectionQuotas:
    """Connection counts per address and in total, and the creation-rate bucket."""

    def __init__(
        self, limits: ConnectionLimits | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = limits or ConnectionLimits()
        self._clock = clock
        self._per_ip_overrides = {
            _address(host): count
            for host, count in self.limits.max_connections_per_ip_overrides.items()
        }
        self._counts: dict[str, int] = {}
        self.total = 0
        rate = self.limits.max_connection_creation_rate
        self._rate: float | None = None if rate >= INT_MAX else float(rate)
        self._tokens = float(rate) if self._rate is not None else 0.0
        self._refilled_at = clock()
        self._release_listeners: list[Callable[[], None]] = []

    def update_limits(self, limits: ConnectionLimits) -> None:
        """New limits at runtime (a dynamic broker config, Kafka's DynamicConnectionQuota).
        Connections already held stay even above a lowered limit; new ones follow the new
        limits. The creation-rate bucket starts full at a new rate."""
        self.limits = limits
        self._per_ip_overrides = {
            _address(host): count for host, count in limits.max_connections_per_ip_overrides.items()
        }
        rate = None if limits.max_connection_creation_rate >= INT_MAX else float(
            limits.max_connection_creation_rate)
        if rate != self._rate:
            self._rate = rate
            self._tokens = rate if rate is not None else 0.0
            self._refilled_at = self._clock()
        for listener in list(self._release_listeners):  # a raised max.connections frees slots
            listener()

    # -- the broker-wide limits, before accept ------------------------------------------

    def slot_available(self) -> bool:
        """False while the broker holds ``max.connections``: the acceptor waits."""
        return self.total < self.limits.max_connections

    def accept_delay(self) -> float:
        """Seconds to wait before the next accept to stay within
        ``max.connection.creation.rate``; the accept is counted against the rate."""
        if self._rate is None:
            return 0.0
        now = self._clock()
        capacity = max(self._rate, 1.0)
        self._tokens = min(capacity, self._tokens + (now - self._refilled_at) * self._rate)
        self._refilled_at = now
        self._tokens -= 1.0
        if self._tokens >= 0.0:
            return 0.0
        if self._rate <= 0.0:
            delay = MAX_THROTTLE_S
        else:
            delay = min(-self._tokens / self._rate, MAX_THROTTLE_S)
        # The accept happens after the delay: the bucket refills for it meanwhile.
        self._tokens = min(self._tokens + delay * self._rate, 0.0) if self._rate else 0.0
        self._refilled_at = now + delay
        return delay

    def refund_accept(self) -> None:
        """The accept :meth:`accept_delay` counted found no connection: give it back."""
        if self._rate is not None:
            self._tokens = min(self._tokens + 1.0, max(self._rate, 1.0))

    # -- per connection -----------------------------------------------------------------

    def max_for(self, host: str) -> int:
        return self._per_ip_overrides.get(_address(host), self.limits.max_connections_per_ip)

    def inc(self, host: str) -> int | None:
        """Count a new connection from ``host``. Returns None if it may stay, or the
        per-address maximum it would exceed: the caller then closes it at once (the
        connection is not counted)."""
        address = _address(host)
        count = self._counts.get(address, 0)
        limit = self._per_ip_overrides.get(address, self.limits.max_connections_per_ip)
        if count >= limit:
            return limit
        self._counts[address] = count + 1
        self.total += 1
        return None

    def dec(self, host: str) -> None:
        """A counted connection from ``host`` closed: free its slot."""
        address = _address(host)
        count = self._counts.get(address, 0)
        if count <= 0:
            raise ValueError(f"no connection from {address} to release")
        if count == 1:
            del self._counts[address]
        else:
            self._counts[address] = count - 1
        self.total -= 1
        for listener in list(self._release_listeners):
            listener()

    def get(self, host: str) -> int:
        return self._counts.get(_address(host), 0)

    def add_release_listener(self, listener: Callable[[], None]) -> None:
        self._release_listeners.append(listener)

    def remove_release_listener(self, listener: Callable[[], None]) -> None:
        if listener in self._release_listeners:
            self._release_listeners.remove(listener)
