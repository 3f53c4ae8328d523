"""OffsetForLeaderEpoch (key 23), versions 0-4: where a leader epoch ended in the leader's
log (KIP-101, KIP-279, KIP-320).

Follows Kafka's ``KafkaApis.handleOffsetForLeaderEpochRequest`` /
``Partition.lastOffsetForLeaderEpoch``: only the leader answers, at the request's
``current_leader_epoch`` (-1 skips the check), with the replica manager's errors
(NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
UNKNOWN_TOPIC_OR_PARTITION). The answer comes from the leader-epoch cache
(``LeaderEpochCache.end_offset_for``, Kafka's ``LeaderEpochFileCache.endOffsetFor``): for
the requested epoch, the largest epoch at or below it the log knows and where it ended,
which is the start of the next epoch, or the log end offset for the latest one; an epoch
older than every epoch the log holds (retention dropped them) ends where the first one
begins; -1/-1 for no epoch or one newer than the latest. Followers (``replica_id`` >= 0) use it
to truncate before they fetch; consumers (KIP-320) to check their position after a
leader change. v0-1 (replicas of 0.11-1.x; KIP-896 removed them, kio lacks them) are
transcoded to v2 (``_transcode.py``): no ``current_leader_epoch`` (-1, unchecked), and v0
answers no leader epoch. With an authorizer, as Kafka: ClusterAction on the cluster
answers every topic; without it each topic needs Describe (TOPIC_AUTHORIZATION_FAILED),
whether the request is a follower's or a consumer's.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.primitives import BodyReader
from odradek.protocol.registry import HandlerRegistry, RequestContext, bind
from odradek.server.authorization import (
    AclOperation,
    ResourceType,
    allowed_on_cluster,
    filter_refused,
)
from odradek.server.handlers._entities import ZERO_THROTTLE, make, response_module
from odradek.server.handlers._errors import error_code_for
from odradek.server.handlers._transcode import OldVersions, register_with_old_versions

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

CONSUMER = -1  # replica_id of a consumer's request (v3+); a follower gives its broker id
VERSIONS = (0, 4)


def register_offset_for_leader_epoch(registry: HandlerRegistry, services: BrokerServices) -> None:
    register_with_old_versions(registry, ApiKey.OFFSET_FOR_LEADER_EPOCH, VERSIONS[1],
                               bind(offset_for_leader_epoch, services),
                               OldVersions(0, 2, _to_v2, _from_v2))


async def offset_for_leader_epoch(
    services: BrokerServices, ctx: RequestContext, request: Any,
) -> Any:
    replica_manager = services.replica_manager
    m = response_module("offset_for_leader_epoch", ctx.api_version)
    authorizer = services.authorizer
    refused: set[str] = set()
    # Kafka's KafkaApis: ClusterAction on the cluster (followers have it) answers every
    # topic; without it, each topic needs Describe (KIP-320's consumers), whoever asks.
    if authorizer is not None and not allowed_on_cluster(authorizer, ctx,
                                                         AclOperation.CLUSTER_ACTION):
        refused = filter_refused(authorizer, ctx, AclOperation.DESCRIBE,
                                 ResourceType.TOPIC, (t.topic for t in request.topics))
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            code = ErrorCode.none
            epoch, end = -1, -1
            if topic.topic in refused:
                partitions.append(make(m.EpochEndOffset,
                                       error_code=ErrorCode.topic_authorization_failed,
                                       partition=p.partition, leader_epoch=-1, end_offset=-1))
                continue
            try:
                partition = replica_manager.leader_partition(
                    topic.topic, p.partition, p.current_leader_epoch
                )
                partition_log = partition.log
                epoch, end = partition_log.leader_epoch_cache.end_offset_for(
                    p.leader_epoch, partition_log.log_end_offset
                )
            except Exception as exc:
                code, _ = error_code_for(
                    exc, f"OffsetForLeaderEpoch of {topic.topic}-{p.partition}"
                )
            partitions.append(make(m.EpochEndOffset, error_code=code,
                                   partition=p.partition, leader_epoch=epoch,
                                   end_offset=end))
        topics.append(make(m.OffsetForLeaderTopicResult, topic=topic.topic,
                           partitions=tuple(partitions)))
    return make(m.OffsetForLeaderEpochResponse, throttle_time=ZERO_THROTTLE,
                topics=tuple(topics))


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION = struct.Struct(">ii")  # partition, leader_epoch (v0-1)
_PARTITION_V2 = struct.Struct(">iii")  # partition, current_leader_epoch, leader_epoch
_TOPIC_MIN = 6  # an int16 name length and an int32 partition count


def _to_v2(body: bytes, version: int) -> bytes:
    """v0-1: [topic, [partition, leader_epoch]]; v2 puts current_leader_epoch (-1) before
    leader_epoch. Counts are checked against the bytes that remain (a topic takes at least
    6 bytes, a partition 8); a null count or name is copied for kio's check to refuse."""
    reader = BodyReader(body)
    out = bytearray(body[:4])
    for _ in range(reader.count(_TOPIC_MIN, "topics")):
        start = reader.pos
        reader.skip_string("topic")
        partitions = reader.count(_PARTITION.size, "partitions")
        out += body[start : reader.pos]
        for _ in range(partitions):
            partition, leader_epoch = _PARTITION.unpack(reader.take(_PARTITION.size))
            out += _PARTITION_V2.pack(partition, -1, leader_epoch)
    out += body[reader.pos :]
    return bytes(out)


def _from_v2(response: Any, version: int) -> bytes:
    """v1: v2 without throttle_time_ms; v0 without the leader epoch as well."""
    out = bytearray(_I32.pack(len(response.topics)))
    for topic in response.topics:
        name = topic.topic.encode()
        out += _I16.pack(len(name)) + name + _I32.pack(len(topic.partitions))
        for p in topic.partitions:
            if version >= 1:
                out += struct.pack(">hiiq", p.error_code.value, p.partition, p.leader_epoch,
                                   p.end_offset)
            else:
                out += struct.pack(">hiq", p.error_code.value, p.partition, p.end_offset)
    return bytes(out)
