"""Transaction APIs on the transaction coordinator (KIP-98): AddPartitionsToTxn (key 24)
v0-4, AddOffsetsToTxn (25) v0-4, EndTxn (26) v0-4, TxnOffsetCommit (28) v0-4,
DescribeTransactions (65) v0 and ListTransactions (66) v0-1 (KIP-664) — Kafka 3.9's
ranges. InitProducerId is in :mod:`.init_producer_id`, FindCoordinator's key type
TRANSACTION in :mod:`.groups`.

Follows Kafka's ``KafkaApis`` for the request-to-coordinator translation:

- AddPartitionsToTxn v0-3 carries one transaction: partitions of unknown topics get
  UNKNOWN_TOPIC_OR_PARTITION, of topics without Write or internal ones (authorizer or
  not: only the coordinators write there) TOPIC_AUTHORIZATION_FAILED, and then
  every other partition OPERATION_NOT_ATTEMPTED; otherwise the coordinator's answer is
  every partition's. v4 is the batched form brokers send (KIP-890): it needs ClusterAction
  (else a top-level CLUSTER_AUTHORIZATION_FAILED) and answers each transaction; a
  transaction with ``verify_only`` is only checked (NONE for a partition already in the
  transaction, whatever is being written for others, INVALID_TXN_STATE otherwise,
  CONCURRENT_TRANSACTIONS while it ends), nothing is added.
- AddOffsetsToTxn adds the group's ``__consumer_offsets`` partition to the transaction,
  so its markers reach the group coordinator.
- EndTxn writes PrepareCommit / PrepareAbort and answers; the markers follow.
- TxnOffsetCommit goes to the group coordinator, which keeps the offsets pending per
  producer id until the marker of the transaction reaches the group's partition. With
  ``transaction.partition.verification.enable`` (KIP-890, Kafka 3.6+) the group's
  ``__consumer_offsets`` partition is first verified with the transaction coordinator
  (server/txn_verification.py) unless the producer's transaction is open there already:
  a TxnOffsetCommit of a transaction that ended is refused (INVALID_TXN_STATE, a fenced
  epoch INVALID_PRODUCER_EPOCH) and nothing is written, so it cannot open a transaction
  on ``__consumer_offsets`` that pins the partition's last stable offset.
- DescribeTransactions answers each id from its coordinator (NOT_COORDINATOR elsewhere;
  TRANSACTIONAL_ID_NOT_FOUND for an unknown id), listing only the topics the caller may
  Describe; ListTransactions lists the ids this
  broker coordinates, filtered by state names (an unknown name is echoed in
  ``unknown_state_filters``), producer ids and (v1, KIP-994) a transaction running longer
  than ``duration_filter`` ms; ids the caller may not Describe are left out.
- KIP-588: versions before 2 (before 3 for InitProducerId's v4 cut) know no
  PRODUCER_FENCED; they get INVALID_PRODUCER_EPOCH.

With an authorizer: Describe on the transactional id for DescribeTransactions (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and ListTransactions (else left out); Write on the
transactional id for the others (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), Write on each topic for AddPartitionsToTxn, Read
on the group for AddOffsetsToTxn and TxnOffsetCommit (GROUP_AUTHORIZATION_FAILED), Read on
each topic for TxnOffsetCommit (TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from odradek.cluster.topic_names import is_internal
from odradek.coordinator.offsets_topic import OFFSETS_TOPIC
from odradek.coordinator.transaction_coordinator import TransactionCoordinator
from odradek.coordinator.transaction_state import TransactionState
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import HandlerRegistry, RequestContext, bind
from odradek.server.authorization import (
    AclOperation,
    ResourceType,
    allowed,
    allowed_on_cluster,
    filter_refused,
)
from odradek.server.handlers._entities import ZERO_THROTTLE, make, response_module
from odradek.server.handlers._group_log import group_log_replicated
from odradek.server.handlers._steps import Steps
from odradek.server.txn_verification import translate_offset_commit

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices
    from odradek.storage.producer_state import ProducerStateManager

ADD_PARTITIONS_TO_TXN_VERSIONS = (0, 4)
ADD_OFFSETS_TO_TXN_VERSIONS = (0, 4)
END_TXN_VERSIONS = (0, 4)
TXN_OFFSET_COMMIT_VERSIONS = (0, 4)
DESCRIBE_TRANSACTIONS_VERSIONS = (0, 0)
LIST_TRANSACTIONS_VERSIONS = (0, 1)
BATCHED_FROM = 4  # AddPartitionsToTxn v4: many transactions, from brokers only
FENCED_FROM = 2  # KIP-588: PRODUCER_FENCED from this version on

_Partition = tuple[str, int]


def register_transactions(registry: HandlerRegistry, services: BrokerServices) -> None:
    registry.register(ApiKey.ADD_PARTITIONS_TO_TXN, *ADD_PARTITIONS_TO_TXN_VERSIONS,
                      bind(add_partitions_to_txn, services))
    registry.register(ApiKey.ADD_OFFSETS_TO_TXN, *ADD_OFFSETS_TO_TXN_VERSIONS,
                      bind(add_offsets_to_txn, services))
    registry.register(ApiKey.END_TXN, *END_TXN_VERSIONS, bind(end_txn, services))
    registry.register(ApiKey.TXN_OFFSET_COMMIT, *TXN_OFFSET_COMMIT_VERSIONS,
                      bind(txn_offset_commit, services))
    registry.register(ApiKey.DESCRIBE_TRANSACTIONS, *DESCRIBE_TRANSACTIONS_VERSIONS,
                      bind(describe_transactions, services))
    registry.register(ApiKey.LIST_TRANSACTIONS, *LIST_TRANSACTIONS_VERSIONS,
                      bind(list_transactions, services))


def _fenced(code: ErrorCode, version: int) -> ErrorCode:
    if code == ErrorCode.producer_fenced and version < FENCED_FROM:
        return ErrorCode.invalid_producer_epoch
    return code


def _coordinator(services: BrokerServices) -> TransactionCoordinator | None:
    return services.transaction_coordinator


def _writable_coordinator(
    services: BrokerServices, ctx: RequestContext, txn_id: str, *, check_auth: bool = True,
) -> tuple[TransactionCoordinator | None, ErrorCode]:
    """The transaction coordinator for a request that writes ``txn_id``'s transaction, and
    NONE; or None and COORDINATOR_NOT_AVAILABLE (no coordinator), or
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED (no Write on the id, when ``check_auth``)."""
    coordinator = _coordinator(services)
    if coordinator is None:
        return None, ErrorCode.coordinator_not_available
    if check_auth and not allowed(services.authorizer, ctx, AclOperation.WRITE,
                                  ResourceType.TRANSACTIONAL_ID, txn_id):
        return None, ErrorCode.transactional_id_authorization_failed
    return coordinator, ErrorCode.none


# -- AddPartitionsToTxn ----------------------------------------------------------------
async def add_partitions_to_txn(
    services: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    m = response_module("add_partitions_to_txn", ctx.api_version)
    if ctx.api_version >= BATCHED_FROM:
        return await _add_partitions_batched(services, ctx, request, m)
    results = await _add_one(
        services, ctx, request.v3_and_below_transactional_id,
        int(request.v3_and_below_producer_id), int(request.v3_and_below_producer_epoch),
        [(t.name, list(t.partitions)) for t in request.v3_and_below_topics], verify=False,
        check_auth=True)
    return make(m.AddPartitionsToTxnResponse, throttle_time=ZERO_THROTTLE,
                results_by_topic_v3_and_below=_topic_results(m, results))


def _topic_results(m: Any, results: dict[_Partition, ErrorCode]) -> tuple[Any, ...]:
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), code in results.items():
        by_topic.setdefault(topic, []).append(make(
            m.AddPartitionsToTxnPartitionResult, partition_index=partition,
            partition_error_code=code))
    return tuple(make(m.AddPartitionsToTxnTopicResult, name=topic,
                      results_by_partition=tuple(parts))
                 for topic, parts in by_topic.items())


async def _add_partitions_batched(
    services: BrokerServices, ctx: RequestContext, request: Any, m: Any
) -> Any:
    if not allowed_on_cluster(services.authorizer, ctx, AclOperation.CLUSTER_ACTION):
        return make(m.AddPartitionsToTxnResponse, throttle_time=ZERO_THROTTLE,
                    error_code=ErrorCode.cluster_authorization_failed,
                    results_by_transaction=())
    out = []
    steps = Steps()
    for txn in request.transactions:
        await steps.tick()
        results = await _add_one(
            services, ctx, txn.transactional_id, int(txn.producer_id),
            int(txn.producer_epoch), [(t.name, list(t.partitions)) for t in txn.topics],
            verify=bool(txn.verify_only), check_auth=False)
        out.append(make(m.AddPartitionsToTxnResult, transactional_id=txn.transactional_id,
                        topic_results=_topic_results(m, results)))
    return make(m.AddPartitionsToTxnResponse, throttle_time=ZERO_THROTTLE,
                error_code=ErrorCode.none, results_by_transaction=tuple(out))


async def _add_one(
    services: BrokerServices, ctx: RequestContext, txn_id: str, producer_id: int,
    producer_epoch: int, topics: list[tuple[str, list[int]]], *, verify: bool,
    check_auth: bool,
) -> dict[_Partition, ErrorCode]:
    partitions = [(name, int(p)) for name, parts in topics for p in parts]

    def every(code: ErrorCode) -> dict[_Partition, ErrorCode]:
        return dict.fromkeys(partitions, code)

    coordinator, error = _writable_coordinator(services, ctx, txn_id, check_auth=check_auth)
    if coordinator is None:
        return every(error)
    refused = (filter_refused(services.authorizer, ctx, AclOperation.WRITE,
                              ResourceType.TOPIC, {t for t, _ in partitions})
               if check_auth else set())
    errors: dict[_Partition, ErrorCode] = {}
    for tp in partitions:
        # A client's request (v0-3) never adds an internal topic, authorizer or not
        # (Kafka leaves them out of the authorized topics).
        if tp[0] in refused or (check_auth and is_internal(tp[0])):
            errors[tp] = ErrorCode.topic_authorization_failed
        elif not _partition_exists(services, tp):
            errors[tp] = ErrorCode.unknown_topic_or_partition
    if errors:
        return {tp: errors.get(tp, ErrorCode.operation_not_attempted) for tp in partitions}
    if verify:
        code, per_partition = coordinator.verify_partitions(
            txn_id, producer_id, producer_epoch, partitions)
        if code != ErrorCode.none:
            return every(code)
        return per_partition
    code = await coordinator.add_partitions(txn_id, producer_id, producer_epoch, partitions)
    return every(_fenced(code, ctx.api_version))


def _partition_exists(services: BrokerServices, tp: _Partition) -> bool:
    info = services.metadata.get(tp[0])
    return info is not None and tp[1] in info.partitions


# -- AddOffsetsToTxn -------------------------------------------------------------------
async def add_offsets_to_txn(
    services: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    m = response_module("add_offsets_to_txn", ctx.api_version)

    def answer(code: ErrorCode) -> Any:
        return make(m.AddOffsetsToTxnResponse, throttle_time=ZERO_THROTTLE, error_code=code)

    txn_id, group_id = request.transactional_id, request.group_id
    coordinator, error = _writable_coordinator(services, ctx, txn_id)
    if coordinator is None:
        return answer(error)
    if not allowed(services.authorizer, ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return answer(ErrorCode.group_authorization_failed)
    offsets_partition = services.group_coordinator.partition_for(group_id)
    code = await coordinator.add_partitions(
        txn_id, int(request.producer_id), int(request.producer_epoch),
        [(OFFSETS_TOPIC, offsets_partition)])
    return answer(_fenced(code, ctx.api_version))


# -- EndTxn ----------------------------------------------------------------------------
async def end_txn(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    m = response_module("end_txn", ctx.api_version)

    def answer(code: ErrorCode) -> Any:
        return make(m.EndTxnResponse, throttle_time=ZERO_THROTTLE, error_code=code)

    coordinator, error = _writable_coordinator(services, ctx, request.transactional_id)
    if coordinator is None:
        return answer(error)
    code = await coordinator.end_txn(request.transactional_id, int(request.producer_id),
                                     int(request.producer_epoch), bool(request.committed))
    return answer(_fenced(code, ctx.api_version))


# -- TxnOffsetCommit -------------------------------------------------------------------
async def txn_offset_commit(
    services: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    m = response_module("txn_offset_commit", ctx.api_version)
    requested = [(t.name, [(int(p.partition_index), p) for p in t.partitions])
                 for t in request.topics]

    def answer(codes: dict[_Partition, ErrorCode]) -> Any:
        topics = tuple(
            make(m.TxnOffsetCommitResponseTopic, name=name, partitions=tuple(
                make(m.TxnOffsetCommitResponsePartition, partition_index=index,
                     error_code=codes[(name, index)])
                for index, _ in parts))
            for name, parts in requested)
        return make(m.TxnOffsetCommitResponse, throttle_time=ZERO_THROTTLE, topics=topics)

    all_partitions = [(name, index) for name, parts in requested for index, _ in parts]

    def every(code: ErrorCode) -> Any:
        return answer(dict.fromkeys(all_partitions, code))

    txn_id, group_id = request.transactional_id, request.group_id
    if not allowed(services.authorizer, ctx, AclOperation.WRITE,
                   ResourceType.TRANSACTIONAL_ID, txn_id):
        return every(ErrorCode.transactional_id_authorization_failed)
    if not allowed(services.authorizer, ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return every(ErrorCode.group_authorization_failed)
    refused = filter_refused(services.authorizer, ctx, AclOperation.READ, ResourceType.TOPIC,
                             {name for name, _ in requested})
    codes: dict[_Partition, ErrorCode] = {}
    offsets: dict[_Partition, tuple[int, int, str | None]] = {}
    for name, parts in requested:
        known = services.metadata.get(name) is not None
        for index, p in parts:
            if name in refused:
                codes[(name, index)] = ErrorCode.topic_authorization_failed
            elif not known:
                codes[(name, index)] = ErrorCode.unknown_topic_or_partition
            else:
                offsets[(name, index)] = (int(p.committed_offset),
                                          int(getattr(p, "committed_leader_epoch", -1)),
                                          p.committed_metadata)
    if offsets:
        producer_id, epoch = int(request.producer_id), int(request.producer_epoch)
        verified: _OffsetsVerified | None = None
        if services.txn_verifier is not None:  # KIP-890
            refusal, verified = await _verify_offsets(services, txn_id, group_id,
                                                      producer_id, epoch)
            if refusal is not None:
                codes.update(dict.fromkeys(offsets, refusal))
                return answer(codes)
        try:
            results = services.group_coordinator.txn_commit_offsets(
                group_id, producer_id, epoch,
                getattr(request, "member_id", ""), getattr(request, "group_instance_id", None),
                int(getattr(request, "generation_id", -1)), offsets,
                None if verified is None else verified.holds)
        finally:
            if verified is not None:
                verified.end()
        if any(code == ErrorCode.none for code in results.values()):
            waited = await group_log_replicated(services, group_id)
            if waited != ErrorCode.none:
                results = {tp: (waited if code == ErrorCode.none else code)
                           for tp, code in results.items()}
        codes.update(results)
    return answer(codes)


class _OffsetsVerified:
    """KIP-890 for TxnOffsetCommit: what the append to the group's ``__consumer_offsets``
    partition must still hold — the producer's transaction open there at this epoch, or
    the verification guard taken before the coordinator was asked (a marker of the
    producer landing meanwhile drops it)."""

    def __init__(self, services: BrokerServices, partition: int, state: ProducerStateManager,
                 producer_id: int, epoch: int, guard: object | None) -> None:
        self._services = services
        self._partition = partition
        self._state = state
        self._producer_id = producer_id
        self._epoch = epoch
        self._guard = guard

    def holds(self) -> bool:
        if _offsets_producer_state(self._services, self._partition) is not self._state:
            return False  # the partition's log changed (leadership moved) meanwhile
        if self._guard is None:
            return self._state.has_ongoing_txn(self._producer_id, self._epoch)
        return self._state.verified(self._producer_id, self._epoch, self._guard)

    def end(self) -> None:
        if self._guard is not None:
            self._state.end_verification(self._producer_id, self._guard)


def _offsets_producer_state(services: BrokerServices, partition: int
                            ) -> ProducerStateManager | None:
    try:
        return services.replica_manager.leader_partition(
            OFFSETS_TOPIC, partition).log.producer_state
    except Exception:  # not led here (any more): the group coordinator answers it
        return None


async def _verify_offsets(
    services: BrokerServices, txn_id: str, group_id: str, producer_id: int, epoch: int,
) -> tuple[ErrorCode | None, _OffsetsVerified | None]:
    """Ask the transaction coordinator whether the group's ``__consumer_offsets``
    partition is in the producer's ongoing transaction (Kafka 3.6+'s
    ``handleTxnCommitOffsets``), unless the producer's transaction is open there already:
    (the refusal, None), or (None, what the append must still hold). A group this broker
    does not coordinate is left to the group coordinator's answer."""
    verifier = services.txn_verifier
    group_coordinator = services.group_coordinator
    if verifier is None or group_coordinator.check_coordinator(group_id) != ErrorCode.none:
        return None, None
    partition = group_coordinator.partition_for(group_id)
    state = _offsets_producer_state(services, partition)
    if state is None:
        return ErrorCode.not_coordinator, None
    if state.has_ongoing_txn(producer_id, epoch):
        return None, _OffsetsVerified(services, partition, state, producer_id, epoch, None)
    guard = state.start_verification(producer_id)
    answers = await verifier.ask(txn_id, producer_id, epoch, [(OFFSETS_TOPIC, partition)])
    code = answers.get((OFFSETS_TOPIC, partition), ErrorCode.invalid_txn_state)
    if code != ErrorCode.none:
        state.end_verification(producer_id, guard)
        return translate_offset_commit(code), None
    return None, _OffsetsVerified(services, partition, state, producer_id, epoch, guard)


