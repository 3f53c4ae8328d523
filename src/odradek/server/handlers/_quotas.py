"""The controller mutation quota as the topic handlers use it (KIP-599).

CreateTopics, CreatePartitions and DeleteTopics take a :class:`MutationQuota` for the
request's client (strict from the version that knows THROTTLING_QUOTA_EXCEEDED, permissive
below it), record the partitions they change, and answer with its throttle time while the
connection is muted for as long (see :mod:`odradek.server.client_quotas`). Metadata's
auto-creation records permissively, as Kafka's does.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from odradek.protocol.registry import RequestContext
from odradek.server.client_quotas import MutationQuota, principal_user
from odradek.server.handlers._entities import ZERO_THROTTLE

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

THROTTLED_MESSAGE = "The throttling quota has been exceeded."
PERMISSIVE = 1 << 15  # no version is strict


def mutation_quota(
    services: BrokerServices, ctx: RequestContext, strict_from: int
) -> MutationQuota | None:
    """The request's view of its client's controller mutation quota; None: none set."""
    manager = services.client_quotas.controller_mutation
    if not manager.active:
        return None
    user = principal_user(ctx.principal)
    if manager.quota(ctx.client_id, user) is None:
        return None
    return manager.for_request(ctx.client_id, ctx.api_version >= strict_from, user)


def throttle_ms_after(ctx: RequestContext, quota: MutationQuota | None) -> int:
    """The answer's throttle time in ms; the connection is muted for as long."""
    if quota is None:
        return 0
    throttle_ms = quota.throttle_time()
    if throttle_ms and ctx.channel is not None:
        ctx.channel.throttle(throttle_ms)
    return throttle_ms


def throttle_after(ctx: RequestContext, quota: MutationQuota | None) -> datetime.timedelta:
    throttle_ms = throttle_ms_after(ctx, quota)
    return datetime.timedelta(milliseconds=throttle_ms) if throttle_ms else ZERO_THROTTLE
