"""Topic configs changed at the source after the mirror created the target topic are
propagated (MirrorMaker 2's ``sync.topic.configs.enabled``): set, changed and removed
keys, while the keys the mirror never copies stay as the target has them. The mirror's
query runs in the tests' shared Spark session (the command's process is not the subject
here: tests/spark/test_mirror.py runs it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

from odradek.testing import running_broker
from tests.spark.test_mirror import mirror_in_session, partition_count, wait_until


def dynamic(admin: AdminClient, topic: str) -> dict[str, str]:
    """The configs set on ``topic`` itself."""
    res = ConfigResource("topic", topic)
    entries = admin.describe_configs([res])[res].result(30)
    return {k: e.value for k, e in entries.items()
            if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


def alter(admin: AdminClient, topic: str, **changes: str | None) -> None:
    ops = [ConfigEntry(k.replace("_", "."), v,
                       incremental_operation=AlterConfigOpType.SET if v is not None
                       else AlterConfigOpType.DELETE)
           for k, v in changes.items()]
    res = ConfigResource("topic", topic, incremental_configs=ops)
    admin.incremental_alter_configs([res])[res].result(30)


@pytest.mark.timeout(600)
def test_source_config_changes_reach_the_target(mirror_spark: Any, tmp_path: Path) -> None:
    with (
        running_broker(data_dir=tmp_path / "a") as a,
        running_broker(data_dir=tmp_path / "b") as b,
    ):
        src = AdminClient({"bootstrap.servers": a.bootstrap})
        tgt = AdminClient({"bootstrap.servers": b.bootstrap})
        src.create_topics([NewTopic("g.t", 2, 1, config={
            "retention.ms": "3600000", "compression.type": "lz4"})])["g.t"].result(30)
        log = tmp_path / "mirror.log"
        try:
            with mirror_in_session(mirror_spark, a.bootstrap, b.bootstrap, tmp_path / "ckpt", log,
                                   r"g\..*") as mirror:
                wait_until(lambda: partition_count(tgt, "g.t") == 2, "the target topic")
                assert dynamic(tgt, "g.t") == {"retention.ms": "3600000",
                                               "compression.type": "lz4"}
                # the target's own operation setting: never copied, never removed
                alter(tgt, "g.t", min_insync_replicas="1")
                alter(src, "g.t", retention_ms="7200000", cleanup_policy="compact",
                      compression_type=None, min_insync_replicas="1",
                      unclean_leader_election_enable="true")
                want = {"retention.ms": "7200000", "cleanup.policy": "compact",
                        "min.insync.replicas": "1"}
                wait_until(lambda: dynamic(tgt, "g.t") == want,
                           f"the target's configs to become {want}", 120)
                # changed back at the source: followed again
                alter(src, "g.t", cleanup_policy=None, retention_ms="1000000")
                want = {"retention.ms": "1000000", "min.insync.replicas": "1"}
                wait_until(lambda: dynamic(tgt, "g.t") == want,
                           f"the target's configs to become {want}", 120)
                assert mirror.running(), mirror.error
                assert mirror.stop() == 0
        except BaseException:
            print(log.read_text(errors="replace")[-6000:])
            raise
        assert "target topic g.t: configs" in log.read_text(errors="replace")
