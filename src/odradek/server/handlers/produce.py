"""Produce (key 0), versions 3-11: append record batches, answer per partition.

Follows Kafka's ``KafkaApis.handleProduceRequest`` and ``ReplicaManager.appendRecords``:
``acks`` must be 0, 1 or -1 (else INVALID_REQUIRED_ACKS for every partition); an unknown
topic or partition is UNKNOWN_TOPIC_OR_PARTITION; the log validates each batch (CRC,
magic, sizes, offsets, timestamps) and the precise error comes back per partition
(CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE, INVALID_TIMESTAMP, …), with nothing of
a refused partition written. acks=0 sends no response at all. acks=-1 waits for the ISR
(on one broker: the leader alone) and is refused with NOT_ENOUGH_REPLICAS when the ISR is
smaller than ``min.insync.replicas``. Idempotent batches go through the partition's
producer state (sequence checks, duplicate detection) before the append.

The handler is registered ``serial``: requests of one connection are applied in order, as
idempotent producers with several requests in flight require.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.produce_reader import read_produce_request
from odradek.protocol.produce_writer import PartitionResult, write_produce_response
from odradek.protocol.registry import HandlerRegistry, RequestContext
from odradek.protocol.send import Send
from odradek.server.handlers._errors import error_code_for
from odradek.storage.cleaner import require_keys

if TYPE_CHECKING:
    from odradek.server.broker import Broker

VERSIONS = (3, 11)
VALID_ACKS = (0, 1, -1)

# Error codes as the ints the response writer packs (looked up once, not per partition).
_NONE = int(ErrorCode.none.value)
_INVALID_REQUIRED_ACKS = int(ErrorCode.invalid_required_acks.value)
_UNKNOWN_TOPIC_OR_PARTITION = int(ErrorCode.unknown_topic_or_partition.value)
_CORRUPT_MESSAGE = int(ErrorCode.corrupt_message.value)
_TRANSACTIONAL_ID_AUTHORIZATION_FAILED = int(
    ErrorCode.transactional_id_authorization_failed.value
)
_NOT_ENOUGH_REPLICAS = int(ErrorCode.not_enough_replicas.value)


def register_produce(registry: HandlerRegistry, broker: Broker) -> None:
    async def produce(ctx: RequestContext, request: Any) -> Any:
        acks = request.acks
        # What fails every partition alike is decided once per request; the per-partition
        # order of checks stays Kafka's (see _append).
        refusal: tuple[int, str] | None = None
        if acks not in VALID_ACKS:
            refusal = (_INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1, not {acks}")
        transactional = request.transactional_id is not None
        topics: list[tuple[str, list[PartitionResult]]] = []
        for topic in request.topic_data:
            name = topic.name
            partitions = [
                _append(broker, acks, name, index, records, refusal, transactional)
                for index, records in topic.partition_data
            ]
            topics.append((name, partitions))
        if acks == 0:
            return None
        # Encoded by the hot-path writer (byte-identical to kio's, see its tests).
        return Send((write_produce_response(ctx.api_version, topics),))

    # Decoded by the hot-path reader: records stay views of the request frame.
    registry.register(ApiKey.PRODUCE, VERSIONS[0], VERSIONS[1], produce, serial=True,
                      decode=read_produce_request)


def _append(
    broker: Broker, acks: int, topic: str, index: int, records: memoryview | bytes | None,
    refusal: tuple[int, str] | None, transactional: bool,
) -> PartitionResult:
    if refusal is not None:
        return PartitionResult(index, refusal[0], error_message=refusal[1])
    partition_log = broker.get_log(topic, index)
    if partition_log is None:
        return PartitionResult(index, _UNKNOWN_TOPIC_OR_PARTITION)
    if not records:
        return PartitionResult(index, _CORRUPT_MESSAGE,
                               error_message="no records in the partition data")
    if transactional:
        return PartitionResult(index, _TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                               error_message="transactions are not supported yet")
    config = partition_log.config
    if acks == -1:
        min_isr = config.min_insync_replicas
        if min_isr > 1:  # one broker: the ISR is the leader alone
            return PartitionResult(
                index, _NOT_ENOUGH_REPLICAS,
                error_message=f"ISR of 1 is below min.insync.replicas={min_isr}",
            )
    try:
        if config.compact:  # Kafka's rule; the only per-record look here
            require_keys(records, f"{topic}-{index}")
        info = broker.append_records(partition_log, records)
    except Exception as exc:
        code, message = error_code_for(exc, f"appending to {topic}-{index}")
        return PartitionResult(
            index, int(code.value), error_message=message if code != ErrorCode.none else None
        )
    return PartitionResult(
        index, _NONE, info.first_offset, info.log_append_time, info.log_start_offset
    )
