"""Group configs (KIP-848): per-group overrides of the broker's consumer group configs,
as Kafka 4.0's ``GroupConfig``.

How it works: a group may override ``consumer.session.timeout.ms`` and
``consumer.heartbeat.interval.ms`` (IncrementalAlterConfigs / AlterConfigs of a GROUP
resource, stored in the metadata store beside the other entity configs, as Kafka keeps
them in its metadata log); a group without one takes the broker's
``group.consumer.session.timeout.ms`` / ``group.consumer.heartbeat.interval.ms``. A new
set of overrides is checked as Kafka's ``GroupConfig.validate`` checks it, with its
messages: only known names; integers of at least 1; each within the broker's
``group.consumer.min.*`` / ``max.*``; the session timeout greater than the heartbeat
interval (a name not overridden counts at the broker's value, which is the value the
group would then use; Kafka's ConfigDef default there). The group coordinator reads a
group's overrides at each heartbeat (:func:`consumer_group_config_for`), so a change
reaches each member at its next heartbeat: the interval it is told, and its session
deadline. Kafka's ``share.*`` group configs are refused: share groups (KIP-932) are not
served.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from odradek.coordinator.consumer_group import ConsumerGroupConfig
from odradek.storage.config import java_int

__all__ = [
    "GROUP_CONFIG_DEFS",
    "GroupConfigDef",
    "GroupConfigError",
    "consumer_group_config_for",
    "group_config_values",
    "validate_group_configs",
]

CONSUMER_SESSION_TIMEOUT_MS = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL_MS = "consumer.heartbeat.interval.ms"
#: Kafka 4.0's other group configs, for share groups, which Odradek does not serve
SHARE_GROUP_CONFIGS = frozenset({
    "share.session.timeout.ms", "share.heartbeat.interval.ms",
    "share.record.lock.duration.ms",
})


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    name: str
    broker_key: str  # the broker config it overrides (its value when not overridden)
    min_key: str
    max_key: str
    doc: str


GROUP_CONFIG_DEFS: dict[str, GroupConfigDef] = {
    d.name: d for d in (
        GroupConfigDef(CONSUMER_HEARTBEAT_INTERVAL_MS, "group.consumer.heartbeat.interval.ms",
                       "group.consumer.min.heartbeat.interval.ms",
                       "group.consumer.max.heartbeat.interval.ms",
                       "The heartbeat interval given to the members."),
        GroupConfigDef(CONSUMER_SESSION_TIMEOUT_MS, "group.consumer.session.timeout.ms",
                       "group.consumer.min.session.timeout.ms",
                       "group.consumer.max.session.timeout.ms",
                       "The timeout to detect client failures when using the consumer "
                       "group protocol."),
    )
}

_INT_MAX = 2_147_483_647


class GroupConfigError(ValueError):
    """A refused set of group configs (Kafka's InvalidConfigurationException: the
    request's INVALID_CONFIG)."""


def _parse(name: str, text: str) -> int:
    try:
        value = java_int(text)
    except ValueError:
        raise GroupConfigError(
            f"Invalid value {text} for configuration {name}: Not a number of type INT"
        ) from None
    if not -_INT_MAX - 1 <= value <= _INT_MAX:
        raise GroupConfigError(
            f"Invalid value {text} for configuration {name}: Not a number of type INT")
    if value < 1:
        raise GroupConfigError(
            f"Invalid value {value} for configuration {name}: Value must be at least 1")
    return value


def group_config_values(broker: Mapping[str, Any],
                        overrides: Mapping[str, str]) -> dict[str, int]:
    """The value in effect of each group config for a group with ``overrides`` (stored,
    so valid when written; one that no longer parses counts at the broker's value)."""
    out = {}
    for name, d in GROUP_CONFIG_DEFS.items():
        value = int(broker[d.broker_key])
        if name in overrides:
            with contextlib.suppress(GroupConfigError):
                value = _parse(name, overrides[name])
        out[name] = value
    return out


def validate_group_configs(broker: Mapping[str, Any], overrides: Mapping[str, str]) -> None:
    """Kafka's ``GroupConfig.validate`` of a group's whole set of overrides against the
    broker's ``group.consumer.*`` configs (``broker``: config name -> value); raises
    :class:`GroupConfigError`."""
    for name in overrides:
        if name in SHARE_GROUP_CONFIGS:
            raise GroupConfigError(f"Group config {name} is not supported: share groups "
                                   "(KIP-932) are not served")
        if name not in GROUP_CONFIG_DEFS:
            raise GroupConfigError(f"Unknown group config name: {name}")
    values = {name: int(broker[d.broker_key]) for name, d in GROUP_CONFIG_DEFS.items()}
    for name, text in overrides.items():
        values[name] = _parse(name, text)
    for name, d in GROUP_CONFIG_DEFS.items():
        if values[name] < int(broker[d.min_key]):
            raise GroupConfigError(f"{name} must be greater than or equal to {d.min_key}")
        if values[name] > int(broker[d.max_key]):
            raise GroupConfigError(f"{name} must be less than or equal to {d.max_key}")
    if values[CONSUMER_SESSION_TIMEOUT_MS] <= values[CONSUMER_HEARTBEAT_INTERVAL_MS]:
        raise GroupConfigError(f"{CONSUMER_SESSION_TIMEOUT_MS} must be greater than "
                               f"{CONSUMER_HEARTBEAT_INTERVAL_MS}")


def consumer_group_config_for(base: ConsumerGroupConfig,
                              overrides: Mapping[str, str]) -> ConsumerGroupConfig:
    """``base`` (the broker's) with the group's overrides applied."""
    if not overrides:
        return base
    values = group_config_values({
        GROUP_CONFIG_DEFS[CONSUMER_SESSION_TIMEOUT_MS].broker_key: base.session_timeout_ms,
        GROUP_CONFIG_DEFS[CONSUMER_HEARTBEAT_INTERVAL_MS].broker_key:
            base.heartbeat_interval_ms,
    }, overrides)
    config = replace(base, session_timeout_ms=values[CONSUMER_SESSION_TIMEOUT_MS],
                     heartbeat_interval_ms=values[CONSUMER_HEARTBEAT_INTERVAL_MS])
    return base if config == base else config
