"""Fetch over real sockets: incremental fetch sessions (KIP-227) with raw v12 (by name) and
v13+ (by topic id) requests, byte limits, zero copy without fd leaks."""

from __future__ import annotations

import asyncio
import datetime
import importlib
import random
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.client.connection import BrokerConnection
from odradek.records.builder import build_batch
from odradek.server.config import BrokerConfig
from odradek.server.handlers._entities import make
from odradek.server.handlers.fetch import (
    ANSWER_BYTES_PER_PARTITION,
    DEFAULT_ANSWER_MAX_BYTES,
    answer_cap,
)
from odradek.server.network.writer import COPY_REGION_BYTES
from odradek.testing import RunningBroker, running_broker
from tests._deadlines import expired
from tests._own import server_descriptors


@pytest.fixture(scope="module")
def broker() -> Iterator[RunningBroker]:
    with running_broker() as b:
        yield b


def _topic(broker: RunningBroker, partitions: int = 3) -> tuple[str, uuid.UUID]:
    name = f"fetch-{uuid.uuid4().hex[:8]}"
    info = broker.call(broker.broker.metadata.create_topic, name, partitions, 1, {})
    return name, info.topic_id


def _append(broker: RunningBroker, name: str, partition: int, n: int = 3,
            value: bytes = b"v") -> None:
    log = broker.call(broker.broker.get_log, name, partition)  # the loop's partitions
    assert log is not None
    broker.call(log.append_as_leader,
                build_batch([(b"k", value)] * n, timestamp=int(time.time() * 1000)))


class Fetcher:
    """Builds Fetch requests of one version for one topic."""

    def __init__(self, version: int, name: str, topic_id: uuid.UUID) -> None:
        self.version = version
        self.m = importlib.import_module(f"kio.schema.fetch.v{version}.request")
        self.name = name
        self.topic_id = topic_id

    def request(self, offsets: dict[int, int], session_id: int = 0, epoch: int = -1,
                forgotten: tuple[int, ...] = (), max_wait_ms: int = 20, min_bytes: int = 1,
                max_bytes: int = 1 << 20, partition_max_bytes: int = 1 << 20,
                leader_epoch: int = -1) -> Any:
        m = self.m
        topics: tuple[Any, ...] = ()
        if offsets:
            topics = (make(m.FetchTopic, topic=self.name, topic_id=self.topic_id, partitions=tuple(
                make(m.FetchPartition, partition=p, fetch_offset=o,
                     partition_max_bytes=partition_max_bytes, current_leader_epoch=leader_epoch,
                     last_fetched_epoch=-1, log_start_offset=-1, replica_directory_id=None)
                for p, o in offsets.items())),)
        forgotten_data: tuple[Any, ...] = ()
        if forgotten:
            forgotten_data = (make(m.ForgottenTopic, topic=self.name, topic_id=self.topic_id,
                                   partitions=forgotten),)
        return make(
            m.FetchRequest, replica_id=-1,
            replica_state=make(m.ReplicaState, replica_id=-1, replica_epoch=-1)
            if hasattr(m, "ReplicaState") else None,
            max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes,
            max_bytes=max_bytes, isolation_level=0, session_id=session_id,
            session_epoch=epoch, cluster_id=None, rack_id="",
            forgotten_topics_data=forgotten_data, topics=topics,
        )


def _parts(response: Any) -> dict[int, Any]:
    return {p.partition_index: p for t in response.responses for p in t.partitions}


