"""WriteTxnMarkers (key 27), versions 0-1: the transaction coordinator's commit and abort
markers, written by each partition's leader (KIP-98).

Follows Kafka's ``KafkaApis.handleWriteTxnMarkersRequest``. The coordinator of another
broker sends, per transaction, the producer id and epoch, the result (commit or abort),
its coordinator epoch and the partitions; this broker's own coordinator hands the same
to :func:`write_markers_locally` for the partitions it leads here, without a request
(server/txn_markers.py). Both run the same appends and waits: for each partition this
broker:

- answers UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist and
  NOT_LEADER_OR_FOLLOWER (or LEADER_NOT_AVAILABLE while its log is created) where it is
  not the leader;
- appends one control batch (:mod:`odradek.records.control`) through the leader's append
  path, fenced by the partition's producer state: INVALID_PRODUCER_EPOCH for an epoch older
  than the producer's, TRANSACTION_COORDINATOR_FENCED for a coordinator epoch older than
  the last marker's;
- waits, as an acks=-1 produce does (Kafka appends markers with ``requiredAcks = -1``),
  until the ISR has the marker: NOT_ENOUGH_REPLICAS before the append when the ISR is
  below ``min.insync.replicas``, REQUEST_TIMED_OUT after :data:`MARKER_TIMEOUT_MS`,
  NOT_LEADER_OR_FOLLOWER when leadership moved meanwhile. The coordinator retries what
  failed.

Markers written to ``__consumer_offsets`` partitions complete the transaction's pending
offset commits (TxnOffsetCommit): the broker's ``txn_offsets_completed`` service, when
set, is told which (Kafka's ``GroupCoordinator.onTransactionCompleted``).

Only the cluster itself may write markers: ClusterAction on the cluster, else the whole
request is CLUSTER_AUTHORIZATION_FAILED (the in-process path is the broker itself). The
handler is registered ``serial``, so one coordinator's markers for a partition are
appended in the order it sent them; in-process, each marker is appended when the
coordinator hands it over, which is the order it decided them in.

Version 0 (Kafka 4.0 removed it, KIP-896; kio lacks it) is version 1 without flexible
encoding: it is transcoded to v1 (``_transcode.py``) with the layouts of Kafka 3.9's
``WriteTxnMarkersRequest.json`` and ``WriteTxnMarkersResponse.json``::

    WriteTxnMarkersRequest v0
      markers array of {producer_id int64, producer_epoch int16, transaction_result bool,
                        topics array of {name string, partition_indexes array of int32},
                        coordinator_epoch int32}
    WriteTxnMarkersResponse v0
      markers array of {producer_id int64,
                        topics array of {name string,
                                         partitions array of {partition_index int32,
                                                              error_code int16}}}
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.types import ProducerId, TopicName
from kio.schema.write_txn_markers.v1 import request as request_v1
from kio.static.primitive import i16, i32

from odradek.cluster.replica_manager import PendingAppend, Replication
from odradek.coordinator.offsets_topic import OFFSETS_TOPIC
from odradek.coordinator.transaction_coordinator import TxnMarker
from odradek.coordinator.transaction_state import TopicPartition
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.codec import encode_body
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import HandlerRegistry, RequestContext, bind
from odradek.server.authorization import AclOperation, allowed_on_cluster, require_on_cluster
from odradek.server.handlers._entities import make, response_module
from odradek.server.handlers._errors import error_code_for
from odradek.server.handlers._transcode import OldVersions, register_with_old_versions

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

__all__ = ["MARKER_TIMEOUT_MS", "append_markers", "register_txn_markers", "write_markers_locally",
           "write_txn_markers"]

VERSIONS = (0, 1)
# How long a marker waits for the ISR: Kafka uses the broker's request.timeout.ms, whose
# default this is.
MARKER_TIMEOUT_MS = 30_000


def register_txn_markers(registry: HandlerRegistry, services: BrokerServices) -> None:
    handler = bind(write_txn_markers, services)
    register_with_old_versions(registry, ApiKey.WRITE_TXN_MARKERS, VERSIONS[1], handler,
                               OldVersions(0, 1, _to_v1, _from_v1), serial=True)


async def write_txn_markers(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    # Kafka's KafkaApis: Alter on the cluster, or else ClusterAction
    if not allowed_on_cluster(services.authorizer, ctx, AclOperation.ALTER):
        require_on_cluster(services.authorizer, ctx, AclOperation.CLUSTER_ACTION)
    m = response_module("write_txn_markers", ctx.api_version)
    markers = [TxnMarker(int(marker.producer_id), int(marker.producer_epoch),
                         bool(marker.transaction_result), int(marker.coordinator_epoch),
                         tuple((str(topic.name), int(index)) for topic in marker.topics
                               for index in topic.partition_indexes))
               for marker in request.markers]
    answers = await append_markers(services, markers)
    results = []
    for marker, codes in zip(request.markers, answers, strict=True):
        topics = tuple(
            make(m.WritableTxnMarkerTopicResult, name=topic.name, partitions=tuple(
                make(m.WritableTxnMarkerPartitionResult, partition_index=index,
                     error_code=codes[(str(topic.name), int(index))])
                for index in topic.partition_indexes))
            for topic in marker.topics)
        results.append(make(m.WritableTxnMarkerResult, producer_id=marker.producer_id,
                            topics=topics))
    return make(m.WriteTxnMarkersResponse, markers=tuple(results))


async def write_markers_locally(
    services: BrokerServices, marker: TxnMarker
) -> dict[TopicPartition, ErrorCode]:
    """One marker of this broker's transaction coordinator for partitions this broker
    leads, written without the network (see the module's docstring): the same appends,
    checks and answers as a WriteTxnMarkers request carrying it."""
    markers = [marker]
    answers, waiting = _append_markers(services, markers)
    if waiting:
        # As a request's handler would, the wait runs to its end (and the group
        # coordinator is told of __consumer_offsets markers) even if the coordinator's
        # task is cancelled meanwhile.
        await asyncio.shield(_finish(services, markers, answers, waiting))
    else:
        _complete_offsets(services, markers, answers)
    return answers[0]


async def append_markers(
    services: BrokerServices, markers: Sequence[TxnMarker]
) -> list[dict[TopicPartition, ErrorCode]]:
    """Append each marker to each of its partitions as their leader and wait for the ISR
    (Kafka's ``ReplicaManager.appendRecords`` of the markers, ``requiredAcks = -1``): the
    error per partition, one mapping per marker."""
    answers, waiting = _append_markers(services, markers)
    await _finish(services, markers, answers, waiting)
    return answers


# An append still to replicate: (its marker's answer, the partition, the append).
_Waiting = list[tuple[dict[TopicPartition, ErrorCode], TopicPartition, PendingAppend]]


def _append_markers(
    services: BrokerServices, markers: Sequence[TxnMarker]
) -> tuple[list[dict[TopicPartition, ErrorCode]], _Waiting]:
    """The appends: the error per partition of each marker, and the appends the ISR does
    not have yet."""
    replica_manager = services.replica_manager
    answers: list[dict[TopicPartition, ErrorCode]] = []
    waiting: _Waiting = []
    for marker in markers:
        codes: dict[TopicPartition, ErrorCode] = {}
        answers.append(codes)
        for tp in marker.partitions:
            try:
                partition = replica_manager.leader_partition(tp[0], tp[1])
                info = partition.append_control_as_leader(
                    marker.producer_id, marker.producer_epoch, marker.commit,
                    marker.coordinator_epoch)
            except Exception as exc:
                codes[tp], _ = error_code_for(
                    exc, f"writing a transaction marker to {tp[0]}-{tp[1]}")
                continue
            codes[tp] = ErrorCode.none
            if partition.high_watermark <= info.last_offset:
                waiting.append((codes, tp, PendingAppend(partition, partition.leader_epoch,
                                                         info.last_offset + 1)))
    return answers, waiting


async def _finish(
    services: BrokerServices, markers: Sequence[TxnMarker],
    answers: list[dict[TopicPartition, ErrorCode]], waiting: _Waiting,
) -> None:
    """Wait for the ISR of each append still to replicate (at most
    :data:`MARKER_TIMEOUT_MS`) and set its partition's error from where it stands then;
    then tell the group coordinator."""
    if waiting:
        outcomes = await services.replica_manager.wait_for_replication(
            [append for _, _, append in waiting], MARKER_TIMEOUT_MS / 1000)
        for (codes, tp, append), outcome in zip(waiting, outcomes, strict=True):
            if outcome is Replication.REPLICATED:
                if append.partition.under_min_isr():
                    codes[tp] = ErrorCode.not_enough_replicas_after_append
            elif outcome is Replication.PENDING:
                codes[tp] = ErrorCode.request_timed_out
            else:
                codes[tp] = ErrorCode.not_leader_or_follower
    _complete_offsets(services, markers, answers)


def _complete_offsets(
    services: BrokerServices, markers: Sequence[TxnMarker],
    answers: list[dict[TopicPartition, ErrorCode]],
) -> None:
    """Tell the group coordinator which ``__consumer_offsets`` partitions now hold the
    transaction's marker (its pending offset commits become visible or are dropped)."""
    completed = services.txn_offsets_completed
    if completed is None:
        return
    for marker, codes in zip(markers, answers, strict=True):
        written = [index for (topic, index), code in codes.items()
                   if topic == OFFSETS_TOPIC and code is ErrorCode.none]
        if written:
            completed(marker.producer_id, marker.commit, written)


# -- version 0 -------------------------------------------------------------------------
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_MARKER_HEAD = struct.Struct(">qh?")  # producer_id, producer_epoch, transaction_result


def _string(body: bytes, pos: int) -> tuple[str, int]:
    (n,) = _I16.unpack_from(body, pos)
    pos += 2
    if n < 0 or pos + n > len(body):
        raise ValueError("bad string length")
    return body[pos : pos + n].decode("utf-8"), pos + n


def _count(body: bytes, pos: int, min_size: int) -> tuple[int, int]:
    (n,) = _I32.unpack_from(body, pos)
    pos += 4
    if n < 0 or n * min_size > len(body) - pos:
        raise ValueError(f"bad array length {n}")
    return n, pos


def _to_v1(body: bytes, _version: int) -> bytes:
    markers = []
    count, pos = _count(body, 0, _MARKER_HEAD.size + 8)
    for _ in range(count):
        producer_id, producer_epoch, result = _MARKER_HEAD.unpack_from(body, pos)
        pos += _MARKER_HEAD.size
        topics = []
        topic_count, pos = _count(body, pos, 6)
        for _t in range(topic_count):
            name, pos = _string(body, pos)
            n, pos = _count(body, pos, 4)
            indexes = struct.unpack_from(f">{n}i", body, pos)
            pos += 4 * n
            topics.append(request_v1.WritableTxnMarkerTopic(
                name=TopicName(name), partition_indexes=tuple(i32(i) for i in indexes)))
        (coordinator_epoch,) = _I32.unpack_from(body, pos)
        pos += 4
        markers.append(request_v1.WritableTxnMarker(
            producer_id=ProducerId(producer_id), producer_epoch=i16(producer_epoch),
            transaction_result=result, topics=tuple(topics),
            coordinator_epoch=i32(coordinator_epoch)))
    if pos != len(body):
        raise ValueError("bytes remain after the request body")
    return encode_body(request_v1.WriteTxnMarkersRequest(markers=tuple(markers)))


def _from_v1(response: Any, _version: int) -> bytes:
    out = bytearray(_I32.pack(len(response.markers)))
    for marker in response.markers:
        out += struct.pack(">qi", marker.producer_id, len(marker.topics))
        for topic in marker.topics:
            name = topic.name.encode("utf-8")
            out += _I16.pack(len(name)) + name + _I32.pack(len(topic.partitions))
            for p in topic.partitions:
                out += struct.pack(">ih", p.partition_index, p.error_code.value)
    return bytes(out)
