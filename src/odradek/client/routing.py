"""Requests to the broker that can answer them: partition leaders and group coordinators.

How it works, as Kafka's clients do it (``Metadata`` and ``NetworkClient`` of the Java
client, ``ConsumerNetworkClient`` for coordinators): :class:`ClusterAdmin` opens one
connection to the first bootstrap server that answers and keeps it for cluster-wide
requests (create a topic, describe configs). A partition-level request (Produce,
ListOffsets, Fetch) goes to the partition's leader, found in Metadata (brokers and, per
partition, the leader's id) and reached over one connection per broker, opened on first
use and kept. A group request goes to the coordinator FindCoordinator names.

When the answer says the leader or coordinator has moved or is not there yet
(NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION, FENCED or
UNKNOWN_LEADER_EPOCH, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS, ...) or the connection to it fails, the request is retried
after a backoff that doubles from ``retry.backoff.ms`` (100 ms) up to
``retry.backoff.max.ms`` (1 s) as KIP-580 has it, each time with metadata refreshed from
any broker that answers (the bootstrap list is tried again when none of the known ones
does). Retries stop at a deadline, :data:`RETRY_TIMEOUT_S` after the first failure
(Kafka's ``default.api.timeout.ms``); the last error is then raised with how long it was
retried. Other errors are raised at once.

A Produce retried after a connection broke may be written twice, as with Kafka's
producer without idempotence: the tools give at-least-once.

:meth:`ClusterAdmin.fetch` reads a topic's partitions from their leaders at once (one
Fetch per leader, in parallel). A partition whose leader is moving returns no records
that time (error code 0, high watermark -1) and is retried on the next call after the
metadata refresh, so a consumer loop keeps reading the other partitions; only a
partition that stays unreachable past the deadline raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from odradek.client.admin import Admin, FetchedPartition, TopicDescription
from odradek.client.connection import BrokerConnection, ClientError
from odradek.client.groups import GroupListing, GroupsClient
from odradek.client.security import PLAINTEXT, ClientSecurity

__all__ = ["RETRIABLE_CODES", "RETRY_TIMEOUT_S", "ClusterAdmin", "retriable"]

T = TypeVar("T")

#: Kafka's default.api.timeout.ms: how long a request is retried after its first failure
RETRY_TIMEOUT_S = 60.0
#: retry.backoff.ms and retry.backoff.max.ms (KIP-580)
RETRY_BACKOFF_S = 0.1
RETRY_BACKOFF_MAX_S = 1.0

#: Errors that mean "ask the metadata again and retry" (Kafka's InvalidMetadataException
#: and the coordinator errors a client retries after FindCoordinator), by code.
RETRIABLE_CODES = frozenset({
    3,   # UNKNOWN_TOPIC_OR_PARTITION (metadata not yet propagated)
    5,   # LEADER_NOT_AVAILABLE (an election in progress)
    6,   # NOT_LEADER_OR_FOLLOWER
    14,  # COORDINATOR_LOAD_IN_PROGRESS
    15,  # COORDINATOR_NOT_AVAILABLE
    16,  # NOT_COORDINATOR
    19,  # NOT_ENOUGH_REPLICAS (refused before the append: safe to retry)
    56,  # KAFKA_STORAGE_ERROR (the replica is offline: another leader follows)
    74,  # FENCED_LEADER_EPOCH
    75,  # UNKNOWN_LEADER_EPOCH
    78,  # OFFSET_NOT_AVAILABLE (a new leader's high watermark not yet known)
})


def retriable(exc: ClientError) -> bool:
    """A broker's retriable error, or a connection that failed (no error code)."""
    return exc.error_code is None or exc.error_code in RETRIABLE_CODES


def _addresses(bootstrap: str) -> list[str]:
    return [a.strip() for a in bootstrap.split(",") if a.strip()]


