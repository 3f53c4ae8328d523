"""Fetch session state machine (KIP-227), without sockets."""

from __future__ import annotations

import uuid

from odradek.protocol.errors import ErrorCode
from odradek.server.fetch_session import (
    CachedPartition,
    ContextKind,
    FetchSessionCache,
    next_epoch,
)


def cp(topic: str, partition: int, offset: int = 0) -> CachedPartition:
    return CachedPartition(topic, None, partition, offset, 1 << 20)


def full(cache: FetchSessionCache, parts: list[CachedPartition], now: int = 0,
         privileged: bool = False) -> int:
    ctx = cache.new_context(0, 0, parts, [], False, now)
    assert ctx.kind is ContextKind.FULL
    session = cache.maybe_create(privileged, False, ctx.partitions, now)
    return 0 if session is None else session.id


def test_epochs() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(5) == 6
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(-1) == -1


def test_sessionless_and_full() -> None:
    cache = FetchSessionCache()
    ctx = cache.new_context(0, -1, [cp("a", 0)], [], False, 0)
    assert ctx.kind is ContextKind.SESSIONLESS
    sid = full(cache, [cp("a", 0), cp("a", 1)])
    assert sid > 0 and sid in cache
    session = cache.get(sid)
    assert session is not None and session.epoch == 1
    # a full fetch naming the session closes it (and may open another)
    ctx = cache.new_context(sid, 0, [cp("a", 0)], [], False, 1)
    assert ctx.kind is ContextKind.FULL and sid not in cache
    sid2 = full(cache, [cp("a", 0)])
    # epoch -1 closes it and fetches without a session
    ctx = cache.new_context(sid2, -1, [cp("a", 0)], [], False, 2)
    assert ctx.kind is ContextKind.SESSIONLESS and sid2 not in cache and len(cache) == 0


def test_incremental_errors_and_updates() -> None:
    cache = FetchSessionCache()
    sid = full(cache, [cp("a", 0), cp("a", 1), cp("b", 0)])
    assert cache.new_context(sid + 1, 1, [], [], False, 0).error == \
        ErrorCode.fetch_session_id_not_found
    assert cache.new_context(sid, 2, [], [], False, 0).error == \
        ErrorCode.invalid_fetch_session_epoch
    assert cache.new_context(sid, 1, [], [], True, 0).error == \
        ErrorCode.fetch_session_topic_id_error
    # epoch 1: update a-0's offset, add c-0, forget b-0
    ctx = cache.new_context(sid, 1, [cp("a", 0, 42), cp("c", 0)], [("b", 0)], False, 0)
    assert ctx.kind is ContextKind.INCREMENTAL
    assert [(p.topic, p.partition, p.fetch_offset) for p in ctx.partitions] == [
        ("a", 0, 42), ("a", 1, 0), ("c", 0, 0)]
    # a replayed epoch is refused; the next one is accepted
    assert cache.new_context(sid, 1, [], [], False, 0).error == \
        ErrorCode.invalid_fetch_session_epoch
    assert cache.new_context(sid, 2, [], [], False, 0).kind is ContextKind.INCREMENTAL
    # forgetting everything removes the session
    ctx = cache.new_context(sid, 3, [], [("a", 0), ("a", 1), ("c", 0)], False, 0)
    assert ctx.kind is ContextKind.SESSIONLESS and sid not in cache


def test_must_respond_rule() -> None:
    p = cp("a", 0)
    assert p.maybe_update(0, 10, 0, 0)  # first time: hw -1 -> 10
    assert not p.maybe_update(0, 10, 0, 0)  # nothing changed
    assert p.maybe_update(100, 10, 0, 0)  # records
    assert p.maybe_update(0, 11, 0, 0)  # high watermark moved
    assert p.maybe_update(0, 11, 5, 0)  # log start moved
    assert p.maybe_update(0, -1, -1, ErrorCode.offset_out_of_range)  # error
    assert p.maybe_update(0, 11, 5, 0)  # error cleared: reported again (hw reset)
    assert not p.maybe_update(0, 11, 5, 0)


def test_topic_id_sessions() -> None:
    cache = FetchSessionCache()
    tid = uuid.uuid4()
    parts = [CachedPartition("t", tid, 0, 0, 100), CachedPartition("t", tid, 1, 0, 100)]
    ctx = cache.new_context(0, 0, parts, [], True, 0)
    session = cache.maybe_create(False, True, ctx.partitions, 0)
    assert session is not None
    assert list(session.partitions) == [(tid, 0), (tid, 1)]
    ctx = cache.new_context(session.id, 1, [], [(tid, 1)], True, 0)
    assert [p.partition for p in ctx.partitions] == [0]


def test_capacity_and_eviction() -> None:
    cache = FetchSessionCache(max_slots=2, eviction_ms=1000)
    a = full(cache, [cp("a", 0)], now=0)
    b = full(cache, [cp("b", 0), cp("b", 1)], now=0)
    # full, nothing idle or old: no session (session id 0 in the response)
    assert full(cache, [cp("c", i) for i in range(5)], now=10) == 0
    # a follower (privileged) may evict the smallest consumer session
    f = full(cache, [cp("f", 0)], now=20, privileged=True)
    assert f and a not in cache and b in cache
    # after the eviction time (since creation), a consumer session with more partitions
    # may evict an older, smaller consumer session, but never a follower's
    cache.touch(cache.get(b), 1500)  # type: ignore[arg-type]
    cache.touch(cache.get(f), 1500)  # type: ignore[arg-type]
    assert full(cache, [cp("d", 0)], now=1600) == 0  # 1 partition < b's 2
    d = full(cache, [cp("d", i) for i in range(3)], now=1700)
    assert d and b not in cache and f in cache


def test_idle_sessions_expire() -> None:
    cache = FetchSessionCache(max_slots=10, eviction_ms=1000)
    a = full(cache, [cp("a", 0)], now=0)
    b = full(cache, [cp("b", 0)], now=500)
    ctx = cache.new_context(a, 1, [], [], False, 900)  # keeps a alive
    assert ctx.kind is ContextKind.INCREMENTAL
    cache.new_context(0, -1, [], [], False, 1600)
    assert a in cache and b not in cache
    assert cache.new_context(b, 1, [], [], False, 1600).error == \
        ErrorCode.fetch_session_id_not_found


def test_zero_slots_disables_sessions() -> None:
    cache = FetchSessionCache(max_slots=0)
    assert full(cache, [cp("a", 0)]) == 0
