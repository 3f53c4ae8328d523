"""GROUP config resources (type 32, KIP-848's group configs) over the wire: DescribeConfigs,
AlterConfigs and IncrementalAlterConfigs, their errors and their authorization (Kafka
4.0's ConfigHelper / ControllerConfigurationValidator); the checks of Kafka's
GroupConfig themselves are in tests/coordinator/test_group_config.py."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.testing import RunningBroker, running_broker
from tests.server.test_admin_protocol import alter, describe, incremental

GROUP = 32
SET, DELETE, APPEND = 0, 1, 2


@pytest.fixture(scope="module")
def rb() -> Iterator[RunningBroker]:
    with running_broker(overrides={"group.consumer.min.heartbeat.interval.ms": "100",
                                   "group.consumer.min.session.timeout.ms": "1000"}) as b:
        yield b


def new_group() -> str:
    return f"gc-{uuid.uuid4().hex[:8]}"


def values(result: Any) -> dict[str, tuple[str, int]]:
    assert result.error_code == ErrorCode.none, result
    return {c.name: (c.value, int(c.config_source)) for c in result.configs}


def test_describe_with_keys_synonyms_and_docs(rb: RunningBroker) -> None:
    group = new_group()
    (r,) = incremental(rb, 1, [(GROUP, group, [("consumer.heartbeat.interval.ms", SET, "300")])])
    assert r.error_code == ErrorCode.none
    (d,) = describe(rb, 4, [(GROUP, group, ("consumer.heartbeat.interval.ms", "nope"))],
                    synonyms=True, docs=True)
    [entry] = d.configs
    assert (entry.name, entry.value, int(entry.config_source), entry.read_only,
            entry.is_sensitive, int(entry.config_type)) == (
        "consumer.heartbeat.interval.ms", "300", 8, False, False, 3)
    assert [(s.name, s.value, int(s.source)) for s in entry.synonyms] == [
        ("consumer.heartbeat.interval.ms", "300", 8)]
    assert entry.documentation
    assert rb.broker.metadata.group_configs[group] == {"consumer.heartbeat.interval.ms": "300"}


def test_alter_configs_replaces_the_set(rb: RunningBroker) -> None:
    group = new_group()
    (r,) = alter(rb, 2, [(GROUP, group, {"consumer.heartbeat.interval.ms": "300",
                                         "consumer.session.timeout.ms": "9000"})])
    assert r.error_code == ErrorCode.none
    (r,) = alter(rb, 2, [(GROUP, group, {"consumer.session.timeout.ms": "8000"})])
    assert r.error_code == ErrorCode.none
    assert values(describe(rb, 4, [(GROUP, group, None)])[0]) == {
        "consumer.heartbeat.interval.ms": ("5000", 5),
        "consumer.session.timeout.ms": ("8000", 8),
    }
    # every override removed: the node goes, the group is back at the broker's values
    (r,) = alter(rb, 2, [(GROUP, group, {})])
    assert r.error_code == ErrorCode.none
    assert group not in rb.broker.metadata.group_configs
    assert rb.broker.metadata.store.get(rb.broker.metadata.group_config_path(group)) is None


@pytest.mark.parametrize(("resource", "ops", "error", "message"), [
    ("", [("consumer.session.timeout.ms", SET, "9000")], ErrorCode.invalid_request,
     "Group name must not be empty"),
    ("g", [("consumer.session.timeout.ms", APPEND, "9000")], ErrorCode.invalid_config,
     "config value append is not allowed for config key: consumer.session.timeout.ms "
     "(not a list)"),
    ("g", [("share.session.timeout.ms", SET, "9000")], ErrorCode.invalid_config,
     "Group config share.session.timeout.ms is not supported: share groups (KIP-932) are "
     "not served"),
    ("g", [("consumer.session.timeout.ms", SET, "0")], ErrorCode.invalid_config,
     "Invalid value 0 for configuration consumer.session.timeout.ms: Value must be at "
     "least 1"),
    ("g", [("consumer.session.timeout.ms", SET, None)], ErrorCode.invalid_request,
     "null value not supported for: consumer.session.timeout.ms"),
])
def test_refused_alters(rb: RunningBroker, resource: str, ops: list[Any], error: ErrorCode,
                        message: str) -> None:
    (r,) = incremental(rb, 1, [(GROUP, resource, ops)])
    assert (r.error_code, r.error_message) == (error, message)
    assert resource not in rb.broker.metadata.group_configs


def test_describe_of_an_empty_group_name(rb: RunningBroker) -> None:
    (d,) = describe(rb, 4, [(GROUP, "", None)])
    assert (d.error_code, d.error_message, d.configs) == (
        ErrorCode.invalid_request, "Group name must not be empty", ())


def test_group_configs_need_configs_acls_on_the_group() -> None:
    from tests.server.test_authorization import (
        ADMIN,
        AUTHORIZER,
        GROUP_T,
        acl_creation,
        call,
        grant,
    )

    carol, alter_configs = "User:carol", 11
    with running_broker(overrides={"authorizer.class.name": AUTHORIZER,
                                   "super.users": ADMIN}) as b:
        mine, other = new_group(), new_group()
        grant(b, acl_creation(GROUP_T, mine, carol, op=alter_configs))
        m = __import__("kio.schema.incremental_alter_configs.v1.request", fromlist=["x"])
        request = m.IncrementalAlterConfigsRequest(resources=tuple(
            m.AlterConfigsResource(resource_type=GROUP, resource_name=g, configs=(
                m.AlterableConfig(name="consumer.session.timeout.ms", config_operation=SET,
                                  value="50000"),))
            for g in (mine, other)), validate_only=False)
        response, _ = call(b, request, carol)
        assert [r.error_code for r in response.responses] == [
            ErrorCode.none, ErrorCode.group_authorization_failed]
        assert b.broker.metadata.group_configs == {
            mine: {"consumer.session.timeout.ms": "50000"}}
        d = __import__("kio.schema.describe_configs.v4.request", fromlist=["x"])
        described = d.DescribeConfigsRequest(resources=tuple(
            d.DescribeConfigsResource(resource_type=GROUP, resource_name=g,
                                      configuration_keys=None) for g in (mine, other)),
            include_synonyms=False, include_documentation=False)
        # AlterConfigs implies DescribeConfigs (Kafka's ACL rules)
        response, _ = call(b, described, carol)
        assert [r.error_code for r in response.results] == [
            ErrorCode.none, ErrorCode.group_authorization_failed]
