"""ElectLeaders (key 43, v0-2): move leadership back to the preferred replicas (KIP-183,
KIP-460), as Kafka's ``KafkaApis.handleElectLeaders`` with the ZooKeeper controller's
``KafkaController.onReplicaElection``.

How it works: the request names partitions, or none (v1+: ``null``, every partition the
metadata cache knows). Each one is answered on its own:

- not in the metadata cache: UNKNOWN_TOPIC_OR_PARTITION;
- otherwise the controller (``BrokerServices.elect_preferred``) runs one preferred
  election for all of them (:func:`~odradek.cluster.leader_election.decide_preferred`:
  the first replica of the assignment leads when it is live and in the ISR) and returns
  the partitions whose new state it wrote. The answer then waits, at most the request's
  ``timeout``, until this broker's metadata cache shows the preferred replica leading each
  of them (the written state has come back through the ZooKeeper notification): NONE, or
  REQUEST_TIMED_OUT if it has not by then, as Kafka's DelayedElectLeader purgatory;
- partitions not moved: ELECTION_NOT_NEEDED when the preferred replica leads already,
  else PREFERRED_LEADER_NOT_AVAILABLE (it is down or out of the ISR).

``election_type`` UNCLEAN (1, v1+; KIP-460) asks the controller
(``BrokerServices.elect_unclean``) for a leader for each partition whose leader is gone:
the first live ISR replica, else the first live replica even out of sync (whatever only
the lost ISR held is lost, as Kafka documents), whatever the topic's
``unclean.leader.election.enable``. A partition with a live leader is
ELECTION_NOT_NEEDED; one with no live replica ELIGIBLE_LEADERS_NOT_AVAILABLE; the answer
waits for the new leaders as above. Other election types are INVALID_REQUEST.

A broker that is not the controller answers NOT_CONTROLLER, per partition and (v1+) at the
top level, as a ZooKeeper-era Kafka broker whose controller is elsewhere did: admin clients
send ElectLeaders to the controller named in Metadata, and retry there after a refresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import time
from typing import TYPE_CHECKING, Any

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import HandlerRegistry, RequestContext, bind
from odradek.server.authorization import AclOperation, require_on_cluster
from odradek.server.handlers._entities import ZERO_THROTTLE, make, response_module

if TYPE_CHECKING:
    from odradek.cluster.metadata import ClusterMetadata
    from odradek.server.services import BrokerServices

VERSIONS = (0, 2)
PREFERRED = 0
UNCLEAN = 1

_NOT_NEEDED = "Leader election not needed for topic partition."
_UNKNOWN = "The partition does not exist."


def _not_available(tp: tuple[str, int]) -> str:
    return (f"Failed to elect leader for partition {tp[0]}-{tp[1]}: the preferred replica "
            "is not live or not in the ISR")


def register_elect_leaders(registry: HandlerRegistry, services: BrokerServices) -> None:
    registry.register(ApiKey.ELECT_LEADERS, VERSIONS[0], VERSIONS[1],
                      bind(elect_leaders, _Elections(services)))


class _Elections:
    """The services ElectLeaders uses, and the requests waiting for partition states: each
    waiter's event is set on every partition state change, and it re-checks its
    partitions then."""

    __slots__ = ("changed", "services")

    def __init__(self, services: BrokerServices) -> None:
        self.services = services
        self.changed: list[asyncio.Event] = []
        services.metadata.add_state_listener(self._on_states)

    def _on_states(self, _keys: list[tuple[str, int]]) -> None:
        for event in self.changed:
            event.set()

    async def wait_led(self, moved: dict[tuple[str, int], int],
                       deadline: float) -> set[tuple[str, int]]:
        """Those of ``moved`` this broker sees led by their new leader by ``deadline``
        (monotonic): the state written has come back through ZooKeeper."""
        metadata = self.services.metadata
        event = asyncio.Event()
        self.changed.append(event)
        try:
            while True:
                event.clear()
                done = {tp for tp, leader in moved.items()
                        if metadata.partition_state(*tp).leader == leader}
                remaining = deadline - time.monotonic()
                if len(done) == len(moved) or remaining <= 0:
                    return done
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), remaining)
        finally:
            self.changed.remove(event)


async def elect_leaders(elections: _Elections, ctx: RequestContext, request: Any) -> Any:
    require_on_cluster(elections.services.authorizer, ctx, AclOperation.ALTER)
    m = response_module("elect_leaders", ctx.api_version)
    metadata = elections.services.metadata
    tps = _wanted_partitions(metadata, request)
    election_type = int(getattr(request, "election_type", PREFERRED))
    timeout: datetime.timedelta = request.timeout
    deadline = time.monotonic() + max(0.0, timeout.total_seconds())
    results: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
    top = ErrorCode.none

    known = [tp for tp in tps if _preferred(metadata, tp) is not None]
    for tp in tps:
        if _preferred(metadata, tp) is None:
            results[tp] = (ErrorCode.unknown_topic_or_partition, _UNKNOWN)
    if election_type not in (PREFERRED, UNCLEAN):
        top = ErrorCode.invalid_request
        for tp in known:
            results[tp] = (ErrorCode.invalid_request, f"unknown election type {election_type}")
    elif known:
        top = await _elect(elections, election_type, known, deadline, timeout, results)
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), (code, message) in results.items():
        by_topic.setdefault(topic, []).append(make(
            m.PartitionResult, partition_id=partition, error_code=code,
            error_message=message))
    return make(
        m.ElectLeadersResponse, throttle_time=ZERO_THROTTLE, error_code=top,
        replica_election_results=tuple(
            make(m.ReplicaElectionResult, topic=topic, partition_result=tuple(parts))
            for topic, parts in by_topic.items()
        ),
    )


async def _elect(
    elections: _Elections, election_type: int, known: list[tuple[str, int]], deadline: float,
    timeout: datetime.timedelta, results: dict[tuple[str, int], tuple[ErrorCode, str | None]],
) -> ErrorCode:
    """Ask the controller, wait for the new leaders, and answer each partition of ``known``
    in ``results``; returns the top-level error."""
    services = elections.services
    try:
        moved = await _ask(services, election_type, known, deadline)
        timed_out = False
    except TimeoutError:
        moved, timed_out = {}, True
    if moved is None:
        for tp in known:
            results[tp] = (ErrorCode.not_controller, "this broker is not the "
                           f"controller (the controller is {services.controller_id()})")
        return ErrorCode.not_controller
    led = await elections.wait_led(moved, deadline)
    for tp in known:
        if tp in moved:
            results[tp] = ((ErrorCode.none, None) if tp in led else (
                ErrorCode.request_timed_out,
                f"the new leader of {tp[0]}-{tp[1]} was not known within "
                f"{timeout.total_seconds() * 1000:.0f} ms"))
        elif timed_out:
            results[tp] = (ErrorCode.request_timed_out, "the controller did not answer in time")
        elif (_leads(services.metadata, tp) if election_type == PREFERRED
              else _live_leader(services, tp)):
            results[tp] = (ErrorCode.election_not_needed, _NOT_NEEDED)
        elif election_type == PREFERRED:
            results[tp] = (ErrorCode.preferred_leader_not_available, _not_available(tp))
        else:
            results[tp] = (ErrorCode.eligible_leaders_not_available,
                           f"no replica of {tp[0]}-{tp[1]} is live")
    return ErrorCode.none


def _preferred(metadata: ClusterMetadata, tp: tuple[str, int]) -> int | None:
    info = metadata.get(tp[0])
    replicas = info.partitions.get(tp[1]) if info is not None else None
    return replicas[0] if replicas else None


def _leads(metadata: ClusterMetadata, tp: tuple[str, int]) -> bool:
    wanted = _preferred(metadata, tp)
    return wanted is not None and metadata.partition_state(*tp).leader == wanted


def _live_leader(services: BrokerServices, tp: tuple[str, int]) -> bool:
    leader = services.metadata.partition_state(*tp).leader
    return leader >= 0 and any(b[0] == leader for b in services.live_brokers())


def _wanted_partitions(metadata: ClusterMetadata, request: Any) -> list[tuple[str, int]]:
    if request.topic_partitions is None:
        return sorted((name, p) for name, info in metadata.topics.items()
                      for p in info.partitions)
    seen: dict[tuple[str, int], None] = {}
    for topic in request.topic_partitions:
        for p in topic.partitions:
            seen[(str(topic.topic), int(p))] = None
    return list(seen)


async def _ask(services: BrokerServices, election_type: int, tps: list[tuple[str, int]],
               deadline: float) -> dict[tuple[str, int], int] | None:
    """The controller's answer: the new leader of each partition it moved (None: not the
    controller; TimeoutError past the deadline)."""
    remaining = max(0.0, deadline - time.monotonic())
    if election_type == PREFERRED:
        moved = await asyncio.wait_for(services.elect_preferred(tps), remaining)
        if moved is None:
            return None
        return {tp: leader for tp in moved
                if (leader := _preferred(services.metadata, tp)) is not None}
    return await asyncio.wait_for(services.elect_unclean(tps), remaining)
