"""The metadata store: a ZooKeeper-shaped interface with an embedded file-backed backend.

How it works: metadata lives in a tree of paths (Kafka's ZooKeeper layout:
``/brokers/ids/<id>``, ``/brokers/topics/<topic>``, ``/config/topics/<topic>``,
``/cluster/id``). Each node holds bytes and a version that every write bumps. Writes are
compare-and-set on the version (``expected_version=-1`` means unconditional), so two
writers never silently overwrite each other — the property the controller's epoch fencing
relies on. Ephemeral nodes vanish with their session (broker registration).
Watches fire once per change, as in ZooKeeper: a data watch set by :meth:`get` fires when the
node is created, changed or deleted (``get`` on a missing node still watches for its
creation, as ZooKeeper's ``exists`` does); a child watch set by :meth:`children` fires when a
child is added or removed. A watcher receives the watched path and re-reads: after a lost
connection a backend may fire a watcher spuriously so that nothing is missed.

Several writes can be applied atomically with :meth:`MetadataStore.multi` (ZooKeeper's
``multi``): a :class:`CheckVersion` op lets the controller fence its writes with the
controller epoch's version (Kafka's ``controllerEpochZkVersion``). Session listeners hear
:class:`SessionEvent` transitions (suspended, reconnected, expired, new session), which
is what broker registration and controller election need to recover from a lost session.

:class:`EmbeddedStore` keeps the tree in memory and persists the persistent nodes to one
JSON file, rewritten atomically (write, fsync, rename) on every change, mode 0600 (it
holds SCRAM credentials and the encrypted dynamic passwords; a wider mode found at start
is narrowed, with a warning, and a crashed writer's tmp file is removed). Metadata changes
are rare (topic creation, config changes), so one small file is simpler than a log. A
parent's sequential-node counter is kept (and persisted) with the parent, and goes with it
when it is deleted, as ZooKeeper's does; it counts sequential creates only, where
ZooKeeper's (the parent's cversion) counts every child added or removed: names increase in
creation order on both, without gaps on neither being promised. It
has one session that lives as long as the store, unless :meth:`EmbeddedStore.expire_session`
ends it (tests). :mod:`odradek.cluster.zk_store` implements the same interface over a real
ZooKeeper.

Request size: ZooKeeper closes the connection of a client whose request is longer than
its ``jute.maxbuffer`` (1 MB - 1 by default, on the server and on ZooKeeper 3.8's client),
and the broker's session is then suspended or lost. Every backend therefore refuses,
before sending it, a request whose path and data (a transaction's: all its ops) exceed the
limit less room for the request's header and ACLs (:meth:`MetadataStore.check_size`),
with :class:`RequestTooLargeError`; the embedded store refuses the same requests, so that
a client sees one behaviour. The limit is Kafka's: the ZooKeeper client's ``jute.maxbuffer``
JVM system property, which Kafka's start scripts pass in ``KAFKA_OPTS``
(``-Djute.maxbuffer=<bytes>``; :func:`jute_maxbuffer`). Handlers check what a client sends
against :meth:`MetadataStore.fits` first, to answer with their API's own error.
"""

from __future__ import annotations

import abc
import base64
import enum
import glob
import json
import logging
import os
import shlex
import stat
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from odradek.storage.files import TMP_SUFFIX, fsync_dir

log = logging.getLogger(__name__)

# The embedded store's file: the broker's user only (it holds credentials).
FILE_MODE = 0o600

Watcher = Callable[[str], None]


class SessionEvent(enum.Enum):
    """Transitions of the store's session (Kafka's ZooKeeperClient state change handlers)."""

    SUSPENDED = "suspended"      # connection lost; the session may still be alive
    RECONNECTED = "reconnected"  # connection back, same session: ephemerals intact
    EXPIRED = "expired"          # the session is gone, and with it our ephemeral nodes
    NEW_SESSION = "new_session"  # connected again with a new session: re-register


SessionListener = Callable[[SessionEvent], None]


