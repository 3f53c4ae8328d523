"""AlterClientQuotas / DescribeClientQuotas (KIP-546) with user, client-id and user +
client-id entities (KIP-55), against an in-process broker: Kafka's validation errors, the
match types (exact, default, any) and ``strict``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.client.connection import BrokerConnection, request_class
from odradek.testing import RunningBroker, running_broker

EXACT, DEFAULT, ANY = 0, 1, 2
Entity = tuple[tuple[str, str | None], ...]


def send(rb: RunningBroker, request: Any) -> Any:
    async def go() -> Any:
        conn = await BrokerConnection.open(rb.bootstrap)
        try:
            return await conn.send(request)
        finally:
            await conn.close()

    return asyncio.run(go())


def alter(rb: RunningBroker, *entries: tuple[Entity, dict[str, float | None]],
          validate_only: bool = False) -> list[tuple[ErrorCode, str | None]]:
    """One entry per (entity, {key: value or None to remove}); each one's (error, message)."""
    req = request_class("alter_client_quotas", 1, "AlterClientQuotasRequest")
    entry = request_class("alter_client_quotas", 1, "EntryData")
    entity = request_class("alter_client_quotas", 1, "EntityData")
    op = request_class("alter_client_quotas", 1, "OpData")
    response = send(rb, req(entries=tuple(
        entry(entity=tuple(entity(entity_type=t, entity_name=n) for t, n in components),
              ops=tuple(op(key=k, value=v or 0.0, remove=v is None) for k, v in ops.items()))
        for components, ops in entries), validate_only=validate_only))
    return [(r.error_code, r.error_message) for r in response.entries]


def describe(rb: RunningBroker, *filters: tuple[str, int, str | None],
             strict: bool = False) -> Any:
    req = request_class("describe_client_quotas", 1, "DescribeClientQuotasRequest")
    comp = request_class("describe_client_quotas", 1, "ComponentData")
    return send(rb, req(components=tuple(comp(entity_type=t, match_type=m, match=n)
                                         for t, m, n in filters), strict=strict))


def entities(response: Any) -> dict[Entity, dict[str, float]]:
    assert response.error_code == ErrorCode.none, response.error_message
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity):
            {v.key: v.value for v in entry.values} for entry in response.entries}


ALICE: Entity = (("user", "alice"),)
ALICE_APP: Entity = (("user", "alice"), ("client-id", "app"))
DEFAULT_USER_APP: Entity = (("user", None), ("client-id", "app"))
APP: Entity = (("client-id", "app"),)


@pytest.fixture(scope="module")
def rb() -> Iterator[RunningBroker]:
    with running_broker() as broker:
        assert [c for c, _ in alter(
            broker, (ALICE, {"producer_byte_rate": 1000.0}),
            (ALICE_APP, {"consumer_byte_rate": 2000.0}),
            (DEFAULT_USER_APP, {"request_percentage": 50.0}),
            (APP, {"producer_byte_rate": 3000.0}))] == [ErrorCode.none] * 4
        yield broker


def test_every_kind_of_entity_is_stored_and_applied(rb: RunningBroker) -> None:
    assert entities(describe(rb)) == {
        ALICE: {"producer_byte_rate": 1000.0},
        ALICE_APP: {"consumer_byte_rate": 2000.0},
        DEFAULT_USER_APP: {"request_percentage": 50.0},
        APP: {"producer_byte_rate": 3000.0},
    }
    quotas = rb.broker.services.client_quotas
    assert quotas.produce.quota("app", "alice") == 1000.0  # /users/alice beats /clients/app
    assert quotas.produce.quota("app", "bob") == 3000.0
    assert quotas.fetch.quota("app", "alice") == 2000.0
    assert quotas.request.quota("app", "bob") == 50.0  # /users/<default>/clients/app


def test_describe_match_types_and_strict(rb: RunningBroker) -> None:
    assert set(entities(describe(rb, ("user", EXACT, "alice")))) == {ALICE, ALICE_APP}
    assert set(entities(describe(rb, ("user", EXACT, "alice"), strict=True))) == {ALICE}
    assert set(entities(describe(rb, ("user", DEFAULT, None)))) == {DEFAULT_USER_APP}
    assert set(entities(describe(rb, ("user", ANY, None)))) == {ALICE, ALICE_APP}
    assert set(entities(describe(rb, ("client-id", EXACT, "app")))) == {
        ALICE_APP, DEFAULT_USER_APP, APP}
    assert set(entities(describe(rb, ("client-id", EXACT, "app"), strict=True))) == {APP}
    assert set(entities(describe(rb, ("user", EXACT, "alice"),
                                 ("client-id", EXACT, "app"), strict=True))) == {ALICE_APP}
    assert entities(describe(rb, ("user", EXACT, "nobody"))) == {}


