"""InitProducerId (key 22), versions 0-5: producer ids for idempotent producers (KIP-98).

Follows Kafka's ``TransactionCoordinator.handleInitProducerId`` for a null transactional
id: every request gets a NEW producer id with epoch 0, whatever producer id and epoch it
carries (v3+, KIP-360). Kafka answers that way because a broker keeps no record of which
idempotent producer ids are alive, so it cannot check a claimed (id, epoch) before bumping
it; an idempotent producer bumps its epoch locally and asks for a new id only when the
epoch would overflow or its state is lost. A new id is always safe: no partition has state
for it, so its first batch is accepted at any sequence.

A non-null transactional id goes to the transaction coordinator
(:meth:`~odradek.coordinator.transaction_coordinator.TransactionCoordinator.init_producer_id`):
a new producer id or an epoch bump, a fence of the previous incarnation
(CONCURRENT_TRANSACTIONS while its open transaction is aborted), KIP-360's expected
producer id and epoch (v3+; one of them without the other is INVALID_REQUEST), and
``transaction.timeout.ms`` checked against ``transaction.max.timeout.ms``
(INVALID_TRANSACTION_TIMEOUT). An empty transactional id is INVALID_REQUEST; versions
before 4 (KIP-588) get INVALID_PRODUCER_EPOCH instead of PRODUCER_FENCED. It needs Write on
the transactional id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED.

With an authorizer, an idempotent producer needs IdempotentWrite on the cluster or Write
on at least one topic (Kafka 3.x's ``authorizeByResourceType``), else
CLUSTER_AUTHORIZATION_FAILED.

A failure to claim a new block of ids from the metadata store (a transient store error) is
COORDINATOR_LOAD_IN_PROGRESS, which clients retry, as Kafka answers while its producer id
manager waits for a block.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from odradek.cluster.store import StoreError
from odradek.coordinator.producer_ids import ProducerIdsExhaustedError
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import HandlerRegistry, RequestContext, bind
from odradek.server.authorization import (
    AclOperation,
    ResourceType,
    allowed,
    allowed_on_any,
    allowed_on_cluster,
)
from odradek.server.handlers._entities import ZERO_THROTTLE, make, response_module

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

log = logging.getLogger(__name__)

VERSIONS = (0, 5)


def register_init_producer_id(registry: HandlerRegistry, services: BrokerServices) -> None:
    registry.register(ApiKey.INIT_PRODUCER_ID, VERSIONS[0], VERSIONS[1],
                      bind(init_producer_id, services))


async def init_producer_id(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    m = response_module("init_producer_id", ctx.api_version)

    def answer(code: ErrorCode, producer_id: int = -1, epoch: int = -1) -> Any:
        return make(
            m.InitProducerIdResponse, throttle_time=ZERO_THROTTLE, error_code=code,
            producer_id=producer_id, producer_epoch=epoch,
        )

    if request.transactional_id is not None:
        code, producer_id, epoch = await _transactional(services, ctx, request)
        return answer(code, producer_id, epoch)
    authorizer = services.authorizer
    if authorizer is not None and not (
            allowed_on_cluster(authorizer, ctx, AclOperation.IDEMPOTENT_WRITE)
            or allowed_on_any(authorizer, ctx, AclOperation.WRITE, ResourceType.TOPIC)):
        return answer(ErrorCode.cluster_authorization_failed)
    try:
        producer_id = await allocate_producer_id(services)
    except ProducerIdsExhaustedError:
        log.error("producer ids are exhausted")
        return answer(ErrorCode.unknown_server_error)
    except StoreError as exc:
        log.warning("could not claim a block of producer ids: %s", exc)
        return answer(ErrorCode.coordinator_load_in_progress)
    return answer(ErrorCode.none, producer_id, 0)




async def allocate_producer_id(services: BrokerServices) -> int:
    """A new producer id (a block claim is a ZooKeeper write: off the loop in a cluster)."""
    manager = services.producer_ids
    if services.metadata.remote:
        return await asyncio.to_thread(manager.generate_producer_id)
    return manager.generate_producer_id()


async def _transactional(
    services: BrokerServices, ctx: RequestContext, request: Any
) -> tuple[ErrorCode, int, int]:
    txn_id: str = request.transactional_id
    coordinator = services.transaction_coordinator
    if coordinator is None:
        return ErrorCode.coordinator_not_available, -1, -1
    if not txn_id:
        return ErrorCode.invalid_request, -1, -1
    if not allowed(services.authorizer, ctx, AclOperation.WRITE,
                   ResourceType.TRANSACTIONAL_ID, txn_id):
        return ErrorCode.transactional_id_authorization_failed, -1, -1
    producer_id = int(getattr(request, "producer_id", -1))
    producer_epoch = int(getattr(request, "producer_epoch", -1))
    if (producer_id == -1) != (producer_epoch == -1):
        return ErrorCode.invalid_request, -1, -1
    expected = None if producer_id == -1 else (producer_id, producer_epoch)
    timeout_ms = round(request.transaction_timeout.total_seconds() * 1000)
    try:
        result = await coordinator.init_producer_id(txn_id, timeout_ms, expected)
    except ProducerIdsExhaustedError:
        log.error("producer ids are exhausted")
        return ErrorCode.unknown_server_error, -1, -1
    except StoreError as exc:
        log.warning("could not claim a block of producer ids: %s", exc)
        return ErrorCode.coordinator_load_in_progress, -1, -1
    code = result.error
    if code == ErrorCode.producer_fenced and ctx.api_version < 4:
        code = ErrorCode.invalid_producer_epoch  # KIP-588
    return code, result.producer_id, result.producer_epoch
