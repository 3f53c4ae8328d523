"""The MetadataStore contract, run against both backends (EmbeddedStore, ZooKeeperStore)."""

from __future__ import annotations

import threading

import pytest

from odradek.cluster.store import (
    UPDATE_ATTEMPTS,
    BadVersionError,
    CheckVersion,
    CreateOp,
    DeleteOp,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionEvent,
    SetOp,
    config_of,
)
from tests.cluster._zookeeper import wait_for
from tests.cluster.conftest import Backend


class Recorder:
    """Collects watcher calls and session events from whichever thread delivers them."""

    def __init__(self) -> None:
        self.calls: list[object] = []
        self._lock = threading.Lock()

    def __call__(self, item: object) -> None:
        with self._lock:
            self.calls.append(item)

    def count(self, item: object) -> int:
        with self._lock:
            return self.calls.count(item)


def test_create_get_set_delete(store: MetadataStore) -> None:
    assert store.get("/a/b") is None
    node = store.create("/a/b", b"one")  # parents are made
    assert (node.data, node.version, node.ephemeral) == (b"one", 0, False)
    assert store.get("/a") is not None
    assert store.children("/a") == ["b"]
    node = store.set("/a/b", b"two", expected_version=0)
    assert node.version == 1
    got = store.get("/a/b")
    assert got is not None and (got.data, got.version) == (b"two", 1)
    store.delete("/a/b", expected_version=1)
    assert store.get("/a/b") is None
    assert store.children("/a") == []


def test_errors(store: MetadataStore) -> None:
    store.create("/x", b"")
    with pytest.raises(NodeExistsError):
        store.create("/x", b"")
    with pytest.raises(NoNodeError):
        store.set("/missing", b"")
    with pytest.raises(NoNodeError):
        store.delete("/missing")
    with pytest.raises(BadVersionError):
        store.set("/x", b"", expected_version=7)
    with pytest.raises(BadVersionError):
        store.delete("/x", expected_version=7)
    store.create("/x/child", b"")
    with pytest.raises(NotEmptyError):
        store.delete("/x")


def test_children_of_missing_node_are_empty(store: MetadataStore) -> None:
    assert store.children("/nothing/here") == []


def test_recursive_delete(store: MetadataStore) -> None:
    for path in ("/r/a/1", "/r/a/2", "/r/b"):
        store.create(path, b"v")
    store.delete("/r", recursive=True)
    assert store.get("/r") is None
    assert store.get("/r/a/1") is None


def test_json_helpers(store: MetadataStore) -> None:
    store.create_json("/j", {"version": 1, "x": [1, 2]})
    assert store.get_json("/j") == ({"version": 1, "x": [1, 2]}, 0)
    store.set_json("/j", {"version": 2}, expected_version=0)
    assert store.get_json("/j") == ({"version": 2}, 1)


def test_set_or_create_creates_then_overwrites(store: MetadataStore) -> None:
    assert store.set_or_create("/sc/a/b", b"1").data == b"1"  # parents are made
    assert store.set_or_create("/sc/a/b", b"2").version == 1
    got = store.get("/sc/a/b")
    assert got is not None and got.data == b"2"


