"""CreateTopics (key 19, v0-7) and DeleteTopics (key 20, v0-6).

Follows Kafka's ``KafkaApis.handleCreateTopicsRequest`` / ``ZkAdminManager.createTopics``:
each topic is validated on its own (name, partition count, replication factor, configs,
duplicates within the request → INVALID_REQUEST), errors are per topic with a message, and
``validate_only`` checks everything without creating. From v5 the answer carries the new
topic's partition count, replication factor and effective configs with their sources.
The new partitions' logs are created in a worker thread (see ``ReplicaManager.change_topics``);
the answer waits for them up to the request's ``timeout_ms`` (0: not at all), and a topic
still incomplete then is REQUEST_TIMED_OUT, as in Kafka, while its creation goes on.
Both are subject to the client's ``controller_mutation_rate`` (KIP-599, see
:mod:`odradek.server.client_quotas`): partitions created or deleted are counted; at
CreateTopics v6+ / DeleteTopics v5+ a topic reached while the client is over its quota is
THROTTLING_QUOTA_EXCEEDED, at older versions it is done all the same; the answer carries
the throttle time and the connection is muted for it.
DeleteTopics (v6 may name topics by id) removes the topic from metadata; logs are renamed
``-delete`` and removed asynchronously. Internal topics cannot be deleted.
CreateTopics v0-1 and DeleteTopics v0 (KIP-896 removed them from Kafka 4.0; kio lacks
them) are served by transcoding to v2 / v1 (``_transcode.py``).

With an authorizer, creating needs Create on the cluster or on the topic, and the configs
of the answer (v5+) DescribeConfigs on the topic (else left out, the topic's
``topic_config_error_code`` TOPIC_AUTHORIZATION_FAILED); deleting needs Delete on the
topic. Refused topics are TOPIC_AUTHORIZATION_FAILED; a topic named by id whose caller may
not Describe it is answered without its name (as Kafka does).
"""

from __future__ import annotations

import datetime
import struct
import uuid
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from odradek.cluster.metadata import MetadataError
from odradek.cluster.store import RequestTooLargeError
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.codec import encode_body
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import HandlerRegistry, RequestContext, bind
from odradek.server.authorization import (
    AclOperation,
    ResourceType,
    allowed,
    allowed_on_cluster,
    filter_refused,
)
from odradek.server.client_quotas import MutationQuota
from odradek.server.handlers._entities import make, response_module
from odradek.server.handlers._errors import code_of
from odradek.server.handlers._quotas import THROTTLED_MESSAGE, mutation_quota, throttle_after
from odradek.server.handlers._transcode import OldVersions, register_with_old_versions
from odradek.server.handlers.configs import (
    ConfigRequestError,
    check_config_size,
    topic_config_entries,
)

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

CREATE_VERSIONS = (0, 7)
DELETE_VERSIONS = (0, 6)
ZERO_UUID = uuid.UUID(int=0)
# The first versions whose clients know THROTTLING_QUOTA_EXCEEDED (KIP-599).
CREATE_STRICT_VERSION = 6
DELETE_STRICT_VERSION = 5


def register_topics(registry: HandlerRegistry, services: BrokerServices) -> None:
    # v0-1 of CreateTopics and v0 of DeleteTopics (admin tools of 0.10; KIP-896 removed
    # them, kio lacks them) are transcoded to v2 / v1, which only add fields.
    register_with_old_versions(registry, ApiKey.CREATE_TOPICS, CREATE_VERSIONS[1],
                               bind(create_topics, services),
                               OldVersions(0, 2, _create_v0_1, _created_v0_1))
    register_with_old_versions(registry, ApiKey.DELETE_TOPICS, DELETE_VERSIONS[1],
                               bind(delete_topics, services), OldVersions(0, 1, _same, _deleted_v0))