async def _session_scenario(broker: RunningBroker, version: int) -> None:
    name, tid = _topic(broker)
    _append(broker, name, 0)
    _append(broker, name, 1, 5)
    f = Fetcher(version, name, tid)
    conn = await BrokerConnection.open(broker.bootstrap)
    try:
        # full fetch, epoch 0: creates a session, answers every partition
        r = await conn.send(f.request({0: 0, 1: 0, 2: 0}, 0, 0))
        assert r.error_code == ErrorCode.none
        sid = r.session_id
        assert sid != 0
        ps = _parts(r)
        assert sorted(ps) == [0, 1, 2]
        assert ps[0].high_watermark == 3 and ps[1].high_watermark == 5
        assert ps[0].records and ps[1].records and not ps[2].records
        if version >= 13:
            assert r.responses[0].topic_id == tid
        else:
            assert r.responses[0].topic == name

        # incremental, epoch 1: new offsets for 0 and 1; nothing changed -> empty
        t0 = time.monotonic()
        r = await conn.send(f.request({0: 3, 1: 5}, sid, 1, max_wait_ms=200))
        assert r.error_code == ErrorCode.none and r.session_id == sid
        assert _parts(r) == {}
        assert time.monotonic() - t0 >= 0.15  # waited in the purgatory

        # data on partition 2 only: only partition 2 is in the response
        _append(broker, name, 2, 2)
        r = await conn.send(f.request({}, sid, 2))
        ps = _parts(r)
        assert list(ps) == [2] and ps[2].records and ps[2].high_watermark == 2

        # the client did not move 2's offset: same data again (the session keeps offsets)
        r = await conn.send(f.request({}, sid, 3))
        assert list(_parts(r)) == [2]
        r = await conn.send(f.request({2: 2}, sid, 4, max_wait_ms=0))
        assert _parts(r) == {}

        # an append completes a waiting incremental fetch early (event, not timeout)
        timer = threading.Timer(0.2, _append, (broker, name, 1, 1))
        timer.start()
        t0 = time.monotonic()
        r = await conn.send(f.request({}, sid, 5, max_wait_ms=5000))
        assert time.monotonic() - t0 < 3
        timer.join()
        ps = _parts(r)
        assert list(ps) == [1] and ps[1].high_watermark == 6

        # wrong epochs, unknown sessions
        r = await conn.send(f.request({}, sid, 5))
        assert r.error_code == ErrorCode.invalid_fetch_session_epoch
        assert r.responses == () and r.session_id == 0
        r = await conn.send(f.request({}, sid ^ 0x5A5A, 1))
        assert r.error_code == ErrorCode.fetch_session_id_not_found
        # the failed requests did not advance the epoch
        r = await conn.send(f.request({1: 6}, sid, 6, max_wait_ms=0))
        assert r.error_code == ErrorCode.none

        # forgotten partitions are no longer reported, even with new data
        r = await conn.send(f.request({}, sid, 7, forgotten=(2,), max_wait_ms=0))
        assert r.error_code == ErrorCode.none
        _append(broker, name, 2, 1)
        r = await conn.send(f.request({}, sid, 8, max_wait_ms=0))
        assert _parts(r) == {}
        # ... until added back
        r = await conn.send(f.request({2: 0}, sid, 9, max_wait_ms=0))
        ps = _parts(r)
        assert list(ps) == [2] and ps[2].high_watermark == 3

        # an out-of-range offset is reported as a partition error, every time
        r = await conn.send(f.request({0: 999, 2: 3}, sid, 10, max_wait_ms=0))
        ps = _parts(r)
        assert ps[0].error_code == ErrorCode.offset_out_of_range
        r = await conn.send(f.request({0: 3}, sid, 11, max_wait_ms=0))
        assert list(_parts(r)) == [0]  # recovered: hw reported again
        assert _parts(r)[0].error_code == ErrorCode.none

        # epoch -1 closes the session and fetches without one
        r = await conn.send(f.request({0: 0}, sid, -1))
        assert r.session_id == 0 and list(_parts(r)) == [0]
        r = await conn.send(f.request({}, sid, 12))
        assert r.error_code == ErrorCode.fetch_session_id_not_found

        # session id 0, epoch -1: sessionless
        r = await conn.send(f.request({0: 0, 1: 0}, 0, -1))
        assert r.session_id == 0 and sorted(_parts(r)) == [0, 1]
    finally:
        await conn.close()


@pytest.mark.parametrize("version", [7, 11, 12, 13, 15, 17])
def test_incremental_fetch_session(broker: RunningBroker, version: int) -> None:
    asyncio.run(_session_scenario(broker, version))