@pytest.mark.parametrize(("filters", "message"), [
    ((("group", EXACT, "g"),), "unknown entity type 'group'"),
    ((("user", EXACT, None),), "needs a name"),
    ((("user", DEFAULT, "x"),), "takes no name"),
    ((("user", 7, None),), "unknown match type 7"),
    ((("user", ANY, None), ("user", DEFAULT, None)), "duplicate filter component"),
    ((("ip", ANY, None), ("user", ANY, None)), "cannot be combined"),
])
def test_a_bad_filter_is_invalid_request(
    rb: RunningBroker, filters: tuple[tuple[str, int, str | None], ...], message: str
) -> None:
    response = describe(rb, *filters)
    assert response.error_code == ErrorCode.invalid_request
    assert message in response.error_message


@pytest.mark.parametrize(("entity", "ops", "message"), [
    ((("group", "g"),), {"producer_byte_rate": 1.0}, "unknown entity type 'group'"),
    ((("user", "a"), ("user", "b")), {"producer_byte_rate": 1.0}, "duplicate entity type"),
    ((("ip", "10.0.0.1"),), {"connection_creation_rate": 1.0}, "ip quotas"),
    ((("user", "a"), ("ip", "10.0.0.1")), {"producer_byte_rate": 1.0}, "ip quotas"),
    ((), {"producer_byte_rate": 1.0}, "names no component"),
    ((("user", "<default>"),), {"producer_byte_rate": 1.0}, "reserved"),
    ((("user", "a"),), {"SCRAM-SHA-256": 1.0}, "invalid quota key 'SCRAM-SHA-256'"),
    ((("user", "a"), ("client-id", None)), {"producer_byte_rate": 1.5}, "whole number"),
    ((("user", "a"),), {"request_percentage": -1.0}, "positive"),
])
def test_a_bad_entry_is_refused_alone(
    rb: RunningBroker, entity: Entity, ops: dict[str, float | None], message: str
) -> None:
    results = alter(rb, (entity, ops), (ALICE, {"producer_byte_rate": 1000.0}))
    (code, text), second = results
    assert code == ErrorCode.invalid_request and text is not None and message in text
    assert second == (ErrorCode.none, None)


def test_validate_only_and_removal(rb: RunningBroker) -> None:
    bob: Entity = (("user", "bob"), ("client-id", None))
    assert alter(rb, (bob, {"producer_byte_rate": 10.0}), validate_only=True) == [
        (ErrorCode.none, None)]
    assert bob not in entities(describe(rb))
    alter(rb, (bob, {"producer_byte_rate": 10.0}))
    assert entities(describe(rb, ("user", EXACT, "bob")))[bob] == {"producer_byte_rate": 10.0}
    assert rb.broker.services.client_quotas.produce.quota("any", "bob") == 10.0
    alter(rb, (bob, {"producer_byte_rate": None}))
    assert entities(describe(rb, ("user", EXACT, "bob"))) == {}
    assert rb.broker.services.client_quotas.produce.quota("any", "bob") is None


def test_an_alter_starts_from_the_stored_quotas(rb: RunningBroker) -> None:
    """A quota and a SCRAM credential stored behind this broker's view (another broker's
    writes, not heard of yet) are kept: the entry's operations apply to what the store
    holds, and two entries on one entity apply in order."""
    from odradek.cluster.store import config_of
    from odradek.cluster.user_credentials import set_scram_credential

    carol: Entity = (("user", "carol"),)
    md = rb.broker.metadata
    path = md.quota_path(("carol", None))
    rb.call(md.store.set_or_create, path,
            b'{"version": 1, "config": {"consumer_byte_rate": "500"}}')
    rb.call(set_scram_credential, md.store, "carol", "SCRAM-SHA-256", "salt=c2FsdA==")
    assert ("carol", None) not in md.client_quotas  # the view is behind
    assert alter(rb, (carol, {"producer_byte_rate": 10.0}),
                 (carol, {"request_percentage": 20.0})) == [(ErrorCode.none, None)] * 2
    stored = config_of(rb.call(md.store.get, path))
    assert stored == {"consumer_byte_rate": "500", "producer_byte_rate": "10",
                      "request_percentage": "20.0", "SCRAM-SHA-256": "salt=c2FsdA=="}
    assert entities(describe(rb, ("user", EXACT, "carol")))[carol] == {
        "consumer_byte_rate": 500.0, "producer_byte_rate": 10.0, "request_percentage": 20.0}
    alter(rb, (carol, {"consumer_byte_rate": None, "producer_byte_rate": None,
                       "request_percentage": None}))
    assert config_of(rb.call(md.store.get, path)) == {"SCRAM-SHA-256": "salt=c2FsdA=="}
