"""Authentication and authorization together, with real clients: the principal SASL or a
client certificate gives a connection is the one the ACL authorizer judges. alice may
write one topic, bob nothing; the principal of a certificate is mapped by
``ssl.principal.mapping.rules``. ``User:ANONYMOUS`` (the PLAINTEXT listener) is a super
user here only to set the test up."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from odradek.testing import RunningBroker

from ._security import Certs, bootstrap, confluent_settings, secure_broker

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningBroker, Certs, str]]:
    with secure_broker(tmp_path_factory.mktemp("security-authorization"), **{
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",
    }) as (broker, certs):
        topic = f"alice-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap(broker, "PLAINTEXT")})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        grant = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                           "User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW)
        for future in admin.create_acls([grant]).values():
            future.result(30)
        yield broker, certs, topic


def _produce(settings: dict[str, str], topic: str) -> list[Any]:
    """One record; the errors the client reported (empty: delivered)."""
    errors: list[Any] = []

    def delivered(error: KafkaError | None, _msg: Any) -> None:
        if error is not None:
            errors.append(error.code())

    producer = Producer({**settings, "message.timeout.ms": 10000,
                         "error_cb": lambda e: errors.append(e.code())})
    producer.produce(topic, b"x", on_delivery=delivered)
    if producer.flush(20):
        errors.append("not delivered")
    return errors


@pytest.mark.parametrize(("listener", "mechanism"), [
    ("SASL_PLAINTEXT", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
    ("SASL_SSL", "SCRAM-SHA-512"),
])
def test_the_sasl_user_is_the_principal_the_authorizer_judges(
    secured: tuple[RunningBroker, Certs, str], listener: str, mechanism: str,
) -> None:
    broker, certs, topic = secured
    target = bootstrap(broker, listener)
    alice = {"bootstrap.servers": target, **confluent_settings(certs, listener, mechanism)}
    bob = {"bootstrap.servers": target,
           **confluent_settings(certs, listener, mechanism, user="bob")}
    assert _produce(alice, topic) == []
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED in _produce(bob, topic)
    # Describe is implied by Write: alice sees the topic; bob sees none, and no answer
    # tells him whether it exists
    assert topic in AdminClient(alice).list_topics(timeout=20).topics
    assert topic not in AdminClient(bob).list_topics(timeout=20).topics


def test_a_client_certificate_is_judged_by_its_mapped_principal(
    secured: tuple[RunningBroker, Certs, str],
) -> None:
    broker, certs, topic = secured
    settings = {"bootstrap.servers": bootstrap(broker, "MTLS"),
                **confluent_settings(certs, "MTLS")}
    # the MTLS listener maps CN=alice,... to User:alice, which may write the topic
    assert _produce(settings, topic) == []
    other = f"{topic}-other"
    admin = AdminClient({"bootstrap.servers": bootstrap(broker, "PLAINTEXT")})
    admin.create_topics([NewTopic(other, 1, 1)])[other].result(30)
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED in _produce(settings, other)