def test_session_by_id_reports_deleted_topic(broker: RunningBroker) -> None:
    async def scenario() -> None:
        name, tid = _topic(broker, 1)
        _append(broker, name, 0)
        f = Fetcher(13, name, tid)
        conn = await BrokerConnection.open(broker.bootstrap)
        try:
            r = await conn.send(f.request({0: 3}, 0, 0, max_wait_ms=0))
            sid = r.session_id
            assert sid and _parts(r)[0].high_watermark == 3
            broker.call(broker.broker.metadata.delete_topic, name)
            await asyncio.sleep(0.1)
            r = await conn.send(f.request({}, sid, 1, max_wait_ms=0))
            assert _parts(r)[0].error_code == ErrorCode.unknown_topic_id
            # a v12 request cannot use a session created by topic id
            r = await conn.send(Fetcher(12, name, tid).request({}, sid, 2, max_wait_ms=0))
            assert r.error_code == ErrorCode.fetch_session_topic_id_error
        finally:
            await conn.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("epoch", [0, -1])
def test_an_all_zero_topic_id_is_unknown_topic_id(broker: RunningBroker, epoch: int) -> None:
    """Fetch v15, session epoch 0 (or sessionless), topic id 0: kio reads the id as None,
    which tripped an assertion in the session cache and closed the connection. Kafka
    answers UNKNOWN_TOPIC_ID for the partition; the connection goes on serving."""
    async def scenario() -> None:
        name, tid = _topic(broker, 1)
        _append(broker, name, 0)
        zero = Fetcher(15, name, uuid.UUID(int=0))
        conn = await BrokerConnection.open(broker.bootstrap)
        try:
            r = await conn.send(zero.request({0: 0}, 0, epoch, max_wait_ms=0))
            assert r.error_code == ErrorCode.none
            (topic,) = r.responses
            assert topic.topic_id is None  # all zero, as kio reads it
            (partition,) = topic.partitions
            assert (partition.partition_index, partition.error_code) == (
                0, ErrorCode.unknown_topic_id
            )
            r = await conn.send(Fetcher(15, name, tid).request({0: 0}, 0, -1, max_wait_ms=0))
            assert _parts(r)[0].error_code == ErrorCode.none and _parts(r)[0].records
        finally:
            await conn.close()

    asyncio.run(scenario())


def test_sessions_bounded_by_config(tmp_path: Any) -> None:
    overrides = {"max.incremental.fetch.session.cache.slots": "2"}
    with running_broker(overrides=overrides, data_dir=tmp_path) as b:
        name, tid = _topic(b, 1)
        f = Fetcher(12, name, tid)

        async def scenario() -> list[int]:
            conn = await BrokerConnection.open(b.bootstrap)
            try:
                return [(await conn.send(f.request({0: 0}, 0, 0, max_wait_ms=0))).session_id
                        for _ in range(3)]
            finally:
                await conn.close()

        ids = asyncio.run(scenario())
        assert ids[0] and ids[1] and ids[2] == 0
        assert len(b.broker.services.fetch_sessions) == 2


def test_max_bytes_and_first_batch_rule(broker: RunningBroker) -> None:
    async def scenario() -> None:
        name, tid = _topic(broker, 3)
        for p in range(3):
            _append(broker, name, p, 20, b"x" * 1000)  # one ~20 kB batch per partition
        f = Fetcher(12, name, tid)
        conn = await BrokerConnection.open(broker.bootstrap)
        try:
            # max_bytes below one batch: the first batch still comes back whole (KIP-74)
            r = await conn.send(f.request({0: 0, 1: 0, 2: 0}, max_bytes=100))
            ps = _parts(r)
            size = len(ps[0].records)
            assert size > 20_000 and not ps[1].records and not ps[2].records
            # room for two batches and a bit: two, and no partial first batch (Kafka's
            # firstEntryIncomplete rule)
            r = await conn.send(f.request({0: 0, 1: 0, 2: 0}, max_bytes=2 * size + 10))
            assert [len(p.records or b"") for p in _parts(r).values()] == [size, size, 0]
            # partition_max_bytes below one batch: a whole batch only for the response's
            # first data; later partitions whose first batch does not fit are empty
            r = await conn.send(f.request({0: 0, 1: 0}, partition_max_bytes=10))
            assert [len(p.records or b"") for p in _parts(r).values()] == [size, 0]
            # a partial batch after complete ones is sent (as Kafka), clients drop it
            _append(broker, name, 0, 20, b"y" * 1000)
            r = await conn.send(f.request({0: 0}, max_bytes=size + 100))
            assert len(_parts(r)[0].records) == size + 100
        finally:
            await conn.close()

    asyncio.run(scenario())