class ClusterAdmin(Admin):
    """:class:`Admin` whose partition-level and group requests follow leaders and
    coordinators; ``conn`` is the bootstrap connection, for cluster-wide requests."""

    def __init__(self, conn: BrokerConnection, bootstrap: str, client_id: str,
                 retry_timeout: float = RETRY_TIMEOUT_S,
                 security: ClientSecurity = PLAINTEXT) -> None:
        super().__init__(conn)
        self.bootstrap = bootstrap
        self.client_id = client_id
        self.security = security
        self.retry_timeout = retry_timeout
        self.known_brokers: dict[int, tuple[str, int]] = {}
        self.leaders: dict[tuple[str, int], int] = {}
        self._conns: dict[int, BrokerConnection] = {}
        # partitions a Fetch could not read: (topic, partition) -> (since, last error)
        self._failing: dict[tuple[str, int], tuple[float, ClientError]] = {}

    @classmethod
    async def connect(cls, bootstrap: str, client_id: str = "odradek-cli",
                      timeout: float = 10.0,
                      retry_timeout: float = RETRY_TIMEOUT_S,
                      security: ClientSecurity = PLAINTEXT) -> ClusterAdmin:
        """Connect to the first bootstrap server that answers; when none does, the
        first one's error is raised (a :class:`ClientError` saying why). ``security``:
        TLS and SASL settings for every connection it opens."""
        conn = await _open_any(_addresses(bootstrap) or [bootstrap], client_id, timeout,
                               security)
        return cls(conn, bootstrap, client_id, retry_timeout, security)

    async def close(self) -> None:
        for conn in self._conns.values():
            await conn.close()
        self._conns.clear()
        await self.conn.close()

    # ---- connections
    async def _any(self) -> BrokerConnection:
        """A live connection for a metadata request: the bootstrap one, else one to a
        known broker, else a new one to a bootstrap server."""
        if not self.conn.closed:
            return self.conn
        for conn in self._conns.values():
            if not conn.closed:
                return conn
        known = [f"{h}:{p}" for h, p in self.known_brokers.values()]
        self.conn = await _open_any(known + _addresses(self.bootstrap), self.client_id, 10.0,
                                    self.security)
        return self.conn

    async def broker(self, broker_id: int) -> BrokerConnection:
        """The connection to broker ``broker_id`` (opened on first use, reopened when it
        broke); a broker the metadata does not list is LEADER_NOT_AVAILABLE."""
        conn = self._conns.get(broker_id)
        if conn is not None and not conn.closed:
            return conn
        if conn is not None:
            await conn.close()
            del self._conns[broker_id]
        if broker_id not in self.known_brokers:
            raise ClientError(f"broker {broker_id} is not in the cluster's metadata", 5)
        host, port = self.known_brokers[broker_id]
        conn = await BrokerConnection.open(f"{host}:{port}", client_id=self.client_id,
                                           security=self.security)
        self._conns[broker_id] = conn
        return conn

    async def _drop(self, broker_id: int) -> None:
        conn = self._conns.pop(broker_id, None)
        if conn is not None:
            await conn.close()

    # ---- metadata
    async def cluster_metadata(
        self, topics: list[str] | None = None, auto_create: bool = False
    ) -> tuple[dict[int, tuple[str, int]], list[TopicDescription]]:
        """Metadata from any broker that answers; remembers brokers and leaders."""
        try:
            brokers, described = await Admin(await self._any()).cluster_metadata(
                topics, auto_create)
        except ClientError as exc:
            if exc.error_code is not None:
                raise
            # the connection broke: once more, on another broker
            brokers, described = await Admin(await self._any()).cluster_metadata(
                topics, auto_create)
        self.known_brokers = brokers
        for t in described:
            for p in t.partitions:
                if p.leader >= 0:
                    self.leaders[(t.name, p.partition)] = p.leader
                else:
                    self.leaders.pop((t.name, p.partition), None)
        return brokers, described

    async def refresh(self, topic: str) -> None:
        """Metadata of ``topic`` again (a failure here is left to the retry that follows)."""
        self.leaders = {tp: b for tp, b in self.leaders.items() if tp[0] != topic}
        with contextlib.suppress(ClientError):
            await self.cluster_metadata([topic])

    async def leader_of(self, topic: str, partition: int) -> int:
        """The id of the leader of ``topic-partition`` (metadata asked when not known)."""
        if (topic, partition) not in self.leaders:
            _, described = await self.cluster_metadata([topic])
            error = "unknown_topic_or_partition"
            for t in described:
                if t.name == topic:
                    error = t.error if t.error != "none" else next(
                        (p.error if p.error != "none" else "leader_not_available"
                         for p in t.partitions if p.partition == partition),
                        "unknown_topic_or_partition")
            if (topic, partition) not in self.leaders:
                raise ClientError(f"finding the leader of {topic}-{partition} failed with "
                                  f"{error.upper()}", _code(error))
        return self.leaders[(topic, partition)]

    # ---- retries
    async def _retrying(self, what: Callable[[], Awaitable[T]],
                        recover: Callable[[ClientError], Awaitable[None]]) -> T:
        """``what()`` until it succeeds, fails with a non-retriable error, or the deadline
        passes; ``recover`` runs after each retriable failure, before the backoff ends."""
        deadline: float | None = None
        backoff = RETRY_BACKOFF_S
        while True:
            try:
                return await what()
            except ClientError as exc:
                if not retriable(exc):
                    raise
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.retry_timeout
                if now + backoff > deadline:
                    raise ClientError(f"{exc} (retried for {self.retry_timeout:g} s)",
                                      exc.error_code) from exc
                await recover(exc)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)

    async def on_leader(self, topic: str, partition: int,
                        call: Callable[[Admin], Awaitable[T]]) -> T:
        """``call`` with an :class:`Admin` on the leader of ``topic-partition``, retried
        (metadata refreshed) while the leader moves."""
        leader: list[int] = []

        async def attempt() -> T:
            leader[:] = [await self.leader_of(topic, partition)]
            return await call(Admin(await self.broker(leader[0])))

        async def recover(exc: ClientError) -> None:
            if exc.error_code is None and leader:
                await self._drop(leader[0])
            await self.refresh(topic)

        return await self._retrying(attempt, recover)

    async def on_coordinator(self, group_id: str,
                             call: Callable[[GroupsClient], Awaitable[T]]) -> T:
        """``call`` with a :class:`GroupsClient` on ``group_id``'s coordinator (asked with
        FindCoordinator each time), retried while the coordinator moves or loads."""
        coordinator: list[int] = []

        async def attempt() -> T:
            node, host, port = await GroupsClient(await self._any()).find_coordinator(group_id)
            self.known_brokers.setdefault(node, (host, port))
            coordinator[:] = [node]
            return await call(GroupsClient(await self.broker(node)))

        async def recover(exc: ClientError) -> None:
            if exc.error_code is None and coordinator:
                await self._drop(coordinator[0])
            with contextlib.suppress(ClientError):
                await self.cluster_metadata([])

        return await self._retrying(attempt, recover)

    # ---- partition-level requests, to the leader
    async def list_offset(self, topic: str, partition: int, timestamp: int) -> tuple[int, int]:
        return await self.on_leader(
            topic, partition, lambda a: a.list_offset(topic, partition, timestamp))

    async def produce(self, topic: str, partition: int, records: bytes, acks: int = -1) -> int:
        return await self.on_leader(
            topic, partition, lambda a: a.produce(topic, partition, records, acks))

    async def fetch(
        self, topic: str, partitions: dict[int, int], max_wait_ms: int = 500,
        max_bytes: int = 52428800, partition_max_bytes: int = 1048576,
    ) -> dict[int, tuple[int, int, bytes]]:
        """{partition: (error code, high watermark, records)}: :meth:`fetch_partitions`
        read_uncommitted."""
        out = await self.fetch_partitions(topic, partitions, max_wait_ms, max_bytes,
                                          partition_max_bytes)
        return {p: (f.error_code, f.high_watermark, f.records) for p, f in out.items()}

    async def fetch_partitions(
        self, topic: str, partitions: dict[int, int], max_wait_ms: int = 500,
        max_bytes: int = 52428800, partition_max_bytes: int = 1048576,
        isolation_level: int = 0,
    ) -> dict[int, FetchedPartition]:
        """One Fetch per leader, in parallel (``isolation_level`` as
        :meth:`Admin.fetch_partitions`); see the module's docstring for partitions whose
        leader moves."""
        out: dict[int, FetchedPartition] = {}
        by_leader: dict[int, dict[int, int]] = {}
        trouble: dict[int, ClientError] = {}
        for p, offset in partitions.items():
            try:
                by_leader.setdefault(await self.leader_of(topic, p), {})[p] = offset
            except ClientError as exc:
                if not retriable(exc):
                    raise
                trouble[p] = exc

        async def one(leader: int, wanted: dict[int, int]) -> dict[int, FetchedPartition]:
            return await Admin(await self.broker(leader)).fetch_partitions(
                topic, wanted, max_wait_ms, max_bytes, partition_max_bytes, isolation_level)

        leaders = list(by_leader)
        answers = await asyncio.gather(*(one(b, by_leader[b]) for b in leaders),
                                       return_exceptions=True)
        for leader, answer in zip(leaders, answers, strict=True):
            if isinstance(answer, ClientError) and retriable(answer):
                if answer.error_code is None:
                    await self._drop(leader)
                trouble.update({p: answer for p in by_leader[leader]})
                continue
            if isinstance(answer, BaseException):
                raise answer
            for p, fetched in answer.items():
                code = fetched.error_code
                if code in RETRIABLE_CODES:
                    trouble[p] = ClientError(f"fetching {topic}-{p} failed with error {code}",
                                             code)
                else:
                    out[p] = fetched
        now = time.monotonic()
        for p in out:
            self._failing.pop((topic, p), None)
        for p, error in trouble.items():
            since, _ = self._failing.get((topic, p), (now, error))
            if now - since > self.retry_timeout:
                raise ClientError(f"{error} (retried for {self.retry_timeout:g} s)",
                                  error.error_code) from error
            self._failing[(topic, p)] = (since, error)
            out[p] = FetchedPartition(0, -1, -1, [], b"")
        if trouble:
            if not by_leader or all(p in trouble for p in partitions):
                await asyncio.sleep(RETRY_BACKOFF_S)  # nothing read: do not spin
            await self.refresh(topic)
        return out

    # ---- groups, at their coordinators
    async def list_groups_everywhere(self, states: list[str] | None = None,
                                     types: list[str] | None = None) -> list[GroupListing]:
        """ListGroups of every broker (each lists the groups it coordinates), merged;
        ``states`` and ``types`` ("classic", "consumer") filter."""
        brokers, _ = await self.cluster_metadata([])
        found: dict[str, GroupListing] = {}
        for broker_id in sorted(brokers):
            async def ask(broker_id: int = broker_id) -> list[GroupListing]:
                return await GroupsClient(await self.broker(broker_id)).list_groups(
                    states, types)

            async def again(exc: ClientError, broker_id: int = broker_id) -> None:
                await self._drop(broker_id)

            for g in await self._retrying(ask, again):
                found[g.group_id] = g
        return sorted(found.values(), key=lambda g: g.group_id)


def _code(name: str) -> int | None:
    from kio.schema.errors import ErrorCode

    try:
        return int(ErrorCode[name].value)
    except KeyError:
        return None


async def _open_any(addresses: list[str], client_id: str, timeout: float,
                    security: ClientSecurity = PLAINTEXT) -> BrokerConnection:
    first: ClientError | None = None
    for address in addresses:
        try:
            return await BrokerConnection.open(address, timeout, client_id=client_id,
                                               security=security)
        except ClientError as exc:
            first = first or exc
        except (TimeoutError, OSError) as exc:
            first = first or ClientError(str(exc))
    assert first is not None
    raise first
