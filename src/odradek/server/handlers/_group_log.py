"""Waiting for the ISR of a group's ``__consumer_offsets`` partition (and of a
``__transaction_state`` partition for the transaction coordinator).

How it works: Kafka appends a group's records (its committed offsets, and the group
metadata stored when a generation's assignment is synced) with acks=-1
(``GroupMetadataManager.appendForGroup``) and answers the client only once the ISR of the
group's partition has them, within ``offsets.commit.timeout.ms``. So a coordinator
failover cannot lose what a client was told had been stored. The coordinator appends at
once; the handler then waits here for the partition's high watermark to pass the log end
offset it saw (the replica manager's produce purgatory, as an acks=all Produce).

Kafka 4's coordinator runtime answers every write once it is committed (DeleteGroups
too: its tombstones) and serves reads from the state as of the last committed offset;
here a read (ConsumerGroupDescribe) is built at once and answered once the partition's
ISR holds everything appended for the groups it shows when it was built
(:func:`groups_replicated`; the coordinator keeps the end offset of each group's newest
append), so neither shows a client what a failover could take back, and a group whose
records are replicated is shown at once while another group's appends wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING

from odradek.cluster.replica_manager import PendingAppend, Replication
from odradek.coordinator.offsets_topic import OFFSETS_TOPIC
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices


async def group_log_replicated(services: BrokerServices, group_id: str,
                               *group_ids: str, reads: bool = False) -> ErrorCode:
    """NONE once the ISR of ``group_id``'s partition holds everything appended to it so
    far (``reads``: only what was appended for ``group_id`` and ``group_ids``, of the
    same partition); NOT_COORDINATOR if this broker stopped leading it meanwhile;
    REQUEST_TIMED_OUT when the ISR did not catch up within ``offsets.commit.timeout.ms``."""
    manager = services.group_coordinator.manager
    partition = services.replica_manager.get_partition(
        OFFSETS_TOPIC, manager.partition_for(group_id))
    if partition is None or not partition.is_leader:
        return ErrorCode.none  # the append itself answered that
    required = partition.log.log_end_offset
    if reads:  # a group appended nothing since it was loaded or forgotten: all of it
        required = min(required, max(manager.appended_end.get(g, required)
                                     for g in (group_id, *group_ids)))
    append = PendingAppend(partition, partition.leader_epoch, required)
    timeout_s = int(services.config["offsets.commit.timeout.ms"]) / 1000
    [outcome] = await services.replica_manager.wait_for_replication([append], timeout_s)
    if outcome is Replication.REPLICATED:
        return ErrorCode.none
    if outcome is Replication.PENDING:
        return ErrorCode.request_timed_out
    return ErrorCode.not_coordinator


async def groups_replicated(services: BrokerServices, group_ids: Iterable[str], *,
                            reads: bool = False) -> dict[str, ErrorCode]:
    """:func:`group_log_replicated` for several groups, one wait per partition of
    ``__consumer_offsets`` (so bounded by the partition count): a timeout is
    COORDINATOR_NOT_AVAILABLE, which clients retry (Kafka's coordinator service maps a
    write's REQUEST_TIMED_OUT so). With ``reads``, each wait is for what was appended
    for those groups only: as Kafka's reads at the last committed offset, a group whose
    records the ISR holds is shown while others' appends wait for a lagging follower."""
    by_partition: dict[int, list[str]] = {}
    for group_id in dict.fromkeys(group_ids):
        partition = services.group_coordinator.partition_for(group_id)
        by_partition.setdefault(partition, []).append(group_id)
    outcomes = await asyncio.gather(*(group_log_replicated(services, *groups, reads=reads)
                                      for groups in by_partition.values()))
    results: dict[str, ErrorCode] = {}
    for groups, error in zip(by_partition.values(), outcomes, strict=True):
        if error == ErrorCode.request_timed_out:
            error = ErrorCode.coordinator_not_available
        results.update(dict.fromkeys(groups, error))
    return results


# Kafka's request.timeout.ms default: the transaction coordinator's acks=all wait
# (TransactionStateManager.appendTransactionToLog).
TXN_LOG_TIMEOUT_S = 30.0


async def txn_log_replicated(services: BrokerServices, topic: str, partition: int) -> ErrorCode:
    """NONE once the ISR of ``__transaction_state`` partition ``partition`` holds
    everything appended to it so far; NOT_COORDINATOR if this broker stopped leading it;
    REQUEST_TIMED_OUT when the ISR did not catch up in time."""
    hosted = services.replica_manager.get_partition(topic, partition)
    if hosted is None or not hosted.is_leader:
        return ErrorCode.not_coordinator
    log_end = hosted.log.log_end_offset
    if hosted.high_watermark >= log_end:
        return ErrorCode.none  # the ISR has it already (an ISR of one: on the append)
    append = PendingAppend(hosted, hosted.leader_epoch, log_end)
    [outcome] = await services.replica_manager.wait_for_replication([append],
                                                                    TXN_LOG_TIMEOUT_S)
    if outcome is Replication.REPLICATED:
        return ErrorCode.none
    if outcome is Replication.PENDING:
        return ErrorCode.request_timed_out
    return ErrorCode.not_coordinator