class StoreError(Exception):
    """Base of the store's errors. Raised by :meth:`MetadataStore.multi`, ``failed_op`` is
    the index of the op that failed (the whole transaction was rolled back)."""

    failed_op: int | None = None


class NodeExistsError(StoreError):
    pass


class NoNodeError(StoreError):
    pass


class NotEmptyError(StoreError):
    """A non-recursive delete of a node that has children."""


class BadVersionError(StoreError):
    """A conditional write lost: the node changed since it was read."""


class ConnectionLossError(StoreError):
    """The request's outcome is unknown: the connection dropped before the answer came."""


class SessionExpiredError(StoreError):
    """The session expired while the request was pending."""


class StoreConnectionError(StoreError):
    """The store could not be reached (within ``zookeeper.connection.timeout.ms``)."""


class RequestTooLargeError(StoreError):
    """A request longer than one store request may be (``jute.maxbuffer``): not sent."""

    kafka_error = "INVALID_REQUEST"


#: ZooKeeper's default ``jute.maxbuffer`` (0xfffff, the server's and ZooKeeper 3.8's client's)
DEFAULT_JUTE_MAXBUFFER = 0xFFFFF
#: the ZooKeeper client's JVM system property (``-Djute.maxbuffer=`` in ``KAFKA_OPTS``)
JUTE_MAXBUFFER = "jute.maxbuffer"
#: room kept per request for what is not its ops: the request and reply headers, the
#: packet's framing
REQUEST_OVERHEAD = 1024
#: room kept per op (a request's one, or each of a transaction's) for what is not its
#: path and data: the multi header (type, done, error), the lengths, flags, version and
#: the ACLs' count (ZooKeeper's wire form: some 30 bytes; the ACLs' own bytes are the
#: ZooKeeper store's to count, by what it sets)
OP_OVERHEAD = 64
#: what an error message shows of a path (a hostile one may be megabytes long)
SHOWN_PATH_CHARS = 120


def jute_maxbuffer(environ: Mapping[str, str] | None = None) -> int:
    """The ``jute.maxbuffer`` of ``KAFKA_OPTS``' ``-D`` properties, else ZooKeeper's default.
    A value that is not a positive number is refused (the ZooKeeper client's would fail)."""
    opts = (os.environ if environ is None else environ).get("KAFKA_OPTS", "")
    value: str | None = None
    try:
        words = shlex.split(opts)
    except ValueError:
        words = []
    for word in words:
        if word.startswith(f"-D{JUTE_MAXBUFFER}="):
            value = word.partition("=")[2]
    if value is None:
        return DEFAULT_JUTE_MAXBUFFER
    try:
        size = int(value.strip(), 0)
    except ValueError:
        size = 0
    if size <= REQUEST_OVERHEAD:
        raise StoreError(f"-D{JUTE_MAXBUFFER}={value} in KAFKA_OPTS: not a number of bytes "
                         f"above {REQUEST_OVERHEAD}")
    return size


def shown_path(path: str) -> str:
    """``path`` for a message or a log line: cut after :data:`SHOWN_PATH_CHARS`."""
    if len(path) <= SHOWN_PATH_CHARS:
        return path
    return f"{path[:SHOWN_PATH_CHARS]}... ({len(path.encode())} bytes)"


@dataclass(frozen=True, slots=True)
class Node:
    data: bytes
    version: int
    ephemeral: bool = False
    # Session that owns an ephemeral node (ZooKeeper's Stat.ephemeralOwner); 0 otherwise.
    ephemeral_owner: int = 0
    # The node's path: for a sequential create, the name with its counter appended. Set on
    # what create, set and multi return and on what get reads; "" where unknown.
    path: str = ""
    # The transaction id that created the node (ZooKeeper's Stat.czxid), as ``get`` reads
    # it; 0 where unknown (what create returns, the embedded store). A broker's
    # registration's is its broker epoch (KIP-380).
    czxid: int = 0


# A sequential node's name is the requested path + the parent's counter in 10 digits
# (ZooKeeper's "%010d"): names then sort in creation order.
SEQUENCE_DIGITS = 10


