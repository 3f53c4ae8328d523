"""The metadata store: a ZooKeeper-shaped interface with an embedded file-backed backend.

How it works: metadata lives in a tree of paths (Kafka's ZooKeeper layout:
``/brokers/ids/<id>``, ``/brokers/topics/<topic>``, ``/config/topics/<topic>``,
``/cluster/id``). Each node holds bytes and a version that every write bumps. Writes are
compare-and-set on the version (``expected_version=-1`` means unconditional), so two
writers never silently overwrite each other — the property the controller's epoch fencing
relies on in seed 000. Ephemeral nodes vanish with their session (broker registration).
Watches fire once per change, as in ZooKeeper.

:class:`EmbeddedStore` keeps the tree in memory and persists the persistent nodes to one
JSON file, rewritten atomically (write, fsync, rename) on every change. Metadata changes
are rare (topic creation, config changes), so one small file is simpler than a log. The
ZooKeeper backend (kazoo) implements the same :class:`MetadataStore` in the cluster issue.
"""

from __future__ import annotations

import abc
import base64
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from odradek.storage.files import atomic_write

log = logging.getLogger(__name__)

Watcher = Callable[[str], None]


class StoreError(Exception):
    pass


class NodeExistsError(StoreError):
    pass


class NoNodeError(StoreError):
    pass


class BadVersionError(StoreError):
    """A conditional write lost: the node changed since it was read."""


@dataclass(frozen=True, slots=True)
class Node:
    data: bytes
    version: int
    ephemeral: bool = False


class MetadataStore(abc.ABC):
    @abc.abstractmethod
    def get(self, path: str, watch: Watcher | None = None) -> Node | None: ...

    @abc.abstractmethod
    def children(self, path: str, watch: Watcher | None = None) -> list[str]: ...

    @abc.abstractmethod
    def create(self, path: str, data: bytes, ephemeral: bool = False) -> Node: ...

    @abc.abstractmethod
    def set(self, path: str, data: bytes, expected_version: int = -1) -> Node: ...

    @abc.abstractmethod
    def delete(self, path: str, expected_version: int = -1, recursive: bool = False) -> None: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    # -- conveniences shared by every backend ---------------------------------------------
    def get_json(self, path: str) -> tuple[object, int] | None:
        node = self.get(path)
        if node is None:
            return None
        return json.loads(node.data), node.version

    def create_json(self, path: str, value: object, ephemeral: bool = False) -> Node:
        return self.create(path, json.dumps(value, sort_keys=True).encode(), ephemeral)

    def set_json(self, path: str, value: object, expected_version: int = -1) -> Node:
        return self.set(path, json.dumps(value, sort_keys=True).encode(), expected_version)


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


class EmbeddedStore(MetadataStore):
    """In-process store persisted to ``path`` (a JSON file)."""

    FORMAT_VERSION = 1

    def __init__(self, path: Path) -> None:
        self.path = path
        self._nodes: dict[str, Node] = {"/": Node(b"", 0)}
        self._data_watches: dict[str, list[Watcher]] = {}
        self._child_watches: dict[str, list[Watcher]] = {}
        self._lock = threading.RLock()
        if path.exists():
            self._load()

    def _load(self) -> None:
        try:
            doc = json.loads(self.path.read_text())
            if not isinstance(doc, dict):
                raise TypeError(f"a JSON {type(doc).__name__}, not an object")
            if doc.get("format") != self.FORMAT_VERSION:
                raise StoreError(f"{self.path}: unknown format {doc.get('format')!r}")
            for p, (data, version) in doc["nodes"].items():
                self._nodes[p] = Node(base64.b64decode(data), int(version))
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"{self.path} is not a valid metadata file: {exc}") from exc

    def _persist(self) -> None:
        nodes = {
            p: [base64.b64encode(n.data).decode(), n.version]
            for p, n in sorted(self._nodes.items())
            if not n.ephemeral and p != "/"
        }
        body = json.dumps({"format": self.FORMAT_VERSION, "nodes": nodes}, indent=1)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, body.encode())

    def _fire(self, table: dict[str, list[Watcher]], path: str) -> None:
        for watcher in table.pop(path, []):
            try:
                watcher(path)
            except Exception:
                log.exception("metadata watch on %s failed", path)

    def get(self, path: str, watch: Watcher | None = None) -> Node | None:
        with self._lock:
            if watch is not None:
                self._data_watches.setdefault(path, []).append(watch)
            return self._nodes.get(path)

    def children(self, path: str, watch: Watcher | None = None) -> list[str]:
        with self._lock:
            if watch is not None:
                self._child_watches.setdefault(path, []).append(watch)
            prefix = path.rstrip("/") + "/"
            return sorted(
                p[len(prefix):] for p in self._nodes
                if p.startswith(prefix) and p != prefix and "/" not in p[len(prefix):]
            )

    def create(self, path: str, data: bytes, ephemeral: bool = False) -> Node:
        with self._lock:
            if path in self._nodes:
                raise NodeExistsError(path)
            # Create missing parents, as kazoo's ``makepath=True`` does.
            parent = _parent(path)
            missing = []
            while parent not in self._nodes:
                missing.append(parent)
                parent = _parent(parent)
            for p in reversed(missing):
                self._nodes[p] = Node(b"", 0)
            node = Node(data, 0, ephemeral)
            self._nodes[path] = node
            if not ephemeral:
                self._persist()
        self._fire(self._child_watches, _parent(path))
        return node

    def set(self, path: str, data: bytes, expected_version: int = -1) -> Node:
        with self._lock:
            current = self._nodes.get(path)
            if current is None:
                raise NoNodeError(path)
            if expected_version != -1 and expected_version != current.version:
                raise BadVersionError(
                    f"{path}: expected version {expected_version}, found {current.version}"
                )
            node = Node(data, current.version + 1, current.ephemeral)
            self._nodes[path] = node
            if not node.ephemeral:
                self._persist()
        self._fire(self._data_watches, path)
        return node

    def delete(self, path: str, expected_version: int = -1, recursive: bool = False) -> None:
        with self._lock:
            current = self._nodes.get(path)
            if current is None:
                raise NoNodeError(path)
            if expected_version != -1 and expected_version != current.version:
                raise BadVersionError(path)
            prefix = path.rstrip("/") + "/"
            below = [p for p in self._nodes if p.startswith(prefix)]
            if below and not recursive:
                raise StoreError(f"{path} has children")
            for p in below:
                del self._nodes[p]
            del self._nodes[path]
            self._persist()
        self._fire(self._data_watches, path)
        self._fire(self._child_watches, _parent(path))

    def close(self) -> None:
        with self._lock:
            for p in [p for p, n in self._nodes.items() if n.ephemeral]:
                del self._nodes[p]
