"""``odradek consume`` on a transactional topic (issue 46, item 5), through the real command
in a subprocess against a broker written to by a real transactional producer
(confluent-kafka): transaction markers are never printed nor counted, and
``--isolation-level`` is Kafka's console consumer's (read_uncommitted by default: aborted
records shown; read_committed: only committed ones), with and without ``--group``."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator

import confluent_kafka as ck
import pytest
from tests.interop._broker import REPO, odradek_executable

from odradek.testing import RunningBroker, running_broker

COMMITTED = [b"c1", b"c2", b"c3", b"c4", b"c5"]
ABORTED = [b"a1", b"a2"]


@pytest.fixture(scope="module")
def topic() -> Iterator[tuple[RunningBroker, str]]:
    """A one-partition topic holding: a committed transaction (c1-c3), an aborted one
    (a1, a2), a committed one (c4, c5): 7 records and 3 markers."""
    with running_broker() as rb:
        name = f"consume-txn-{uuid.uuid4().hex[:6]}"
        rb.call(rb.broker.metadata.create_topic, name, 1, 1, {})
        producer = ck.Producer({"bootstrap.servers": rb.bootstrap,
                                "transactional.id": f"consume-{uuid.uuid4().hex[:6]}"})
        producer.init_transactions(30)
        for values, commit in ((COMMITTED[:3], True), (ABORTED, False),
                               (COMMITTED[3:], True)):
            producer.begin_transaction()
            for value in values:
                producer.produce(name, value, partition=0)
            producer.flush(30)
            if commit:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
        yield rb, name


def consume(rb: RunningBroker, topic: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run(
        [str(odradek_executable()), "consume", "--bootstrap-server", rb.bootstrap,
         "--topic", topic, "--from-beginning", "--timeout-ms", "2000", *args],
        capture_output=True, env=env, timeout=120, check=False,
    )


@pytest.mark.parametrize("group", [False, True])
@pytest.mark.parametrize("isolation", [None, "read_uncommitted", "read_committed"])
def test_markers_are_never_records_and_isolation_is_kafkas(
    topic: tuple[RunningBroker, str], group: bool, isolation: str | None,
) -> None:
    rb, name = topic
    args = ["--isolation-level", isolation] if isolation else []
    if group:
        args += ["--group", f"g-{uuid.uuid4().hex[:6]}"]
    done = consume(rb, name, *args)
    assert done.returncode == 0, done.stderr
    expected = COMMITTED if isolation == "read_committed" else [
        *COMMITTED[:3], *ABORTED, *COMMITTED[3:]]
    assert done.stdout.splitlines() == expected
    assert f"Processed a total of {len(expected)} messages".encode() in done.stderr


def test_an_unknown_isolation_level_is_a_usage_error(
    topic: tuple[RunningBroker, str],
) -> None:
    rb, name = topic
    done = consume(rb, name, "--isolation-level", "read_dirty")
    assert done.returncode == 2
    assert b"read_committed" in done.stderr
