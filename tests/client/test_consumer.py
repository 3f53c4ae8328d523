"""The group member's pure parts: Kafka's RangeAssignor and the subscription it sends."""

from __future__ import annotations

from odradek.client.consumer import encode_subscription, range_assign
from odradek.coordinator.group_protocol import decode_subscription


def test_range_gives_contiguous_ranges_the_first_members_one_more() -> None:
    plan = range_assign({"m-b": ("t",), "m-a": ("t",), "m-c": ("t",)}, {"t": 7})
    assert plan == {"m-a": {"t": [0, 1, 2]}, "m-b": {"t": [3, 4]}, "m-c": {"t": [5, 6]}}


def test_range_per_topic_only_among_its_subscribers() -> None:
    plan = range_assign({"a": ("x", "y"), "b": ("y",)}, {"x": 2, "y": 3})
    assert plan == {"a": {"x": [0, 1], "y": [0, 1]}, "b": {"y": [2]}}


def test_more_members_than_partitions_leaves_some_without() -> None:
    plan = range_assign({"a": ("t",), "b": ("t",), "c": ("t",)}, {"t": 2})
    assert plan == {"a": {"t": [0]}, "b": {"t": [1]}, "c": {}}


def test_the_subscription_is_consumer_protocol_v0() -> None:
    decoded = decode_subscription(encode_subscription(["one", "two"]))
    assert (decoded.version, decoded.topics, decoded.user_data) == (0, ("one", "two"), b"")
