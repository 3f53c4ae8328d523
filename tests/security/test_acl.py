"""The ACL model and the authorizer's decision (odradek.security.acl), as Kafka's
AclAuthorizer decides; the store is tested in tests/cluster/test_acl_store.py and the
handlers' checks in tests/server/test_authorization.py."""

from __future__ import annotations

import pytest

from odradek.security.acl import (
    CLUSTER_NAME,
    AclAuthorizer,
    AclBinding,
    AclBindingFilter,
    AclEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    parse_super_users,
)
from tests._own import own_cpu

Op = AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def lit(name: str, rtype: ResourceType = TOPIC) -> ResourcePattern:
    return ResourcePattern(rtype, name, PatternType.LITERAL)


def pre(name: str, rtype: ResourceType = TOPIC) -> ResourcePattern:
    return ResourcePattern(rtype, name, PatternType.PREFIXED)


def entry(principal: str, op: AclOperation, perm: AclPermissionType = ALLOW,
          host: str = "*") -> AclEntry:
    return AclEntry(principal, host, op, perm)


def authz(*acls: tuple[ResourcePattern, AclEntry], **kw: object) -> AclAuthorizer:
    a = AclAuthorizer(**kw)  # type: ignore[arg-type]
    by: dict[ResourcePattern, set[AclEntry]] = {}
    for pattern, e in acls:
        by.setdefault(pattern, set()).add(e)
    a.replace_all(by)
    return a


def can(a: AclAuthorizer, op: AclOperation, name: str, principal: str = ALICE,
        rtype: ResourceType = TOPIC, host: str = HOST) -> bool:
    return a.authorize(principal, host, op, rtype, name)


def test_no_acl_denies_unless_allow_everyone_if_no_acl_found() -> None:
    assert not can(authz(), Op.READ, "t")
    assert can(authz(allow_if_no_acl=True), Op.READ, "t")
    # an ACL on the topic, for anyone, makes the flag irrelevant for it
    a = authz((lit("t"), entry(BOB, Op.READ)), allow_if_no_acl=True)
    assert not can(a, Op.READ, "t")
    assert can(a, Op.READ, "other")


def test_allow_matches_principal_host_and_operation() -> None:
    a = authz((lit("t"), entry(ALICE, Op.READ, host=HOST)))
    assert can(a, Op.READ, "t")
    assert not can(a, Op.WRITE, "t")
    assert not can(a, Op.READ, "t", principal=BOB)
    assert not can(a, Op.READ, "t", host="10.0.0.2")
    assert not can(a, Op.READ, "t2")


def test_deny_wins_over_allow() -> None:
    a = authz((lit("t"), entry(ALICE, Op.ALL)), (lit("t"), entry(ALICE, Op.WRITE, DENY)))
    assert can(a, Op.READ, "t")
    assert not can(a, Op.WRITE, "t")
    # a DENY on the wildcard or a prefix wins over a literal ALLOW
    b = authz((lit("t"), entry(ALICE, Op.READ)), (lit("*"), entry("User:*", Op.READ, DENY)))
    assert not can(b, Op.READ, "t")
    c = authz((lit("team-a"), entry(ALICE, Op.READ)), (pre("team-"), entry(ALICE, Op.ALL, DENY)))
    assert not can(c, Op.READ, "team-a")


def test_implied_operations() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        a = authz((lit("t"), entry(ALICE, op)))
        assert can(a, Op.DESCRIBE, "t"), op
    a = authz((lit("t"), entry(ALICE, Op.ALTER_CONFIGS)))
    assert can(a, Op.DESCRIBE_CONFIGS, "t")
    assert not can(a, Op.ALTER, "t")
    # All allows everything; Read does not imply Write, Describe implies nothing
    assert can(authz((lit("t"), entry(ALICE, Op.ALL))), Op.DELETE, "t")
    assert not can(authz((lit("t"), entry(ALICE, Op.READ))), Op.WRITE, "t")
    assert not can(authz((lit("t"), entry(ALICE, Op.DESCRIBE))), Op.READ, "t")
    # a DENY of Read does not deny Describe (Kafka denies only the operation asked)
    d = authz((lit("t"), entry(ALICE, Op.DESCRIBE)), (lit("t"), entry(ALICE, Op.READ, DENY)))
    assert can(d, Op.DESCRIBE, "t") and not can(d, Op.READ, "t")