def sequential_path(path: str, counter: int) -> str:
    return f"{path}{counter:0{SEQUENCE_DIGITS}d}"


# -- ops for multi() (ZooKeeper's multi / Kafka's MultiRequest) -------------------------------
@dataclass(frozen=True, slots=True)
class CheckVersion:
    """Fails the transaction unless ``path`` is at ``version``."""

    path: str
    version: int


@dataclass(frozen=True, slots=True)
class CreateOp:
    """Create ``path``; unlike :meth:`MetadataStore.create` the parent must exist. With
    ``sequential`` the parent's counter is appended to the name (the result's ``path``)."""

    path: str
    data: bytes
    ephemeral: bool = False
    sequential: bool = False


@dataclass(frozen=True, slots=True)
class SetOp:
    path: str
    data: bytes
    expected_version: int = -1


@dataclass(frozen=True, slots=True)
class DeleteOp:
    path: str
    expected_version: int = -1


Op = CheckVersion | CreateOp | SetOp | DeleteOp


def op_sizes(ops: Sequence[Op]) -> list[tuple[str, bytes]]:
    """Each op's (path, data), as :meth:`MetadataStore.check_size` counts them."""
    return [(op.path, op.data if isinstance(op, CreateOp | SetOp) else b"") for op in ops]


class MetadataStore(abc.ABC):
    #: the longest request the store sends (ZooKeeper's ``jute.maxbuffer``)
    max_request_bytes: int = DEFAULT_JUTE_MAXBUFFER

    def request_bytes(self, path: str, data: bytes = b"") -> int:
        """What one op (a request's, or one of a transaction's) on ``path`` with ``data``
        counts; a request counts :data:`REQUEST_OVERHEAD` more."""
        return len(path.encode()) + len(data) + OP_OVERHEAD

    def fits(self, path: str, data: bytes = b"") -> bool:
        """Whether a write of ``data`` to ``path`` is within :attr:`max_request_bytes`."""
        return REQUEST_OVERHEAD + self.request_bytes(path, data) <= self.max_request_bytes

    def check_size(self, ops: Sequence[tuple[str, bytes]]) -> None:
        """Refuse, with :class:`RequestTooLargeError`, a request of these (path, data) ops
        that is longer than :attr:`max_request_bytes`: ZooKeeper would close the
        connection (and the session would be suspended) rather than answer it."""
        size = REQUEST_OVERHEAD + sum(self.request_bytes(path, data) for path, data in ops)
        if size > self.max_request_bytes:
            raise RequestTooLargeError(
                f"{shown_path(ops[0][0])}: a request of {size} bytes is longer than one "
                f"metadata store request may be (jute.maxbuffer: {self.max_request_bytes} "
                "bytes); not sent")

    @abc.abstractmethod
    def get(self, path: str, watch: Watcher | None = None) -> Node | None: ...

    @abc.abstractmethod
    def children(self, path: str, watch: Watcher | None = None) -> list[str]:
        """Sorted child names; ``[]`` for a missing node, whose watch fires on creation."""

    def get_many(self, paths: Sequence[str], watch: Watcher | None = None) -> list[Node | None]:
        """:meth:`get` of each path (None for a missing one), in order. Backends that can
        pipeline requests (ZooKeeper) override it: one round trip's wait for them all."""
        return [self.get(p, watch) for p in paths]

    @abc.abstractmethod
    def create(
        self, path: str, data: bytes, ephemeral: bool = False, sequential: bool = False
    ) -> Node:
        """Create ``path`` (and missing parents). With ``sequential`` the name gets the
        parent's counter appended (:data:`SEQUENCE_DIGITS` digits, ZooKeeper's sequential
        nodes): the returned node's ``path`` is the one created."""

    @abc.abstractmethod
    def set(self, path: str, data: bytes, expected_version: int = -1) -> Node: ...

    @abc.abstractmethod
    def delete(self, path: str, expected_version: int = -1, recursive: bool = False) -> None: ...

    @abc.abstractmethod
    def multi(self, ops: Sequence[Op]) -> list[Node | None]:
        """Apply ``ops`` atomically: all of them or none. Returns, per op, the new node for
        a create or set and None for a check or delete; on failure raises the failing op's
        error (NoNodeError, NodeExistsError, BadVersionError, ...) with ``failed_op`` set."""

    @property
    @abc.abstractmethod
    def session_id(self) -> int:
        """The current session's id (the ``ephemeral_owner`` of the nodes it creates)."""

    @abc.abstractmethod
    def add_session_listener(self, listener: SessionListener) -> None:
        """Call ``listener`` on every :class:`SessionEvent` (not on the initial connect)."""

    @abc.abstractmethod
    def remove_session_listener(self, listener: SessionListener) -> None: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    # -- conveniences shared by every backend ---------------------------------------------
    def get_json(self, path: str) -> tuple[object, int] | None:
        node = self.get(path)
        if node is None:
            return None
        return json.loads(node.data), node.version

    def create_json(
        self, path: str, value: object, ephemeral: bool = False, sequential: bool = False
    ) -> Node:
        return self.create(path, json.dumps(value, sort_keys=True).encode(), ephemeral,
                           sequential)

    def set_json(self, path: str, value: object, expected_version: int = -1) -> Node:
        return self.set(path, json.dumps(value, sort_keys=True).encode(), expected_version)

    def update_config(self, path: str, change: Callable[[dict[str, str]], dict[str, str]],
                      remove_empty: bool = True) -> dict[str, str]:
        """Read-modify-write of a Kafka entity config node (``{"version": 1, "config":
        {...}}``): ``change`` gets the stored configs and returns the new ones, written
        compare-and-set on the version read: created if there was no node; with
        ``remove_empty``, removed if the configs are empty and the node has no children.
        When another writer came between, it reads and calls ``change`` again, up to
        :data:`UPDATE_ATTEMPTS` times, then raises :class:`BadVersionError`. An exception
        from ``change`` (a refused change) writes nothing. Returns the configs written."""
        return self.update_config_node(path, change, remove_empty)[0]

    def update_config_node(self, path: str,
                           change: Callable[[dict[str, str]], dict[str, str]],
                           remove_empty: bool = True) -> tuple[dict[str, str], int]:
        """:meth:`update_config`, also returning the version of the node written (-1:
        removed, or left absent), for a view that must not take an older one after it."""
        for _ in range(UPDATE_ATTEMPTS):
            node = self.get(path)
            new = change(config_of(node))
            try:
                if new or not remove_empty or (node is not None and self.children(path)):
                    data = config_node_data(new)
                    if node is None:
                        written = self.create(path, data)
                    else:
                        written = self.set(path, data, node.version)
                    return new, written.version
                if node is not None:
                    self.delete(path, node.version)
                return new, -1
            except (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError):
                continue  # another writer came between: read again
        raise BadVersionError(f"{path}: changed {UPDATE_ATTEMPTS} times while updating it")

    def set_or_create(self, path: str, data: bytes) -> Node:
        """Write ``path`` unconditionally, creating it (and its parents) if missing, as
        Kafka's ``ZkUtils.updatePersistentPath``: set; if there is no node, create; if
        another writer created it meanwhile, set again. Never a read then a create, which
        two writers can both pass."""
        try:
            return self.set(path, data)
        except NoNodeError:
            pass
        try:
            return self.create(path, data)
        except NodeExistsError:
            return self.set(path, data)


