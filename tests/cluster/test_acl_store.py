"""AclStore (odradek.cluster.acl_store): Kafka's ZooKeeper layout of ACLs and their change
notifications, on both backends (the embedded store and a real ZooKeeper)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from odradek.cluster import acl_store
from odradek.cluster.acl_store import (
    EXTENDED_CHANGES,
    LITERAL_CHANGES,
    AclStore,
)
from odradek.cluster.store import EmbeddedStore, MetadataStore
from odradek.security.acl import (
    AclEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tests._deadlines import expired
from tests.cluster.conftest import Backend

ORDERS = ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL)
APPS = ResourcePattern(ResourceType.GROUP, "app-", PatternType.PREFIXED)
READ = AclEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
DENY_WRITE = AclEntry("User:bob", "10.0.0.1", AclOperation.WRITE, AclPermissionType.DENY)


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    started = time.monotonic()
    while not condition():
        assert not expired(started, timeout), "condition not met in time"
        time.sleep(0.01)


def _second(backend: Backend, first: MetadataStore) -> MetadataStore:
    """Another broker's view of the same tree (the embedded store is one process's)."""
    return first if backend.name == "embedded" else backend.open()


def test_kafkas_znodes_and_json(store: MetadataStore) -> None:
    acls = AclStore(store)
    assert acls.update(ORDERS, add=[READ, DENY_WRITE]) == {READ, DENY_WRITE}
    node = store.get("/kafka-acl/Topic/orders")
    assert node is not None
    doc = json.loads(node.data)
    assert doc["version"] == 1
    assert sorted(doc["acls"], key=lambda a: a["principal"]) == [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read",
         "host": "*"},
        {"principal": "User:bob", "permissionType": "Deny", "operation": "Write",
         "host": "10.0.0.1"},
    ]
    acls.update(APPS, add=[READ])
    assert store.get("/kafka-acl-extended/prefixed/Group/app-") is not None
    literal = store.children(LITERAL_CHANGES)
    extended = store.children(EXTENDED_CHANGES)
    assert [n[:12] for n in literal] == ["acl_changes_"]
    assert store.get(f"{LITERAL_CHANGES}/{literal[0]}").data == b"Topic:orders"  # type: ignore[union-attr]
    change = json.loads(store.get(f"{EXTENDED_CHANGES}/{extended[0]}").data)  # type: ignore[union-attr]
    assert change == {"version": 1, "resourceType": "Group", "name": "app-",
                      "patternType": "PREFIXED"}
    assert acls.read_all() == {ORDERS: {READ, DENY_WRITE}, APPS: {READ}}


def test_removing_the_last_entry_removes_the_node(store: MetadataStore) -> None:
    acls = AclStore(store)
    acls.update(ORDERS, add=[READ, DENY_WRITE])
    assert acls.update(ORDERS, remove=[READ]) == {DENY_WRITE}
    assert acls.update(ORDERS, remove=[DENY_WRITE]) == frozenset()
    assert store.get("/kafka-acl/Topic/orders") is None
    assert acls.read_all() == {}
    # a change that changes nothing writes nothing
    before = store.children(LITERAL_CHANGES)
    acls.update(ORDERS, remove=[READ])
    assert store.children(LITERAL_CHANGES) == before


def test_a_change_through_one_store_reaches_every_follower(backend: Backend) -> None:
    first = backend.open()
    writer = AclStore(first)
    writer.update(ORDERS, add=[READ])  # before the follower starts: read at once
    follower = AclStore(_second(backend, first))
    seen: dict[ResourcePattern, frozenset[AclEntry]] = {}
    lock = threading.Lock()

    def on_change(pattern: ResourcePattern, entries: frozenset[AclEntry]) -> None:
        with lock:
            seen[pattern] = entries

    def on_reload(acls: dict[ResourcePattern, frozenset[AclEntry]]) -> None:
        with lock:
            seen.clear()
            seen.update(acls)

    follower.follow(on_change, on_reload)
    assert seen == {ORDERS: {READ}}
    writer.update(APPS, add=[DENY_WRITE])
    wait_for(lambda: seen.get(APPS) == {DENY_WRITE})
    writer.update(ORDERS, remove=[READ])
    wait_for(lambda: seen.get(ORDERS) == frozenset())
    follower.close()


def test_a_new_session_reads_every_acl_again(backend: Backend) -> None:
    store = backend.open()
    acls = AclStore(store)
    reloads: list[dict[ResourcePattern, frozenset[AclEntry]]] = []
    acls.follow(lambda p, e: None, reloads.append)
    acls.update(ORDERS, add=[READ])
    backend.expire(store)
    wait_for(lambda: len(reloads) >= 2 and reloads[-1] == {ORDERS: {READ}})
    acls.close()


def test_old_notifications_are_removed(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At most ``acl_store.MAX_NOTIFICATIONS`` are kept, the newest. Counted at a cap of
    20: at 1,000 the test made 1,005 updates of one growing ACL (each rewrote the embedded
    store's file), 25 s of CPU on a whole run's machine for the same branch."""
    cap = 20
    monkeypatch.setattr(acl_store, "MAX_NOTIFICATIONS", cap)
    acls = AclStore(store)
    for i in range(cap + 5):
        acls.update(ORDERS, add=[AclEntry(f"User:u{i}", "*", AclOperation.READ,
                                          AclPermissionType.ALLOW)])
    names = store.children(LITERAL_CHANGES)
    assert len(names) == cap
    assert names[-1].endswith(f"{cap + 4:010d}")
    assert names[0].endswith(f"{5:010d}")  # the five oldest went


def test_acls_survive_a_restart_of_the_embedded_store(tmp_path: Path) -> None:
    path = tmp_path / "meta.json"
    store = EmbeddedStore(path)
    AclStore(store).update(APPS, add=[READ])
    store.close()
    again = EmbeddedStore(path)
    assert AclStore(again).read_all() == {APPS: {READ}}
    again.close()
