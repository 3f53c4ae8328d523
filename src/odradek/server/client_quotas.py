"""Client quotas: byte rates, request time and mutation rates per user and client id, by
throttling.

Follows Kafka's ``ClientQuotaManager`` (KIP-13, KIP-219), ``ControllerMutationQuotaManager``
(KIP-599) and the ``Rate`` / ``SampledStat`` metrics they rest on:

- *Entities and precedence (KIP-55).* A quota is set for a user, a client id, or a user and
  a client id together, each name either specific or the type's default entity
  (``<default>``). A request's user is its principal's name (``ANONYMOUS`` on an
  unauthenticated listener, as Kafka's). Its quota is the first stored entity of
  :data:`PRECEDENCE` that matches it, Kafka's ``DefaultQuotaCallback`` order:
  ``/config/users/<user>/clients/<client-id>``, ``users/<user>/clients/<default>``,
  ``users/<user>``, ``users/<default>/clients/<client-id>``,
  ``users/<default>/clients/<default>``, ``users/<default>``, ``clients/<client-id>``,
  ``clients/<default>``. The level matched also says what is measured (Kafka's quota
  metric tags): a level naming a user and a client id (even through a default) measures
  each (user, client id) pair on its own, a user level each user across its client ids, a
  client-id level each client id across users. With only client-id quotas stored, the
  user levels are not even looked at.
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
from typing import Final, TypeAlias

__all__ = [
    "ANONYMOUS_USER",
    "CLIENT_ID",
    "CLIENT_QUOTA_KEYS",
    "CONSUMER_BYTE_RATE",
    "CONTROLLER_MUTATION_RATE",
    "DEFAULT_ENTITY",
    "ENTITY_TYPES",
    "IP",
    "NANOS_TO_PERCENTAGE",
    "PRECEDENCE",
    "PRODUCER_BYTE_RATE",
    "REQUEST_PERCENTAGE",
    "USER",
    "ClientQuotaManager",
    "ClientQuotas",
    "ClientRequestQuotaManager",
    "ControllerMutationQuotaManager",
    "MutationQuota",
    "QuotaEntity",
    "QuotaLevel",
    "QuotaWindow",
    "Rate",
    "principal_user",
    "resolve_quota",
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

QuotaEntity: TypeAlias = tuple[str | None, str | None]
"""(user, client id) of a stored quota entity, or a quota's metric tags: a name,
:data:`DEFAULT_ENTITY`, or None where the entity has no such component."""

_NAME: Final = "name"  # the request's own user or client id
_DEFAULT: Final = "default"  # the type's default entity
_ABSENT: Final = "absent"  # no such component


@dataclass(frozen=True, slots=True)
class QuotaLevel:
    """One row of the precedence table: the stored entity it looks for, and whether the
    quota is then measured per user and per client id (Kafka's metric tags)."""

    user: str
    client_id: str
    per_user: bool
    per_client_id: bool

    def entity(self, user: str, client_id: str) -> QuotaEntity:
        return (_component(self.user, user), _component(self.client_id, client_id))

    def tags(self, user: str, client_id: str) -> QuotaEntity:
        return (user if self.per_user else None, client_id if self.per_client_id else None)


def _component(kind: str, name: str) -> str | None:
    if kind == _NAME:
        return name
    return DEFAULT_ENTITY if kind == _DEFAULT else None


# KIP-55's order, most specific first (Kafka's DefaultQuotaCallback.quotaMetricTags).
PRECEDENCE: Final = (
    QuotaLevel(_NAME, _NAME, True, True),  # /config/users/<user>/clients/<client-id>
    QuotaLevel(_NAME, _DEFAULT, True, True),  # /config/users/<user>/clients/<default>
    QuotaLevel(_NAME, _ABSENT, True, False),  # /config/users/<user>
    QuotaLevel(_DEFAULT, _NAME, True, True),  # /config/users/<default>/clients/<client-id>
    QuotaLevel(_DEFAULT, _DEFAULT, True, True),  # /config/users/<default>/clients/<default>
    QuotaLevel(_DEFAULT, _ABSENT, True, False),  # /config/users/<default>
    QuotaLevel(_ABSENT, _NAME, False, True),  # /config/clients/<client-id>
    QuotaLevel(_ABSENT, _DEFAULT, False, True),  # /config/clients/<default>
)
_CLIENT_LEVELS: Final = PRECEDENCE[6:]
ANONYMOUS_USER: Final = "ANONYMOUS"


def principal_user(principal: str) -> str:
    """The quota user of a ``KafkaPrincipal`` string (``"User:alice"`` -> ``alice``)."""
    return principal.partition(":")[2] or principal


def resolve_quota(
    quotas: Mapping[QuotaEntity, float], user: str, client_id: str, user_quotas: bool = True,
) -> tuple[QuotaEntity, float] | None:
    """(metric tags, bound) of the most specific stored entity matching ``user`` and
    ``client_id``; None: no quota. ``user_quotas`` False skips the user levels (none is
    stored)."""
    for level in PRECEDENCE if user_quotas else _CLIENT_LEVELS:
        bound = quotas.get(level.entity(user, client_id))
        if bound is not None:
            return level.tags(user, client_id), bound
    return None


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


class _Bounds:
    """The stored bounds of one quota kind, by entity, and the precedence walk over them."""

    __slots__ = ("_quotas", "_user_quotas")

    def __init__(self) -> None:
        self._quotas: dict[QuotaEntity, float] = {}
        self._user_quotas = False

    def set(self, quotas: Mapping[QuotaEntity, float]) -> bool:
        """Take ``quotas``; whether any is set."""
        self._quotas = dict(quotas)
        self._user_quotas = any(user is not None for user, _ in self._quotas)
        return bool(self._quotas)

    def resolve(self, client_id: str | None, user: str) -> tuple[QuotaEntity, float] | None:
        return resolve_quota(self._quotas, user, client_id or "", self._user_quotas)


class ClientQuotaManager:
    """One quota kind (e.g. ``producer_byte_rate``): the bounds per entity and a
    :class:`Rate` per measured entity (its metric tags) against its bound."""

    __slots__ = ("_bounds", "_last_sweep", "_rates", "active", "key", "window")

    def __init__(self, key: str, window: QuotaWindow) -> None:
        self.key = key
        self.window = window
        self._bounds = _Bounds()
        self._rates: dict[QuotaEntity, Rate] = {}
        self._last_sweep = 0.0
        self.active = False
        """Whether any quota of this kind is set: the hot path's single check."""

    def set_quotas(self, quotas: Mapping[QuotaEntity, float]) -> None:
        self.active = self._bounds.set(quotas)
        if not self.active:
            self._rates.clear()

    def quota(self, client_id: str | None, user: str = ANONYMOUS_USER) -> float | None:
        """The bound for the client: the most specific stored entity's, or none."""
        found = self._bounds.resolve(client_id, user)
        return None if found is None else found[1]

    def max_value_in_window(self, client_id: str | None, user: str = ANONYMOUS_USER) -> float:
        """What one request may take at most without throttling forever (Kafka's
        ``getMaxValueInQuotaWindow``)."""
        bound = self.quota(client_id, user)
        if bound is None:
            return math.inf
        return bound * (self.window.samples - 1) * self.window.size_s

    def record(self, client_id: str | None, value: float, now_ms: float | None = None,
               user: str = ANONYMOUS_USER) -> int:
        """Record ``value`` for the client; the throttle time in ms (0: within quota)."""
        found = self._bounds.resolve(client_id, user)
        if found is None:
            return 0
        tags, bound = found
        if now_ms is None:
            now_ms = time.monotonic() * 1000.0
        rate = self._rate(tags, now_ms)
        rate.record(value, now_ms)
        observed = rate.measure(now_ms)
        if observed <= bound:
            return 0
        return round((observed - bound) / bound * rate.window_ms(now_ms))

    def unrecord(self, client_id: str | None, value: float, now_ms: float | None = None,
                 user: str = ANONYMOUS_USER) -> None:
        """Take back a recorded value (a throttled fetch sends no data)."""
        found = self._bounds.resolve(client_id, user)
        rate = None if found is None else self._rates.get(found[0])
        if rate is not None:
            rate.record(-value, now_ms if now_ms is not None else time.monotonic() * 1000.0)

    def throttle_time(self, client_id: str | None, now_ms: float | None = None,
                      user: str = ANONYMOUS_USER) -> int:
        """How long the client must wait for its rate to be back within its quota,
        without recording anything (KIP-599's check before a mutation)."""
        found = self._bounds.resolve(client_id, user)
        rate = None if found is None else self._rates.get(found[0])
        if found is None or rate is None:
            return 0
        bound = found[1]
        if now_ms is None:
            now_ms = time.monotonic() * 1000.0
        observed = rate.measure(now_ms)
        if observed <= bound:
            return 0
        return round((observed - bound) / bound * rate.window_ms(now_ms))

    @property
    def tracked(self) -> int:
        """Entities measured now (bounded by the sweep)."""
        return len(self._rates)

    def measured(self) -> list[QuotaEntity]:
        """The metric tags (user, client id) of the entities measured now."""
        return list(self._rates)

    def rates(self, now_ms: float | None = None) -> list[tuple[QuotaEntity, float]]:
        """Each measured entity's rate now (Kafka's ``byte-rate`` / ``request-time``
        sensors, tagged with the user and client id the quota resolved to)."""
        now_ms = time.monotonic() * 1000.0 if now_ms is None else now_ms
        return [(tags, rate.measure(now_ms)) for tags, rate in self._rates.items()]

    def _rate(self, tags: QuotaEntity, now_ms: float) -> Rate:
        rate = self._rates.get(tags)
        if rate is None:
            self._sweep(now_ms)
            rate = self._rates[tags] = Rate(self.window, now_ms)
        return rate

    def _sweep(self, now_ms: float) -> None:
        full = self.window.samples * self.window.size_ms
        if now_ms - self._last_sweep < self.window.size_ms:
            return
        self._last_sweep = now_ms
        idle = [t for t, r in self._rates.items() if now_ms - r.last_used >= full]
        for tags in idle:
            del self._rates[tags]


class _TokenBucket:
    __slots__ = ("last_ms", "tokens")

    def __init__(self, tokens: float, now_ms: float) -> None:
        self.tokens = tokens
        self.last_ms = now_ms


class ControllerMutationQuotaManager:
    """``controller_mutation_rate`` per measured entity: a token bucket each (KIP-599)."""

    __slots__ = ("_bounds", "_buckets", "_lock", "active", "key", "window")

    def __init__(self, window: QuotaWindow) -> None:
        self.key = CONTROLLER_MUTATION_RATE
        self.window = window
        self._bounds = _Bounds()
        self._buckets: dict[QuotaEntity, _TokenBucket] = {}
        # Topic changes may run in a worker thread (cluster mode).
        self._lock = threading.Lock()
        self.active = False

    def set_quotas(self, quotas: Mapping[QuotaEntity, float]) -> None:
        with self._lock:
            self.active = self._bounds.set(quotas)
            if not self.active:
                self._buckets.clear()

    def quota(self, client_id: str | None, user: str = ANONYMOUS_USER) -> float | None:
        found = self._bounds.resolve(client_id, user)
        return None if found is None else found[1]

    def _bucket(self, tags: QuotaEntity, quota: float, now_ms: float) -> _TokenBucket:
        burst = quota * self.window.samples * self.window.size_s
        bucket = self._buckets.get(tags)
        if bucket is None:
            if len(self._buckets) >= 1024:  # full buckets carry no state: drop them
                for key in [k for k, b in self._buckets.items() if b.tokens >= burst]:
                    del self._buckets[key]
            bucket = self._buckets[tags] = _TokenBucket(burst, now_ms)
        else:
            elapsed_s = max(now_ms - bucket.last_ms, 0.0) / 1000.0
            bucket.tokens = min(burst, bucket.tokens + quota * elapsed_s)
            bucket.last_ms = now_ms
        return bucket

    def throttle_time(self, client_id: str | None, now_ms: float | None = None,
                      user: str = ANONYMOUS_USER) -> int:
        """ms until the client is back within its quota (0: it is)."""
        found = self._bounds.resolve(client_id, user)
        if found is None:
            return 0
        tags, quota = found
        now_ms = time.monotonic() * 1000.0 if now_ms is None else now_ms
        with self._lock:
            bucket = self._bucket(tags, quota, now_ms)
            return 0 if bucket.tokens >= 0 else math.ceil(-bucket.tokens / quota * 1000.0)

    def record(self, client_id: str | None, partitions: int, now_ms: float | None = None,
               user: str = ANONYMOUS_USER) -> None:
        found = self._bounds.resolve(client_id, user)
        if found is None:
            return
        tags, quota = found
        now_ms = time.monotonic() * 1000.0 if now_ms is None else now_ms
        with self._lock:
            self._bucket(tags, quota, now_ms).tokens -= partitions

    def for_request(self, client_id: str | None, strict: bool,
                    user: str = ANONYMOUS_USER) -> MutationQuota:
        return MutationQuota(self, client_id, strict, user)


class MutationQuota:
    """One request's view of its client's mutation quota (Kafka's
    ``StrictControllerMutationQuota`` / ``PermissiveControllerMutationQuota``)."""

    __slots__ = ("client_id", "manager", "strict", "user")

    def __init__(
        self, manager: ControllerMutationQuotaManager, client_id: str | None, strict: bool,
        user: str = ANONYMOUS_USER,
    ) -> None:
        self.manager = manager
        self.client_id = client_id
        self.strict = strict
        self.user = user

    def exceeded(self) -> bool:
        """Strict requests: must the next mutation be refused?"""
        return self.strict and self.manager.throttle_time(self.client_id, user=self.user) > 0

    def record(self, partitions: int) -> None:
        self.manager.record(self.client_id, partitions, user=self.user)

    def throttle_time(self) -> int:
        return self.manager.throttle_time(self.client_id, user=self.user)


class ClientRequestQuotaManager(ClientQuotaManager):
    """``request_percentage``: throttles capped at one sample window (Kafka's)."""

    __slots__ = ()

    def record(self, client_id: str | None, value: float, now_ms: float | None = None,
               user: str = ANONYMOUS_USER) -> int:
        return min(super().record(client_id, value, now_ms, user), round(self.window.size_ms))


class ClientQuotas:
    """The broker's quota managers, fed with the stored quota entities."""

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

    def apply(self, entities: Mapping[QuotaEntity, Mapping[str, str]]) -> None:
        """Take the stored quotas: (user, client id) -> key -> value (see
        :data:`QuotaEntity`)."""
        for key, manager in self.managers().items():
            quotas: dict[QuotaEntity, float] = {}
            for entity, configs in entities.items():
                text = configs.get(key)
                if text is None:
                    continue
                try:
                    quotas[entity] = float(text)
                except ValueError:
                    continue
            manager.set_quotas(quotas)

    def listener(self) -> Callable[[Mapping[QuotaEntity, Mapping[str, str]]], None]:
        return self.apply
