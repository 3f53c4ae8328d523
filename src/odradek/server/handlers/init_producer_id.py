"""InitProducerId (key 22), versions 0-5: producer ids for idempotent producers (KIP-98).

Follows Kafka's ``TransactionCoordinator.handleInitProducerId`` for a null transactional
id: every request gets a NEW producer id with epoch 0, whatever producer id and epoch it
carries (v3+, KIP-360). Kafka answers that way because a broker keeps no record of which
idempotent producer ids are alive, so it cannot check a claimed (id, epoch) before bumping
it; an idempotent producer bumps its epoch locally and asks for a new id only when the
epoch would overflow or its state is lost. A new id is always safe: no partition has state
for it, so its first batch is accepted at any sequence.

Transactions are not supported yet: a non-null transactional id is answered
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which the Java client (TransactionalIdAuthorization-
Exception) and librdkafka both treat as fatal and report in plain words, instead of
retrying forever as they would on COORDINATOR_NOT_AVAILABLE; UNSUPPORTED_VERSION would
wrongly suggest that another request version could work. Produce uses the same code for
transactional requests.

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
    manager = services.producer_ids
    m = response_module("init_producer_id", ctx.api_version)

    def answer(code: ErrorCode, producer_id: int = -1, epoch: int = -1) -> Any:
        return make(
            m.InitProducerIdResponse, throttle_time=ZERO_THROTTLE, error_code=code,
            producer_id=producer_id, producer_epoch=epoch,
        )

    if request.transactional_id is not None:
        return answer(ErrorCode.transactional_id_authorization_failed)
    authorizer = services.authorizer
    if authorizer is not None and not (
            allowed_on_cluster(authorizer, ctx, AclOperation.IDEMPOTENT_WRITE)
            or allowed_on_any(authorizer, ctx, AclOperation.WRITE, ResourceType.TOPIC)):
        return answer(ErrorCode.cluster_authorization_failed)
    try:
        if services.metadata.remote:  # a block claim is a ZooKeeper write
            producer_id = await asyncio.to_thread(manager.generate_producer_id)
        else:
            producer_id = manager.generate_producer_id()
    except ProducerIdsExhaustedError:
        log.error("producer ids are exhausted")
        return answer(ErrorCode.unknown_server_error)
    except StoreError as exc:
        log.warning("could not claim a block of producer ids: %s", exc)
        return answer(ErrorCode.coordinator_load_in_progress)
    return answer(ErrorCode.none, producer_id, 0)


