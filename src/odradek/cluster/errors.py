"""The cluster's errors, each answered with the Kafka error code it names.

Raised by the partition and the replica manager when a request reached the wrong broker,
names an unknown partition, or carries another leader epoch (Kafka's
``Partition.checkCurrentLeaderEpoch``, ``ReplicaManager.getPartitionOrException``). Their
base is :class:`~odradek.storage.errors.ApiError`.
"""

from __future__ import annotations

from odradek.storage.errors import ApiError

__all__ = [
    "FencedLeaderEpochError",
    "LeaderNotAvailableError",
    "NotEnoughReplicasError",
    "NotLeaderOrFollowerError",
    "UnknownLeaderEpochError",
    "UnknownTopicOrPartitionError",
]


class NotLeaderOrFollowerError(ApiError):
    kafka_error = "NOT_LEADER_OR_FOLLOWER"


class LeaderNotAvailableError(ApiError):
    kafka_error = "LEADER_NOT_AVAILABLE"


class NotEnoughReplicasError(ApiError):
    kafka_error = "NOT_ENOUGH_REPLICAS"


class FencedLeaderEpochError(ApiError):
    kafka_error = "FENCED_LEADER_EPOCH"


class UnknownLeaderEpochError(ApiError):
    kafka_error = "UNKNOWN_LEADER_EPOCH"


class UnknownTopicOrPartitionError(ApiError):
    kafka_error = "UNKNOWN_TOPIC_OR_PARTITION"
