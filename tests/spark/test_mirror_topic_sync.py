"""The mirror's topic sync (MirrorJob.sync_topics) without Spark: each cluster's Metadata
request is bounded by the attempt's timeout, not ``--timeout``, and a failed one renews
that side's admin client, so the next attempt bootstraps afresh (whole run Q29 saw the
group sync's single attempt wait out its 30 s on a killed broker)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.spark.mirror import MirrorConfig, MirrorJob, TransientMirrorError
from odradek.testing import RunningBroker, running_broker
from tests.interop._broker import refusing_address


@pytest.fixture(scope="module")
def broker() -> Iterator[RunningBroker]:
    with running_broker() as b:
        b.call(b.broker.metadata.create_topic, "sync.a", 2, 1, {})
        yield b


@pytest.fixture
def dead_address() -> Iterator[str]:
    """An address that refuses connections (:func:`refusing_address`)."""
    with refusing_address() as address:
        yield address


def test_an_unreachable_source_fails_the_attempt_in_its_bound_and_renews_the_client(
    broker: RunningBroker, dead_address: str, tmp_path: Path
) -> None:
    job = MirrorJob(MirrorConfig(dead_address, broker.bootstrap, "sync\\..*",
                                 checkpoint_dir=tmp_path, api_timeout_ms=30_000))
    before = job.src
    started = time.monotonic()
    with pytest.raises(TransientMirrorError, match=r"source cluster .* within 1000 ms"):
        job.sync_topics(1.0)
    assert time.monotonic() - started < 10  # the attempt's 1 s, not --timeout's 30 s
    assert job.src is not before  # the next attempt bootstraps with a new client
    assert job.tgt is not None


def test_a_reachable_pair_syncs_with_the_default_bound(
    broker: RunningBroker, tmp_path: Path
) -> None:
    job = MirrorJob(MirrorConfig(broker.bootstrap, broker.bootstrap, "sync\\..*",
                                 topic_prefix="copy.", checkpoint_dir=tmp_path,
                                 api_timeout_ms=30_000))
    before = job.src
    assert job.sync_topics() == {"sync.a": 2}
    assert job.src is before  # kept while it answers