def test_set_or_create_when_another_writer_creates_the_node_first(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The node appears between the failed set and the create: the write still lands
    (a get-then-create would raise NodeExistsError here)."""
    create = store.create

    def raced(path: str, data: bytes, *args: bool) -> object:
        create(path, b"other writer")
        return create(path, data, *args)

    monkeypatch.setattr(store, "create", raced)
    store.set_or_create("/sc/raced", b"mine")
    got = store.get("/sc/raced")
    assert got is not None and (got.data, got.version) == (b"mine", 1)


def _config(store: MetadataStore, path: str) -> tuple[dict[str, str], int] | None:
    node = store.get(path)
    return None if node is None else (config_of(node), node.version)


def test_update_config_creates_changes_and_removes_the_node(store: MetadataStore) -> None:
    path = "/uc/users/alice"  # parents are made
    assert store.update_config(path, lambda c: {**c, "a": "1"}) == {"a": "1"}
    assert store.update_config(path, lambda c: {**c, "b": "2"}) == {"a": "1", "b": "2"}
    assert _config(store, path) == ({"a": "1", "b": "2"}, 1)
    store.create(f"{path}/clients", b"")  # a child keeps an emptied node
    assert store.update_config(path, lambda c: {}) == {}
    assert _config(store, path) == ({}, 2)
    store.delete(f"{path}/clients")
    store.update_config(path, lambda c: {})
    assert store.get(path) is None
    kept = "/uc/topics/t"
    store.update_config(kept, lambda c: {}, remove_empty=False)
    assert _config(store, kept) == ({}, 0)


def test_update_config_applies_the_change_again_after_a_write_between(
        store: MetadataStore) -> None:
    """Another writer's change landing between the read and the write (created, changed,
    removed) fails the compare-and-set; the change is applied to a fresh read, and
    neither is lost."""
    path = "/uc/raced"
    seen: list[dict[str, str]] = []
    behind = [
        lambda: store.create(path, b'{"version": 1, "config": {"other": "1"}}'),
        lambda: store.set(path, b'{"version": 1, "config": {"other": "2"}}'),
        lambda: store.delete(path),
    ]

    def change(current: dict[str, str]) -> dict[str, str]:
        seen.append(current)
        if behind:
            behind.pop(0)()  # another broker's write, after this read
        return {**current, "mine": "x"}

    assert store.update_config(path, change) == {"mine": "x"}
    assert seen == [{}, {"other": "1"}, {"other": "2"}, {}]
    assert _config(store, path) == ({"mine": "x"}, 0)


def test_update_config_gives_up_after_its_attempts(store: MetadataStore) -> None:
    path = "/uc/busy"
    store.update_config(path, lambda c: {"n": "0"})
    calls = 0

    def always_behind(current: dict[str, str]) -> dict[str, str]:
        nonlocal calls
        calls += 1
        store.set(path, f'{{"version": 1, "config": {{"n": "{calls}"}}}}'.encode())
        return {"n": "mine"}

    with pytest.raises(BadVersionError):
        store.update_config(path, always_behind)
    assert calls == UPDATE_ATTEMPTS
    assert _config(store, path) == ({"n": str(UPDATE_ATTEMPTS)}, UPDATE_ATTEMPTS)


def test_update_config_writes_nothing_when_the_change_is_refused(store: MetadataStore) -> None:
    path = "/uc/refused"
    store.update_config(path, lambda c: {"a": "1"})

    def refuse(current: dict[str, str]) -> dict[str, str]:
        raise ValueError("no")

    with pytest.raises(ValueError):
        store.update_config(path, refuse)
    assert _config(store, path) == ({"a": "1"}, 0)


def test_data_watch_fires_once(store: MetadataStore) -> None:
    store.create("/w", b"0")
    seen = Recorder()
    store.get("/w", watch=seen)
    store.set("/w", b"1")
    wait_for(lambda: seen.count("/w") == 1, what="the data watch")
    store.set("/w", b"2")  # one-shot: not re-armed
    store.create("/w-sync", b"")  # a later write, to order the check behind any late event
    assert seen.count("/w") == 1


def test_watch_on_missing_node_fires_on_creation(store: MetadataStore) -> None:
    seen = Recorder()
    assert store.get("/later", watch=seen) is None
    store.create("/later", b"x")
    wait_for(lambda: seen.count("/later") == 1, what="the creation watch")


def test_delete_fires_data_watch(store: MetadataStore) -> None:
    store.create("/d", b"x")
    seen = Recorder()
    store.get("/d", watch=seen)
    store.delete("/d")
    wait_for(lambda: seen.count("/d") == 1, what="the deletion watch")


def test_child_watch(store: MetadataStore) -> None:
    store.create("/p", b"")
    seen = Recorder()
    assert store.children("/p", watch=seen) == []
    store.create("/p/c1", b"")
    wait_for(lambda: seen.count("/p") == 1, what="the child watch (create)")
    assert store.children("/p", watch=seen) == ["c1"]
    store.delete("/p/c1")
    wait_for(lambda: seen.count("/p") == 2, what="the child watch (delete)")


def test_child_watch_on_missing_parent_fires_on_creation(store: MetadataStore) -> None:
    seen = Recorder()
    assert store.children("/ids", watch=seen) == []
    store.create("/ids/1", b"", ephemeral=True)
    wait_for(lambda: seen.count("/ids") >= 1, what="the parent's creation")
    assert store.children("/ids") == ["1"]


def test_ephemeral_owned_by_session(store: MetadataStore) -> None:
    node = store.create("/e", b"x", ephemeral=True)
    assert node.ephemeral and node.ephemeral_owner == store.session_id != 0
    got = store.get("/e")
    assert got is not None and got.ephemeral and got.ephemeral_owner == store.session_id
    persistent = store.get("/")
    assert persistent is not None and not persistent.ephemeral


def test_multi_applies_all(store: MetadataStore) -> None:
    store.create("/m", b"0")
    results = store.multi([
        CheckVersion("/m", 0),
        SetOp("/m", b"1", expected_version=0),
        CreateOp("/m/child", b"c"),
        CreateOp("/eph", b"e", ephemeral=True),
    ])
    assert results[0] is None
    assert results[1] is not None and results[1].version == 1
    assert results[2] is not None and results[2].data == b"c"
    assert results[3] is not None and results[3].ephemeral_owner == store.session_id
    store.multi([DeleteOp("/m/child"), SetOp("/m", b"2")])
    assert store.get("/m/child") is None


def test_multi_is_all_or_nothing(store: MetadataStore) -> None:
    store.create("/m", b"0")
    with pytest.raises(BadVersionError) as info:
        store.multi([CreateOp("/m2", b""), SetOp("/m", b"1"), CheckVersion("/m", 0)])
    assert info.value.failed_op == 2  # the set made it version 1 inside the transaction
    assert store.get("/m2") is None
    got = store.get("/m")
    assert got is not None and got.version == 0
    with pytest.raises(NoNodeError) as missing:
        store.multi([CreateOp("/no/parent", b"")])  # no makepath inside a transaction
    assert missing.value.failed_op == 0
    with pytest.raises(NodeExistsError):
        store.multi([CreateOp("/m", b"")])


def test_expiry_removes_ephemerals_and_starts_a_new_session(backend: Backend) -> None:
    store = backend.open()
    events = Recorder()
    store.add_session_listener(events)
    store.create("/eph", b"x", ephemeral=True)
    store.create("/keep", b"x")
    watched = Recorder()
    store.get("/keep", watch=watched)
    old = store.session_id
    backend.expire(store)
    wait_for(lambda: events.count(SessionEvent.NEW_SESSION) == 1, what="NEW_SESSION")
    assert events.count(SessionEvent.EXPIRED) == 1
    assert store.session_id != old
    assert store.get("/eph") is None
    assert store.get("/keep") is not None
    # A watch set in the old session is not silently lost: it fires once reconnected.
    wait_for(lambda: watched.count("/keep") == 1, what="the re-fired watch")
    node = store.create("/eph", b"y", ephemeral=True)
    assert node.ephemeral_owner == store.session_id


def test_multi_fires_the_watches_of_what_it_changed(store: MetadataStore) -> None:
    store.create("/c", b"0")
    store.create("/s", b"0")
    checked, data, kids = Recorder(), Recorder(), Recorder()
    store.get("/c", watch=checked)
    store.get("/s", watch=data)
    store.children("/", watch=kids)
    store.multi([CheckVersion("/c", 0), SetOp("/s", b"1"), CreateOp("/n", b"")])
    wait_for(lambda: data.count("/s") == 1 and kids.count("/") == 1, what="the watches")
    store.set("/c", b"1")  # the check did not consume /c's watch: this change fires it
    wait_for(lambda: checked.count("/c") == 1, what="the watch on the checked node")


def test_sequential_create_appends_the_parents_counter(store: MetadataStore) -> None:
    first = store.create("/n/change_", b"a", sequential=True)  # parents are made
    second = store.create("/n/change_", b"b", sequential=True)
    assert first.path == "/n/change_0000000000"
    assert second.path.startswith("/n/change_") and len(second.path) == len(first.path)
    assert second.path > first.path  # names sort in creation order
    assert store.children("/n") == [first.path[3:], second.path[3:]]
    got = store.get(second.path)
    assert got is not None and got.data == b"b" and got.path == second.path
    # Another parent has its own counter; a plain create returns its path too.
    assert store.create("/m/x_", b"", sequential=True).path == "/m/x_0000000000"
    assert store.create("/m/plain", b"").path == "/m/plain"


def test_sequential_create_in_multi(store: MetadataStore) -> None:
    store.create("/q", b"")
    store.create("/q/s", b"")
    results = store.multi([
        SetOp("/q/s", b"1"),
        CreateOp("/q/item_", b"x", sequential=True),
        CreateOp("/q/item_", b"y", sequential=True),
    ])
    a, b = results[1], results[2]
    assert a is not None and b is not None
    assert a.path.startswith("/q/item_") and b.path > a.path
    assert results[0] is not None and results[0].path == "/q/s"
    # A rolled-back transaction leaves no node behind.
    with pytest.raises(NoNodeError):
        store.multi([CreateOp("/q/item_", b"z", sequential=True), SetOp("/missing", b"")])
    assert sorted(store.children("/q")) == sorted(["s", a.path[3:], b.path[3:]])


def test_sequence_counter_goes_with_a_deleted_parent(store: MetadataStore) -> None:
    store.create("/r/s_", b"", sequential=True)
    store.create("/r/s_", b"", sequential=True)
    store.delete("/r", recursive=True)
    assert store.create("/r/s_", b"", sequential=True).path == "/r/s_0000000000"


def test_get_many(store: MetadataStore) -> None:
    for i in range(5):
        store.create(f"/g/{i}", str(i).encode())
    seen = Recorder()
    nodes = store.get_many(["/g/0", "/g/missing", "/g/4"], watch=seen)
    assert [n.data if n else None for n in nodes] == [b"0", None, b"4"]
    assert nodes[0] is not None and nodes[0].path == "/g/0"
    store.set("/g/4", b"changed")
    store.create("/g/missing", b"now")  # the missing node's creation is watched too
    wait_for(lambda: seen.count("/g/4") == 1 and seen.count("/g/missing") == 1,
             what="the watches set by get_many")
