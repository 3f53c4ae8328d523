"""Produce (key 0), versions 0-11: append record batches, answer per partition.

Follows Kafka's ``KafkaApis.handleProduceRequest`` and ``ReplicaManager.appendRecords``:
``acks`` must be 0, 1 or -1 (else INVALID_REQUIRED_ACKS for every partition); an unknown
topic or partition is UNKNOWN_TOPIC_OR_PARTITION; the log validates each batch (CRC,
magic, sizes, offsets, timestamps) and the precise error comes back per partition
(CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE, INVALID_TIMESTAMP, …), with nothing
of a refused partition written; a rule that refuses records one by one (a key missing on a
compacted topic, a timestamp out of range) names them in ``record_errors`` (v8+, KIP-467).
Partitions are reached through the replica manager: a partition this broker does not lead
is NOT_LEADER_OR_FOLLOWER, one whose log is still being created LEADER_NOT_AVAILABLE.
acks=0 sends no response at all. acks=-1 is refused with NOT_ENOUGH_REPLICAS when the ISR
is smaller than ``min.insync.replicas``, and its answer waits until the high watermark
passes the appended records (the ISR has them) or the request's timeout runs out
(REQUEST_TIMED_OUT); with the leader alone in the ISR it passes them at once. Idempotent
batches go through the partition's producer state (sequence checks, duplicate detection)
before the append; so do transactional ones, which open their producer's transaction
(storage/producer_state.py: a non-transactional batch while it is open is
INVALID_TXN_STATE), and a control batch is refused (INVALID_RECORD: markers come from the
transaction coordinator, WriteTxnMarkers). With ``transaction.partition.verification.enable``
(KIP-890's first part, Kafka's ``ReplicaManager.handleProduceAppend``), a producer's first
transactional batch on a partition (no transaction of its open there at its epoch) is
appended only once the transaction coordinator confirmed the partition is in its ongoing
transaction (server/txn_verification.py, one question per request for all such
partitions); else INVALID_TXN_STATE, or NOT_ENOUGH_REPLICAS while the coordinator cannot
answer. Kafka's verification guard is the producer state's (storage/producer_state.py): a
marker written while the coordinator was asked refuses the append (INVALID_TXN_STATE).
Transactional batches of more than one producer id in a request are
INVALID_PRODUCER_ID_MAPPING. Batches of a producer whose transaction is open are not
verified again once the coordinator confirmed the producer id for the request's
transactional id (a leader remembers that, bounded); before, the coordinator is asked,
so a request cannot slip records into the open transaction of another transactional id
(INVALID_PRODUCER_ID_MAPPING), and under a verification guard as a first batch is: a
marker ending that transaction while the coordinator answers refuses the append
(INVALID_TXN_STATE), which would open a transaction no coordinator knows of.
Non-transactional produce is not checked.

A request with a transactional batch (the attributes' bit, read from each batch header,
by one call into the C extension for the whole request) and no transactional id is
refused whole with TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
authorizer or not (Kafka's first check): no coordinator would ever end its transaction.
The internal topics (``__consumer_offsets``, ``__transaction_state``) take no client
appends: INVALID_TOPIC_EXCEPTION, "Cannot append to internal topic" (Kafka's
``ReplicaManager``; the coordinators append by their own path). Kafka lets a client whose
id is ``__admin_client`` through; Odradek does not.

With an authorizer, each topic needs Write: the partitions of a topic refused are
TOPIC_AUTHORIZATION_FAILED, with nothing appended (checked before the topic's existence,
so an answer does not tell whether it exists); a transactional produce also needs Write on
its transactional id, else every partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED.

A client over its ``producer_byte_rate`` quota (:mod:`odradek.server.client_quotas`) has
its records appended all the same; the request's size is recorded, and the answer carries
the throttle time while the connection is muted for it (KIP-219). acks=0 has no answer:
the muting alone slows it.

Versions 0-2 (clients of Kafka 0.9-0.10, KIP-896 removed them from Kafka 4.0) carry
message sets of magic 0 or 1: each is validated (CRC32, sizes, wrappers) and converted to
one RecordBatch v2 before the same append (Kafka 3.x's LogValidator stores v2 whatever the
client sends); a bad set is CORRUPT_MESSAGE or INVALID_RECORD with nothing stored. Their
bodies are read and written by protocol/legacy_api.py; v3+ never reaches that code.

The handler is registered ``serial``: requests of one connection are applied in order, as
idempotent producers with several requests in flight require.
"""

