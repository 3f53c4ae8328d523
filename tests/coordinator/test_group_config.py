"""KIP-848's group configs checked as Kafka 4.0's GroupConfig.validate, and applied over
the broker's consumer group configs (sans-I/O)."""

from __future__ import annotations

import pytest

from odradek.coordinator.consumer_group import ConsumerGroupConfig
from odradek.coordinator.group_config import (
    GroupConfigError,
    consumer_group_config_for,
    group_config_values,
    validate_group_configs,
)

BROKER = {
    "group.consumer.session.timeout.ms": 45000,
    "group.consumer.min.session.timeout.ms": 45000,
    "group.consumer.max.session.timeout.ms": 60000,
    "group.consumer.heartbeat.interval.ms": 5000,
    "group.consumer.min.heartbeat.interval.ms": 5000,
    "group.consumer.max.heartbeat.interval.ms": 15000,
}  # Kafka 4.0's defaults

S, H = "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"


@pytest.mark.parametrize("overrides", [
    {}, {S: "45000"}, {S: "60000", H: "15000"}, {H: "5000"}, {S: " 50000 "},
])
def test_accepted(overrides: dict[str, str]) -> None:
    validate_group_configs(BROKER, overrides)


@pytest.mark.parametrize(("overrides", "message"), [
    ({S: "44999"}, f"{S} must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ({S: "60001"}, f"{S} must be less than or equal to group.consumer.max.session.timeout.ms"),
    ({H: "4999"},
     f"{H} must be greater than or equal to group.consumer.min.heartbeat.interval.ms"),
    ({H: "15001"}, f"{H} must be less than or equal to group.consumer.max.heartbeat.interval.ms"),
    ({S: "0"}, f"Invalid value 0 for configuration {S}: Value must be at least 1"),
    ({S: "1.5"}, f"Invalid value 1.5 for configuration {S}: Not a number of type INT"),
    ({S: "2147483648"},
     f"Invalid value 2147483648 for configuration {S}: Not a number of type INT"),
    # Python's int() takes digit separators, Java's Integer.parseInt does not
    ({S: "50_000"}, f"Invalid value 50_000 for configuration {S}: Not a number of type INT"),
    ({"group.id": "x"}, "Unknown group config name: group.id"),
    ({"share.record.lock.duration.ms": "30000"},
     "Group config share.record.lock.duration.ms is not supported: share groups (KIP-932) "
     "are not served"),
])
def test_refused(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(GroupConfigError) as caught:
        validate_group_configs(BROKER, overrides)
    assert str(caught.value) == message


def test_the_session_must_exceed_the_interval_counting_the_broker_s_values() -> None:
    broker = {**BROKER, "group.consumer.min.session.timeout.ms": 1000}
    validate_group_configs(broker, {S: "6000"})
    with pytest.raises(GroupConfigError, match=f"^{S} must be greater than {H}$"):
        validate_group_configs(broker, {S: "5000"})  # the broker's interval: 5000


def test_values_in_effect_and_the_group_s_consumer_config() -> None:
    assert group_config_values(BROKER, {H: "7000"}) == {S: 45000, H: 7000}
    assert group_config_values(BROKER, {H: "garbage"}) == {S: 45000, H: 5000}
    base = ConsumerGroupConfig(session_timeout_ms=45000, heartbeat_interval_ms=5000,
                               max_size=10)
    assert consumer_group_config_for(base, {}) is base
    assert consumer_group_config_for(base, {S: "50000", H: "6000"}) == ConsumerGroupConfig(
        session_timeout_ms=50000, heartbeat_interval_ms=6000, max_size=10)