def test_the_broker_caps_a_response_at_its_fetch_max_bytes(broker: RunningBroker) -> None:
    """A request may ask for 64 MiB; the answer holds at most the broker's
    ``fetch.max.bytes`` (8 MiB by default), and the partitions left out come next."""
    async def scenario() -> None:
        cap = int(broker.broker.config["fetch.max.bytes"])
        assert cap == 8 << 20
        name, tid = _topic(broker, 3)
        for p in range(3):  # 3 MiB a partition: two fit under the cap, not three
            for _ in range(3):
                _append(broker, name, p, 1024, b"x" * 1000)
        f = Fetcher(13, name, tid)
        conn = await BrokerConnection.open(broker.bootstrap)
        try:
            r = await conn.send(f.request({0: 0, 1: 0, 2: 0}, 0, 0, max_bytes=64 << 20,
                                          partition_max_bytes=8 << 20))
            sizes = {p: len(x.records or b"") for p, x in _parts(r).items()}
            assert 6 << 20 < sum(sizes.values()) <= cap
            assert sizes[2] < sizes[0] == sizes[1]
            # the next fetch of the session starts with what was left out
            r = await conn.send(f.request({0: 3072, 1: 3072}, r.session_id, 1,
                                          max_bytes=64 << 20, partition_max_bytes=8 << 20))
            assert _parts(r)[2].records
        finally:
            await conn.close()

    asyncio.run(scenario())


def test_the_default_cap_grows_with_the_partitions_a_request_names() -> None:
    """Left at its default (8 MiB), ``fetch.max.bytes`` gives a request naming many
    partitions 256 KiB a partition, up to 30 MiB; set, it is the cap whatever the count."""
    default = BrokerConfig.from_raw({})
    assert answer_cap(default, 1) == answer_cap(default, 32) == 8 << 20
    assert answer_cap(default, 100) == 100 * ANSWER_BYTES_PER_PARTITION == 100 << 18
    assert answer_cap(default, 120) == answer_cap(default, 5000) == DEFAULT_ANSWER_MAX_BYTES
    assert DEFAULT_ANSWER_MAX_BYTES == 30 << 20
    for value in (8 << 20, 1 << 20, 55 << 20):
        set_ = BrokerConfig.from_raw({"fetch.max.bytes": str(value)})
        assert answer_cap(set_, 1) == answer_cap(set_, 1000) == value


def test_a_request_of_many_partitions_gets_more_than_8_mib(broker: RunningBroker) -> None:
    """40 partitions of 300 KB each: one answer holds more than 8 MiB (the default cap of
    a request of few partitions) and at most 40 x 256 KiB; the session's next fetch
    serves the partitions left out."""
    async def scenario() -> None:
        partitions = 40
        name, tid = _topic(broker, partitions)
        for p in range(partitions):
            _append(broker, name, p, 300, b"x" * 1000)
        f = Fetcher(13, name, tid)
        conn = await BrokerConnection.open(broker.bootstrap)
        try:
            r = await conn.send(f.request(dict.fromkeys(range(partitions), 0), 0, 0,
                                          max_bytes=64 << 20, partition_max_bytes=8 << 20))
            sizes = {p: len(x.records or b"") for p, x in _parts(r).items()}
            assert 8 << 20 < sum(sizes.values()) <= partitions * ANSWER_BYTES_PER_PARTITION
            left = [p for p, size in sizes.items() if not size]
            assert left
            served = {p: 300 for p, size in sizes.items() if size}  # each read whole
            r = await conn.send(f.request(served, r.session_id, 1, max_bytes=64 << 20,
                                          partition_max_bytes=8 << 20))
            assert {p for p, x in _parts(r).items() if x.records} == set(left)
        finally:
            await conn.close()

    asyncio.run(scenario())


