"""A broker in a ZooKeeper cluster (odradek.server.zk_cluster) is started only once its own
view of the live brokers lists its registration.

Its view follows the watch on ``/brokers/ids``, reported a moment after the registration's
create. Here that report is held back (:data:`HELD_S`): a broker that called itself
started meanwhile answered Metadata with no broker at all, and librdkafka's AdminClient,
asked to alter broker 0's configs, then waited for broker 0 until its timeout, even after
the view had caught up (the failure of a whole run, issue 51). A real ZooKeeper, the broker
in this process (odradek.testing), confluent-kafka as the client."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from odradek.cluster.membership import BrokerInfo
from odradek.server.zk_cluster import ZkCluster
from odradek.testing import running_broker
from tests.cluster._zookeeper import ZooKeeperServer

pytestmark = pytest.mark.interop

HELD_S = 2.0


def test_start_returns_once_the_broker_lists_itself(
    zookeeper: ZooKeeperServer, zk_chroot: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    report = ZkCluster._brokers_changed
    held: list[threading.Timer] = []

    def held_back(self: ZkCluster, brokers: dict[int, BrokerInfo]) -> None:
        if self.broker_id in brokers and not held:  # the report of its own registration
            held.append(threading.Timer(HELD_S, report, (self, brokers)))
            held[0].start()
            return
        report(self, brokers)

    monkeypatch.setattr(ZkCluster, "_brokers_changed", held_back)
    config = {"broker.id": "0", "zookeeper.connect": zookeeper.connect_string(zk_chroot)}
    with running_broker(config, data_dir=tmp_path / "broker") as broker:
        assert held, "the registration's report was not seen"
        port = broker.broker.servers[0].port
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        assert list(admin.list_topics(timeout=10).brokers) == [0]
        resource = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
            ConfigEntry("log.retention.ms", "3600000",
                        incremental_operation=AlterConfigOpType.SET)])
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(15)
        assert broker.broker.metadata.read_broker_configs("0") == {
            "log.retention.ms": "3600000"}
