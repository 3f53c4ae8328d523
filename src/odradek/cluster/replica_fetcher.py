"""Followers fetching from their leaders (Kafka's ReplicaFetcherManager and
ReplicaFetcherThread, with KIP-101 / KIP-279 truncation).

How it works: the replica manager tells :class:`ReplicaFetcherManager` which partitions
this broker follows, from which leader and at which leader epoch (:meth:`add`), and which
it stopped following (:meth:`remove`). There is one :class:`ReplicaFetcher` per leader
broker, an asyncio task carrying every partition followed from that leader in one Fetch
request (``replica_id`` = this broker, ``max_wait`` = ``replica.fetch.wait.max.ms``,
``min_bytes`` = ``replica.fetch.min.bytes``), as Kafka's fetcher threads do.

Each partition starts *truncating*: before it fetches, the fetcher asks the leader
OffsetForLeaderEpoch for the latest leader epoch in this replica's log. The leader answers
where that epoch (or the newest epoch it knows below it) ended in its log; the follower
truncates to the smaller of that and where the same epoch ends in its own log. What is
left is a prefix of the leader's log, so the replicas never diverge; records the old
leader appended but never committed are dropped here and fetched again from the new
leader. A log without any epoch (nothing written with a leader epoch) truncates to its
high watermark, Kafka's pre-KIP-101 rule. Every truncation says why in the log's one INFO
line (``PartitionLog.truncate_to``: from which offset to which, the epoch asked and the
leader's answer), and one below the high watermark this replica knew, a WARNING.

Then it fetches from its log end offset and appends the leader's batches unchanged (same
bytes, offsets and leader epochs: :meth:`PartitionLog.append_as_follower`), and takes the
leader's high watermark and log start offset from the response. A fetch offset below the
leader's log start (retention removed it) starts the log again at the leader's log start;
one past the leader's log end (an unclean election) truncates again. Leadership errors
(NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, ...) back the partition
off for ``replica.fetch.backoff.ms`` until the controller's next decision moves it; a lost
connection backs the whole fetcher off and reconnects (the leader's address is looked up
again each time). Partitions named in their topic's
``follower.replication.throttled.replicas`` share ``follower.replication.throttled.rate``
(KIP-73, :mod:`odradek.cluster.replication_quota`): over it, they sit out fetches.

Each fetcher keeps an incremental fetch session with its leader (KIP-227, the client side:
Kafka's ``FetchSessionHandler``, :class:`FetchSessionHandler` here). The first fetch is
full (every partition) and asks for a session; the next ones name only the partitions
whose fetch position changed (an append, a truncation, a new leader epoch) and, in
``forgotten_topics_data``, those that left the fetch (removed, backing off, truncating,
throttled), and the leader answers only the partitions with news (records, a moved high
watermark or log start, an error). An idle follower's fetch is then a few dozen bytes
each way, whatever the number of partitions. A session error (FETCH_SESSION_ID_NOT_FOUND:
the leader restarted or evicted it; INVALID_FETCH_SESSION_EPOCH), a lost connection or a
failed exchange starts a new full session at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.offset_for_leader_epoch.v4 import request as ofle_v4
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from odradek.cluster.partition import Partition
from odradek.cluster.replication_quota import ReplicationQuota, is_throttled
from odradek.storage import TopicPartition
from odradek.storage.leader_epoch import UNDEFINED_EPOCH

__all__ = ["FetcherConfig", "ReplicaFetcher", "ReplicaFetcherManager", "complete_batches"]

log = logging.getLogger(__name__)

# How long a throttled partition waits before it is considered for a fetch again.
THROTTLE_PAUSE_S = 0.1
INITIAL_EPOCH = 0  # FetchMetadata.INITIAL_EPOCH: a full fetch, opening a session
_MAX_EPOCH = 2**31 - 1
_SESSION_ERRORS = frozenset({
    ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch,
    ErrorCode.fetch_session_topic_id_error,
})

# A partition as a Fetch request names it: fetch offset, current leader epoch, last fetched
# epoch, log start offset, partition max bytes.
Position = tuple[int, int, int, int, int]


class FetchSessionHandler:
    """The follower's side of one fetch session (Kafka's ``FetchSessionHandler``):
    :meth:`build` says what the next request carries, :meth:`handle` takes the answer."""

    def __init__(self) -> None:
        self.session_id = 0
        self.epoch = INITIAL_EPOCH
        self.sent: dict[TopicPartition, Position] = {}  # the session's partitions

    def build(self, wanted: dict[TopicPartition, Position]
              ) -> tuple[bool, list[TopicPartition], list[TopicPartition]]:
        """(full, the partitions to name, the partitions to forget) for fetching
        ``wanted``: everything when no session is open, else what changed."""
        if self.session_id == 0 or self.epoch == INITIAL_EPOCH:
            return True, list(wanted), []
        sent = self.sent
        changed = [tp for tp, position in wanted.items() if sent.get(tp) != position]
        forgotten = [tp for tp in sent if tp not in wanted]
        return False, changed, forgotten

    def handle(self, full: bool, wanted: dict[TopicPartition, Position], error: ErrorCode,
               session_id: int) -> bool:
        """The answer to a request built for ``wanted``; False on a session error (the
        next request opens a new session)."""
        if error in _SESSION_ERRORS:
            self.reset()
            return False
        if full:
            self.session_id = session_id
            self.epoch = 1 if session_id else INITIAL_EPOCH
        else:
            self.epoch = 1 if self.epoch == _MAX_EPOCH else self.epoch + 1
        self.sent = dict(wanted) if self.session_id else {}
        return True

    def reset(self) -> None:
        """Start over with a full fetch (which also closes the old session, if any)."""
        self.epoch = INITIAL_EPOCH
        self.sent = {}

_LEADERSHIP_ERRORS = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch, ErrorCode.unknown_topic_or_partition,
    ErrorCode.leader_not_available, ErrorCode.kafka_storage_error,
})


class Connection(Protocol):
    async def send(self, request: Any) -> Any: ...

    async def close(self) -> None: ...


Connect = Callable[[int], Awaitable[Connection | None]]


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    """Kafka's ``replica.fetch.*`` broker configs."""

    max_bytes: int = 1048576            # replica.fetch.max.bytes (per partition)
    response_max_bytes: int = 10485760  # replica.fetch.response.max.bytes
    min_bytes: int = 1                  # replica.fetch.min.bytes
    max_wait_ms: int = 500              # replica.fetch.wait.max.ms
    backoff_ms: int = 1000              # replica.fetch.backoff.ms
    socket_timeout_ms: int = 30000      # replica.socket.timeout.ms (an answer's deadline)

    @classmethod
    def from_broker(cls, config: Any) -> FetcherConfig:
        return cls(
            max_bytes=int(config["replica.fetch.max.bytes"]),
            response_max_bytes=int(config["replica.fetch.response.max.bytes"]),
            min_bytes=int(config["replica.fetch.min.bytes"]),
            max_wait_ms=int(config["replica.fetch.wait.max.ms"]),
            backoff_ms=int(config["replica.fetch.backoff.ms"]),
            socket_timeout_ms=int(config["replica.socket.timeout.ms"]),
        )


