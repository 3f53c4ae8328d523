"""The small async Kafka client the broker and its tools need (replica fetcher, CLI)."""

from odradek.client.connection import BrokerConnection, ClientError
from odradek.client.partitioner import murmur2, partition_for_key

__all__ = ["BrokerConnection", "ClientError", "murmur2", "partition_for_key"]