async def create_topics(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    m = response_module("create_topics", ctx.api_version)
    counts = Counter(t.name for t in request.topics)
    quota = mutation_quota(services, ctx, CREATE_STRICT_VERSION)
    authorizer = services.authorizer
    refused: set[str] = set()
    hidden: set[str] = set()  # configs the caller may not see
    if authorizer is not None:
        names = [t.name for t in request.topics]
        if not allowed_on_cluster(authorizer, ctx, AclOperation.CREATE):
            refused = filter_refused(authorizer, ctx, AclOperation.CREATE,
                                     ResourceType.TOPIC, names)
        hidden = filter_refused(authorizer, ctx, AclOperation.DESCRIBE_CONFIGS,
                                ResourceType.TOPIC, names)
    results, timed_out = await services.replica_manager.change_topics(lambda: [
        _create_one(m, services, topic, counts[topic.name] > 1, request.validate_only,
                    quota, topic.name not in refused, topic.name not in hidden)
        for topic in request.topics
    ], wait=request.timeout)
    if timed_out:
        results = [_timed_out(services, result, request.timeout) for result in results]
    return make(m.CreateTopicsResponse, throttle_time=throttle_after(ctx, quota),
                topics=tuple(results))


async def delete_topics(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    m = response_module("delete_topics", ctx.api_version)
    if ctx.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(n, None) for n in request.topic_names]
    quota = mutation_quota(services, ctx, DELETE_STRICT_VERSION)
    # Authorized here, on the loop, before the hand-off: the authorizer and its decision
    # cache are the loop's (docs/architecture.md, "Threads").
    refusals = [_refusal(m, services, ctx, name, topic_id) for name, topic_id in wanted]
    results, _ = await services.replica_manager.change_topics(lambda: [
        refused or _delete_one(m, services, name, topic_id, quota)
        for (name, topic_id), refused in zip(wanted, refusals, strict=True)
    ])
    return make(m.DeleteTopicsResponse, throttle_time=throttle_after(ctx, quota),
                responses=tuple(results))


def _create_v0_1(body: bytes, version: int) -> bytes:
    """CreateTopics v0 is v1 without ``validate_only`` (false); v1 is v2 byte for byte."""
    return body + b"\x00" if version == 0 else body


def _created_v0_1(response: Any, version: int) -> bytes:
    """v0: [name, error_code]; v1: [name, error_code, error_message] (v2 adds throttle)."""
    out = bytearray(struct.pack(">i", len(response.topics)))
    for t in response.topics:
        name = t.name.encode()
        out += struct.pack(">h", len(name)) + name + struct.pack(">h", t.error_code.value)
        if version >= 1:
            if t.error_message is None:
                out += b"\xff\xff"
            else:
                message = t.error_message.encode()
                out += struct.pack(">h", len(message)) + message
    return bytes(out)


def _same(body: bytes, version: int) -> bytes:
    return body


def _deleted_v0(response: Any, version: int) -> bytes:
    """DeleteTopics v0 is v1 without ``throttle_time_ms`` at the front."""
    return encode_body(response)[4:]


def _create_one(
    m: Any, services: BrokerServices, topic: Any, duplicate: bool, validate_only: bool,
    quota: MutationQuota | None = None, authorized: bool = True,
    configs_visible: bool = True,
) -> Any:
    def result(code: ErrorCode, message: str | None = None, info: Any = None) -> Any:
        configs: tuple[Any, ...] = ()
        partitions, rf = -1, -1
        config_cls = getattr(m, "CreatableTopicConfigs", None)
        if info is not None:
            partitions = len(info[0])
            rf = info[1]
        if info is not None and config_cls is not None and configs_visible:
            configs = tuple(
                make(config_cls, name=k, value=v, read_only=False,
                     config_source=src, is_sensitive=False)
                for k, v, src in info[2]
            )
        return make(m.CreatableTopicResult, name=topic.name,
                    topic_id=info[3] if info is not None else ZERO_UUID,
                    error_code=code, error_message=message,
                    topic_config_error_code=ErrorCode.none if configs_visible or info is None
                    else ErrorCode.topic_authorization_failed,
                    num_partitions=partitions, replication_factor=rf, configs=configs)

    if duplicate:
        return result(ErrorCode.invalid_request, f"topic {topic.name!r} appears twice")
    if not authorized:
        return result(ErrorCode.topic_authorization_failed,
                      "Authorization failed.")
    configs = {c.name: c.value for c in topic.configs}
    try:
        check_config_size(services.metadata.store,
                          services.metadata.topic_config_path(topic.name), configs)
    except ConfigRequestError as exc:
        return result(exc.code, str(exc))
    assignment = None
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            return result(ErrorCode.invalid_request,
                          "give either assignments or partitions and replication factor")
        assignment = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
        problem = _assignment_problem(assignment, {b[0] for b in services.live_brokers()})
        if problem is not None:
            return result(ErrorCode.invalid_replica_assignment, problem)
    try:
        if validate_only:
            n, rf, _ = services.metadata.validate_new_topic(
                topic.name,
                len(assignment) if assignment else topic.num_partitions,
                len(next(iter(assignment.values()))) if assignment else topic.replication_factor,
                configs,
            )
            return result(ErrorCode.none, None, (range(n), rf,
                                                 _preview_configs(services, configs), ZERO_UUID))
        if quota is not None and quota.exceeded():
            return result(ErrorCode.throttling_quota_exceeded, THROTTLED_MESSAGE)
        info = services.metadata.create_topic(
            topic.name, topic.num_partitions if not assignment else len(assignment),
            topic.replication_factor if not assignment else len(assignment[0]),
            configs, assignment,
        )
        if quota is not None:
            quota.record(len(info.partitions))
    except MetadataError as exc:
        return result(code_of(exc.kafka_error), str(exc))
    except RequestTooLargeError as exc:  # the assignment and configs: one transaction
        return result(ErrorCode.invalid_request, str(exc))
    rf = len(next(iter(info.partitions.values())))
    return result(ErrorCode.none, None, (info.partitions, rf,
                                         topic_config_entries(services, info.configs),
                                         info.topic_id))


def _assignment_problem(assignment: dict[int, list[int]], live: set[int]) -> str | None:
    """Why an explicit replica assignment is refused (Kafka's checks), or None."""
    if sorted(assignment) != list(range(len(assignment))):
        return f"partitions {sorted(assignment)} are not 0..{len(assignment) - 1}"
    sizes = {len(ids) for ids in assignment.values()}
    if 0 in sizes:
        return "a partition has no replicas"
    if len(sizes) > 1:
        return "all partitions must have the same number of replicas"
    for p, ids in sorted(assignment.items()):
        if len(set(ids)) != len(ids):
            return f"partition {p} names a broker twice: {ids}"
        unknown = sorted(set(ids) - live)
        if unknown:
            return f"partition {p} names brokers {unknown} that are not live"
    return None


def _timed_out(services: BrokerServices, result: Any, timeout: datetime.timedelta) -> Any:
    """A created topic whose logs are not all in place when the request's timeout ends is
    REQUEST_TIMED_OUT (as Kafka's DelayedCreatePartitions answers); creation goes on."""
    pending = services.replica_manager.topic_pending(result.name)
    if result.error_code != ErrorCode.none or not pending:
        return result
    return replace(result, error_code=ErrorCode.request_timed_out,
                   error_message=f"the topic's logs were not all created within "
                                 f"{timeout.total_seconds() * 1000:.0f} ms; creation "
                                 "continues")


def _preview_configs(
    services: BrokerServices, configs: dict[str, str | None]
) -> list[tuple[str, str | None, int]]:
    """The configs a validate_only creation would give the topic."""
    return topic_config_entries(services, {k: v for k, v in configs.items() if v is not None})


def _refusal(m: Any, services: BrokerServices, ctx: RequestContext, name: str | None,
             topic_id: uuid.UUID | None) -> Any | None:
    """The answer for a topic the caller may not delete, decided on the loop; None when
    :func:`_delete_one` is to answer (allowed, or a request it refuses for what it is).
    Checked before existence: the answer tells nothing of the topic."""
    if services.authorizer is None:
        return None
    has_id = topic_id is not None and topic_id != ZERO_UUID
    if (name is not None) == has_id:
        return None  # both or neither: INVALID_REQUEST from _delete_one
    if name is None and topic_id is not None:
        info = services.metadata.by_id(topic_id)
        if info is None:
            return None  # UNKNOWN_TOPIC_ID from _delete_one
        if not allowed(services.authorizer, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                       info.name):
            # Kafka: a caller who may not Describe the topic does not learn its name
            return make(m.DeletableTopicResult, name=None, topic_id=topic_id,
                        error_code=ErrorCode.topic_authorization_failed,
                        error_message="Authorization failed.")
        name = info.name
    assert name is not None
    if not allowed(services.authorizer, ctx, AclOperation.DELETE, ResourceType.TOPIC, name):
        return make(m.DeletableTopicResult, name=name, topic_id=topic_id or ZERO_UUID,
                    error_code=ErrorCode.topic_authorization_failed,
                    error_message="Authorization failed.")
    return None


def _delete_one(
    m: Any, services: BrokerServices, name: str | None, topic_id: uuid.UUID | None,
    quota: MutationQuota | None = None,
) -> Any:
    """Delete one topic (in the worker thread of ``change_topics``), the caller already
    authorized (:func:`_refusal`)."""
    has_id = topic_id is not None and topic_id != ZERO_UUID
    if name is not None and has_id:  # Kafka's ControllerApis.deleteTopics
        return make(m.DeletableTopicResult, name=name, topic_id=topic_id,
                    error_code=ErrorCode.invalid_request,
                    error_message="You may not specify both topic name and topic id.")
    if name is None and not has_id:
        return make(m.DeletableTopicResult, name=None, topic_id=ZERO_UUID,
                    error_code=ErrorCode.invalid_request,
                    error_message="Neither topic name nor id were specified.")
    if name is None and topic_id is not None:
        info = services.metadata.by_id(topic_id)
        if info is None:
            return make(m.DeletableTopicResult, name=None, topic_id=topic_id,
                        error_code=ErrorCode.unknown_topic_id, error_message=None)
        name = info.name
    assert name is not None
    info = services.metadata.get(name)
    tid = info.topic_id if info else ZERO_UUID
    if not services.config["delete.topic.enable"]:
        return make(m.DeletableTopicResult, name=name, topic_id=tid,
                    error_code=ErrorCode.topic_deletion_disabled, error_message=None)
    if info is not None and info.is_internal:
        return make(m.DeletableTopicResult, name=name, topic_id=tid,
                    error_code=ErrorCode.invalid_request,
                    error_message=f"internal topic {name} cannot be deleted")
    if quota is not None and info is not None and quota.exceeded():
        return make(m.DeletableTopicResult, name=name, topic_id=tid,
                    error_code=ErrorCode.throttling_quota_exceeded,
                    error_message=THROTTLED_MESSAGE)
    try:
        services.metadata.delete_topic(name)
        if quota is not None and info is not None:
            quota.record(len(info.partitions))
    except MetadataError as exc:
        return make(m.DeletableTopicResult, name=name, topic_id=tid,
                    error_code=code_of(exc.kafka_error), error_message=str(exc))
    return make(m.DeletableTopicResult, name=name, topic_id=tid, error_code=ErrorCode.none,
                error_message=None)
