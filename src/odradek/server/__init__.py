"""Network layer and request handlers of the broker.

Public surface of the network layer: :class:`~odradek.server.network.KafkaServer`,
:class:`~odradek.server.network.NetworkConfig`; handlers register on a
:class:`~odradek.protocol.registry.HandlerRegistry`.
"""

from odradek.server.network import KafkaConnection, KafkaServer, NetworkConfig

__all__ = ["KafkaConnection", "KafkaServer", "NetworkConfig"]
