"""CreatePartitions (key 37, v0-3): grow topics to a new partition count.

Each topic is answered on its own, as Kafka's ``handleCreatePartitionsRequest`` does: a
topic named twice in one request is INVALID_REQUEST (every occurrence); an unknown topic is
UNKNOWN_TOPIC_OR_PARTITION; a count not larger than the current one is INVALID_PARTITIONS.
Explicit ``assignments`` must give exactly one replica list per new partition, each with the
topic's replication factor, no broker twice, and only live brokers, else
INVALID_REPLICA_ASSIGNMENT. ``validate_only`` checks everything and changes nothing. The new
partitions' logs are created in a worker thread (see ``ReplicaManager.change_topics``); the answer
waits for them up to the request's ``timeout_ms`` (0: not at all), after which a topic whose
logs are incomplete is REQUEST_TIMED_OUT, as in Kafka, while creation goes on. Partitions
added count against the client's ``controller_mutation_rate`` (KIP-599): from v3 a topic
reached while the client is over it is THROTTLING_QUOTA_EXCEEDED, below v3 it is grown all
the same; the answer carries the throttle time (see ``handlers/topics.py``).
"""

from __future__ import annotations

import datetime
from collections import Counter
from typing import TYPE_CHECKING, Any

from odradek.cluster.metadata import MetadataError
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import HandlerRegistry, RequestContext, bind
from odradek.server.authorization import AclOperation, ResourceType, filter_refused
from odradek.server.client_quotas import MutationQuota
from odradek.server.handlers._entities import make, response_module
from odradek.server.handlers._errors import code_of
from odradek.server.handlers._quotas import THROTTLED_MESSAGE, mutation_quota, throttle_after

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

VERSIONS = (0, 3)
STRICT_VERSION = 3  # the first that knows THROTTLING_QUOTA_EXCEEDED (KIP-599)


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _assignment(
    services: BrokerServices, topic: Any, current: int, rf: int
) -> dict[int, list[int]] | None:
    if topic.assignments is None or not topic.assignments:
        return None
    added = topic.count - current
    if len(topic.assignments) != added:
        raise _Refused(
            ErrorCode.invalid_replica_assignment,
            f"increasing the number of partitions by {added} but "
            f"{len(topic.assignments)} assignments provided",
        )
    live = set(services.metadata.broker_ids())
    out: dict[int, list[int]] = {}
    for i, a in enumerate(topic.assignments):
        replicas = [int(b) for b in a.broker_ids]
        if len(replicas) != rf:
            raise _Refused(ErrorCode.invalid_replica_assignment,
                           f"inconsistent replication factor between partitions: partition "
                           f"{current + i} has {len(replicas)} replicas, the topic has {rf}")
        if len(set(replicas)) != len(replicas):
            raise _Refused(ErrorCode.invalid_replica_assignment,
                           f"duplicate brokers not allowed in replica assignment: {replicas}")
        unknown = sorted(set(replicas) - live)
        if unknown:
            raise _Refused(ErrorCode.invalid_replica_assignment,
                           f"unknown broker(s) in replica assignment: {unknown}")
        out[current + i] = replicas
    return out


def _create(services: BrokerServices, topic: Any, validate_only: bool,
            quota: MutationQuota | None = None) -> None:
    info = services.metadata.get(topic.name)
    if info is None:
        raise _Refused(ErrorCode.unknown_topic_or_partition,
                       f"topic {topic.name!r} does not exist")
    current = len(info.partitions)
    if topic.count == current:
        raise _Refused(ErrorCode.invalid_partitions,
                       f"topic already has {current} partitions")
    if topic.count < current:
        raise _Refused(ErrorCode.invalid_partitions,
                       f"topic currently has {current} partitions, which is higher than the "
                       f"requested {topic.count}")
    rf = len(next(iter(info.partitions.values())))
    assignment = _assignment(services, topic, current, rf)
    if quota is not None and not validate_only and quota.exceeded():
        raise _Refused(ErrorCode.throttling_quota_exceeded, THROTTLED_MESSAGE)
    try:
        services.metadata.create_partitions(topic.name, topic.count, validate_only, assignment)
        if quota is not None and not validate_only:
            quota.record(topic.count - current)
    except MetadataError as exc:
        raise _Refused(code_of(exc.kafka_error), str(exc)) from None


def _timed_out(
    services: BrokerServices, name: str, code: ErrorCode, message: str | None,
    timeout: datetime.timedelta,
) -> tuple[ErrorCode, str | None]:
    """REQUEST_TIMED_OUT for a grown topic whose new logs are not all in place yet."""
    if code != ErrorCode.none or not services.replica_manager.topic_pending(name):
        return code, message
    return ErrorCode.request_timed_out, (
        f"the new partitions' logs were not all created within "
        f"{timeout.total_seconds() * 1000:.0f} ms; creation continues"
    )


def register_partitions(registry: HandlerRegistry, services: BrokerServices) -> None:
    registry.register(ApiKey.CREATE_PARTITIONS, VERSIONS[0], VERSIONS[1],
                      bind(create_partitions, services))


async def create_partitions(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    m = response_module("create_partitions", ctx.api_version)
    counts = Counter(t.name for t in request.topics)
    quota = mutation_quota(services, ctx, STRICT_VERSION)
    refused = filter_refused(services.authorizer, ctx, AclOperation.ALTER, ResourceType.TOPIC,
                             (t.name for t in request.topics))

    def change() -> list[tuple[ErrorCode, str | None]]:
        outcomes: list[tuple[ErrorCode, str | None]] = []
        for topic in request.topics:
            try:
                if counts[topic.name] > 1:
                    raise _Refused(ErrorCode.invalid_request, "duplicate topic in request")
                if topic.name in refused:  # Alter on the topic (before its existence)
                    raise _Refused(ErrorCode.topic_authorization_failed,
                                   "Authorization failed.")
                _create(services, topic, request.validate_only, quota)
            except _Refused as exc:
                outcomes.append((exc.code, str(exc)))
            else:
                outcomes.append((ErrorCode.none, None))
        return outcomes

    outcomes, timed_out = await services.replica_manager.change_topics(
        change, wait=request.timeout
    )
    if timed_out:
        outcomes = [
            _timed_out(services, topic.name, code, message, request.timeout)
            for topic, (code, message) in zip(request.topics, outcomes, strict=True)
        ]
    results = tuple(
        make(m.CreatePartitionsTopicResult, name=topic.name, error_code=code,
             error_message=message)
        for topic, (code, message) in zip(request.topics, outcomes, strict=True)
    )
    return make(m.CreatePartitionsResponse, throttle_time=throttle_after(ctx, quota),
                results=results)


