"""KIP-848's group configs (GROUP config resources, type 32) with confluent-kafka's
AdminClient: IncrementalAlterConfigs and DescribeConfigs of ``consumer.session.timeout.ms``
and ``consumer.heartbeat.interval.ms``, checked against the broker's
``group.consumer.min/max.*`` as Kafka 4.0's GroupConfig, and applied to the group's
members at their next heartbeat (the interval they are told, the session that fences
them); kept across a restart (stored in the metadata store)."""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.client.connection import BrokerConnection, request_class
from odradek.client.groups import GroupsClient
from odradek.protocol.errors import ErrorCode

from ._broker import BrokerProcess, start_broker

pytestmark = pytest.mark.interop

BROKER = {
    "group.consumer.session.timeout.ms": 45000,
    "group.consumer.min.session.timeout.ms": 1000,
    "group.consumer.max.session.timeout.ms": 60000,
    "group.consumer.heartbeat.interval.ms": 5000,
    "group.consumer.min.heartbeat.interval.ms": 100,
    "group.consumer.max.heartbeat.interval.ms": 15000,
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with start_broker(tmp_path_factory.mktemp("group-configs"), overrides=BROKER) as b:
        yield b


def admin(broker: BrokerProcess) -> Any:
    from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

    return AdminClient({"bootstrap.servers": broker.bootstrap})


def alter(broker: BrokerProcess, group: str, *ops: tuple[str, str | None],
          validate_only: bool = False) -> None:
    """SET (a value) or DELETE (None) of group configs; raises KafkaException."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    entries = [ConfigEntry(name, value or "", incremental_operation=(
        AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE))
        for name, value in ops]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    client = admin(broker)  # kept until the answers are in (its end cancels them)
    futures = client.incremental_alter_configs([resource], validate_only=validate_only)
    for f in futures.values():
        f.result(30)


DEFAULT_CONFIG, GROUP_CONFIG = 5, 8  # Kafka's ConfigSource ids (confluent-kafka 2.16 has
# no name for GROUP_CONFIG: it gives the number)


def described(broker: BrokerProcess, group: str) -> dict[str, tuple[str, int]]:
    """name -> (value, source)."""
    from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]

    client = admin(broker)
    futures = client.describe_configs([ConfigResource(ResourceType.GROUP, group)])
    [entries] = [f.result(30) for f in futures.values()]
    return {name: (e.value, int(getattr(e.source, "value", e.source)))
            for name, e in entries.items()}


def heartbeat(broker: BrokerProcess, group: str, member_id: str, epoch: int,
              topic: str) -> Any:
    cls = request_class("consumer_group_heartbeat", 1, "ConsumerGroupHeartbeatRequest")
    joining = epoch == 0
    request = cls(group_id=group, member_id=member_id, member_epoch=epoch, instance_id=None,
                  rack_id=None,
                  rebalance_timeout=datetime.timedelta(milliseconds=30000 if joining else -1),
                  subscribed_topic_names=(topic,) if joining else None, server_assignor=None,
                  topic_partitions=() if joining else None, subscribed_topic_regex=None)

    async def go() -> Any:
        async with await BrokerConnection.open(broker.bootstrap) as conn:
            return await conn.send(request)

    return asyncio.run(go())


def interval_ms(response: Any) -> int:
    assert response.error_code == ErrorCode.none, response
    interval: datetime.timedelta = response.heartbeat_interval
    return round(interval.total_seconds() * 1000)


def new_names() -> tuple[str, str]:
    return f"gc-{uuid.uuid4().hex[:8]}", f"gc-t-{uuid.uuid4().hex[:8]}"


def test_group_configs_are_described_altered_and_checked(broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaException

    group, _ = new_names()
    # a group without configs (that need not exist): the broker's values, by default
    assert described(broker, group) == {
        "consumer.heartbeat.interval.ms": ("5000", DEFAULT_CONFIG),
        "consumer.session.timeout.ms": ("45000", DEFAULT_CONFIG),
    }
    alter(broker, group, ("consumer.session.timeout.ms", "2000"),
          ("consumer.heartbeat.interval.ms", "500"))
    assert described(broker, group) == {
        "consumer.heartbeat.interval.ms": ("500", GROUP_CONFIG),
        "consumer.session.timeout.ms": ("2000", GROUP_CONFIG),
    }
    refused = {
        ("consumer.session.timeout.ms", "999"):
            "consumer.session.timeout.ms must be greater than or equal to "
            "group.consumer.min.session.timeout.ms",
        ("consumer.heartbeat.interval.ms", "15001"):
            "consumer.heartbeat.interval.ms must be less than or equal to "
            "group.consumer.max.heartbeat.interval.ms",
        ("consumer.heartbeat.interval.ms", "2000"):
            "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms",
        ("consumer.session.timeout.ms", "soon"):
            "Invalid value soon for configuration consumer.session.timeout.ms: "
            "Not a number of type INT",
        ("session.timeout.ms", "2000"): "Unknown group config name: session.timeout.ms",
    }
    for op, message in refused.items():
        with pytest.raises(KafkaException) as caught:
            alter(broker, group, op)
        error = caught.value.args[0]
        assert (error.name(), error.str()) == ("INVALID_CONFIG", message), op
    alter(broker, group, ("consumer.heartbeat.interval.ms", "700"), validate_only=True)
    assert described(broker, group)["consumer.heartbeat.interval.ms"] == ("500", GROUP_CONFIG)
    # the set left by a deletion is checked too: the broker's 5000 ms interval is not
    # below the group's 2000 ms session
    with pytest.raises(KafkaException) as caught:
        alter(broker, group, ("consumer.heartbeat.interval.ms", None))
    assert caught.value.args[0].str() == (
        "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms")
    alter(broker, group, ("consumer.heartbeat.interval.ms", None),
          ("consumer.session.timeout.ms", "10000"))
    assert described(broker, group) == {
        "consumer.heartbeat.interval.ms": ("5000", DEFAULT_CONFIG),
        "consumer.session.timeout.ms": ("10000", GROUP_CONFIG),
    }


def members(broker: BrokerProcess, group: str) -> int | None:
    """How many members ConsumerGroupDescribe shows (None: no such consumer group)."""
    async def go() -> int | None:
        async with await BrokerConnection.open(broker.bootstrap) as conn:
            described = await GroupsClient(conn).describe_consumer_group(group)
        return None if described is None else len(described.members)

    return asyncio.run(go())


def test_group_configs_reach_the_members_at_their_next_heartbeat(
        broker: BrokerProcess) -> None:
    group, topic = new_names()
    first = heartbeat(broker, group, "m1", 0, topic)
    assert interval_ms(first) == 5000 and first.member_epoch == 1
    alter(broker, group, ("consumer.heartbeat.interval.ms", "200"),
          ("consumer.session.timeout.ms", "1500"))
    # the next heartbeat is told the group's interval, and starts the group's session:
    # m1, silent from then on, is fenced after 1.5 s (the broker's: 45 s)
    assert interval_ms(heartbeat(broker, group, "m1", 1, topic)) == 200
    last = time.monotonic()
    deadline = last + 15
    while members(broker, group):
        assert time.monotonic() < deadline, "m1 not fenced by the group's session timeout"
    assert time.monotonic() - last >= 1.4
    # a config removed: the broker's value again, at the next heartbeat
    alter(broker, group, ("consumer.heartbeat.interval.ms", None),
          ("consumer.session.timeout.ms", None))
    assert interval_ms(heartbeat(broker, group, "m2", 0, topic)) == 5000


def test_group_configs_are_kept_across_a_restart(tmp_path: Path) -> None:
    group, _ = new_names()
    with start_broker(tmp_path, overrides=BROKER) as first:
        alter(first, group, ("consumer.session.timeout.ms", "10000"))
        data_dir = tmp_path / "data"
        first.stop()
    with start_broker(tmp_path / "again", data_dir=data_dir, overrides=BROKER) as second:
        assert described(second, group)["consumer.session.timeout.ms"] == (
            "10000", GROUP_CONFIG)
