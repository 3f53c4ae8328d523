"""Acceptance (issue 52): admin requests racing each other through the three brokers of a
cluster never break a broker's view of the metadata.

A broker hands the ZooKeeper round trips of a CreateTopics to a worker thread while its
event loop goes on applying the changes other brokers make (docs/architecture.md,
"Threads"). The worker once walked the loop's own topic dictionary while the loop changed
it, and a CreateTopics of 100 topics failed whole with UNKNOWN_SERVER_ERROR
("dictionary changed size during iteration"). The cluster is this module's own
(:func:`tests.interop._cluster.cluster3`); requests go to one broker each, over raw
connections, so that every answer's error code is checked as the broker gave it.
"""

from __future__ import annotations

import asyncio
import datetime
import threading
import uuid
from collections import Counter
from typing import Any

import pytest

from odradek.client.connection import BrokerConnection

from ._cluster import Cluster, cluster3, cluster3_shared

__all__ = ["cluster3", "cluster3_shared"]  # the fixtures, used by name

pytestmark = pytest.mark.interop

#: Topics of one CreateTopics (the issue's request), and topics that exist beforehand:
#: each creation in the worker thread walks all of them (the partition limits), so the
#: more there are, the wider the window in which the loop applies a change meanwhile.
BATCH = 100
EXISTING = 300
#: How many CreateTopics of BATCH topics the test sends while the churn runs.
ROUNDS = 3
DEADLINE_S = 120.0


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def _create(conn: BrokerConnection, names: list[str], timeout_ms: int = 60_000) -> Any:
    from kio.schema.create_topics.v5 import request as m
    from kio.schema.types import TopicName
    from kio.static.primitive import i16, i32, i32Timedelta

    return await conn.send(m.CreateTopicsRequest(
        topics=tuple(m.CreatableTopic(name=TopicName(n), num_partitions=i32(1),
                                      replication_factor=i16(1), assignments=(), configs=())
                     for n in names),
        timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=timeout_ms)),
        validate_only=False))


async def _delete(conn: BrokerConnection, names: list[str]) -> Any:
    from kio.schema.delete_topics.v4 import request as m
    from kio.schema.types import TopicName
    from kio.static.primitive import i32Timedelta

    return await conn.send(m.DeleteTopicsRequest(
        topic_names=tuple(TopicName(n) for n in names),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30))))


def _codes(response: Any) -> Counter[int]:
    return Counter(int(t.error_code) for t in response.topics)


def _failures(response: Any) -> list[tuple[str, int, str | None]]:
    """(topic, error code, message) of every topic not created: the assertion's story."""
    return [(t.name, int(t.error_code), t.error_message) for t in response.topics
            if int(t.error_code) != 0][:3]


def test_create_100_topics_while_another_broker_creates_and_deletes(cluster3: Cluster) -> None:
    """CreateTopics of 100 topics through broker 1, three times, while broker 2 creates and
    deletes topics in a loop: every topic of every request is created (error code 0),
    none answered UNKNOWN_SERVER_ERROR (-1); the churn's own requests all succeed too."""
    stop = threading.Event()
    churn_codes: Counter[int] = Counter()
    churn_errors: list[BaseException] = []

    async def churn() -> None:
        conn = await BrokerConnection.open(cluster3.address(2))
        try:
            while not stop.is_set():
                names = [_name("churn") for _ in range(5)]
                churn_codes.update(_codes(await _create(conn, names)))
                deleted = await _delete(conn, names)
                churn_codes.update(int(r.error_code) for r in deleted.responses)
        finally:
            await conn.close()

    def run_churn() -> None:
        try:
            asyncio.run(churn())
        except BaseException as exc:  # reported by the test, not lost in the thread
            churn_errors.append(exc)

    failures: list[tuple[str, int, str | None]] = []

    async def main() -> list[Counter[int]]:
        conn = await BrokerConnection.open(cluster3.address(1))
        try:
            existing = await _create(conn, [_name("existing") for _ in range(EXISTING)])
            assert _codes(existing) == Counter({0: EXISTING}), _failures(existing)
            churner = threading.Thread(target=run_churn, name="churn", daemon=True)
            churner.start()
            try:
                rounds = []
                for _ in range(ROUNDS):
                    response = await _create(conn, [_name("batch") for _ in range(BATCH)])
                    rounds.append(_codes(response))
                    failures.extend(_failures(response))
                return rounds
            finally:
                stop.set()
                await asyncio.to_thread(churner.join, DEADLINE_S)
        finally:
            await conn.close()

    rounds = asyncio.run(asyncio.wait_for(main(), DEADLINE_S))
    assert churn_errors == []
    assert rounds == [Counter({0: BATCH})] * ROUNDS, failures
    assert churn_codes and set(churn_codes) == {0}, churn_codes


def test_no_loop_owned_container_was_touched_from_another_thread(cluster3: Cluster) -> None:
    """Last in this module, over the logs of its brokers: run with ODRADEK_DEBUG_THREADS=1
    (the suite's conftest sets it, and the brokers inherit it), a loop-owned container
    touched from a worker thread raises WrongThreadError, which the broker logs; none
    did during the requests above."""
    logs = {b.stderr_path.parent for b in cluster3.brokers.values()}
    found = [
        (path.name, line)
        for folder in logs for path in sorted(folder.glob("broker-*.stderr"))
        for line in path.read_text(errors="replace").splitlines()
        if "WrongThreadError" in line or "changed size during iteration" in line
    ]
    assert found == []
