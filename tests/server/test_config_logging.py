"""What the broker logs of the configs a client alters (issue 47): Kafka's
``KafkaConfig.loggableValue`` hides a password and any key whose type it cannot tell,
as DescribeConfigs marks them sensitive."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from odradek.protocol.errors import ErrorCode
from odradek.testing import RunningBroker, running_broker
from tests.server._requests import one, req

BROKER = 4
SET = 0


@pytest.fixture(scope="module")
def rb() -> Iterator[RunningBroker]:
    with running_broker() as broker:
        yield broker


@pytest.mark.parametrize("key", ["custom.api.secret",
                                 "plugin.vendor.token"])
def test_a_config_of_unknown_type_is_logged_hidden(
    rb: RunningBroker, caplog: pytest.LogCaptureFixture, key: str,
) -> None:
    m = req("incremental_alter_configs", 1)
    caplog.set_level(logging.INFO)
    response = one(rb, m.IncrementalAlterConfigsRequest(resources=(m.AlterConfigsResource(
        resource_type=BROKER, resource_name=str(rb.broker.broker_id), configs=(
            m.AlterableConfig(name=key, config_operation=SET, value="s3cr3t-value"),)),),
        validate_only=False))
    assert response.responses[0].error_code == ErrorCode.none, response
    logged = [r.getMessage() for r in caplog.records if "dynamic broker configs" in r.getMessage()]
    assert logged, caplog.text
    assert "s3cr3t-value" not in caplog.text
    assert f"'{key}': '[hidden]'" in logged[-1]