from __future__ import annotations

import struct
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from odradek.cluster.replica_manager import PendingAppend, Replication
from odradek.cluster.topic_names import INTERNAL_TOPICS, is_internal
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.legacy_api import PRODUCE_LEGACY_MAX
from odradek.protocol.legacy_api import write_produce_response as write_legacy_response
from odradek.protocol.produce_reader import read_produce_request
from odradek.protocol.produce_writer import PartitionResult, write_produce_response
from odradek.protocol.registry import (
    GENERIC_ERROR_RESPONSE,
    HandlerRegistry,
    RequestContext,
    bind,
)
from odradek.protocol.send import Send
from odradek.records.batch import (
    ATTRIBUTES_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    InvalidRecordError,
    iter_batches,
)
from odradek.records.legacy import CORRUPT_REASONS, magic_of, to_record_batch
from odradek.security.acl import AclOperation, ResourceType
from odradek.server.client_quotas import principal_user
from odradek.server.handlers._errors import error_code_for

if TYPE_CHECKING:
    from odradek.cluster.replica_manager import ReplicaManager
    from odradek.server.broker_stats import TopicCounters
    from odradek.server.services import BrokerServices
    from odradek.server.txn_verification import TxnVerifier
    from odradek.storage.producer_state import ProducerStateManager

VERSIONS = (0, 11)
VALID_ACKS = (0, 1, -1)

# Error codes as the ints the response writer packs (looked up once, not per partition).
_NONE = int(ErrorCode.none.value)
_INVALID_REQUIRED_ACKS = int(ErrorCode.invalid_required_acks.value)
_CORRUPT_MESSAGE = int(ErrorCode.corrupt_message.value)
_INVALID_RECORD = int(ErrorCode.invalid_record.value)
_TRANSACTIONAL_ID_AUTHORIZATION_FAILED = int(
    ErrorCode.transactional_id_authorization_failed.value
)
_REQUEST_TIMED_OUT = int(ErrorCode.request_timed_out.value)
_TOPIC_AUTHORIZATION_FAILED = int(ErrorCode.topic_authorization_failed.value)
_NOT_ENOUGH_REPLICAS_AFTER_APPEND = int(ErrorCode.not_enough_replicas_after_append.value)
_NOT_LEADER_OR_FOLLOWER = int(ErrorCode.not_leader_or_follower.value)
_INVALID_TXN_STATE = int(ErrorCode.invalid_txn_state.value)
_INVALID_PRODUCER_ID_MAPPING = int(ErrorCode.invalid_producer_id_mapping.value)
_INVALID_TOPIC = int(ErrorCode.invalid_topic_exception.value)
_TRANSACTIONAL = 0x10  # attributes bit 4 (bit 5, control, marks markers)
_CONTROL = 0x20
# What a batch's transactional bit is read from, in one unpack: its length, magic and
# attributes (the leader epoch and the CRC between them skipped), at the offsets
# RecordBatch v2 has them; a message set of magic 0/1 has its size and magic at the same
# offsets, and no transactional bit.
_LENGTH_MAGIC_ATTRIBUTES = struct.Struct(">i4xb4xh")
assert (LENGTH_OFFSET + 8, LENGTH_OFFSET + 13) == (MAGIC_OFFSET, ATTRIBUTES_OFFSET)
_UNPACK_LENGTH_MAGIC_ATTRIBUTES = _LENGTH_MAGIC_ATTRIBUTES.unpack_from
_BATCH_HEADER_END = LENGTH_OFFSET + _LENGTH_MAGIC_ATTRIBUTES.size
_NULL_TXN_ID = ("Transactional records need the producer's transactional id, and this "
                "request has none")



class _Guard(NamedTuple):
    """KIP-890: the verification guard a verified partition's append must still hold."""

    state: ProducerStateManager
    producer_id: int
    epoch: int
    guard: object


# (topic, partition) -> a refusal (code, message), or the guard of a verified partition
_Verified = dict[tuple[str, int], tuple[int, str | None] | _Guard]

