"""Incremental fetch sessions (KIP-227): Kafka's ``FetchSession``, ``FetchSessionCache`` and
``FetchManager.newContext``.

How it works
------------
A consumer (or follower) that fetches many partitions sends, without sessions, every
partition in every request and gets every partition back, data or not. With a session the
broker remembers the partition list, and the next requests carry only what changed:

- ``session_id`` 0, ``epoch`` 0 (INITIAL): a *full* fetch. The broker answers every
  partition and, if the cache can make room, creates a session whose id (nonzero,
  random) is returned; the next epoch the client must send is 1.
- ``session_id`` S, ``epoch`` 0: S is closed, then as above (a new session is created).
- ``session_id`` S, ``epoch`` -1 (FINAL): S is closed and the fetch is sessionless.
- ``session_id`` 0, ``epoch`` -1: a sessionless full fetch (response session id 0).
- ``session_id`` S, ``epoch`` E >= 1: an *incremental* fetch. Unknown S is
  FETCH_SESSION_ID_NOT_FOUND; E other than the session's expected next epoch is
  INVALID_FETCH_SESSION_EPOCH; a session created by id (v13+) used by name or vice
  versa is FETCH_SESSION_TOPIC_ID_ERROR. Otherwise the request's partitions are added
  to the session or update its cached fetch offset / max bytes, ``forgotten_topics_data``
  removes partitions, the expected epoch moves on (wrapping to 1 after 2^31-1), and every
  partition of the session is read from its cached fetch offset. The response holds only
  the partitions that must be reported (``CachedPartition.maybe_update``): those returning
  records, whose high watermark or log start offset changed since last reported, or with
  an error (the cached high watermark is then reset to -1 so that the partition is
  reported again once the error clears). Partitions that returned records are moved to
  the end of the session's order, so that under ``max_bytes`` every partition gets its
  turn. A session left with no partitions is removed and the fetch is sessionless.

The cache is bounded by ``max.incremental.fetch.session.cache.slots`` (default 1000;
0 disables sessions). When it is full, a new session may take the place of
(Kafka's ``tryEvict``):
1. the least recently used session idle for longer than
   ``min.incremental.fetch.session.eviction.ms`` (default 120000), if any; else
2. a session *older* than that eviction time (counted from its creation) that ranks
   below the newcomer, sessions ranking by (privileged, number of partitions, id):
   a follower's (privileged) session can thus evict any consumer session, a consumer's
   session only an older consumer session with fewer partitions. A privileged newcomer
   may also evict an unprivileged session that is not yet old.
Otherwise no session is created and the full fetch is answered with session id 0.

Departure from Kafka: Kafka only evicts idle sessions when it needs the slot; here idle
sessions are also dropped lazily on every new fetch (the cache keeps sessions in
least-recently-used order, so this pops from the front and costs nothing when none is
stale). A client that comes back after the eviction time gets FETCH_SESSION_ID_NOT_FOUND
and starts a new session, as it would after an eviction in Kafka.

Sessions are not bound to a connection (as in Kafka): a client may reconnect and carry
on. Session ids are drawn from a CSPRNG so one client cannot guess another's session.

Sans I/O: the cache takes ``now_ms`` from its caller (a monotonic clock in production).
"""

from __future__ import annotations

import secrets
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from odradek.protocol.errors import ErrorCode

__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "CachedPartition",
    "ContextKind",
    "FetchContext",
    "FetchSession",
    "FetchSessionCache",
    "PartitionKey",
    "next_epoch",
]

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 2**31 - 1

PartitionKey = tuple[str | uuid.UUID, int]
"""A session partition: (topic name, or topic id for v13+ sessions; partition index)."""


def next_epoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """What the session remembers of one partition: the request fields (fetch offset, max
    bytes, leader epoch) and the response fields last sent (high watermark, log start)."""

    topic: str | None
    topic_id: uuid.UUID | None
    partition: int
    fetch_offset: int
    max_bytes: int
    leader_epoch: int = -1
    high_watermark: int = -1
    log_start_offset: int = -1

    def key(self, by_id: bool) -> PartitionKey:
        topic = self.topic_id if by_id else self.topic
        assert topic is not None
        return (topic, self.partition)

    def maybe_update(self, records_size: int, high_watermark: int, log_start_offset: int,
                     error_code: int, update: bool = True) -> bool:
        """Must this partition be in an incremental response? Remembers what it sent."""
        must = records_size > 0
        if self.high_watermark != high_watermark:
            must = True
            if update:
                self.high_watermark = high_watermark
        if self.log_start_offset != log_start_offset:
            must = True
            if update:
                self.log_start_offset = log_start_offset
        if error_code != ErrorCode.none:
            must = True
            if update:
                self.high_watermark = -1
        return must


