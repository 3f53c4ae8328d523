"""Client quotas: byte rates, request time and mutation rates per client id, by throttling.

Follows Kafka's ``ClientQuotaManager`` (KIP-13, KIP-219), ``ControllerMutationQuotaManager``
(KIP-599) and the ``Rate`` / ``SampledStat`` metrics they rest on:

- *Entities.* A quota is set for one client id (``client-id=X``) or for every client id
  without its own (``client-id=<default>``, Kafka's default entity); the specific one wins.
  Each client id is measured on its own, also when its quota is the default. Quotas per
  user (and user + client id) need authenticated principals, which Odradek does not have
  yet: AlterClientQuotas refuses user entities, and so does ``odradek configs``.
- *Measure.* Each (quota kind, client id) has a windowed :class:`Rate`: ``quota.window.num``
  samples (11) of ``quota.window.size.seconds`` (1 s) each. A sample older than the whole
  window is reset; the rate is the samples' total divided by the time they span, counted
  as at least ``num - 1`` full windows, so a client that just started is measured over 10 s,
  not over its first milliseconds (Kafka's ``Rate.windowSize``).
- *Throttle.* A value is recorded first, then the rate is checked against the quota. Over
  it, the throttle time is ``(rate - quota) / quota * window`` ms: how long the client must
  stay silent for the rate to come back to the quota (Kafka's ``QuotaUtils.throttleTime``).
  The handler answers at once with that ``throttle_time_ms`` and mutes the channel
  (KIP-219): the network layer reads nothing more from the connection until the time has
  passed (:meth:`~odradek.protocol.registry.Channel.throttle`). Produce records the
  request's size and appends anyway (nothing is lost); Fetch (consumers only, never
  followers) records the records it would send and, when throttled, sends none of them (an
  empty response: the data is read again after the throttle) and takes the value back
  out, as Kafka does; a fetch asks for at most what the quota allows in one window
  (``quota * (num - 1) * size``), so a large ``fetch.max.bytes`` cannot throttle forever.
- *Request time (KIP-124).* ``request_percentage`` is the share of one thread a client may
  keep busy (200: two threads' worth), measured as the time its requests take on the event
  loop, from the frame read to the answer built, in percent-seconds per second; over it,
  the throttle is at most one ``quota.window.size.seconds`` (Kafka's
  ``ClientRequestQuotaManager``). ApiVersions and followers' fetches are exempt. Odradek
  runs a request's steps on one loop, interleaved with others', so only a request answered
  without waiting is counted (nearly all: a Fetch that waits in the purgatory, an acks=all
  Produce, a JoinGroup are not); the throttle time goes into the answers built from kio
  entities, while the hot-path answers (Produce, Fetch, Metadata) carry only their own
  quotas' and the request quota mutes the connection alone for them.
- *Controller mutations (KIP-599).* ``controller_mutation_rate`` is partitions created,
  added or deleted a second (CreateTopics, CreatePartitions, DeleteTopics), measured by a
  token bucket (:class:`ControllerMutationQuotaManager`, Kafka's ``TokenBucket``): it holds
  at most ``quota * controller.quota.window.num * controller.quota.window.size.seconds``
  tokens, refills at the quota, and each mutation takes its partitions' worth; below zero
  the client is over its quota, for ``-tokens / quota`` seconds. Requests at versions that
  know THROTTLING_QUOTA_EXCEEDED (CreateTopics v6+, CreatePartitions v3+, DeleteTopics
  v5+) are strict: a topic reached while the bucket is below zero is refused with that
  error (one already started may take the bucket below zero). Older versions are
  permissive: everything is done and recorded. Either way the answer carries the throttle
  time and the channel is muted for it.
- *Hot path.* With no quota of a kind set, :attr:`ClientQuotaManager.active` is False and
  the handler's only cost is reading that attribute.
- *Bounded.* A client id's rate unused for a whole window is back to its initial state, so
  it is dropped (swept at most once per window); only client ids seen in the last window
  are kept.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "CLIENT_ID",
    "CLIENT_QUOTA_KEYS",
    "CONSUMER_BYTE_RATE",
    "CONTROLLER_MUTATION_RATE",
    "DEFAULT_ENTITY",
    "ENTITY_TYPES",
    "IP",
    "NANOS_TO_PERCENTAGE",
    "PRODUCER_BYTE_RATE",
    "REQUEST_PERCENTAGE",
    "USER",
    "ClientQuotaManager",
    "ClientQuotas",
    "ClientRequestQuotaManager",
    "ControllerMutationQuotaManager",
    "MutationQuota",
    "QuotaWindow",
    "Rate",
]

PRODUCER_BYTE_RATE: Final = "producer_byte_rate"
CONSUMER_BYTE_RATE: Final = "consumer_byte_rate"
REQUEST_PERCENTAGE: Final = "request_percentage"
CONTROLLER_MUTATION_RATE: Final = "controller_mutation_rate"
# The keys a client-id entity may carry, with whether the value must be a whole number
# (Kafka's QuotaConfigs: the byte rates are longs, the others doubles).
CLIENT_QUOTA_KEYS: Final[Mapping[str, bool]] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}
# Nanoseconds on the event loop as percent-seconds of one thread (Kafka's
# ClientQuotaManagerConfig.NanosToPercentagePerSecond).
NANOS_TO_PERCENTAGE: Final = 100.0 / 1e9
# KIP-546 entity types.
USER: Final = "user"
CLIENT_ID: Final = "client-id"
IP: Final = "ip"
ENTITY_TYPES: Final = frozenset({USER, CLIENT_ID, IP})
# The default entity's name where one is stored (ZooKeeper's /config/clients/<default>).
DEFAULT_ENTITY: Final = "<default>"


@dataclass(frozen=True, slots=True)
class QuotaWindow:
    """``quota.window.num`` samples of ``quota.window.size.seconds`` each."""

    samples: int = 11
    size_s: float = 1.0

    @property
    def size_ms(self) -> float:
        return self.size_s * 1000.0


class Rate:
    """A windowed rate (Kafka's ``Rate`` over a ``SampledStat``), in units per second."""

    __slots__ = ("_current", "_starts", "_values", "_window", "last_used")

    def __init__(self, window: QuotaWindow, now_ms: float) -> None:
        self._window = window
        self._starts = [now_ms]
        self._values = [0.0]
        self._current = 0
        self.last_used = now_ms

    def record(self, value: float, now_ms: float) -> None:
        self.last_used = now_ms
        window = self._window
        if now_ms - self._starts[self._current] >= window.size_ms:  # sample complete
            self._current = (self._current + 1) % window.samples
            if self._current >= len(self._starts):
                self._starts.append(now_ms)
                self._values.append(0.0)
            else:
                self._starts[self._current] = now_ms
                self._values[self._current] = 0.0
        self._values[self._current] += value

    def _purge(self, now_ms: float) -> None:
        expire = self._window.samples * self._window.size_ms
        for i, start in enumerate(self._starts):
            if now_ms - start >= expire:
                self._starts[i] = now_ms
                self._values[i] = 0.0

    def window_ms(self, now_ms: float) -> float:
        """The time the samples span, at least ``samples - 1`` full windows."""
        self._purge(now_ms)
        window = self._window
        elapsed = now_ms - min(self._starts)
        full = int(elapsed // window.size_ms)
        if full < window.samples - 1:
            elapsed += (window.samples - 1 - full) * window.size_ms
        return max(elapsed, 1.0)

    def measure(self, now_ms: float) -> float:
        span = self.window_ms(now_ms)
        return sum(self._values) / (span / 1000.0)


class ClientQuotaManager:
    """One quota kind (e.g. ``producer_byte_rate``): the bounds per client id and a
    :class:`Rate` per client id measured against its bound."""

    __slots__ = ("_default", "_last_sweep", "_overrides", "_rates", "active", "key", "window")

    def __init__(self, key: str, window: QuotaWindow) -> None:
        self.key = key
        self.window = window
        self._overrides: dict[str, float] = {}
        self._default: float | None = None
        self._rates: dict[str, Rate] = {}
        self._last_sweep = 0.0
        self.active = False
        """Whether any quota of this kind is set: the hot path's single check."""

    def set_quotas(self, overrides: Mapping[str, float], default: float | None) -> None:
        self._overrides = dict(overrides)
        self._default = default
        self.active = bool(self._overrides) or default is not None
        if not self.active:
            self._rates.clear()

    def quota(self, client_id: str | None) -> float | None:
        """The bound for ``client_id``: its own, else the default, else none."""
        bound = self._overrides.get(client_id or "")
        return self._default if bound is None else bound

    def max_value_in_window(self, client_id: str | None) -> float:
        """What one request may take at most without throttling forever (Kafka's
        ``getMaxValueInQuotaWindow``)."""
        bound = self.quota(client_id)
        if bound is None:
            return math.inf
        return bound * (self.window.samples - 1) * self.window.size_s

    def record(self, client_id: str | None, value: float, now_ms: float | None = None) -> int:
        """Record ``value`` for ``client_id``; the throttle time in ms (0: within quota)."""
        bound = self.quota(client_id)
        if bound is None:
            return 0
        if now_ms is None:
            now_ms = time.monotonic() * 1000.0
        rate = self._rate(client_id or "", now_ms)
        rate.record(value, now_ms)
        observed = rate.measure(now_ms)
        if observed <= bound:
            return 0
        return round((observed - bound) / bound * rate.window_ms(now_ms))

    def unrecord(self, client_id: str | None, value: float, now_ms: float | None = None) -> None:
        """Take back a recorded value (a throttled fetch sends no data)."""
        rate = self._rates.get(client_id or "")
        if rate is not None:
            rate.record(-value, now_ms if now_ms is not None else time.monotonic() * 1000.0)

    def throttle_time(self, client_id: str | None, now_ms: float | None = None) -> int:
        """How long ``client_id`` must wait for its rate to be back within its quota,
        without recording anything (KIP-599's check before a mutation)."""
        bound = self.quota(client_id)
        rate = self._rates.get(client_id or "")
        if bound is None or rate is None:
            return 0
        if now_ms is None:
            now_ms = time.monotonic() * 1000.0
        observed = rate.measure(now_ms)
        if observed <= bound:
            return 0
        return round((observed - bound) / bound * rate.window_ms(now_ms))

    @property
    def tracked(self) -> int:
        """Client ids measured now (bounded by the sweep)."""
        return len(self._rates)

    def _rate(self, client_id: str, now_ms: float) -> Rate:
        rate = self._rates.get(client_id)
        if rate is None:
            self._sweep(now_ms)
            rate = self._rates[client_id] = Rate(self.window, now_ms)
        return rate

    def _sweep(self, now_ms: float) -> None:
        full = self.window.samples * self.window.size_ms
        if now_ms - self._last_sweep < self.window.size_ms:
            return
        self._last_sweep = now_ms
        idle = [c for c, r in self._rates.items() if now_ms - r.last_used >= full]
        for client_id in idle:
            del self._rates[client_id]


class _TokenBucket:
    __slots__ = ("last_ms", "tokens")

    def __init__(self, tokens: float, now_ms: float) -> None:
        self.tokens = tokens
        self.last_ms = now_ms


class ControllerMutationQuotaManager:
    """``controller_mutation_rate`` per client id: a token bucket each (KIP-599)."""

    __slots__ = ("_buckets", "_default", "_lock", "_overrides", "active", "key", "window")

    def __init__(self, window: QuotaWindow) -> None:
        self.key = CONTROLLER_MUTATION_RATE
        self.window = window
        self._overrides: dict[str, float] = {}
        self._default: float | None = None
        self._buckets: dict[str, _TokenBucket] = {}
        # Topic changes may run in a worker thread (cluster mode).
        self._lock = threading.Lock()
        self.active = False

    def set_quotas(self, overrides: Mapping[str, float], default: float | None) -> None:
        with self._lock:
            self._overrides = dict(overrides)
            self._default = default
            self.active = bool(self._overrides) or default is not None
            if not self.active:
                self._buckets.clear()

    def quota(self, client_id: str | None) -> float | None:
        bound = self._overrides.get(client_id or "")
        return self._default if bound is None else bound

    def _bucket(self, client_id: str, quota: float, now_ms: float) -> _TokenBucket:
        burst = quota * self.window.samples * self.window.size_s
        bucket = self._buckets.get(client_id)
        if bucket is None:
            if len(self._buckets) >= 1024:  # full buckets carry no state: drop them
                for key in [k for k, b in self._buckets.items() if b.tokens >= burst]:
                    del self._buckets[key]
            bucket = self._buckets[client_id] = _TokenBucket(burst, now_ms)
        else:
            elapsed_s = max(now_ms - bucket.last_ms, 0.0) / 1000.0
            bucket.tokens = min(burst, bucket.tokens + quota * elapsed_s)
            bucket.last_ms = now_ms
        return bucket

    def throttle_time(self, client_id: str | None, now_ms: float | None = None) -> int:
        """ms until ``client_id`` is back within its quota (0: it is)."""
        quota = self.quota(client_id)
        if quota is None:
            return 0
        now_ms = time.monotonic() * 1000.0 if now_ms is None else now_ms
        with self._lock:
            bucket = self._bucket(client_id or "", quota, now_ms)
            return 0 if bucket.tokens >= 0 else math.ceil(-bucket.tokens / quota * 1000.0)

    def record(self, client_id: str | None, partitions: int, now_ms: float | None = None) -> None:
        quota = self.quota(client_id)
        if quota is None:
            return
        now_ms = time.monotonic() * 1000.0 if now_ms is None else now_ms
        with self._lock:
            self._bucket(client_id or "", quota, now_ms).tokens -= partitions

    def for_request(self, client_id: str | None, strict: bool) -> MutationQuota:
        return MutationQuota(self, client_id, strict)


class MutationQuota:
    """One request's view of its client's mutation quota (Kafka's
    ``StrictControllerMutationQuota`` / ``PermissiveControllerMutationQuota``)."""

    __slots__ = ("client_id", "manager", "strict")

    def __init__(
        self, manager: ControllerMutationQuotaManager, client_id: str | None, strict: bool
    ) -> None:
        self.manager = manager
        self.client_id = client_id
        self.strict = strict

    def exceeded(self) -> bool:
        """Strict requests: must the next mutation be refused?"""
        return self.strict and self.manager.throttle_time(self.client_id) > 0

    def record(self, partitions: int) -> None:
        self.manager.record(self.client_id, partitions)

    def throttle_time(self) -> int:
        return self.manager.throttle_time(self.client_id)


class ClientRequestQuotaManager(ClientQuotaManager):
    """``request_percentage``: throttles capped at one sample window (Kafka's)."""

    __slots__ = ()

    def record(self, client_id: str | None, value: float, now_ms: float | None = None) -> int:
        return min(super().record(client_id, value, now_ms), round(self.window.size_ms))


class ClientQuotas:
    """The broker's quota managers, fed with the stored client-id entities."""

    __slots__ = ("controller_mutation", "fetch", "produce", "request")

    def __init__(
        self, window: QuotaWindow | None = None, controller_window: QuotaWindow | None = None
    ) -> None:
        window = window or QuotaWindow()
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, window)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, window)
        self.request = ClientRequestQuotaManager(REQUEST_PERCENTAGE, window)
        self.controller_mutation = ControllerMutationQuotaManager(
            controller_window or QuotaWindow()
        )

    def managers(self) -> dict[str, ClientQuotaManager | ControllerMutationQuotaManager]:
        return {m.key: m for m in (self.produce, self.fetch, self.request,
                                    self.controller_mutation)}

    def apply(self, entities: Mapping[str, Mapping[str, str]]) -> None:
        """Take the stored quotas: client id (or :data:`DEFAULT_ENTITY`) -> key -> value."""
        for key, manager in self.managers().items():
            overrides: dict[str, float] = {}
            default: float | None = None
            for entity, configs in entities.items():
                text = configs.get(key)
                if text is None:
                    continue
                try:
                    value = float(text)
                except ValueError:
                    continue
                if entity == DEFAULT_ENTITY:
                    default = value
                else:
                    overrides[entity] = value
            manager.set_quotas(overrides, default)

    def listener(self) -> Callable[[Mapping[str, Mapping[str, str]]], None]:
        return self.apply