@dataclass(slots=True)
class _FetchState:
    partition: Partition
    leader_epoch: int
    truncating: bool = True
    delayed_until: float = 0.0


def complete_batches(records: bytes | memoryview) -> memoryview:
    """The whole batches at the front of ``records``: a fetch response may end inside a
    batch (cut at ``partition_max_bytes``), which the next fetch asks for again. One step
    per batch (baseOffset int64, batchLength int32), never per record."""
    view = memoryview(records)
    pos = 0
    end = len(view)
    while end - pos >= 12:
        size = 12 + int.from_bytes(view[pos + 8:pos + 12], "big", signed=True)
        if size <= 12 or pos + size > end:
            break
        pos += size
    return view[:pos]


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader broker."""

    def __init__(self, manager: ReplicaFetcherManager, leader: int) -> None:
        self.manager = manager
        self.leader = leader
        self.partitions: dict[TopicPartition, _FetchState] = {}
        self._wake = asyncio.Event()
        self._conn: Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self.fetches = 0
        self.session = FetchSessionHandler()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"replica-fetcher-{self.manager.broker_id}-from-{self.leader}"
        )

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self._close()

    async def _close(self) -> None:
        self.session.reset()  # whether the leader took the last epoch is unknown
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def _sleep(self, seconds: float) -> None:
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    async def _run(self) -> None:
        backoff = self.manager.config.backoff_ms / 1000
        while True:
            if not self.partitions:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                if self._conn is None:
                    self._conn = await self.manager.connect(self.leader)
                    if self._conn is None:
                        await self._sleep(backoff)
                        continue
                now = time.monotonic()
                truncating = [(tp, s) for tp, s in self.partitions.items()
                              if s.truncating and s.delayed_until <= now]
                if truncating:
                    await self._truncate(self._conn, truncating)
                fetchable = [(tp, s) for tp, s in self.partitions.items()
                             if not s.truncating and s.delayed_until <= now]
                if not fetchable:
                    waits = [s.delayed_until for s in self.partitions.values()]
                    await self._sleep(max(0.01, min(waits, default=now + backoff) - now))
                    continue
                await self._fetch(self._conn, fetchable)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.info("broker %d: fetching from broker %d failed (%s); retrying in %.1f s",
                         self.manager.broker_id, self.leader, exc, backoff)
                await self._close()
                await self._sleep(backoff)

    async def _send(self, conn: Connection, request: Any) -> Any:
        """One exchange, bounded by replica.socket.timeout.ms past the fetch's own wait: a
        leader paused (SIGSTOP) or cut off must not hold the fetcher forever."""
        config = self.manager.config
        timeout = (config.socket_timeout_ms + config.max_wait_ms) / 1000
        return await asyncio.wait_for(conn.send(request), timeout)

    # -- truncation (KIP-101, KIP-279) ---------------------------------------------------
    async def _truncate(
        self, conn: Connection, truncating: list[tuple[TopicPartition, _FetchState]]
    ) -> None:
        asked: list[tuple[TopicPartition, _FetchState, int]] = []
        for tp, state in truncating:
            partition_log = state.partition.log
            epoch = partition_log.leader_epoch_cache.latest_epoch
            if epoch == UNDEFINED_EPOCH:
                partition_log.truncate_to(
                    partition_log.high_watermark,
                    f"broker {self.manager.broker_id}: no leader epoch in the log, to the high "
                    f"watermark (leader {self.leader}, epoch {state.leader_epoch})")
                state.truncating = False
                continue
            asked.append((tp, state, epoch))
        if not asked:
            return
        by_topic: dict[str, list[ofle_v4.OffsetForLeaderPartition]] = {}
        for tp, state, epoch in asked:
            by_topic.setdefault(tp.topic, []).append(ofle_v4.OffsetForLeaderPartition(
                partition=i32(tp.partition), current_leader_epoch=i32(state.leader_epoch),
                leader_epoch=i32(epoch),
            ))
        response = await self._send(conn, ofle_v4.OffsetForLeaderEpochRequest(
            replica_id=BrokerId(self.manager.broker_id),
            topics=tuple(ofle_v4.OffsetForLeaderTopic(topic=TopicName(t), partitions=tuple(ps))
                         for t, ps in by_topic.items()),
        ))
        answers = {
            TopicPartition(str(t.topic), int(p.partition)): p
            for t in response.topics for p in t.partitions
        }
        backoff = self.manager.config.backoff_ms / 1000
        for tp, state, epoch in asked:
            if self.partitions.get(tp) is not state:
                continue  # moved while we asked
            answer = answers.get(tp)
            if answer is None or answer.error_code != ErrorCode.none:
                state.delayed_until = time.monotonic() + backoff
                continue
            partition_log = state.partition.log
            answer_epoch, answer_end = int(answer.leader_epoch), int(answer.end_offset)
            end = self._truncation_offset(state.partition, epoch, answer_epoch, answer_end)
            if end < partition_log.log_end_offset:
                partition_log.truncate_to(end, (
                    f"broker {self.manager.broker_id}: OffsetForLeaderEpoch of epoch {epoch} "
                    f"answered epoch {answer_epoch} ending at {answer_end} by leader "
                    f"{self.leader} at epoch {state.leader_epoch}"))
            state.truncating = False

    @staticmethod
    def _truncation_offset(
        partition: Partition, asked_epoch: int, leader_epoch: int, leader_end: int
    ) -> int:
        """Where this replica's log stops agreeing with the leader's."""
        partition_log = partition.log
        if leader_epoch == UNDEFINED_EPOCH or leader_end < 0:
            return partition_log.high_watermark  # the leader knows no such epoch
        if leader_epoch == asked_epoch:
            return min(leader_end, partition_log.log_end_offset)
        # The leader's newest epoch at or below ours is older: ours ended where that
        # one ends in our log, if we have it at all.
        ours_epoch, ours_end = partition_log.leader_epoch_cache.end_offset_for(
            leader_epoch, partition_log.log_end_offset
        )
        if ours_epoch == UNDEFINED_EPOCH:
            return min(partition_log.high_watermark, leader_end)
        return min(leader_end, ours_end)

    # -- fetching ------------------------------------------------------------------------
    async def _fetch(
        self, conn: Connection, fetchable: list[tuple[TopicPartition, _FetchState]]
    ) -> None:
        config = self.manager.config
        asked: dict[TopicPartition, tuple[_FetchState, int]] = {}
        wanted: dict[TopicPartition, Position] = {}
        quota = self.manager.quota
        now = time.monotonic()
        over_quota = quota is not None and quota.exceeded(now)
        throttled: set[TopicPartition] = set()
        for tp, state in fetchable:
            partition_log = state.partition.log
            if quota is not None and is_throttled(
                partition_log.config["follower.replication.throttled.replicas"],
                tp.partition, self.manager.broker_id,
            ):
                if over_quota:  # left out of this fetch (KIP-73); the others go on
                    state.delayed_until = now + THROTTLE_PAUSE_S
                    continue
                throttled.add(tp)
            offset = partition_log.log_end_offset
            asked[tp] = (state, offset)
            wanted[tp] = (offset, state.leader_epoch, partition_log.leader_epoch_cache.latest_epoch,
                          partition_log.log_start_offset, config.max_bytes)
        if not asked:
            return
        session = self.session
        full, named, forgotten = session.build(wanted)
        by_topic: dict[str, list[fetch_v12.FetchPartition]] = {}
        for tp in named:
            offset, leader_epoch, last_epoch, log_start, max_bytes = wanted[tp]
            by_topic.setdefault(tp.topic, []).append(fetch_v12.FetchPartition(
                partition=i32(tp.partition), current_leader_epoch=i32(leader_epoch),
                fetch_offset=i64(offset), last_fetched_epoch=i32(last_epoch),
                log_start_offset=i64(log_start), partition_max_bytes=i32(max_bytes),
            ))
        forgotten_by_topic: dict[str, list[i32]] = {}
        for tp in forgotten:
            forgotten_by_topic.setdefault(tp.topic, []).append(i32(tp.partition))
        response = await self._send(conn, fetch_v12.FetchRequest(
            cluster_id=None, replica_id=BrokerId(self.manager.broker_id),
            max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=config.max_wait_ms)),
            min_bytes=i32(config.min_bytes), max_bytes=i32(config.response_max_bytes),
            isolation_level=i8(0), session_id=i32(session.session_id),
            session_epoch=i32(session.epoch),
            topics=tuple(fetch_v12.FetchTopic(topic=TopicName(t), partitions=tuple(ps))
                         for t, ps in by_topic.items()),
            forgotten_topics_data=tuple(
                fetch_v12.ForgottenTopic(topic=TopicName(t), partitions=tuple(ps))
                for t, ps in forgotten_by_topic.items()),
            rack_id="",
        ))
        if not session.handle(full, wanted, response.error_code, int(response.session_id)):
            log.info("broker %d: fetch session with broker %d: %s; starting a new one",
                     self.manager.broker_id, self.leader, response.error_code.name)
            return
        self.fetches += 1
        if response.error_code != ErrorCode.none:
            raise RuntimeError(f"fetch answered {response.error_code.name}")
        backoff = config.backoff_ms / 1000
        for topic in response.responses:
            for data in topic.partitions:
                tp = TopicPartition(str(topic.topic), int(data.partition_index))
                entry = asked.get(tp)
                if entry is None:
                    continue
                state, offset = entry
                if self.partitions.get(tp) is not state or state.truncating:
                    continue  # moved, or to truncate again, while we fetched
                partition = state.partition
                if partition.is_leader:
                    continue
                code = data.error_code
                if quota is not None and tp in throttled and data.records:
                    quota.record(len(data.records), time.monotonic())
                if code == ErrorCode.none:
                    try:
                        self._append(tp, partition, offset, data)
                    except Exception as exc:
                        # One partition's bad answer (or a failed disk) must not stop the
                        # others: check where the logs agree again, after a pause.
                        log.warning("broker %d: appending %s fetched from broker %d failed "
                                    "(%s); truncating again", self.manager.broker_id, tp,
                                    self.leader, exc)
                        state.truncating = True
                        state.delayed_until = time.monotonic() + backoff
                elif code == ErrorCode.offset_out_of_range:
                    self._out_of_range(tp, state, offset, int(data.log_start_offset))
                else:
                    if code not in _LEADERSHIP_ERRORS:
                        log.warning("broker %d: fetching %s from broker %d: %s",
                                    self.manager.broker_id, tp, self.leader, code.name)
                    state.delayed_until = time.monotonic() + backoff

    def _append(self, tp: TopicPartition, partition: Partition, offset: int, data: Any) -> None:
        partition_log = partition.log
        if partition_log.log_end_offset != offset:
            return  # truncated meanwhile: the next fetch asks again
        records = data.records
        if records:
            batches = complete_batches(records)
            if len(batches) >= 27:
                base = int.from_bytes(batches[0:8], "big", signed=True)
                last = base + int.from_bytes(batches[23:27], "big", signed=True)
                if base < offset <= last:
                    # Our log ends inside one of the leader's batches: our last batch was
                    # batched differently (another leader's). Drop it and take the
                    # leader's whole (Kafka answers from the batch holding the offset).
                    partition_log.truncate_to(base, (
                        f"broker {self.manager.broker_id}: the log ends inside leader "
                        f"{self.leader}'s batch {base}..{last}, taken whole"))
                    if partition_log.log_end_offset != base:
                        return  # cut lower than that: fetch again from where it ends
                # A batch starting past our log end is the leader's compacted log (the
                # cleaner removed the records between): appended with the same gap.
                partition_log.append_as_follower(batches)
        partition.update_follower_high_watermark(int(data.high_watermark))
        leader_start = int(data.log_start_offset)
        if leader_start > partition_log.log_start_offset:
            new_start = min(leader_start, partition_log.high_watermark)
            if new_start > partition_log.log_start_offset:
                partition_log.maybe_increment_log_start_offset(new_start)

    def _out_of_range(
        self, tp: TopicPartition, state: _FetchState, offset: int, leader_start: int
    ) -> None:
        partition_log = state.partition.log
        if leader_start >= 0 and offset < leader_start:
            partition_log.truncate_fully_and_start_at(leader_start, (
                f"broker {self.manager.broker_id}: fetch offset {offset} is below leader "
                f"{self.leader}'s log start {leader_start}"))
        else:
            state.truncating = True  # past the leader's log end: an unclean election


class ReplicaFetcherManager:
    def __init__(self, broker_id: int, connect: Connect, config: FetcherConfig,
                 quota: ReplicationQuota | None = None) -> None:
        self.broker_id = broker_id
        self.connect = connect
        self.config = config
        # follower.replication.throttled.rate over the partitions named in their topic's
        # follower.replication.throttled.replicas (cluster/replication_quota.py)
        self.quota = quota
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._following: dict[TopicPartition, tuple[int, int]] = {}

    def following(self, tp: TopicPartition) -> tuple[int, int] | None:
        """(leader, leader epoch) ``tp`` is fetched from, or None."""
        return self._following.get(tp)

    def add(self, tp: TopicPartition, partition: Partition, leader: int, leader_epoch: int) -> None:
        """Follow ``tp`` from ``leader`` at ``leader_epoch`` (truncating first); a no-op when
        already following it so."""
        if self._following.get(tp) == (leader, leader_epoch):
            return
        self.remove(tp)
        self._following[tp] = (leader, leader_epoch)
        fetcher = self.fetchers.get(leader)
        if fetcher is None:
            fetcher = self.fetchers[leader] = ReplicaFetcher(self, leader)
            fetcher.start()
        fetcher.partitions[tp] = _FetchState(partition, leader_epoch)
        fetcher.wake()

    def remove(self, tp: TopicPartition) -> None:
        found = self._following.pop(tp, None)
        if found is None:
            return
        fetcher = self.fetchers.get(found[0])
        if fetcher is not None:
            fetcher.partitions.pop(tp, None)

    async def shutdown(self) -> None:
        self._following.clear()
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        for fetcher in fetchers:
            await fetcher.stop()
