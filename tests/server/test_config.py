"""The broker's configuration (odradek.server.config): Kafka's defaults, and the shipped
config/server.properties that `make serve` uses."""

from __future__ import annotations

from pathlib import Path

from odradek.server.config import BrokerConfig
from odradek.testing import running_broker

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "server.properties"


def test_group_initial_rebalance_delay_is_kafkas_by_default() -> None:
    assert BrokerConfig.load()["group.initial.rebalance.delay.ms"] == 3000


def test_the_shipped_server_properties_is_the_embedded_default_for_development() -> None:
    """Every key of the file is known, and it changes nothing of the embedded single node
    but the first rebalance's delay (0, as Kafka's own server.properties)."""
    shipped = BrokerConfig.load(SHIPPED)
    default = BrokerConfig.load()
    assert shipped.unknown == []
    differing = {k for k in set(shipped.values) | set(default.values)
                 if shipped.values.get(k) != default.values.get(k)}
    assert differing == {"group.initial.rebalance.delay.ms"}
    assert shipped["group.initial.rebalance.delay.ms"] == 0
    assert shipped.raw["listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert shipped.raw["log.dirs"] == "./data"


def test_the_test_harness_forms_groups_at_once_unless_told_otherwise() -> None:
    with running_broker() as broker:
        assert broker.broker.config["group.initial.rebalance.delay.ms"] == 0
    with running_broker({"group.initial.rebalance.delay.ms": "250"}) as broker:
        assert broker.broker.config["group.initial.rebalance.delay.ms"] == 250