def test_zero_copy_does_not_leak_fds(broker: RunningBroker) -> None:
    """Batches larger than COPY_REGION_BYTES go out by sendfile: 200 such answers leave
    the broker's descriptors (its sockets and its files) as they were. (The sendfile
    loop's duplicate of a full socket is tested in test_network, with 6 MiB regions.)"""
    async def scenario() -> None:
        name, tid = _topic(broker, 2)
        value = random.Random(7).randbytes(COPY_REGION_BYTES + 1)  # incompressible
        _append(broker, name, 0, n=1, value=value)
        _append(broker, name, 1, n=1, value=value)
        f = Fetcher(13, name, tid)

        def own() -> list[str]:
            # the broker's sockets and this topic's files: the broker may close another
            # test's segment files meanwhile (whole run Q46: six of them, an earlier
            # topic's, were open before the loop and closed after)
            return [t for t in server_descriptors(broker.port, broker.data_dir)
                    if t.startswith("socket:") or f"/{name}-" in t]

        conn = await BrokerConnection.open(broker.bootstrap)
        try:
            await conn.send(f.request({0: 0, 1: 0}))
            before = own()
            assert any(f"/{name}-" in t for t in before)  # its segments are counted
            for _ in range(200):
                r = await conn.send(f.request({0: 0, 1: 0}))
                assert all(p.records for p in _parts(r).values())
            # A duplicate is closed just after the answer's last byte went out.
            started = time.monotonic()
            while own() != before and not expired(started, 10):
                await asyncio.sleep(0.01)
            assert own() == before
        finally:
            await conn.close()

    asyncio.run(scenario())


def test_incremental_fetch_rotates_partitions_with_data(broker: RunningBroker) -> None:
    """Under a small max_bytes, partitions that returned data move to the end of the
    session so the others get their turn (Kafka's IncrementalFetchContext)."""
    async def scenario() -> None:
        name, tid = _topic(broker, 2)
        for p in range(2):
            _append(broker, name, p, 20, b"x" * 1000)
        f = Fetcher(13, name, tid)
        conn = await BrokerConnection.open(broker.bootstrap)
        try:
            r = await conn.send(f.request({0: 0, 1: 0}, 0, 0, max_bytes=100))
            sid = r.session_id
            ps = _parts(r)
            assert ps[0].records and not ps[1].records
            r = await conn.send(f.request({}, sid, 1, max_bytes=100))
            assert list(_parts(r)) == [0]  # p0 again (offsets unchanged), then rotated
            r = await conn.send(f.request({}, sid, 2, max_bytes=100))
            assert list(_parts(r)) == [1] and _parts(r)[1].records
            r = await conn.send(f.request({}, sid, 3, max_bytes=100))
            assert list(_parts(r)) == [0]
        finally:
            await conn.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(("epoch", "code"), [
    (-1, ErrorCode.none), (0, ErrorCode.none), (1, ErrorCode.unknown_leader_epoch),
    (-2, ErrorCode.fenced_leader_epoch),
])
def test_current_leader_epoch_checked_by_fetch_and_list_offsets(
    broker: RunningBroker, epoch: int, code: ErrorCode
) -> None:
    """Kafka's Partition.checkCurrentLeaderEpoch; the one broker's leader epoch is 0."""
    name, tid = _topic(broker, 1)
    _append(broker, name, 0)

    async def scenario() -> None:
        conn = await BrokerConnection.open(broker.bootstrap)
        try:
            r = await conn.send(Fetcher(12, name, tid).request({0: 0}, leader_epoch=epoch))
            assert _parts(r)[0].error_code == code
            m = importlib.import_module("kio.schema.list_offsets.v7.request")
            r = await conn.send(make(
                m.ListOffsetsRequest, replica_id=-1, isolation_level=0,
                topics=(make(m.ListOffsetsTopic, name=name, partitions=(make(
                    m.ListOffsetsPartition, partition_index=0, current_leader_epoch=epoch,
                    timestamp=-1),)),),
            ))
            assert r.topics[0].partitions[0].error_code == code
        finally:
            await conn.close()

    asyncio.run(scenario())


