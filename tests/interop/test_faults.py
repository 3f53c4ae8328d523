"""The short fault run of issue 15 (the long one is ``bench/faults.py``): three brokers on a
real ZooKeeper, an idempotent acks=all producer and a consumer on a topic of replication
factor 3 and ``min.insync.replicas`` 2, while a partition leader is killed -9, the
controller is killed -9, a leader is paused past its session timeout, every broker is
restarted in turn, and a leader is cut off the network (a proxy in front of its listener,
and of its ZooKeeper connection for the second cut), a leader is stopped with SIGTERM
under load, and every broker is killed -9 at once. The oracle is
:meth:`tests.interop._faults.FaultRun.verify`: nothing acknowledged lost or moved, nothing
seen retracted, nothing doubled, no replica diverged.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from ._cluster import running_cluster
from ._faults import FaultRun

pytestmark = [pytest.mark.interop, pytest.mark.slow]

OVERRIDES = {
    "offsets.topic.replication.factor": 3,
    # a follower that stops fetching leaves the ISR in seconds, not Kafka's 30
    "replica.lag.time.max.ms": 5000,
}


def test_no_acknowledged_write_is_lost_through_faults(tmp_path: Path) -> None:
    # in pytest's tmp_path: the brokers' logs stay for a failed run to be looked into
    with running_cluster(tmp_path, 3, OVERRIDES, proxied=True) as c:
        run = FaultRun(c, f"faults-{uuid.uuid4().hex[:8]}", partitions=3, rate_per_s=300)
        run.create_topic()
        run.start()
        try:
            run.inject("kill -9 of a leader", run.kill9_leader)
            run.heal()
            run.inject("kill -9 of the controller", run.kill9_controller)
            run.heal()
            run.inject("SIGSTOP of a leader past its session", run.pause_past_session)
            run.heal()
            run.inject("rolling restart", run.rolling_restart)
            run.heal()
            run.inject("a leader cut off from the others", run.isolate_leader)
            run.heal()
            run.inject("a leader cut off from the others and ZooKeeper",
                       lambda: run.isolate_leader(zookeeper=True))
            run.heal()
            run.inject("SIGTERM of a leader under load", run.sigterm_leader)
            run.heal()
            run.inject("kill -9 of every broker at once", run.kill9_all)
            run.heal()
            run.wait_acks(100, 60)
        finally:
            run.finish()
        report = run.verify()
        assert not run.errors, run.errors
        assert report.ok, "\n".join([report.summary(), *report.missing, *report.diverged,
                                     *report.duplicates])
        assert report.acknowledged > 1000, report.summary()
