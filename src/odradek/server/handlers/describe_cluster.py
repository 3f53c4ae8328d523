"""DescribeCluster (key 60, v0-2): this broker, the cluster id and the controller.

A single node is its own controller, so ``controller_id`` is this broker's id. Only the
BROKER endpoint type (1) is served; asking a broker for CONTROLLER endpoints (2, v1+) is
MISMATCHED_ENDPOINT_TYPE, as Kafka's brokers answer. With
``include_cluster_authorized_operations`` the answer carries the operations allowed on the
CLUSTER resource (``server/authorization.py``), else the "not requested" marker
``-2147483648``. The one broker is never fenced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import HandlerRegistry, RequestContext, bind
from odradek.server.authorization import NOT_REQUESTED, cluster_operations
from odradek.server.handlers._entities import ZERO_THROTTLE, make, response_module

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

VERSIONS = (0, 2)
ENDPOINT_BROKERS = 1


def register_describe_cluster(registry: HandlerRegistry, services: BrokerServices) -> None:
    registry.register(ApiKey.DESCRIBE_CLUSTER, VERSIONS[0], VERSIONS[1],
                      bind(describe_cluster, services))


async def describe_cluster(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    m = response_module("describe_cluster", ctx.api_version)
    endpoint_type = getattr(request, "endpoint_type", ENDPOINT_BROKERS)
    operations = (cluster_operations(services.authorizer, ctx)
                  if request.include_cluster_authorized_operations else NOT_REQUESTED)
    if endpoint_type != ENDPOINT_BROKERS:
        return make(m.DescribeClusterResponse, throttle_time=ZERO_THROTTLE,
                    error_code=ErrorCode.mismatched_endpoint_type,
                    error_message="the request was sent to an endpoint of type BROKER, "
                    f"but it asked for endpoint type {endpoint_type}",
                    endpoint_type=endpoint_type, cluster_id=services.metadata.cluster_id,
                    controller_id=-1, brokers=(),
                    cluster_authorized_operations=NOT_REQUESTED)
    brokers = tuple(make(m.DescribeClusterBroker, broker_id=b, host=host, port=port,
                         rack=rack, is_fenced=False)
                    for b, host, port, rack in services.live_brokers(ctx.listener_name))
    return make(m.DescribeClusterResponse, throttle_time=ZERO_THROTTLE,
                error_code=ErrorCode.none, error_message=None,
                endpoint_type=ENDPOINT_BROKERS, cluster_id=services.metadata.cluster_id,
                controller_id=services.controller_id(), brokers=brokers,
                cluster_authorized_operations=operations)