@dataclass(eq=False, slots=True)
class FetchSession:
    id: int
    privileged: bool
    uses_topic_ids: bool
    creation_ms: int
    last_used_ms: int
    epoch: int = 1
    partitions: OrderedDict[PartitionKey, CachedPartition] = field(default_factory=OrderedDict)

    @property
    def size(self) -> int:
        return len(self.partitions)

    def rank(self) -> tuple[bool, int, int]:
        """Kafka's ``EvictableKey`` order: (privileged, size, id)."""
        return (self.privileged, self.size, self.id)

    def update(self, wanted: Iterable[CachedPartition],
               forgotten: Iterable[PartitionKey]) -> tuple[int, int, int]:
        """Apply an incremental request; returns (added, updated, removed) counts."""
        added = updated = removed = 0
        by_id = self.uses_topic_ids
        for p in wanted:
            key = p.key(by_id)
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = p
                added += 1
            else:
                cached.fetch_offset = p.fetch_offset
                cached.max_bytes = p.max_bytes
                cached.leader_epoch = p.leader_epoch
                if p.topic is not None:
                    cached.topic = p.topic
                updated += 1
        for key in forgotten:
            if self.partitions.pop(key, None) is not None:
                removed += 1
        return added, updated, removed

    def move_to_end(self, p: CachedPartition) -> None:
        key = p.key(self.uses_topic_ids)
        if key in self.partitions:
            self.partitions.move_to_end(key)


class ContextKind(Enum):
    ERROR = "error"
    SESSIONLESS = "sessionless"
    FULL = "full"
    INCREMENTAL = "incremental"


@dataclass(slots=True)
class FetchContext:
    """What a Fetch request amounts to once its session fields are interpreted."""

    kind: ContextKind
    partitions: list[CachedPartition]
    error: ErrorCode = ErrorCode.none
    session: FetchSession | None = None


class FetchSessionCache:
    def __init__(self, max_slots: int = 1000, eviction_ms: int = 120_000) -> None:
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        # least recently used first
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        return self._sessions.pop(session_id, None)

    def touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms
        if session.id in self._sessions:
            self._sessions.move_to_end(session.id)

    def expire_idle(self, now_ms: int) -> int:
        """Drop sessions idle for longer than the eviction time; returns how many."""
        expired = 0
        while self._sessions:
            oldest = next(iter(self._sessions.values()))
            if now_ms - oldest.last_used_ms <= self.eviction_ms:
                break
            del self._sessions[oldest.id]
            expired += 1
        return expired

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        if len(self._sessions) < self.max_slots:
            return True
        if not self._sessions:
            return False  # no slots at all
        oldest = next(iter(self._sessions.values()))
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            del self._sessions[oldest.id]
            self.evictions += 1
            return True
        newcomer = (privileged, size, 0)
        candidates = [
            s for s in self._sessions.values()
            if now_ms - s.creation_ms > self.eviction_ms or (privileged and not s.privileged)
        ]
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.rank)
        if newcomer < victim.rank():
            return False
        del self._sessions[victim.id]
        self.evictions += 1
        return True

    def maybe_create(self, privileged: bool, uses_topic_ids: bool,
                     partitions: Iterable[CachedPartition], now_ms: int) -> FetchSession | None:
        """A new session holding ``partitions``, or ``None`` when there is no room."""
        parts = list(partitions)
        if self.max_slots <= 0 or not self._try_evict(privileged, len(parts), now_ms):
            return None
        session_id = 0
        while session_id == INVALID_SESSION_ID or session_id in self._sessions:
            session_id = secrets.randbelow(_MAX_EPOCH) + 1
        session = FetchSession(session_id, privileged, uses_topic_ids, now_ms, now_ms,
                               epoch=next_epoch(INITIAL_EPOCH))
        for p in parts:
            session.partitions[p.key(uses_topic_ids)] = p
        self._sessions[session_id] = session
        return session

    def new_context(self, session_id: int, epoch: int, wanted: list[CachedPartition],
                    forgotten: list[PartitionKey], uses_topic_ids: bool,
                    now_ms: int) -> FetchContext:
        """Kafka's ``FetchManager.newContext``: interpret the request's session fields."""
        self.expire_idle(now_ms)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)
            kind = ContextKind.SESSIONLESS if epoch == FINAL_EPOCH else ContextKind.FULL
            return FetchContext(kind, wanted)
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext(ContextKind.ERROR, [], ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return FetchContext(ContextKind.ERROR, [], ErrorCode.invalid_fetch_session_epoch)
        if session.uses_topic_ids != uses_topic_ids:
            return FetchContext(ContextKind.ERROR, [], ErrorCode.fetch_session_topic_id_error)
        session.update(wanted, forgotten)
        if not session.partitions:
            self.remove(session.id)
            return FetchContext(ContextKind.SESSIONLESS, wanted)
        self.touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        return FetchContext(ContextKind.INCREMENTAL, list(session.partitions.values()),
                            session=session)
