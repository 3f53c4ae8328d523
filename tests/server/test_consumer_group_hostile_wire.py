"""KIP-848's ConsumerGroupHeartbeat over a real socket from hostile clients: a member
subscribing to more names than the cluster has topics (the coordinator walks the
cluster's topics instead of the names), and a member id reused as a static instance."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from odradek.testing import RunningBroker, running_broker
from tests.server._requests import one
from tests.server.test_consumer_group_apis import assigned, heartbeat, new_group, new_topic


@pytest.fixture(scope="module")
def rb() -> Iterator[RunningBroker]:
    with running_broker() as broker:
        yield broker


def test_a_subscription_of_many_names_is_served_by_the_topics_of_the_cluster(
        rb: RunningBroker) -> None:
    """20,000 names, two of them topics (one created after the subscription): the
    member gets the partitions of both, another member's heartbeats are answered as
    usual, and the two never hold a partition at once."""
    topic, topic_id = new_topic(rb, partitions=2)
    later = f"later-{uuid.uuid4().hex[:8]}"
    names = (*(f"none-{i}" for i in range(20_000)), topic, later)
    group = new_group()
    member = uuid.uuid4().hex
    joined = one(rb, heartbeat(group, member, 0, topics=names))
    assert joined.error_code == ErrorCode.none, joined.error_message
    assert assigned(joined) == {topic_id: {0, 1}}

    rb.call(rb.broker.metadata.create_topic, later, 3, 1, {})
    info = rb.broker.metadata.get(later)
    assert info is not None
    response = one(rb, heartbeat(group, member, joined.member_epoch, owned=None))
    assert response.error_code == ErrorCode.none, response.error_message
    assert assigned(response) == {topic_id: {0, 1}, info.topic_id: {0, 1, 2}}

    other = uuid.uuid4().hex
    second = one(rb, heartbeat(group, other, 0, topics=(topic,)))
    assert second.error_code == ErrorCode.none, second.error_message
    # the second waits for the first to give up partitions of the topic
    assert assigned(second) == {}
    first = one(rb, heartbeat(group, member, response.member_epoch,
                              owned=[(topic_id, [0, 1]), (info.topic_id, [0, 1, 2])]))
    kept = assigned(first)
    assert first.error_code == ErrorCode.none and kept.get(topic_id, set()) != {0, 1}
    first = one(rb, heartbeat(group, member, first.member_epoch,
                              owned=[(t, sorted(ps)) for t, ps in kept.items()]))
    assert first.error_code == ErrorCode.none
    second = one(rb, heartbeat(group, other, second.member_epoch, owned=[]))
    assert second.error_code == ErrorCode.none, second.error_message
    assert assigned(second) == {topic_id: {0, 1} - kept.get(topic_id, set())}


def test_a_heartbeat_subscribing_to_a_topic_it_may_not_describe_is_refused() -> None:
    """Kafka 4.0 (KAFKA-18813): Read on the group is not enough to subscribe to a topic;
    a heartbeat naming one the caller may not Describe is TOPIC_AUTHORIZATION_FAILED
    (joined, its assignment would tell the topic's id and partition count)."""
    from tests.server.test_authorization import (
        ADMIN,
        AUTHORIZER,
        GROUP_T,
        TOPIC_T,
        acl_creation,
        grant,
    )
    from tests.server.test_authorization import call as call_as

    dave, describe_op, read_op = "User:dave", 8, 3
    with running_broker(overrides={"authorizer.class.name": AUTHORIZER,
                                   "super.users": ADMIN}) as b:
        topic, topic_id = new_topic(b, 2)
        hidden, _ = new_topic(b, 3)
        group = new_group()
        grant(b, acl_creation(GROUP_T, group, dave, op=read_op),
              acl_creation(TOPIC_T, topic, dave, op=describe_op))
        response, codes = call_as(b, heartbeat(group, "m1", 0, topics=(topic, hidden)), dave)
        assert codes == {ErrorCode.topic_authorization_failed}
        assert response.assignment is None and response.member_epoch == 0
        response, codes = call_as(b, heartbeat(group, "m1", 0, topics=(topic,)), dave)
        assert codes == {ErrorCode.none} and assigned(response) == {topic_id: {0, 1}}
        # nor may a member add one later
        response, codes = call_as(b, heartbeat(group, "m1", response.member_epoch,
                                               topics=(topic, hidden), owned=None), dave)
        assert codes == {ErrorCode.topic_authorization_failed}
