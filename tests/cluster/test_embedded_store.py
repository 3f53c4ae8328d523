"""EmbeddedStore (odradek.cluster.store): ZooKeeper's node semantics in one process —
versions and compare-and-set, one-shot watches, ephemeral nodes — persisted to one file."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
from pathlib import Path

import pytest

from odradek.cluster.store import (
    BadVersionError,
    EmbeddedStore,
    NodeExistsError,
    NoNodeError,
    StoreError,
)


@pytest.fixture
def store(tmp_path: Path) -> EmbeddedStore:
    return EmbeddedStore(tmp_path / "meta.json")


def test_create_get_set_delete_with_versions(store: EmbeddedStore) -> None:
    assert store.get("/a") is None
    created = store.create("/a", b"one")
    assert (created.data, created.version, created.ephemeral) == (b"one", 0, False)
    assert store.get("/a") == created
    assert store.set("/a", b"two").version == 1
    assert store.set("/a", b"three", expected_version=1).version == 2
    node = store.get("/a")
    assert node is not None and (node.data, node.version) == (b"three", 2)
    store.delete("/a", expected_version=2)
    assert store.get("/a") is None


def test_conditional_writes_lose_to_a_newer_version(store: EmbeddedStore) -> None:
    store.create("/a", b"x")
    store.set("/a", b"y")
    with pytest.raises(BadVersionError):
        store.set("/a", b"z", expected_version=0)
    with pytest.raises(BadVersionError):
        store.delete("/a", expected_version=0)
    node = store.get("/a")
    assert node is not None and (node.data, node.version) == (b"y", 1)


def test_missing_and_existing_nodes(store: EmbeddedStore) -> None:
    store.create("/a", b"")
    with pytest.raises(NodeExistsError):
        store.create("/a", b"again")
    with pytest.raises(NoNodeError):
        store.set("/b", b"")
    with pytest.raises(NoNodeError):
        store.delete("/b")
    assert isinstance(NoNodeError("x"), StoreError)


def test_parents_made_and_children_listed(store: EmbeddedStore) -> None:
    store.create("/brokers/topics/b", b"")
    store.create("/brokers/topics/a", b"")
    store.create("/brokers/topics/a/partitions", b"")
    parent = store.get("/brokers/topics")
    assert parent is not None and parent.data == b""
    assert store.children("/brokers/topics") == ["a", "b"]  # direct children, sorted
    assert store.children("/brokers/topics/") == ["a", "b"]
    assert store.children("/brokers") == ["topics"]
    assert store.children("/") == ["brokers"]
    assert store.children("/nothing") == []


def test_delete_with_children_needs_recursive(store: EmbeddedStore) -> None:
    store.create("/t/a/b", b"")
    store.create("/tx", b"")  # shares a prefix, not a child
    with pytest.raises(StoreError, match="children"):
        store.delete("/t")
    store.delete("/t", recursive=True)
    assert store.get("/t/a/b") is None and store.get("/t/a") is None
    assert store.get("/tx") is not None


def test_json_conveniences(store: EmbeddedStore) -> None:
    assert store.get_json("/j") is None
    store.create_json("/j", {"b": 1, "a": [1, 2]})
    node = store.get("/j")
    assert node is not None and node.data == b'{"a": [1, 2], "b": 1}'  # keys sorted
    store.set_json("/j", {"a": 2}, expected_version=0)
    assert store.get_json("/j") == ({"a": 2}, 1)


def test_data_watch_fires_once(store: EmbeddedStore) -> None:
    store.create("/a", b"")
    fired: list[str] = []
    store.get("/a", watch=fired.append)
    store.set("/a", b"1")
    store.set("/a", b"2")
    assert fired == ["/a"]  # one-shot, as in ZooKeeper
    store.get("/a", watch=fired.append)
    store.delete("/a")
    assert fired == ["/a", "/a"]


def test_child_watch_fires_once(store: EmbeddedStore) -> None:
    fired: list[str] = []
    store.children("/brokers/ids", watch=fired.append)
    store.create("/brokers/ids/1", b"")
    store.create("/brokers/ids/2", b"")
    assert fired == ["/brokers/ids"]
    store.children("/brokers/ids", watch=fired.append)
    store.set("/brokers/ids/1", b"x")  # data of a child: not a children change
    assert fired == ["/brokers/ids"]
    store.delete("/brokers/ids/1")
    assert fired == ["/brokers/ids", "/brokers/ids"]


def test_failing_watch_does_not_break_the_write(store: EmbeddedStore) -> None:
    def broken(_path: str) -> None:
        raise RuntimeError("watcher bug")

    fired: list[str] = []
    store.create("/a", b"")
    store.get("/a", watch=broken)
    store.get("/a", watch=fired.append)
    assert store.set("/a", b"1").version == 1
    assert fired == ["/a"]


def test_watch_may_read_the_store(store: EmbeddedStore) -> None:
    """Watches run after the lock is released: re-reading and re-watching works."""
    store.create("/a", b"0")
    seen: list[bytes] = []

    def watcher(path: str) -> None:
        node = store.get(path, watch=watcher)
        assert node is not None
        seen.append(node.data)

    store.get("/a", watch=watcher)
    store.set("/a", b"1")
    store.set("/a", b"2")
    assert seen == [b"1", b"2"]


def test_persisted_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "meta.json"
    store = EmbeddedStore(path)
    store.create("/a/b", b"\x00\xffbinary")
    store.set("/a/b", b"\x00\xffbinary!")
    store.create("/gone", b"")
    store.delete("/gone")
    store.close()
    again = EmbeddedStore(path)
    node = again.get("/a/b")
    assert node is not None and (node.data, node.version) == (b"\x00\xffbinary!", 1)
    assert again.get("/gone") is None
    assert again.children("/a") == ["b"]
    assert json.loads(path.read_text())["format"] == EmbeddedStore.FORMAT_VERSION


def test_ephemeral_nodes_not_persisted(tmp_path: Path) -> None:
    path = tmp_path / "meta.json"
    store = EmbeddedStore(path)
    node = store.create("/brokers/ids/0", b"me", ephemeral=True)
    assert node.ephemeral
    assert store.set("/brokers/ids/0", b"me too").ephemeral
    assert not path.exists() or "/brokers/ids/0" not in json.loads(path.read_text())["nodes"]
    store.create("/kept", b"")
    assert "/brokers/ids/0" not in json.loads(path.read_text())["nodes"]
    assert EmbeddedStore(path).get("/brokers/ids/0") is None  # another session
    store.close()  # the session ends: its ephemeral nodes go
    assert store.get("/brokers/ids/0") is None
    assert store.get("/kept") is not None


@pytest.mark.parametrize("content", [
    b"{not json",
    b"\xff\xfe",
    b'{"format": 99, "nodes": {}}',
    b'{"format": 1}',
    b'{"format": 1, "nodes": {"/a": ["!!not base64", 0]}}',
    b'{"format": 1, "nodes": {"/a": ["", "zero"]}}',
    b'{"format": 1, "nodes": {"/a": 5}}',
    b"[]",
    b'"text"',
])
def test_damaged_file_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "meta.json"
    path.write_bytes(content)
    with pytest.raises(StoreError, match=r"meta\.json"):
        EmbeddedStore(path)


def test_sequence_counter_persists_with_the_parent(tmp_path: Path) -> None:
    path = tmp_path / "meta.json"
    store = EmbeddedStore(path)
    assert store.create("/n/c_", b"", sequential=True).path == "/n/c_0000000000"
    store.create("/top_", b"", sequential=True)  # the root's counter persists too
    store.close()
    again = EmbeddedStore(path)
    assert again.create("/n/c_", b"", sequential=True).path == "/n/c_0000000001"
    assert again.create("/top_", b"", sequential=True).path == "/top_0000000001"
    assert again.children("/n") == ["c_0000000000", "c_0000000001"]


def test_the_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    old = os.umask(0o022)  # a usual umask: the file would be 0644 without an explicit mode
    try:
        store = EmbeddedStore(tmp_path / "meta.json")
        store.create("/config", b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "meta.json").stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]  # no tmp file left


def test_a_wider_mode_is_narrowed_at_start_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "meta.json"
    EmbeddedStore(path).create("/a", b"x")
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="odradek.cluster.store"):
        reopened = EmbeddedStore(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "had mode 0644" in caplog.text
    node = reopened.get("/a")
    assert node is not None and node.data == b"x"
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="odradek.cluster.store"):
        EmbeddedStore(path)
    assert "had mode" not in caplog.text  # 0600 already: nothing said


def test_a_mode_that_cannot_be_narrowed_is_a_warning_not_a_failed_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # chmod refused (EPERM: here an immutable file, as a file of another owner would be):
    # the broker still starts, and says the file stays readable by others
    path = tmp_path / "meta.json"
    EmbeddedStore(path).create("/a", b"x")
    path.chmod(0o644)
    subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        with caplog.at_level(logging.WARNING, logger="odradek.cluster.store"):
            reopened = EmbeddedStore(path)
        node = reopened.get("/a")
        assert node is not None and node.data == b"x"
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert "could not be narrowed to 0600" in caplog.text


def test_a_tmp_file_a_crashed_writer_left_is_removed_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A writer killed between writing its tmp file and renaming it (an older Odradek's,
    written 0644 by atomic_write) leaves a copy of the credentials next to the file: the
    next start removes it (its process is gone), and narrows any other writer's first."""
    path = tmp_path / "meta.json"
    EmbeddedStore(path).create("/a", b"x")
    # a pid that names no process: the highest pid Linux hands out, plus one
    dead = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    stale = tmp_path / f"meta.json.{dead}-140000000000.tmp"
    stale.write_bytes(b'{"scram": "credentials"}')
    stale.chmod(0o644)
    live = tmp_path / f"meta.json.{os.getpid()}-1.tmp"  # a live writer's: kept, narrowed
    live.write_bytes(b"{}")
    live.chmod(0o644)
    other = tmp_path / "other.json.1-1.tmp"  # not this file's
    other.write_bytes(b"{}")
    with caplog.at_level(logging.WARNING, logger="odradek.cluster.store"):
        EmbeddedStore(path)
    assert not stale.exists()
    assert stat.S_IMODE(live.stat().st_mode) == 0o600
    assert other.exists()
    assert f"removed {stale.name}" in caplog.text
