"""A failing handler is answered, not dropped, for every API and version the broker serves.

A registry with the broker's own version ranges (and its request decoders) but handlers
that raise — a KafkaError, or a plain RuntimeError — is served by the real KafkaServer;
one connection sends a request of every served (key, version) and each must come back,
in order, as the API's error response (Kafka's ``getErrorResponse``): the code in every
place the response has one, the request's topics/partitions/groups/resources echoed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import struct
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.codec import LegacyBody, schema
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.registry import HandlerRegistry, RequestContext
from odradek.server.network import KafkaServer
from odradek.testing import RunningBroker
from tests._own import own_records
from tests.protocol.samples import TOPIC, sample_request
from tests.protocol.wire import decode_response, request_frame

TIMEOUT = 60.0
RAISED = ErrorCode.not_controller
MESSAGE = "raised by the test"


@pytest.fixture(scope="module")
def served(shared_broker: RunningBroker) -> list[tuple[int, int]]:
    """Every (key, version) the real broker serves that kio has a schema for (the old
    versions kio lacks are tested in test_legacy_apis.py with kafka-python's classes)."""
    return [
        (r.api_key, version)
        for r in shared_broker.broker.registry.supported_versions()
        for version in range(r.min_version, r.max_version + 1)
        if schema(r.api_key, version).request_type is not LegacyBody
    ]


def _raising_registry(broker_registry: HandlerRegistry, crash: bool) -> HandlerRegistry:
    async def fail(ctx: RequestContext, request: Any) -> Any:
        if crash:
            raise RuntimeError("boom")
        raise KafkaError(RAISED, MESSAGE)

    registry = HandlerRegistry()
    for r in broker_registry.supported_versions():
        real = broker_registry.get(r.api_key)
        assert real is not None
        registry.register(
            r.api_key, r.min_version, r.max_version, fail, serial=real.serial, decode=real.decode,
            error_response=real.error_response,
        )
    return registry


@contextlib.asynccontextmanager
async def serving(registry: HandlerRegistry) -> AsyncIterator[KafkaServer]:
    server = KafkaServer(registry, "127.0.0.1", 0)
    await server.start()
    try:
        yield server
    finally:
        await server.stop(timeout=5)


async def _read_payload(reader: asyncio.StreamReader) -> bytes | None:
    try:
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        return await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionResetError):
        return None


def _fields(entity: Any, name: str) -> Iterator[Any]:
    """Every value of field ``name`` (or ``partition_<name>``: AddPartitionsToTxn's
    ``partition_error_code``) anywhere in ``entity``."""
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        if field.name in (name, f"partition_{name}"):
            yield value
        if dataclasses.is_dataclass(value):
            yield from _fields(value, name)
        elif isinstance(value, tuple):
            for item in value:
                if dataclasses.is_dataclass(item):
                    yield from _fields(item, name)


def _check_echo(api_key: int, version: int, response: Any) -> None:
    """Where Kafka's getErrorResponse echoes the request (one topic, partition 1...)."""
    if api_key == ApiKey.PRODUCE:
        (topic,) = response.responses
        assert topic.name == TOPIC
        assert [p.index for p in topic.partition_responses] == [1]
        assert topic.partition_responses[0].base_offset == -1
    elif api_key == ApiKey.METADATA:
        assert [t.name for t in response.topics] == [TOPIC]
    elif api_key in (ApiKey.OFFSET_COMMIT, ApiKey.LIST_OFFSETS, ApiKey.DELETE_RECORDS):
        (topic,) = response.topics
        assert [p.partition_index for p in topic.partitions] == [1]
    elif api_key == ApiKey.FETCH:
        assert len(response.responses) == (1 if version < 13 else 0)
    elif api_key == ApiKey.FIND_COORDINATOR and version >= 4:
        assert [c.key for c in response.coordinators] == [TOPIC]
    elif api_key == ApiKey.DESCRIBE_CONFIGS:
        assert [r.resource_name for r in response.results] == [TOPIC]
    elif api_key == ApiKey.DESCRIBE_GROUPS:
        assert [g.group_id for g in response.groups] == [TOPIC]


@pytest.mark.parametrize("crash", [False, True], ids=["KafkaError", "RuntimeError"])
def test_every_served_api_and_version_answers_a_failing_handler(
    shared_broker: RunningBroker,
    served: list[tuple[int, int]],
    crash: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    expected = ErrorCode.unknown_server_error if crash else RAISED
    assert len(served) > 100  # the broker serves about 25 APIs
    registry = _raising_registry(shared_broker.broker.registry, crash)

    async def test() -> None:
        async with serving(registry) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            for correlation_id, (api_key, version) in enumerate(served, start=1):
                writer.write(request_frame(sample_request(api_key, version), correlation_id))
                payload = await _read_payload(reader)
                assert payload is not None, f"API {api_key} v{version}: connection closed"
                corr, response = decode_response(payload, api_key, version)
                assert corr == correlation_id
                codes = list(_fields(response, "error_code"))
                assert codes, f"API {api_key} v{version}: no error code in {response}"
                assert set(codes) == {expected}, f"API {api_key} v{version}: {response}"
                messages = set(_fields(response, "error_message"))
                assert messages <= {None if crash else MESSAGE}
                _check_echo(api_key, version, response)
            writer.close()

    with caplog.at_level(logging.ERROR, logger="odradek.server.network"):
        asyncio.run(asyncio.wait_for(test(), TIMEOUT))
    tracebacks = [r for r in own_records(caplog) if r.exc_info is not None]
    assert len(tracebacks) == (len(served) if crash else 0)


def test_produce_without_acks_closes_the_connection_on_error(
    shared_broker: RunningBroker,
) -> None:
    """Kafka's ProduceRequest.getErrorResponse is null for acks=0: the client expects no
    answer, so closing the connection is the only way to tell it."""
    registry = _raising_registry(shared_broker.broker.registry, crash=False)
    request = dataclasses.replace(sample_request(ApiKey.PRODUCE, 9), acks=0)

    async def test() -> None:
        async with serving(registry) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(request_frame(request, 7))
            assert await _read_payload(reader) is None
            writer.close()

    asyncio.run(asyncio.wait_for(test(), TIMEOUT))
