"""Request handlers, one module per API family; each exposes ``register_*(registry, ...)``.

A handler is a module-level function ``handler(services, ctx, request)``: it can be read,
called from a test and profiled on its own. ``register_*`` binds it to the broker's
:class:`~odradek.server.services.BrokerServices` once (``registry.bind``) and enters it in
the registry under its API key; :func:`register_all` fills the broker's registry, and
ApiVersions is derived from what it holds. Handlers see the broker only through
``BrokerServices``, never the broker module itself.
"""

from __future__ import annotations

from odradek.protocol.registry import HandlerRegistry
from odradek.server.handlers.acls import register_acls
from odradek.server.handlers.api_versions import register_api_versions
from odradek.server.handlers.client_quotas import register_client_quotas
from odradek.server.handlers.configs import register_configs
from odradek.server.handlers.delete_records import register_delete_records
from odradek.server.handlers.describe_cluster import register_describe_cluster
from odradek.server.handlers.describe_producers import register_describe_producers
from odradek.server.handlers.elect_leaders import register_elect_leaders
from odradek.server.handlers.fetch import register_fetch
from odradek.server.handlers.groups import register_groups
from odradek.server.handlers.init_producer_id import register_init_producer_id
from odradek.server.handlers.list_offsets import register_list_offsets
from odradek.server.handlers.metadata import register_metadata
from odradek.server.handlers.offset_for_leader_epoch import register_offset_for_leader_epoch
from odradek.server.handlers.offsets import register_offsets
from odradek.server.handlers.partitions import register_partitions
from odradek.server.handlers.produce import register_produce
from odradek.server.handlers.reassignments import register_reassignments
from odradek.server.handlers.sasl import register_sasl
from odradek.server.handlers.scram_credentials import register_scram_credentials
from odradek.server.handlers.topics import register_topics
from odradek.server.handlers.transactions import register_transactions
from odradek.server.handlers.txn_markers import register_txn_markers
from odradek.server.services import BrokerServices

__all__ = ["register_all"]


def register_all(registry: HandlerRegistry, services: BrokerServices) -> None:
    register_api_versions(registry)
    register_metadata(registry, services)
    register_produce(registry, services)
    register_fetch(registry, services)
    register_list_offsets(registry, services)
    register_topics(registry, services)
    register_init_producer_id(registry, services)
    register_transactions(registry, services)
    register_partitions(registry, services)
    register_configs(registry, services)
    register_client_quotas(registry, services)
    register_delete_records(registry, services)
    register_describe_cluster(registry, services)
    register_groups(registry, services)
    register_offsets(registry, services)
    register_offset_for_leader_epoch(registry, services)
    register_reassignments(registry, services)
    register_elect_leaders(registry, services)
    register_acls(registry, services)
    register_sasl(registry)
    register_scram_credentials(registry, services)
    register_txn_markers(registry, services)
    register_describe_producers(registry, services)