# The coordinator's answers that confirm the producer id is the transactional id's (it
# checks the id first, then the epoch, then the partition), and those that do not.
_BOUND: tuple[ErrorCode, str | None] = (ErrorCode.none, None)
_BINDS = frozenset({ErrorCode.none, ErrorCode.invalid_producer_epoch})
_UNBOUND = frozenset({ErrorCode.invalid_producer_id_mapping, ErrorCode.not_enough_replicas})
# How many producer ids a leader remembers the confirmed transactional id of; one
# forgotten costs its producer one more question to the coordinator.
BOUND_PRODUCERS_MAX = 10_000


class _ProducerBindings:
    """Which transactional id the coordinator confirmed each producer id for, as far as
    this broker asked (bounded: the oldest is forgotten first)."""

    def __init__(self) -> None:
        self._bound: dict[int, str] = {}

    def bound_to(self, producer_id: int) -> str | None:
        return self._bound.get(producer_id)

    def bind(self, producer_id: int, transactional_id: str) -> None:
        bound = self._bound
        bound.pop(producer_id, None)
        bound[producer_id] = transactional_id
        if len(bound) > BOUND_PRODUCERS_MAX:
            del bound[next(iter(bound))]


# One memory per broker (its verifier), without a field in BrokerServices.
_BINDINGS: weakref.WeakKeyDictionary[TxnVerifier, _ProducerBindings] = (
    weakref.WeakKeyDictionary())


def register_produce(registry: HandlerRegistry, services: BrokerServices) -> None:
    # Decoded by the hot-path reader: records stay views of the request frame.
    registry.register(ApiKey.PRODUCE, VERSIONS[0], VERSIONS[1], bind(produce, services),
                      serial=True, decode=read_produce_request, error_response=error_response)


