"""The generic error response (odradek.protocol.error_response), without a network."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.index import api_key_map

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.codec import encode_body, kio_versions, schema
from odradek.protocol.error_response import build_error_response
from odradek.protocol.errors import ErrorCode
from odradek.protocol.produce_reader import read_produce_request
from tests.protocol.samples import TOPIC, TOPIC_ID, sample_request

CODE = ErrorCode.coordinator_not_available


def _all_versions() -> Iterator[tuple[int, int]]:
    for api_key in sorted(api_key_map):
        known = kio_versions(api_key)
        assert known is not None
        for version in range(known[0], known[1] + 1):
            yield api_key, version


def _values(entity: Any, name: str) -> Iterator[Any]:
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        if field.name == name:
            yield value
        for item in value if isinstance(value, tuple) else (value,):
            if dataclasses.is_dataclass(item):
                yield from _values(item, name)


@pytest.mark.parametrize(("api_key", "version"), list(_all_versions()))
def test_every_api_gets_an_encodable_response_with_the_code(api_key: int, version: int) -> None:
    response = build_error_response(api_key, version, sample_request(api_key, version), CODE)
    assert type(response) is schema(api_key, version).response_type
    encode_body(response)
    assert set(_values(response, "error_code")) <= {CODE}


@pytest.mark.parametrize("version", range(3, 12))
def test_produce_answers_every_partition_from_the_hot_path_reader(version: int) -> None:
    request = sample_request(ApiKey.PRODUCE, version)
    view = read_produce_request(encode_body(request), 0, version)
    response = build_error_response(ApiKey.PRODUCE, version, view, CODE, "why")
    assert response == build_error_response(ApiKey.PRODUCE, version, request, CODE, "why")
    (topic,) = response.responses
    assert topic.name == TOPIC
    (partition,) = topic.partition_responses
    assert (partition.index, partition.error_code, partition.base_offset) == (1, CODE, -1)
    if version >= 8:
        assert partition.error_message == "why"


def test_produce_with_acks_0_has_no_response() -> None:
    request = dataclasses.replace(sample_request(ApiKey.PRODUCE, 9), acks=0)
    assert build_error_response(ApiKey.PRODUCE, 9, request, CODE) is None
    view = read_produce_request(encode_body(request), 0, 9)
    assert build_error_response(ApiKey.PRODUCE, 9, view, CODE) is None


def test_metadata_answers_each_requested_topic_and_none_for_all_topics() -> None:
    request = sample_request(ApiKey.METADATA, 12)
    response = build_error_response(ApiKey.METADATA, 12, request, CODE)
    (topic,) = response.topics
    assert (topic.name, topic.topic_id, topic.error_code) == (TOPIC, TOPIC_ID, CODE)
    assert topic.partitions == () and response.brokers == ()
    assert response.controller_id == -1
    all_topics = dataclasses.replace(request, topics=None)
    assert build_error_response(ApiKey.METADATA, 12, all_topics, CODE).topics == ()


def test_fetch_answers_partitions_before_v13_and_the_top_level_after() -> None:
    old = build_error_response(ApiKey.FETCH, 12, sample_request(ApiKey.FETCH, 12), CODE)
    (topic,) = old.responses
    assert topic.topic == TOPIC
    (partition,) = topic.partitions
    assert (partition.partition_index, partition.error_code) == (1, CODE)
    assert (partition.high_watermark, partition.records) == (-1, b"")
    assert old.error_code == CODE and old.session_id == 0
    new = build_error_response(ApiKey.FETCH, 13, sample_request(ApiKey.FETCH, 13), CODE)
    assert new.error_code == CODE and new.responses == ()


def test_offset_fetch_by_version() -> None:
    v1 = build_error_response(ApiKey.OFFSET_FETCH, 1, sample_request(ApiKey.OFFSET_FETCH, 1), CODE)
    assert [p.partition_index for t in v1.topics for p in t.partitions] == [1]
    assert v1.topics[0].partitions[0].error_code == CODE
    v5 = build_error_response(ApiKey.OFFSET_FETCH, 5, sample_request(ApiKey.OFFSET_FETCH, 5), CODE)
    assert v5.topics == () and v5.error_code == CODE
    v8 = build_error_response(ApiKey.OFFSET_FETCH, 8, sample_request(ApiKey.OFFSET_FETCH, 8), CODE)
    (group,) = v8.groups
    assert (group.group_id, group.error_code, group.topics) == (TOPIC, CODE, ())


def test_find_coordinator_answers_no_node_per_key() -> None:
    v3 = build_error_response(
        ApiKey.FIND_COORDINATOR, 3, sample_request(ApiKey.FIND_COORDINATOR, 3), CODE, "m"
    )
    assert (v3.error_code, v3.error_message, v3.node_id, v3.host, v3.port) == (
        CODE, "m", -1, "", -1
    )
    v4 = build_error_response(
        ApiKey.FIND_COORDINATOR, 4, sample_request(ApiKey.FIND_COORDINATOR, 4), CODE
    )
    (coordinator,) = v4.coordinators
    assert (coordinator.key, coordinator.error_code, coordinator.node_id) == (TOPIC, CODE, -1)
    assert coordinator.error_message is None


def test_resources_groups_and_topics_are_echoed() -> None:
    configs = build_error_response(
        ApiKey.DESCRIBE_CONFIGS, 4, sample_request(ApiKey.DESCRIBE_CONFIGS, 4), CODE, "m"
    )
    (result,) = configs.results
    assert (result.resource_type, result.resource_name, result.error_code) == (1, TOPIC, CODE)
    assert (result.error_message, result.configs) == ("m", ())
    groups = build_error_response(
        ApiKey.DELETE_GROUPS, 2, sample_request(ApiKey.DELETE_GROUPS, 2), CODE
    )
    assert [(r.group_id, r.error_code) for r in groups.results] == [(TOPIC, CODE)]
    old_delete = build_error_response(
        ApiKey.DELETE_TOPICS, 5, sample_request(ApiKey.DELETE_TOPICS, 5), CODE
    )
    assert [(r.name, r.error_code) for r in old_delete.responses] == [(TOPIC, CODE)]
    commit = build_error_response(
        ApiKey.OFFSET_COMMIT, 10, sample_request(ApiKey.OFFSET_COMMIT, 10), CODE
    )
    (topic,) = commit.topics
    assert topic.topic_id == TOPIC_ID
    assert [(p.partition_index, p.error_code) for p in topic.partitions] == [(1, CODE)]


def test_top_level_only_responses_keep_schema_defaults() -> None:
    join = build_error_response(ApiKey.JOIN_GROUP, 9, sample_request(ApiKey.JOIN_GROUP, 9), CODE)
    assert (join.error_code, join.generation_id, join.member_id, join.members) == (
        CODE, -1, "", ()
    )
    init = build_error_response(
        ApiKey.INIT_PRODUCER_ID, 5, sample_request(ApiKey.INIT_PRODUCER_ID, 5), CODE
    )
    assert (init.error_code, init.producer_id, init.producer_epoch) == (CODE, -1, -1)
    delete = build_error_response(
        ApiKey.OFFSET_DELETE, 0, sample_request(ApiKey.OFFSET_DELETE, 0), CODE
    )
    assert (delete.error_code, delete.topics) == (CODE, ())
