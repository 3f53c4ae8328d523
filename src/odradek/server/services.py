"""What request handlers may use of the broker: a narrow set of services, not the broker.

How it works: the broker (``server/broker.py``) builds the parts — storage, metadata,
replica manager, coordinators — wires them together, and hands each handler module one
:class:`BrokerServices`. Handlers never import the broker module (an import-linter contract
in ``pyproject.toml`` holds them to it), so the broker's wiring can change, a cluster
broker can replace the single node, without touching a handler; and a handler's needs
are listed here, in one place, as Kafka's ``KafkaApis`` takes its managers in its
constructor.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from odradek.cluster.metadata import ClusterMetadata
from odradek.cluster.replica_manager import ReplicaManager
from odradek.coordinator.producer_ids import ProducerIdManager
from odradek.server.broker_stats import BrokerTopicStats
from odradek.server.client_quotas import ClientQuotas
from odradek.server.config import BrokerConfig
from odradek.server.dynamic_config import DynamicBrokerConfig
from odradek.server.fetch_session import FetchSessionCache
from odradek.server.purgatory import Purgatory

if TYPE_CHECKING:
    from odradek.cluster.acl_store import AclStore
    from odradek.cluster.reassignment import Reassignment
    from odradek.coordinator.group_coordinator import GroupCoordinator
    from odradek.coordinator.transaction_coordinator import TransactionCoordinator
    from odradek.security.acl import AclAuthorizer
    from odradek.server.tls_reload import TlsReloader
    from odradek.server.txn_verification import TxnVerifier

__all__ = ["BrokerServices", "ReassignmentStore"]


class ReassignmentStore(Protocol):
    """``/admin/reassign_partitions`` (cluster mode; blocking: call it off the loop)."""

    def read_reassignments(self) -> dict[tuple[str, int], Reassignment]: ...

    def add_reassignments(self, entries: Sequence[Reassignment]) -> None: ...


@dataclass(slots=True)
class BrokerServices:
    broker_id: int
    config: BrokerConfig
    metadata: ClusterMetadata
    """Topics, configs and partition states (the metadata cache)."""
    replica_manager: ReplicaManager
    """The partitions this broker hosts: the door to append, read and ask who leads."""
    fetch_purgatory: Purgatory
    """Fetches waiting for ``min_bytes``."""
    fetch_sessions: FetchSessionCache
    """Incremental fetch sessions (KIP-227)."""
    group_coordinator: GroupCoordinator
    producer_ids: ProducerIdManager
    dynamic_config: DynamicBrokerConfig
    """Dynamic broker configs layered over the static ones (Kafka's DynamicBrokerConfig)."""
    advertised_endpoint: Callable[[], tuple[str, int]]
    """This broker's advertised (host, port); the port is known once it listens."""
    live_brokers: Callable[..., list[tuple[int, str, int, str | None]]]
    """(id, host, port, rack) of every live broker (this one alone on a single node) on
    the listener named by the optional argument (a request's ``ctx.listener_name``: each
    client gets the endpoints of its own listener), by default the inter-broker one."""
    controller_id: Callable[[], int]
    """The controller's broker id (-1 while none is known)."""
    elect_preferred: Callable[[list[tuple[str, int]]], Awaitable[list[tuple[str, int]] | None]]
    """Ask this broker's controller to move leadership of the partitions to their
    preferred replicas; resolves to the partitions whose new state it wrote, or None when
    this broker is not the controller (ElectLeaders answers NOT_CONTROLLER)."""
    elect_unclean: Callable[
        [list[tuple[str, int]]], Awaitable[dict[tuple[str, int], int] | None]
    ]
    """Ask this broker's controller to give leaderless partitions a leader, out of the ISR
    if no ISR replica is live; resolves to the new leaders written (None: not the
    controller)."""
    reassignments: ReassignmentStore | None = None
    """Partition reassignments in progress (None on the single node: nothing can move)."""
    client_quotas: ClientQuotas = field(default_factory=ClientQuotas)
    """Client quotas (KIP-13, KIP-599): the managers handlers record into and throttle by."""
    tls_reloader: TlsReloader | None = None
    """The TLS listeners' keystores and truststores, reloadable at runtime (KIP-226)."""
    topic_stats: BrokerTopicStats | None = None
    """Bytes and messages in and out per topic (None: metrics.listener is unset)."""
    authorizer: AclAuthorizer | None = None
    """The ACL authorizer (None: ``authorizer.class.name`` unset, nothing is checked)."""
    acl_store: AclStore | None = None
    """Where CreateAcls and DeleteAcls write (None with no authorizer)."""
    transaction_coordinator: TransactionCoordinator | None = None
    """The transaction coordinator over the ``__transaction_state`` partitions led here."""
    txn_verifier: TxnVerifier | None = None
    """Asks the transaction coordinator whether a partition is in a producer's transaction
    before its first transactional append there (KIP-890; None:
    ``transaction.partition.verification.enable=false``)."""
    txn_offsets_completed: Callable[[int, bool, list[int]], None] | None = None
    """Told (producer id, committed, ``__consumer_offsets`` partitions) when WriteTxnMarkers
    wrote a transaction's markers there: the group coordinator makes the transaction's
    pending offsets visible or drops them (None: no transactional offsets)."""