#: read-modify-write rounds of :meth:`MetadataStore.update_config` before it gives up
UPDATE_ATTEMPTS = 10


def config_node_data(configs: Mapping[str, str]) -> bytes:
    """A Kafka entity config node's data: ``{"version": 1, "config": {...}}``."""
    return json.dumps({"version": 1, "config": dict(configs)}, sort_keys=True).encode()


def config_of(node: Node | None) -> dict[str, str]:
    """The ``config`` map of a Kafka entity config node (empty: no node, or not one)."""
    if node is None or not node.data:
        return {}
    try:
        stored = json.loads(node.data).get("config") or {}
        return {str(k): str(v) for k, v in stored.items()}
    except (ValueError, TypeError, AttributeError):
        return {}


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user's counts)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (write, fsync, rename, fsync the directory, as
    :func:`odradek.storage.files.atomic_write`), the file readable by its owner only
    (:data:`FILE_MODE`) from its first byte on."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}{TMP_SUFFIX}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # a stale tmp file keeps its mode through O_CREAT
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except OSError as exc:  # a full disk: no tmp file left behind, and the error names it
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


class EmbeddedStore(MetadataStore):
    """In-process store persisted to ``path`` (a JSON file).

    Watchers and session listeners run synchronously in the thread that made the change,
    after the store's lock is released, so they may call the store again.
    """

    FORMAT_VERSION = 1

    def __init__(self, path: Path, max_request_bytes: int | None = None) -> None:
        self.path = path
        # the same bound as a ZooKeeperStore's: the same requests refused on both
        self.max_request_bytes = max_request_bytes or jute_maxbuffer()
        self._nodes: dict[str, Node] = {"/": Node(b"", 0, path="/")}
        # parent path -> the next sequential child's counter (ZooKeeper's parent cversion)
        self._sequences: dict[str, int] = {}
        self._data_watches: dict[str, list[Watcher]] = {}
        self._child_watches: dict[str, list[Watcher]] = {}
        self._session_listeners: list[SessionListener] = []
        self._session = 1
        self._lock = threading.RLock()
        self._tidy_tmp_files()
        if path.exists():
            self._tighten()
            self._load()

    def _tighten(self) -> None:
        """The file holds credentials (SCRAM's, the encrypted dynamic passwords): a mode
        wider than 0600, left by an older Odradek or a copy, is narrowed."""
        mode = stat.S_IMODE(self.path.stat().st_mode)
        if not mode & ~FILE_MODE:
            return
        try:
            os.chmod(self.path, FILE_MODE)
        except OSError as exc:  # not the file's owner, an immutable file: say so, go on
            log.warning("metadata file %s has mode %04o: readable by others than the broker's "
                        "user, and could not be narrowed to %04o: %s", self.path, mode,
                        FILE_MODE, exc.strerror or exc)
            return
        log.warning("metadata file %s had mode %04o: readable by others than the broker's "
                    "user, now %04o", self.path, mode, FILE_MODE)

    def _tidy_tmp_files(self) -> None:
        """A writer killed between its tmp file and the rename (an older Odradek's, written
        0644) left a copy of the credentials beside the file: one whose process is gone is
        removed, another narrowed to :data:`FILE_MODE` (its writer renames it soon)."""
        name = self.path.name
        for tmp in self.path.parent.glob(f"{glob.escape(name)}.*{TMP_SUFFIX}"):
            writer = tmp.name[len(name) + 1:-len(TMP_SUFFIX)].split("-", 1)[0]
            try:
                if writer.isdigit() and not _alive(int(writer)):
                    tmp.unlink(missing_ok=True)
                    log.warning("removed %s, left by a writer of the metadata file that is "
                                "gone (it may hold credentials)", tmp.name)
                elif stat.S_IMODE(tmp.stat().st_mode) & ~FILE_MODE:
                    os.chmod(tmp, FILE_MODE)
            except OSError as exc:  # gone meanwhile (renamed by its writer), or not ours
                log.debug("%s left as it is: %s", tmp.name, exc)

    def _load(self) -> None:
        try:
            doc = json.loads(self.path.read_text())
            if not isinstance(doc, dict):
                raise TypeError(f"a JSON {type(doc).__name__}, not an object")
            if doc.get("format") != self.FORMAT_VERSION:
                raise StoreError(f"{self.path}: unknown format {doc.get('format')!r}")
            for p, (data, version, *counter) in doc["nodes"].items():
                self._nodes[p] = Node(base64.b64decode(data), int(version), path=p)
                if counter:
                    self._sequences[p] = int(counter[0])
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"{self.path} is not a valid metadata file: {exc}") from exc

    def _persist(self) -> None:
        nodes: dict[str, list[object]] = {
            p: [base64.b64encode(n.data).decode(), n.version]
            for p, n in sorted(self._nodes.items())
            if not n.ephemeral and (p != "/" or p in self._sequences)
        }
        for p, counter in self._sequences.items():
            if p in nodes:
                nodes[p].append(counter)
        body = json.dumps({"format": self.FORMAT_VERSION, "nodes": nodes}, indent=1)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _write_private(self.path, body.encode())

    def _fire(self, table: dict[str, list[Watcher]], path: str) -> None:
        with self._lock:
            watchers = table.pop(path, [])
        for watcher in watchers:
            try:
                watcher(path)
            except Exception:
                log.exception("metadata watch on %s failed", path)

    def _fire_all(self, data_paths: Sequence[str], child_paths: Sequence[str]) -> None:
        for p in dict.fromkeys(data_paths):
            self._fire(self._data_watches, p)
        for p in dict.fromkeys(child_paths):
            self._fire(self._child_watches, p)

    @property
    def session_id(self) -> int:
        return self._session

    def get(self, path: str, watch: Watcher | None = None) -> Node | None:
        self.check_size([(path, b"")])
        with self._lock:
            if watch is not None:
                self._data_watches.setdefault(path, []).append(watch)
            return self._nodes.get(path)

    def children(self, path: str, watch: Watcher | None = None) -> list[str]:
        self.check_size([(path, b"")])
        with self._lock:
            if watch is not None:
                # A missing node has no children; the watch then waits for its creation.
                table = self._child_watches if path in self._nodes else self._data_watches
                table.setdefault(path, []).append(watch)
            return self._children(path)

    def _children(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        return sorted(
            p[len(prefix):] for p in self._nodes
            if p.startswith(prefix) and p != prefix and "/" not in p[len(prefix):]
        )

    def create(
        self, path: str, data: bytes, ephemeral: bool = False, sequential: bool = False
    ) -> Node:
        self.check_size([(path, data)])
        with self._lock:
            # Create missing parents, as kazoo's ``makepath=True`` does.
            parent = _parent(path)
            missing = []
            while parent not in self._nodes:
                missing.append(parent)
                parent = _parent(parent)
            if sequential:
                path = self._next_sequential(path)
            if path in self._nodes:
                raise NodeExistsError(path)
            for p in reversed(missing):
                self._nodes[p] = Node(b"", 0, path=p)
            node = self._new_node(path, data, ephemeral)
            self._nodes[path] = node
            if not ephemeral or missing or sequential:
                self._persist()
        made = [*reversed(missing), path]
        self._fire_all(made, [_parent(p) for p in made])
        return node

    def _new_node(self, path: str, data: bytes, ephemeral: bool) -> Node:
        return Node(data, 0, ephemeral, self._session if ephemeral else 0, path)

    def _next_sequential(self, path: str) -> str:
        """The name of a sequential create of ``path``; counts it in the parent (locked)."""
        parent = _parent(path)
        counter = self._sequences.get(parent, 0)
        self._sequences[parent] = counter + 1
        return sequential_path(path, counter)

    def _check(self, path: str, expected_version: int) -> Node:
        current = self._nodes.get(path)
        if current is None:
            raise NoNodeError(path)
        if expected_version != -1 and expected_version != current.version:
            raise BadVersionError(
                f"{path}: expected version {expected_version}, found {current.version}"
            )
        return current

    def set(self, path: str, data: bytes, expected_version: int = -1) -> Node:
        self.check_size([(path, data)])
        with self._lock:
            current = self._check(path, expected_version)
            node = Node(data, current.version + 1, current.ephemeral, current.ephemeral_owner,
                        path)
            self._nodes[path] = node
            if not node.ephemeral:
                self._persist()
        self._fire(self._data_watches, path)
        return node

    def delete(self, path: str, expected_version: int = -1, recursive: bool = False) -> None:
        self.check_size([(path, b"")])
        with self._lock:
            self._check(path, expected_version)
            prefix = path.rstrip("/") + "/"
            below = [p for p in self._nodes if p.startswith(prefix)]
            if below and not recursive:
                raise NotEmptyError(f"{path} has children")
            gone = [*below, path]
            for p in gone:
                del self._nodes[p]
                self._sequences.pop(p, None)
            self._persist()
        self._fire_all(gone, [_parent(p) for p in gone])

    def multi(self, ops: Sequence[Op]) -> list[Node | None]:
        if ops:
            self.check_size(op_sizes(ops))
        with self._lock:
            saved, saved_sequences = dict(self._nodes), dict(self._sequences)
            results: list[Node | None] = []
            try:
                for index, op in enumerate(ops):
                    try:
                        results.append(self._apply(op))
                    except StoreError as exc:
                        exc.failed_op = index
                        raise
            except StoreError:
                self._nodes, self._sequences = saved, saved_sequences
                raise
            self._persist()
        # Sequential creates changed the name they were given: the results hold the real one.
        paths = [r.path if r is not None else op.path for op, r in zip(ops, results, strict=True)]
        changed = [p for op, p in zip(ops, paths, strict=True) if not isinstance(op, CheckVersion)]
        added_or_removed = [
            p for op, p in zip(ops, paths, strict=True) if isinstance(op, CreateOp | DeleteOp)
        ]
        self._fire_all(changed, [_parent(p) for p in added_or_removed])
        return results

    def _apply(self, op: Op) -> Node | None:
        """One op of a transaction, under the lock (ZooKeeper's semantics: no makepath)."""
        if isinstance(op, CheckVersion):
            self._check(op.path, op.version)
            return None
        path = op.path
        if isinstance(op, CreateOp):
            if _parent(path) not in self._nodes:
                raise NoNodeError(_parent(path))
            if op.sequential:
                path = self._next_sequential(path)
            if path in self._nodes:
                raise NodeExistsError(path)
            node = self._new_node(path, op.data, op.ephemeral)
        elif isinstance(op, SetOp):
            current = self._check(path, op.expected_version)
            node = Node(op.data, current.version + 1, current.ephemeral, current.ephemeral_owner,
                        path)
        else:
            self._check(path, op.expected_version)
            if self._children(path):
                raise NotEmptyError(f"{path} has children")
            del self._nodes[path]
            self._sequences.pop(path, None)
            return None
        self._nodes[path] = node
        return node

    def add_session_listener(self, listener: SessionListener) -> None:
        with self._lock:
            self._session_listeners.append(listener)

    def remove_session_listener(self, listener: SessionListener) -> None:
        with self._lock:
            if listener in self._session_listeners:
                self._session_listeners.remove(listener)

    def _notify(self, event: SessionEvent) -> None:
        with self._lock:
            listeners = list(self._session_listeners)
        for listener in listeners:
            try:
                listener(event)
            except Exception:
                log.exception("session listener failed on %s", event.value)

    def expire_session(self) -> None:
        """End the session as a ZooKeeper expiry would, then start a new one: our ephemeral
        nodes vanish, listeners hear EXPIRED then NEW_SESSION, and every pending watcher
        fires once (a client re-reads after a new session, as with ZooKeeper)."""
        with self._lock:
            gone = [p for p, n in self._nodes.items() if n.ephemeral]
            for p in gone:
                del self._nodes[p]
            self._session += 1
            data, child = self._data_watches, self._child_watches
            self._data_watches, self._child_watches = {}, {}
        self._notify(SessionEvent.EXPIRED)
        self._notify(SessionEvent.NEW_SESSION)
        for table in (data, child):
            for path, watchers in table.items():
                for watcher in watchers:
                    try:
                        watcher(path)
                    except Exception:
                        log.exception("metadata watch on %s failed", path)

    def close(self) -> None:
        with self._lock:
            for p in [p for p, n in self._nodes.items() if n.ephemeral]:
                del self._nodes[p]
            self._data_watches.clear()
            self._child_watches.clear()
            self._session_listeners.clear()
