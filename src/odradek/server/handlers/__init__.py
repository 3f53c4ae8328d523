"""Request handlers, one module per API family; each exposes ``register_*(registry, ...)``.

:func:`register_all` fills the broker's registry; ApiVersions is derived from what it holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.protocol.registry import HandlerRegistry

if TYPE_CHECKING:
    from odradek.server.broker import Broker


def register_all(registry: HandlerRegistry, broker: Broker) -> None:
    from odradek.server.handlers.api_versions import register_api_versions
    from odradek.server.handlers.fetch import register_fetch
    from odradek.server.handlers.init_producer_id import register_init_producer_id
    from odradek.server.handlers.list_offsets import register_list_offsets
    from odradek.server.handlers.metadata import register_metadata
    from odradek.server.handlers.produce import register_produce
    from odradek.server.handlers.topics import register_topics

    register_api_versions(registry)
    register_metadata(registry, broker)
    register_produce(registry, broker)
    register_fetch(registry, broker)
    register_list_offsets(registry, broker)
    register_topics(registry, broker)
    register_init_producer_id(registry, broker)
    from odradek.server.handlers.configs import register_configs
    from odradek.server.handlers.delete_records import register_delete_records
    from odradek.server.handlers.describe_cluster import register_describe_cluster
    from odradek.server.handlers.partitions import register_partitions

    register_partitions(registry, broker)
    register_configs(registry, broker)
    register_delete_records(registry, broker)
    register_describe_cluster(registry, broker)
    from odradek.server.handlers.groups import register_groups
    from odradek.server.handlers.offsets import register_offsets

    register_groups(registry, broker)
    register_offsets(registry, broker)
