"""KIP-848's regular-expression subscriptions with real clients over loopback.

confluent-kafka (librdkafka) with ``group.protocol=consumer`` sends a subscription
starting with ``^`` as ConsumerGroupHeartbeat's ``SubscribedTopicRegex`` (checked on the
coordinator's side: the member holds the expression and no names); the coordinator
resolves it (RE2, full match): the member consumes the matching topics, picks up a
matching topic created later without resubscribing (within Kafka's 10 s between two
refreshes of a group's expressions, plus heartbeats), never a topic that does not
match, and an expression RE2 refuses (a backreference, which librdkafka's own regex
engine lets through) is answered INVALID_REGULAR_EXPRESSION, fatal to the consumer.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from odradek.coordinator.consumer_group import REGEX_BATCH_REFRESH_INTERVAL_MS
from odradek.testing import RunningBroker, running_broker
from tests._deadlines import describe, expired
from tests.interop._broker import JavaRunner, java_client
from tests.interop.test_consumer_group_protocol import (
    BROKER_OVERRIDES,
    Member,
    poll_all,
    produce,
    wait_until,
)

pytestmark = pytest.mark.interop

# a new topic is picked up at the first heartbeat 10 s after the last refresh, then
# assigned over a few heartbeats (200 ms apart here)
PICKUP_S = REGEX_BATCH_REFRESH_INTERVAL_MS / 1000 + 15


@pytest.fixture(scope="module")
def rb() -> Iterator[RunningBroker]:
    with running_broker(overrides=BROKER_OVERRIDES) as broker:
        yield broker


def create(rb: RunningBroker, name: str, partitions: int) -> None:
    rb.call(rb.broker.metadata.create_topic, name, partitions, 1, {})


def test_a_regex_subscription_follows_the_matching_topics(rb: RunningBroker) -> None:
    uid = uuid.uuid4().hex[:6]
    eu, us, later, other = (f"orders-{uid}-eu", f"orders-{uid}-us", f"orders-{uid}-later",
                            f"payments-{uid}")
    for name in (eu, us, other):
        create(rb, name, 2)
        produce(rb.bootstrap, name, 2, 5)
    group = f"g-{uid}"
    regex = f"^orders-{uid}-.*"
    owners: dict[Any, str] = {}
    member = Member(rb.bootstrap, group, [regex], "m1", owners)
    tick = poll_all([member])
    wait_until(lambda: {t for t, _ in member.topics} == {eu, us}, 20,
               "the matching topics assigned", tick)
    wait_until(lambda: len(member.records) == 20, 20, "the records of both", tick)
    # on the wire: the expression (librdkafka puts each in parentheses, joined by "|"),
    # no names
    coordinator_group = rb.broker.group_coordinator.consumer_group(group)
    assert coordinator_group is not None
    (seen,) = coordinator_group.members.values()
    assert (seen.subscribed_topic_regex, seen.subscribed_topic_names) == (
        f"({regex})", frozenset())

    created = time.monotonic()
    create(rb, later, 1)
    produce(rb.bootstrap, later, 1, 3)
    create(rb, f"x-orders-{uid}-late", 1)  # matches only in part: a full match is needed
    wait_until(lambda: (later, 0) in member.topics, PICKUP_S,
               "the new matching topic picked up without resubscribing", tick)
    picked_up_s = time.monotonic() - created
    wait_until(lambda: len(member.records) == 23, 20, "the new topic's records", tick)
    assert {t for t, _ in member.topics} == {eu, us, later}
    assert all(t != other for t, _ in owners)
    member.commit()
    member.close()
    print(f"new matching topic assigned {picked_up_s:.1f} s after its creation")


def test_an_invalid_regex_is_refused(rb: RunningBroker) -> None:
    from confluent_kafka import Consumer, KafkaError

    uid = uuid.uuid4().hex[:6]
    consumer = Consumer({"bootstrap.servers": rb.bootstrap, "group.id": f"g-{uid}",
                         "group.protocol": "consumer"})
    errors: list[Any] = []
    # a backreference: librdkafka's own regex engine accepts it, RE2 does not
    regex = f"^orders-{uid}-(eu)\\1"
    consumer.subscribe([regex])
    try:
        started = time.monotonic()
        while not errors and not expired(started, 20):
            message = consumer.poll(0.1)
            if message is not None and message.error() is not None:
                errors.append(message.error())
        assert errors, f"no error for an invalid regex in {describe(started, 20)}"
        # librdkafka makes INVALID_REGULAR_EXPRESSION (128) a fatal error of the consumer,
        # named by its description of 128 (the broker's message itself is checked in
        # tests/server/test_consumer_group_apis.py)
        error = errors[0]
        assert error.code() == KafkaError._FATAL, error
        assert "Broker: The regular expression is not valid" in error.str(), error
        assert rb.broker.group_coordinator.consumer_group(f"g-{uid}") is None
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def java() -> JavaRunner:
    return java_client()


def test_a_java_pattern_subscription_picks_up_a_new_topic(rb: RunningBroker,
                                                          java: JavaRunner) -> None:
    """kafka-clients 3.9.1 with ``group.protocol=consumer`` resolves a ``Pattern``
    subscription itself (from its metadata, refreshed every ``metadata.max.age.ms``) and
    sends the names it matched: a matching topic created later joins its subscription."""
    uid = uuid.uuid4().hex[:6]
    first = f"jorders-{uid}-a"
    create(rb, first, 2)
    produce(rb.bootstrap, first, 2, 5)
    create(rb, f"jpayments-{uid}", 1)
    group = f"g-{uid}"
    coordinator = rb.broker.group_coordinator
    sent: list[tuple[Any, Any]] = []  # (names, regex) of the group's heartbeats
    original = coordinator.consumer_group_heartbeat

    async def heartbeat(group_id: str, request: Any, *args: Any, **kwargs: Any) -> Any:
        if group_id == group:
            sent.append((request.subscribed_topic_names, request.subscribed_topic_regex))
        return await original(group_id, request, *args, **kwargs)

    coordinator.consumer_group_heartbeat = heartbeat  # type: ignore[method-assign]
    try:
        res = java(rb.bootstrap, "pattern-consume", first, group, f"jorders-{uid}-.*", 10,
                   f"jorders-{uid}-b", 4, "-Xgroup.protocol=consumer",
                   "-Xmetadata.max.age.ms=500")
    finally:
        del coordinator.consumer_group_heartbeat  # type: ignore[method-assign]
    assert res.ok, res.describe()
    assert res.summary["topics"] == [first, f"jorders-{uid}-b"]
    assert res.summary["count"] == 14
    # names, never an expression
    assert {regex for _, regex in sent} <= {None, ""}
    assert (first, f"jorders-{uid}-b") in {tuple(sorted(n)) for n, _ in sent if n}