def test_wildcards_principal_host_and_resource() -> None:
    a = authz((lit("*"), entry("User:*", Op.READ)))
    assert can(a, Op.READ, "anything", principal=BOB, host="1.2.3.4")
    assert not can(a, Op.READ, "g", rtype=GROUP)  # per resource type
    b = authz((lit("t"), entry(ALICE, Op.READ, host=HOST)))
    assert not can(b, Op.READ, "t", host="::1")


def test_prefixed_patterns() -> None:
    a = authz((pre("team-a."), entry(ALICE, Op.WRITE)))
    assert can(a, Op.WRITE, "team-a.orders")
    assert can(a, Op.WRITE, "team-a.")
    assert not can(a, Op.WRITE, "team-b.orders")
    assert not can(a, Op.WRITE, "team-a")


def test_super_users() -> None:
    assert parse_super_users(" User:admin;User:broker ;;") == {"User:admin", "User:broker"}
    a = authz((lit("t"), entry("User:admin", Op.ALL, DENY)), super_users={"User:admin"})
    assert can(a, Op.DELETE, "t", principal="User:admin")
    assert can(a, Op.CLUSTER_ACTION, CLUSTER_NAME, principal="User:admin", rtype=CLUSTER)


def test_the_cache_is_cleared_by_any_change() -> None:
    a = authz()
    assert not can(a, Op.READ, "t")
    a.set_acls(lit("t"), {entry(ALICE, Op.READ)})
    assert can(a, Op.READ, "t")
    a.set_acls(pre("t"), {entry(ALICE, Op.READ, DENY)})
    assert not can(a, Op.READ, "t")
    a.set_acls(pre("t"), set())
    assert can(a, Op.READ, "t")
    a.replace_all({})
    assert not can(a, Op.READ, "t")


def test_authorize_any_resource_of_a_type() -> None:
    """Kafka's authorizeByResourceType (InitProducerId: Write on some topic)."""
    assert not authz().authorize_any(ALICE, HOST, Op.WRITE, TOPIC)
    assert authz(allow_if_no_acl=True).authorize_any(ALICE, HOST, Op.WRITE, TOPIC)
    a = authz((lit("t"), entry(ALICE, Op.WRITE)))
    assert a.authorize_any(ALICE, HOST, Op.WRITE, TOPIC)
    assert not a.authorize_any(BOB, HOST, Op.WRITE, TOPIC)
    denied = authz((lit("t"), entry(ALICE, Op.WRITE)), (lit("t"), entry(ALICE, Op.WRITE, DENY)))
    assert not denied.authorize_any(ALICE, HOST, Op.WRITE, TOPIC)
    by_prefix = authz((pre("app-"), entry(ALICE, Op.WRITE)),
                      (pre("app"), entry(ALICE, Op.WRITE, DENY)))
    assert not by_prefix.authorize_any(ALICE, HOST, Op.WRITE, TOPIC)
    wildcard_deny = authz((lit("t"), entry(ALICE, Op.WRITE)),
                          (lit("*"), entry(ALICE, Op.ALL, DENY)))
    assert not wildcard_deny.authorize_any(ALICE, HOST, Op.WRITE, TOPIC)
    assert authz(super_users={ALICE}).authorize_any(ALICE, HOST, Op.WRITE, TOPIC)


def test_authorized_operations_bit_field() -> None:
    a = authz((lit("t"), entry(ALICE, Op.READ)))
    bits = a.authorized_operations(ALICE, HOST, TOPIC, "t")
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert a.authorized_operations(BOB, HOST, TOPIC, "t") == 0


def _filter(rtype: ResourceType = ResourceType.ANY, name: str | None = None,
            ptype: PatternType = PatternType.ANY, principal: str | None = None,
            op: AclOperation = Op.ANY,
            perm: AclPermissionType = AclPermissionType.ANY) -> AclBindingFilter:
    return AclBindingFilter(rtype, name, ptype, principal, None, op, perm)


