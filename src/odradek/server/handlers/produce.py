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
from odradek.protocol.produce_writer import PartitionResult, write_produce_response
from odradek.protocol.registry import HandlerRegistry, RequestContext
from odradek.protocol.send import Send
from odradek.server.handlers._errors import error_code_for
from odradek.storage.cleaner import require_keys

if TYPE_CHECKING:
    from odradek.server.broker import Broker

VERSIONS = (3, 11)
VALID_ACKS = (0, 1, -1)


def register_produce(registry: HandlerRegistry, broker: Broker) -> None:
    async def produce(ctx: RequestContext, request: Any) -> Any:
        acks = request.acks
        topics: list[tuple[str, list[PartitionResult]]] = []
        for topic in request.topic_data:
            partitions = [
                _append(broker, acks, topic.name, pdata, request)
                for pdata in topic.partition_data
            ]
            topics.append((topic.name, partitions))
        if acks == 0:
            return None
        # Encoded by the hot-path writer (byte-identical to kio's, see its tests).
        return Send((write_produce_response(ctx.api_version, topics),))

    registry.register(ApiKey.PRODUCE, VERSIONS[0], VERSIONS[1], produce, serial=True)


def _partition_response(
    index: int, code: ErrorCode, base_offset: int = -1, log_append_time: int = -1,
    log_start_offset: int = -1, message: str | None = None,
) -> PartitionResult:
    return PartitionResult(
        index, int(code.value), base_offset, log_append_time, log_start_offset,
        message if code != ErrorCode.none else None,
    )


def _append(
    broker: Broker, acks: int, topic: str, pdata: Any, request: Any
) -> PartitionResult:
    index = pdata.index
    if acks not in VALID_ACKS:
        return _partition_response(index, ErrorCode.invalid_required_acks,
                                   message=f"acks must be 0, 1 or -1, not {acks}")
    partition_log = broker.get_log(topic, index)
    if partition_log is None:
        return _partition_response(index, ErrorCode.unknown_topic_or_partition)
    records = pdata.records
    if not records:
        return _partition_response(index, ErrorCode.corrupt_message,
                                   message="no records in the partition data")
    if request.transactional_id is not None:
        return _partition_response(
            index, ErrorCode.transactional_id_authorization_failed,
            message="transactions are not supported yet",
        )
    if acks == -1:
        min_isr = int(partition_log.config["min.insync.replicas"])
        if min_isr > 1:  # one broker: the ISR is the leader alone
            return _partition_response(
                index, ErrorCode.not_enough_replicas,
                message=f"ISR of 1 is below min.insync.replicas={min_isr}",
            )
    try:
        if partition_log.config.compact:  # Kafka's rule; the only per-record look here
            require_keys(records, f"{topic}-{index}")
        info = broker.append_records(partition_log, records)
    except Exception as exc:
        code, message = error_code_for(exc, f"appending to {topic}-{index}")
        return _partition_response(index, code, message=message)
    return _partition_response(
        index, ErrorCode.none, info.first_offset, info.log_append_time, info.log_start_offset
    )