# -- DescribeTransactions / ListTransactions (KIP-664) ------------------------------------
def _start_time(timestamp_ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(timestamp_ms / 1000, tz=datetime.UTC)


async def describe_transactions(
    services: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    m = response_module("describe_transactions", ctx.api_version)
    coordinator = _coordinator(services)
    states = []
    steps = Steps()
    for txn_id in request.transactional_ids:
        await steps.tick()
        code, metadata = ErrorCode.coordinator_not_available, None
        if not allowed(services.authorizer, ctx, AclOperation.DESCRIBE,
                       ResourceType.TRANSACTIONAL_ID, txn_id):
            code = ErrorCode.transactional_id_authorization_failed
        elif coordinator is not None:
            code, metadata = coordinator.describe(txn_id)
        if metadata is None:
            # Kafka's error entry: the id and the code, every other field its default
            states.append(make(m.TransactionState, error_code=code, transactional_id=txn_id,
                               transaction_state="", transaction_timeout=ZERO_THROTTLE,
                               transaction_start_time=_start_time(0), producer_id=0,
                               producer_epoch=0, topics=()))
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(metadata.topic_partitions):
            by_topic.setdefault(topic, []).append(partition)
        # Only the topics the caller may Describe (Kafka removes the others).
        for topic in filter_refused(services.authorizer, ctx, AclOperation.DESCRIBE,
                                    ResourceType.TOPIC, set(by_topic)):
            del by_topic[topic]
        states.append(make(
            m.TransactionState, error_code=ErrorCode.none, transactional_id=txn_id,
            transaction_state=metadata.state.value,
            transaction_timeout=datetime.timedelta(milliseconds=metadata.txn_timeout_ms),
            transaction_start_time=_start_time(metadata.txn_start_timestamp),
            producer_id=metadata.producer_id, producer_epoch=metadata.producer_epoch,
            topics=tuple(make(m.TopicData, topic=t, partitions=tuple(ps))
                         for t, ps in by_topic.items())))
    return make(m.DescribeTransactionsResponse, throttle_time=ZERO_THROTTLE,
                transaction_states=tuple(states))


async def list_transactions(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    m = response_module("list_transactions", ctx.api_version)
    wanted_states = set(request.state_filters or ())
    known = {state.value for state in TransactionState}
    unknown = tuple(name for name in request.state_filters or () if name not in known)
    producer_ids = {int(p) for p in request.producer_id_filters or ()}
    duration = int(getattr(request, "duration_filter", -1))
    coordinator = _coordinator(services)
    code, found = (ErrorCode.coordinator_not_available, []) if coordinator is None else (
        coordinator.list_transactions())
    now = coordinator.time_ms() if coordinator is not None else 0
    out = []
    steps = Steps()
    for metadata in found:
        await steps.tick()
        if metadata.state is TransactionState.DEAD:
            continue
        if wanted_states and metadata.state.value not in wanted_states:
            continue
        if producer_ids and metadata.producer_id not in producer_ids:
            continue
        if duration >= 0 and (metadata.txn_start_timestamp < 0
                              or now - metadata.txn_start_timestamp < duration):
            continue
        if not allowed(services.authorizer, ctx, AclOperation.DESCRIBE,
                       ResourceType.TRANSACTIONAL_ID, metadata.transactional_id):
            continue
        out.append(make(m.TransactionState, transactional_id=metadata.transactional_id,
                        producer_id=metadata.producer_id,
                        transaction_state=metadata.state.value))
    return make(m.ListTransactionsResponse, throttle_time=ZERO_THROTTLE, error_code=code,
                unknown_state_filters=unknown, transaction_states=tuple(out))