def test_filters_match_as_kafkas() -> None:
    a = authz((lit("orders"), entry(ALICE, Op.READ)), (lit("*"), entry(BOB, Op.READ)),
              (pre("ord"), entry(BOB, Op.WRITE)), (pre("x"), entry(BOB, Op.WRITE)),
              (lit("orders", GROUP), entry(ALICE, Op.READ)))
    assert len(a.bindings()) == 5
    assert len(a.bindings(_filter(TOPIC))) == 4
    assert len(a.bindings(_filter(name="orders"))) == 2  # ANY: exact name, both types
    # MATCH: every pattern covering the name (literal, wildcard, prefixes)
    match = a.bindings(_filter(TOPIC, "orders", PatternType.MATCH))
    assert {b.pattern for b in match} == {lit("orders"), lit("*"), pre("ord")}
    assert [b.pattern for b in a.bindings(_filter(TOPIC, "ord", PatternType.PREFIXED))] == [
        pre("ord")]
    assert len(a.bindings(_filter(principal=BOB, op=Op.WRITE))) == 2
    assert a.bindings(_filter(perm=DENY)) == []


def test_invalid_bindings() -> None:
    def reason(pattern: ResourcePattern, e: AclEntry) -> str | None:
        return AclBinding(pattern, e).invalid_reason()

    assert reason(lit("t"), entry(ALICE, Op.READ)) is None
    assert reason(lit(CLUSTER_NAME, CLUSTER), entry(ALICE, Op.ALTER)) is None
    assert reason(lit("other", CLUSTER), entry(ALICE, Op.ALTER)) is not None
    assert reason(lit(""), entry(ALICE, Op.READ)) is not None
    assert reason(pre("*"), entry(ALICE, Op.READ)) is not None
    assert reason(ResourcePattern(TOPIC, "t", PatternType.MATCH), entry(ALICE, Op.READ))
    assert reason(lit("t"), entry(ALICE, Op.ANY)) is not None
    assert reason(lit("t"), entry(ALICE, Op.READ, AclPermissionType.ANY)) is not None
    assert reason(lit("t"), entry("alice", Op.READ)) is not None
    assert reason(ResourcePattern(ResourceType.ANY, "t"), entry(ALICE, Op.READ)) is not None


def test_names_as_kafka_writes_them() -> None:
    assert Op.CLUSTER_ACTION.title == "ClusterAction"
    assert Op.from_title("IdempotentWrite") is Op.IDEMPOTENT_WRITE
    assert Op.from_title("describe-configs") is Op.DESCRIBE_CONFIGS
    assert ResourceType.TRANSACTIONAL_ID.title == "TransactionalId"
    assert ResourceType.from_title("transactional-id".replace("-", "")) is (
        ResourceType.TRANSACTIONAL_ID)
    assert AclPermissionType.from_title("Deny") is DENY


def test_a_cached_decision_costs_about_a_dictionary_lookup() -> None:
    """The hot paths (Produce, Fetch) ask once per topic per request."""
    a = authz(*[(lit(f"topic-{i}"), entry(f"User:u{i}", Op.WRITE)) for i in range(1000)],
              *[(pre(f"p{i}-"), entry(ALICE, Op.READ)) for i in range(100)])
    a.set_acls(lit("orders"), {entry(ALICE, Op.WRITE)})
    assert can(a, Op.WRITE, "orders")
    n = 200_000
    with own_cpu() as spent:
        for _ in range(n):
            a.authorize(ALICE, HOST, Op.WRITE, TOPIC, "orders")
    per_check = spent.seconds / n
    # about 0.5 µs on a 2-core CI machine; bounded loosely for a slower one
    assert per_check < 5e-6, f"{per_check * 1e6:.2f} µs of CPU per cached check"


@pytest.mark.parametrize("op", [Op.READ, Op.WRITE])
def test_an_uncached_decision_scans_only_the_patterns_that_can_match(op: AclOperation) -> None:
    a = authz(*[(lit(f"topic-{i}"), entry(ALICE, op)) for i in range(10_000)])
    assert can(a, op, "topic-9999")
    assert not can(a, op, "topic-10000")