async def produce(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    replica_manager = services.replica_manager
    stats = services.topic_stats
    acks = request.acks
    # What fails every partition alike is decided once per request; the per-partition
    # order of checks stays Kafka's (see _append).
    refusal: tuple[int, str] | None = None
    transactional_id = request.transactional_id
    authorizer = services.authorizer
    if transactional_id is None:
        # Kafka's first check, authorizer or not: a transactional batch no coordinator
        # knows of would stay open for ever, pinning the partition's last stable offset.
        if _transactional_batch_in(request.topic_data):
            refusal = (_TRANSACTIONAL_ID_AUTHORIZATION_FAILED, _NULL_TXN_ID)
    elif authorizer is not None and not authorizer.authorize(
            ctx.principal, ctx.peer[0], AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
            transactional_id):
        refusal = (_TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                   f"Write on transactional id {transactional_id!r} is not authorized")
    if refusal is None and acks not in VALID_ACKS:
        refusal = (_INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1, not {acks}")
    verified: _Verified | None = None
    if transactional_id is not None and refusal is None:
        verifier = services.txn_verifier
        if verifier is not None:  # KIP-890
            verified = await _verify(services, verifier, ctx, request, transactional_id)
    topics: list[tuple[str, list[PartitionResult]]] = []
    # acks=all: the appends the ISR may not have yet, with their answers
    waiting: list[tuple[PartitionResult, PendingAppend]] | None = [] if acks == -1 else None
    legacy = ctx.api_version <= PRODUCE_LEGACY_MAX
    for topic in request.topic_data:
        name = topic.name
        counters = stats.topic(name) if stats is not None else None
        topic_refusal = refusal
        if authorizer is not None and refusal is None and not authorizer.authorize(
                ctx.principal, ctx.peer[0], AclOperation.WRITE, ResourceType.TOPIC, name):
            topic_refusal = (_TOPIC_AUTHORIZATION_FAILED,
                             f"Write on topic {name!r} is not authorized")
        if topic_refusal is None and name in INTERNAL_TOPICS:  # is_internal, inline
            # Only the coordinators write there, by their own path (Kafka's
            # ReplicaManager refuses clients' appends the same way).
            partitions = [_refuse_internal(replica_manager, name, index)
                          for index, _ in topic.partition_data]
        elif legacy:
            partitions = [
                _append_legacy(replica_manager, acks, name, index, records, topic_refusal,
                               waiting, counters)
                for index, records in topic.partition_data
            ]
        elif verified is None:
            partitions = [
                _append(replica_manager, acks, name, index, records, topic_refusal,
                        waiting, counters)
                for index, records in topic.partition_data
            ]
        else:
            partitions = [
                _append_verified(replica_manager, acks, name, index, records,
                                 topic_refusal, waiting, counters, verified)
                for index, records in topic.partition_data
            ]
        topics.append((name, partitions))
        if counters is not None:  # a request per partition; _append counts the appended
            counters.produce_requests += len(partitions)
    throttle_ms = 0
    quota = services.client_quotas.produce
    if quota.active:
        throttle_ms = quota.record(ctx.client_id, ctx.size, user=principal_user(ctx.principal))
        if throttle_ms and ctx.channel is not None:
            ctx.channel.throttle(throttle_ms)
    if acks == 0:
        return None
    if waiting:
        await _wait_for_replication(replica_manager, waiting, request.timeout_ms)
    if legacy:
        return write_legacy_response(ctx.api_version, topics)
    # Encoded by the hot-path writer (byte-identical to kio's, see its tests).
    return Send((write_produce_response(ctx.api_version, topics, throttle_ms),))


def error_response(ctx: RequestContext, request: Any, code: ErrorCode) -> Any:
    """v0-2 answer every partition with ``code`` in their own layout (acks=0: nothing)."""
    if ctx.api_version > PRODUCE_LEGACY_MAX:
        return GENERIC_ERROR_RESPONSE
    if request.acks == 0:
        return None
    value = int(code.value)
    return write_legacy_response(ctx.api_version, [
        (t.name, [PartitionResult(index, value) for index, _ in t.partition_data])
        for t in request.topic_data
    ])


def _has_transactional_batch(topic_data: Any) -> bool:
    """Whether a batch of the request has the transactional bit (Kafka's
    ``RequestUtils.hasTransactionalRecords``; here every batch of a partition's records,
    since more than one is accepted). One unpack per batch header, nothing of its
    records. A batch cut short is not one (as for Kafka's record iterator and the
    append's): the append answers it CORRUPT_MESSAGE."""
    # The twin of _columnar.transactional_batch_in, which serves when the extension is
    # built (it was this function's cost, about 2 % of a one-record Produce, that moved it
    # to C); module constants, no calls but the unpack.
    for topic in topic_data:
        for _, records in topic.partition_data:
            if records is None:
                continue
            end = len(records)
            position = 0
            while position + _BATCH_HEADER_END <= end:
                length, magic, attributes = _UNPACK_LENGTH_MAGIC_ATTRIBUTES(
                    records, position + LENGTH_OFFSET)
                position += LOG_OVERHEAD + length
                if length <= 0 or position > end:
                    break  # malformed or truncated: the append refuses it
                if attributes & _TRANSACTIONAL and magic >= 2:
                    return True
    return False


# The scan above in C (one call, the loops over topics and partitions included), when the
# extension was built; the tests hold the two to each other.
_transactional_batch_in: Callable[[Any], bool]
try:
    from odradek.records._columnar import transactional_batch_in as _transactional_batch_in
except ImportError:  # no C compiler at install time
    _transactional_batch_in = _has_transactional_batch


def _refuse_internal(replica_manager: ReplicaManager, topic: str, index: int
                     ) -> PartitionResult:
    """A client's append to an internal topic: INVALID_TOPIC_EXCEPTION for a partition
    that exists (Kafka checks the topic's existence first)."""
    info = replica_manager.metadata.get(topic)
    if info is None or index not in info.partitions:
        return PartitionResult(index, int(ErrorCode.unknown_topic_or_partition.value),
                               error_message=f"{topic}-{index} does not exist")
    return PartitionResult(index, _INVALID_TOPIC,
                           error_message=f"Cannot append to internal topic {topic}")


def _append(
    replica_manager: ReplicaManager, acks: int, topic: str, index: int,
    records: memoryview | bytes | None, refusal: tuple[int, str] | None,
    waiting: list[tuple[PartitionResult, PendingAppend]] | None,
    counters: TopicCounters | None = None,
) -> PartitionResult:
    if refusal is not None:
        return PartitionResult(index, refusal[0], error_message=refusal[1])
    try:
        partition = replica_manager.leader_partition(topic, index)
        if not records:
            return PartitionResult(index, _CORRUPT_MESSAGE,
                                   error_message="no records in the partition data")
        info = partition.append_records_as_leader(records, acks)
    except Exception as exc:
        code, message = error_code_for(exc, f"appending to {topic}-{index}")
        return PartitionResult(
            index, int(code.value), error_message=message if code != ErrorCode.none else None,
            record_errors=getattr(exc, "record_errors", ()),
        )
    result = PartitionResult(
        index, _NONE, info.first_offset, info.log_append_time, info.log_start_offset
    )
    if counters is not None:  # BrokerTopicMetrics (the broker's totals are summed when read)
        counters.bytes_in += len(records)
        counters.messages_in += info.record_count
        counters.appended += 1
    if waiting is not None and partition.high_watermark <= info.last_offset:
        # The epoch and the log end of this append, taken now (nothing ran since it)
        waiting.append((result, PendingAppend(partition, partition.leader_epoch,
                                              info.last_offset + 1)))
    return result


async def _verify(
    services: BrokerServices, verifier: TxnVerifier, ctx: RequestContext, request: Any,
    transactional_id: str,
) -> _Verified:
    """KIP-890: ask the coordinator about the partitions where the request's producer
    has no transaction open yet (per batch header, never per record); a guard is taken
    on each before the question."""
    replica_manager = services.replica_manager
    authorizer = services.authorizer
    producers: set[tuple[int, int]] = set()
    unverified: dict[tuple[str, int], ProducerStateManager] = {}
    # the producer's transaction is open there
    ongoing: dict[tuple[str, int], ProducerStateManager] = {}
    for topic in request.topic_data:
        name = topic.name
        if is_internal(name) or (authorizer is not None and not authorizer.authorize(
                ctx.principal, ctx.peer[0], AclOperation.WRITE, ResourceType.TOPIC, name)):
            continue  # refused by the append loop
        for index, records in topic.partition_data:
            if not records:
                continue
            try:
                state = replica_manager.leader_partition(name, index).log.producer_state
            except Exception:
                continue  # the append answers its error
            for header in iter_batches(records):
                attributes = header.attributes
                if (header.magic >= 2 and header.producer_id >= 0
                        and attributes & _TRANSACTIONAL and not attributes & _CONTROL):
                    producer = (header.producer_id, header.producer_epoch)
                    producers.add(producer)
                    if not state.has_ongoing_txn(*producer):
                        unverified[(name, index)] = state
                    else:
                        ongoing[(name, index)] = state
    if len(producers) > 1:  # Kafka's InvalidPidMappingException, for the whole request
        every = (_INVALID_PRODUCER_ID_MAPPING,
                 "Transactional records contained more than one producer ID")
        return {(t.name, index): every for t in request.topic_data
                for index, _ in t.partition_data}
    if not producers:
        return {}
    (producer_id, epoch), = producers
    # An open transaction needs no verification only if the coordinator confirmed the
    # producer id for this transactional id (else it may be another id's transaction).
    bindings = _BINDINGS.get(verifier)
    if bindings is None:
        bindings = _BINDINGS[verifier] = _ProducerBindings()
    binding = ({} if bindings.bound_to(producer_id) == transactional_id
               else {tp: state for tp, state in ongoing.items() if tp not in unverified})
    if not unverified and not binding:
        return {}
    # Guards on the open transactions asked about too: a marker ending one while the
    # coordinator answers must refuse the append, which would open a transaction no
    # coordinator knows of.
    guards = {tp: state.start_verification(producer_id)
              for tp, state in (*unverified.items(), *binding.items())}
    refused = await verifier.verify(transactional_id, producer_id, epoch,
                                    [*unverified, *binding])
    if any(refused.get(tp, _BOUND)[0] in _BINDS for tp in (*unverified, *binding)):
        bindings.bind(producer_id, transactional_id)
    out: _Verified = {}
    for tp, state in binding.items():
        found = refused.get(tp)
        if found is not None and found[0] in _UNBOUND:
            state.end_verification(producer_id, guards[tp])
            out[tp] = (int(found[0].value), found[1])
        else:  # the transaction open there is the producer's
            out[tp] = _Guard(state, producer_id, epoch, guards[tp])
    for tp, state in unverified.items():
        found = refused.get(tp)
        if found is not None:
            state.end_verification(producer_id, guards[tp])
            out[tp] = (int(found[0].value), found[1])
        else:
            out[tp] = _Guard(state, producer_id, epoch, guards[tp])
    return out


def _append_verified(
    replica_manager: ReplicaManager, acks: int, topic: str, index: int,
    records: memoryview | bytes | None, refusal: tuple[int, str] | None,
    waiting: list[tuple[PartitionResult, PendingAppend]] | None,
    counters: TopicCounters | None, verified: _Verified,
) -> PartitionResult:
    """A transactional request's append: refused if the coordinator did not verify the
    partition, or if a marker came for the producer while it was asked (Kafka's
    verification guard); nothing runs between this check and the append."""
    found = verified.get((topic, index)) if refusal is None else None
    if found is not None:
        if not isinstance(found, _Guard):
            return PartitionResult(index, found[0], error_message=found[1])
        state = found.state
        try:
            current = replica_manager.leader_partition(topic, index).log.producer_state
        except Exception:
            current = None  # the append answers its error
        try:
            if current is not None and (current is not state or not state.verified(
                    found.producer_id, found.epoch, found.guard)):
                return PartitionResult(
                    index, _INVALID_TXN_STATE,
                    error_message="Record was not part of an ongoing transaction")
            return _append(replica_manager, acks, topic, index, records, refusal, waiting,
                           counters)
        finally:
            state.end_verification(found.producer_id, found.guard)
    return _append(replica_manager, acks, topic, index, records, refusal, waiting, counters)


def _append_legacy(
    replica_manager: ReplicaManager, acks: int, topic: str, index: int,
    records: memoryview | bytes | None, refusal: tuple[int, str] | None,
    waiting: list[tuple[PartitionResult, PendingAppend]] | None,
    counters: TopicCounters | None = None,
) -> PartitionResult:
    """Produce v0-2: a message set of magic 0/1 becomes one RecordBatch v2 (a v2 batch,
    which old request versions may carry too, is appended as it is)."""
    if refusal is None and records and magic_of(records) < 2:
        try:
            replica_manager.leader_partition(topic, index)
            records = to_record_batch(records).batch
        except InvalidRecordError as exc:
            code = _CORRUPT_MESSAGE if exc.reason in CORRUPT_REASONS else _INVALID_RECORD
            return PartitionResult(index, code, error_message=str(exc))
        except Exception as exc:
            error, message = error_code_for(exc, f"appending to {topic}-{index}")
            return PartitionResult(index, int(error.value), error_message=message)
    return _append(replica_manager, acks, topic, index, records, refusal, waiting, counters)


async def _wait_for_replication(
    replica_manager: ReplicaManager,
    waiting: list[tuple[PartitionResult, PendingAppend]],
    timeout_ms: int,
) -> None:
    """acks=all: the answers wait, all partitions at once, until the ISR of each has its
    records (Kafka's DelayedProduce), each judged at the leader epoch it was appended at.
    One still short when the request's timeout runs out is REQUEST_TIMED_OUT (the
    records stay in the leader's log, as with Kafka); one whose leadership moved (even
    and back, at a later epoch) is NOT_LEADER_OR_FOLLOWER."""
    outcomes = await replica_manager.wait_for_replication(
        [append for _, append in waiting], max(timeout_ms / 1000, 0.0))
    for (result, append), outcome in zip(waiting, outcomes, strict=True):
        partition = append.partition
        if outcome is Replication.REPLICATED:
            if partition.under_min_isr():
                # Replicated to the whole ISR, but the ISR shrank below
                # min.insync.replicas meanwhile (Kafka's DelayedProduce).
                result.error_code = _NOT_ENOUGH_REPLICAS_AFTER_APPEND
                result.error_message = (
                    f"the ISR of {len(partition.state.isr)} is below min.insync.replicas="
                    f"{partition.log.config.min_insync_replicas}"
                )
        elif outcome is Replication.PENDING:
            result.error_code = _REQUEST_TIMED_OUT
            result.error_message = (
                f"the in-sync replicas did not confirm offset {append.required_offset - 1} "
                "in time"
            )
        else:
            result.error_code = _NOT_LEADER_OR_FOLLOWER
            result.error_message = "leadership moved before the in-sync replicas had the records"
