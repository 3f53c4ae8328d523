"""The broker's configuration (odradek.server.config): Kafka's defaults, and the shipped
config/server.properties that `make serve` uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def test_a_bad_value_says_what_the_key_expects() -> None:
    import pytest

    from odradek.storage.config import ConfigError

    with pytest.raises(ConfigError) as caught:
        BrokerConfig.load(overrides=["num.partitions=abc"])
    assert str(caught.value) == (
        "invalid value 'abc' for num.partitions: not a number of type INT")
    with pytest.raises(ConfigError, match="not a number of type LONG"):
        BrokerConfig.load(overrides=["log.retention.ms=soon"])


def test_an_unknown_key_near_a_known_one_is_suggested(caplog: Any) -> None:
    config = BrokerConfig.load(overrides=["num.partitons=3", "no.such.thing=1"])
    assert config.unknown == ["no.such.thing", "num.partitons"]
    with caplog.at_level("WARNING", logger="odradek.server.config"):
        config.report_unknown()
    assert ("unknown configuration key 'num.partitons' is ignored (did you mean "
            "num.partitions?)") in caplog.text
    assert "unknown configuration key 'no.such.thing' is ignored\n" in caplog.text + "\n"


def test_digit_separators_are_not_a_number_as_in_java() -> None:
    import pytest

    from odradek.storage.config import ConfigError

    with pytest.raises(ConfigError, match="not a number of type INT"):
        BrokerConfig.load(overrides=["num.partitions=1_0"])
    with pytest.raises(ConfigError, match="Not a number of type"):  # a key not served
        BrokerConfig.load(overrides=["sasl.kerberos.min.time.before.relogin=6_0000"])
