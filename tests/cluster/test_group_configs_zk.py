"""KIP-848's group configs (GROUP config resources) on a broker whose metadata store is a
real ZooKeeper, over the wire: group ids that are not ZooKeeper path components as they
are (``.``, ``..``: ZooKeeper refuses a relative path) are stored under an escaped node
name and read back by the watch; a group id too long for a ZooKeeper request is refused
before the store is asked, so the broker's session to ZooKeeper never drops for it (a
request longer than ZooKeeper's ``jute.maxbuffer`` closes the connection)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from odradek.cluster.metadata import ClusterMetadata
from odradek.cluster.store import SessionEvent
from odradek.testing import RunningBroker, running_broker
from tests.cluster._zookeeper import ZooKeeperServer, wait_for
from tests.server.test_admin_protocol import describe, incremental

GROUP, SET = 32, 0


@pytest.fixture
def zk_broker(zookeeper: ZooKeeperServer) -> Iterator[RunningBroker]:
    connect = zookeeper.connect_string(f"/gc-{uuid.uuid4().hex[:8]}")
    with running_broker(overrides={"zookeeper.connect": connect, "broker.id": "1"}) as rb:
        yield rb


@pytest.mark.parametrize("group", [".", "..", "...", "a/..", "%2E"])
def test_group_ids_that_are_not_path_components_are_stored_escaped(
        zk_broker: RunningBroker, group: str) -> None:
    (r,) = incremental(zk_broker, 1, [(GROUP, group, [
        ("consumer.session.timeout.ms", SET, "50000")])])
    assert (r.error_code, r.error_message) == (ErrorCode.none, None)
    md = zk_broker.broker.metadata
    assert md.group_configs[group] == {"consumer.session.timeout.ms": "50000"}
    node = md.group_config_path(group).rsplit("/", 1)[1]
    assert node not in (".", "..") and ClusterMetadata.desanitize(node) == group
    # a second broker's view: what the watch reads back from the node names
    assert md.read_group_configs()[group] == {"consumer.session.timeout.ms": "50000"}
    (d,) = describe(zk_broker, 4, [(GROUP, group, ("consumer.session.timeout.ms",))])
    assert [(c.value, int(c.config_source)) for c in d.configs] == [("50000", 8)]


def test_a_group_id_too_long_for_the_store_is_refused_and_the_session_holds(
        zk_broker: RunningBroker) -> None:
    md = zk_broker.broker.metadata
    events: list[SessionEvent] = []
    md.store.add_session_listener(events.append)
    longest = "é" * (32767 // 2)  # 32766 bytes of UTF-8: Kafka's longest STRING
    too_long = longest + "é"
    (r,) = incremental(zk_broker, 1, [(GROUP, longest, [
        ("consumer.session.timeout.ms", SET, "50000")])])
    assert r.error_code == ErrorCode.none
    big = "é" * 200_000  # 2.4 MB once URL-encoded: beyond ZooKeeper's jute.maxbuffer
    (r, s) = incremental(zk_broker, 1, [
        (GROUP, too_long, [("consumer.session.timeout.ms", SET, "50000")]),
        (GROUP, big, [("consumer.session.timeout.ms", SET, "50000")])])
    assert (r.error_code, r.error_message) == (
        ErrorCode.invalid_request, "Group name is longer than 32767 bytes")
    assert (s.error_code, s.error_message) == (r.error_code, r.error_message)
    # the connection never dropped (no SUSPENDED, no new session)
    assert events == []
    wait_for(lambda: md.group_configs.get(longest) == {
        "consumer.session.timeout.ms": "50000"}, 10, "the long group's configs")
    assert too_long not in md.group_configs and big not in md.group_configs