def test_list_offsets_of_a_new_leader_lagging_its_epoch_start(broker: RunningBroker) -> None:
    """KIP-207: a leader just elected whose high watermark lags the start of its epoch
    answers a client's ListOffsets OFFSET_NOT_AVAILABLE (a stale end would make a consumer
    stop short, as the Java client's endOffsets did during a rolling restart), a replica or
    debugging tool (replica_id -2) its log end offset, and the earlier records by time."""
    from odradek.cluster.partition import PartitionState

    name, _ = _topic(broker, 1)
    partition = broker.broker.replica_manager.get_partition(name, 0)
    assert partition is not None
    me, other = partition.broker_id, partition.broker_id + 100
    _append(broker, name, 0, 3)  # offsets 0-2, committed: the leader is alone
    started = int(time.time() * 1000) + 60_000  # later than the first three records'
    early = started - 120_000
    # Follower of broker `other` for a while: it appends three records the old leader had,
    # learning a high watermark of 3; then it leads at epoch 2 with `other` in its ISR.
    broker.call(partition.update_state, PartitionState(other, 1, (other, me), (me, other)))
    log = broker.broker.get_log(name, 0)
    assert log is not None
    broker.call(lambda: log.append_as_leader(
        build_batch([(b"k", b"v")] * 3, timestamp=started), leader_epoch=1))
    broker.call(partition.update_state, PartitionState(me, 2, (me, other), (me, other)))
    assert partition.high_watermark == 3 and partition.leader_epoch_start_offset == 6

    def ask(timestamp: int, replica_id: int = -1) -> tuple[int, int]:
        async def one() -> tuple[int, int]:
            conn = await BrokerConnection.open(broker.bootstrap)
            try:
                m = importlib.import_module("kio.schema.list_offsets.v7.request")
                r = await conn.send(make(
                    m.ListOffsetsRequest, replica_id=replica_id, isolation_level=0,
                    topics=(make(m.ListOffsetsTopic, name=name, partitions=(make(
                        m.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1,
                        timestamp=timestamp),)),),
                ))
                p = r.topics[0].partitions[0]
                return int(p.error_code.value), int(p.offset)
            finally:
                await conn.close()

        return asyncio.run(one())

    try:
        not_available = int(ErrorCode.offset_not_available.value)
        assert ask(-1) == (not_available, -1)
        assert ask(started) == (not_available, -1)  # offset 3, above the high watermark
        assert ask(early) == (0, 0)  # found below the high watermark: answered
        assert ask(-2) == (0, 0)
        assert ask(-1, replica_id=-2) == (0, 6)  # a debugging tool sees the log end
        # The follower fetches from the new leader: the high watermark reaches the epoch.
        broker.call(partition.update_follower_fetch_state, other, 6, 0)
        assert ask(-1) == (0, 6)
        assert ask(started) == (0, 3)
    finally:
        broker.call(partition.update_state, PartitionState(me, 3, (me,), (me,)))


def test_metadata_names_no_leader_it_does_not_know_alive(broker: RunningBroker) -> None:
    """Kafka's MetadataCache: a partition whose leader is not among the live brokers of
    the answer (a broker whose registration this one has not seen yet) is
    LEADER_NOT_AVAILABLE with leader -1, never a node id missing from the brokers list."""
    from odradek.server.handlers.metadata import _topic as _topic_of

    name, _ = _topic(broker, 2)
    services = broker.broker.services
    info = services.metadata.get(name)
    assert info is not None
    me = services.broker_id
    seen = broker.call(_topic_of, services, info, {me})
    assert [(p.error_code, p.leader_id) for p in seen.partitions] == [(0, me), (0, me)]
    unseen = broker.call(_topic_of, services, info, {me + 1})
    assert [(p.error_code, p.leader_id) for p in unseen.partitions] == [
        (int(ErrorCode.leader_not_available.value), -1)] * 2
