"""The metadata store over a real Apache ZooKeeper (Kafka's ZooKeeperClient + KafkaZkClient).

How it works: :class:`ZooKeeperStore` implements :class:`~odradek.cluster.store.MetadataStore`
with one kazoo client, i.e. one ZooKeeper session. ``zookeeper.connect`` is Kafka's
``host1:port1,host2:port2/chroot``; as Kafka's ``createChrootIfNecessary`` does, a short-lived
client without the chroot creates the chroot path first, then the store's own client is
rooted there. The session times out after ``zookeeper.session.timeout.ms``; connecting and
every request are bounded by ``zookeeper.connection.timeout.ms`` (Kafka's default: the
session timeout), after which a clear error names the address.

Threads: kazoo reads the socket on its own thread and runs callbacks on another. The store
moves every watcher and every session listener onto one thread of its own, in order, so
they may call the store (blocking requests) and never stall kazoo.

Sessions: kazoo's states become :class:`~odradek.cluster.store.SessionEvent` transitions
(SUSPENDED → RECONNECTED when the same session comes back; EXPIRED → NEW_SESSION when kazoo
reconnects with a fresh one, our ephemeral nodes gone). Unlike ZooKeeper's Java client,
kazoo forgets its watches when the connection drops and fires them with an empty event;
the store holds those back until the connection is back and then calls the watchers, which
re-read and re-arm, so a change made while we were away is never missed.

Security (:mod:`odradek.cluster.zk_security`): the client authenticates with SASL
DIGEST-MD5 when given credentials, and every znode it creates (the chroot and missing
parents too, each with the ACLs of its own path) carries Kafka's default ACLs for
``zookeeper.set.acl``. With ``set_acl`` and no credentials the store refuses to open.

A refused authentication: at start the store refuses to open, with the reason. Once
running (ZooKeeper restarted with the broker's password changed), kazoo gives up for good
on AUTH_FAILED; as Kafka's ``ZooKeeperClient`` reinitializes its session after an auth
failure, the store logs an ERROR naming the user and the reason on every refusal and
starts the client again after a backoff (1 s, doubling up to :data:`_AUTH_RETRY_MAX_S`),
until ZooKeeper accepts it. kazoo says CONNECTED before SASL has answered, so with SASL a
connection is announced (RECONNECTED, NEW_SESSION, the held-back watchers) only once one
round trip behind the authentication has succeeded, and the listeners hear EXPIRED once
however many retries are refused. The session that was refused still lives on the server
(ZooKeeper drops the connection, not the session) with this broker's ephemeral nodes, its
registration among them; before the new session is announced, the store closes that one
(a second client attaches to it with its id and password and closes it, as Kafka's
reinitialization closes its old handle), so the re-registration does not meet its own
stale node.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from kazoo import exceptions as kz
from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, KeeperState, WatchedEvent, ZnodeStat

from odradek.cluster.store import (
    BadVersionError,
    CheckVersion,
    ConnectionLossError,
    CreateOp,
    DeleteOp,
    MetadataStore,
    Node,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SessionEvent,
    SessionExpiredError,
    SessionListener,
    SetOp,
    StoreConnectionError,
    StoreError,
    Watcher,
    jute_maxbuffer,
    op_sizes,
    shown_path,
)
from odradek.cluster.zk_security import ZkClientSecurity, ZooKeeperSecurityError

__all__ = ["ZooKeeperSettings", "ZooKeeperStore", "split_connect"]

log = logging.getLogger(__name__)

# Kafka's default zookeeper.session.timeout.ms (since 2.5, KIP-537).
DEFAULT_SESSION_TIMEOUT_MS = 18_000
# How long close() waits for the event thread to finish the callback it is running.
_CLOSE_JOIN_S = 5.0
# Backoff between the sessions tried again after ZooKeeper refused our SASL credentials
# (Kafka's ZooKeeperClient: 1 s; here doubling, so that a long refusal is not a busy loop).
_AUTH_RETRY_FIRST_S = 1.0
_AUTH_RETRY_MAX_S = 8.0
# Requests get_many keeps in flight: enough to hide the round trip, few enough that the
# answers (≤ 1 MB each, jute.maxbuffer) waiting in memory stay bounded in count.
_PIPELINE = 1000

_ERRORS: dict[type[Exception], type[StoreError]] = {
    kz.NoNodeError: NoNodeError,
    kz.NodeExistsError: NodeExistsError,
    kz.BadVersionError: BadVersionError,
    kz.NotEmptyError: NotEmptyError,
    kz.ConnectionLoss: ConnectionLossError,
    kz.SessionExpiredError: SessionExpiredError,
    kz.ConnectionClosedError: ConnectionLossError,
    kz.AuthFailedError: ZooKeeperSecurityError,
}


def split_connect(connect: str) -> tuple[str, str]:
    """``h1:p1,h2:p2/chroot`` → (``h1:p1,h2:p2``, ``/chroot``); the chroot is ``""`` if absent."""
    hosts, slash, chroot = connect.strip().partition("/")
    if not hosts:
        raise StoreError(f"zookeeper.connect {connect!r} names no server")
    chroot = ("/" + chroot.rstrip("/")) if slash and chroot.strip("/") else ""
    return hosts, chroot


@dataclass(frozen=True, slots=True)
class ZooKeeperSettings:
    """The broker's ``zookeeper.*`` configs (Kafka's names and defaults)."""

    connect: str
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    connection_timeout_ms: int | None = None  # None: the session timeout, as in Kafka

    @property
    def effective_connection_timeout_ms(self) -> int:
        return self.connection_timeout_ms or self.session_timeout_ms

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ZooKeeperSettings:
        connect = props.get("zookeeper.connect", "").strip()
        if not connect:
            raise StoreError("zookeeper.connect is required for cluster mode")
        try:
            session = int(props.get("zookeeper.session.timeout.ms", DEFAULT_SESSION_TIMEOUT_MS))
            raw = props.get("zookeeper.connection.timeout.ms")
            connection = int(raw) if raw else None
        except ValueError as exc:
            raise StoreError(f"invalid zookeeper timeout: {exc}") from exc
        if session <= 0 or (connection is not None and connection <= 0):
            raise StoreError("zookeeper timeouts must be positive")
        return cls(connect, session, connection)


class ZooKeeperStore(MetadataStore):
    """A :class:`MetadataStore` whose tree is a ZooKeeper ensemble's (under the chroot)."""

    def __init__(
        self,
        connect: str,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        connection_timeout_ms: int | None = None,
        security: ZkClientSecurity | None = None,
        max_request_bytes: int | None = None,
    ) -> None:
        self.security = security or ZkClientSecurity()
        # as the ZooKeeper client: -Djute.maxbuffer in KAFKA_OPTS, else ZooKeeper's default
        self.max_request_bytes = max_request_bytes or jute_maxbuffer()
        self.security.require_authentication()
        self.settings = ZooKeeperSettings(connect, session_timeout_ms, connection_timeout_ms)
        self._hosts, self._chroot = split_connect(connect)
        self._timeout_s = self.settings.effective_connection_timeout_ms / 1000
        self._session_s = session_timeout_ms / 1000
        self._listeners: list[SessionListener] = []
        self._state_lock = threading.Lock()
        self._phase = "starting"  # last kazoo state seen: starting, CONNECTED, SUSPENDED, LOST
        self._deferred: list[tuple[Watcher, str]] = []
        self._closing = False
        self._running = False  # the first session is up: refusals from now on are retried
        self._told_expired = False  # listeners heard EXPIRED, not yet NEW_SESSION
        self._auth_refusals = 0  # in a row, since ZooKeeper last accepted the credentials
        self._retry_lock = threading.Lock()  # a restart of the client vs close()
        self._retry_timer: threading.Timer | None = None
        self._announced_session: tuple[int, bytes] | None = None  # the listeners' session
        self._refused_session: tuple[int, bytes] | None = None  # it, once refused
        self._events: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._event_thread = threading.Thread(
            target=self._run_events, name="odradek-zk-events", daemon=True
        )
        if self._chroot:
            self._create_chroot()
        self._client = self._new_client(self._hosts + self._chroot)
        self._client.add_listener(self._on_state)
        self._start(self._client)
        self._announced_session = self._client.client_id
        self._running = True
        self._event_thread.start()

    # -- connecting -------------------------------------------------------------------------
    def _new_client(self, hosts: str) -> KazooClient:
        # Retry connecting forever (a session outlives short outages); requests are not
        # retried by kazoo: callers see ConnectionLossError and decide.
        return KazooClient(
            hosts=hosts,
            timeout=self._session_s,
            connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1.0},
            **self.security.kazoo_options(),
        )

    def _start(self, client: KazooClient) -> None:
        try:
            client.start(timeout=self._timeout_s)
            # kazoo reports CONNECTED before SASL has authenticated; one round trip, queued
            # behind the authentication, tells whether it did (kazoo then stops for good).
            client.exists_async("/").get(timeout=self._timeout_s)
        except (KazooTimeoutError, kz.AuthFailedError) as exc:
            client.stop()
            client.close()
            if isinstance(exc, kz.AuthFailedError):
                raise ZooKeeperSecurityError(self.security.auth_failed(self._hosts)) from None
            raise StoreConnectionError(
                f"could not connect to ZooKeeper at {self._hosts} within "
                f"{self.settings.effective_connection_timeout_ms} ms "
                f"(zookeeper.connection.timeout.ms){self._tls_failure(client)}"
            ) from None

    def _create_chroot(self) -> None:
        bootstrap = self._new_client(self._hosts)
        self._start(bootstrap)
        try:
            # Kafka's createChrootIfNecessary: each missing component with its own ACLs.
            parts = self._chroot.strip("/").split("/")
            for depth in range(1, len(parts) + 1):
                path = "/" + "/".join(parts[:depth])
                if bootstrap.exists(path) is None:
                    with suppress(kz.NodeExistsError):
                        bootstrap.create(path, b"", acl=self.security.acls(path))
        finally:
            bootstrap.stop()
            bootstrap.close()

    def _tls_failure(self, client: KazooClient) -> str:
        handler = client.handler
        failure = getattr(handler, "last_failure", None)
        if failure is None or self.security.tls is None:
            return ""
        return f": {self.security.tls.describe_failure(failure)}"

    @property
    def client(self) -> KazooClient:
        """The kazoo client (for tools and tests; the store's API is the contract)."""
        return self._client

    @property
    def session_id(self) -> int:
        client_id = self._client.client_id
        return int(client_id[0]) if client_id else 0

    # -- the event thread -------------------------------------------------------------------
    def _run_events(self) -> None:
        while True:
            task = self._events.get()
            if task is None:
                return
            try:
                task()
            except Exception:
                log.exception("ZooKeeper watcher or session listener failed")

    def _dispatch(self, task: Callable[[], None]) -> None:
        if not self._closing:
            self._events.put(task)

    def _on_state(self, state: str) -> None:
        """kazoo's connection thread: translate, never block."""
        event: SessionEvent | None = None
        deferred: list[tuple[Watcher, str]] = []
        auth_failed = (state == KazooState.LOST
                       and self._client.client_state == KeeperState.AUTH_FAILED)
        with self._state_lock:
            previous, self._phase = self._phase, state
            if state == KazooState.CONNECTED:
                event = {
                    KazooState.SUSPENDED: SessionEvent.RECONNECTED,
                    KazooState.LOST: SessionEvent.NEW_SESSION,
                }.get(previous)
                deferred, self._deferred = self._deferred, []
            elif state == KazooState.SUSPENDED:
                event = SessionEvent.SUSPENDED
            elif state == KazooState.LOST and not self._closing and not self._told_expired:
                event = SessionEvent.EXPIRED
                self._told_expired = True
        log.info("ZooKeeper session %s (%s → %s)", event.value if event else "-", previous, state)
        if state == KazooState.CONNECTED and self.security.sasl is not None and self._running:
            # announced once SASL has answered (kazoo says CONNECTED before it)
            self._dispatch(lambda: self._confirm(event, deferred))
            return
        if event is SessionEvent.NEW_SESSION:
            with self._state_lock:
                self._told_expired = False
        if event is not None:
            self._dispatch(lambda: self._notify(event))
        for watcher, path in deferred:
            self._dispatch(lambda w=watcher, p=path: w(p))  # type: ignore[misc]
        if auth_failed and self._running and not self._closing:
            if self._refused_session is None:
                self._refused_session = self._announced_session
            self._retry_after_auth_failure()

    def _confirm(self, event: SessionEvent | None, deferred: list[tuple[Watcher, str]]) -> None:
        """The event thread: one round trip, queued behind the SASL exchange, then the
        connection's announcements; none if ZooKeeper refused (the retry announces them)."""
        try:
            self._client.exists_async("/").get(timeout=self._timeout_s)
        except (kz.KazooException, KazooTimeoutError):
            with self._state_lock:
                self._deferred = deferred + self._deferred
            return
        if self._auth_refusals:
            log.warning("authenticated to ZooKeeper again at %s as '%s' after %d refusals",
                        self._hosts, self.security.sasl.username if self.security.sasl else "?",
                        self._auth_refusals)
            self._auth_refusals = 0
        if event is SessionEvent.NEW_SESSION:
            with self._state_lock:
                self._told_expired = False
            refused, self._refused_session = self._refused_session, None
            if refused is not None and refused != self._client.client_id:
                self._close_session(refused)
        self._announced_session = self._client.client_id
        if event is not None:
            self._notify(event)
        for watcher, path in deferred:
            try:
                watcher(path)
            except Exception:
                log.exception("ZooKeeper watcher failed")

    def _close_session(self, client_id: tuple[int, bytes]) -> None:
        """Close a session of ours that kazoo gave up (its ephemeral nodes go with it)."""
        twin = KazooClient(hosts=self._hosts, client_id=client_id, timeout=self._session_s,
                           connection_retry={"max_tries": 3, "delay": 0.1},
                           **self.security.kazoo_options())
        try:
            twin.start(timeout=self._timeout_s)
        except (kz.KazooException, KazooTimeoutError) as exc:
            log.warning("could not close the refused ZooKeeper session 0x%x (%s): its "
                        "ephemeral nodes stay until it times out", client_id[0],
                        type(exc).__name__)
        finally:
            twin.stop()
            twin.close()

    def _retry_after_auth_failure(self) -> None:
        """kazoo gave up on AUTH_FAILED: say why at ERROR, start it again after a backoff
        (Kafka's ZooKeeperClient reinitializes after an auth failure)."""
        self._auth_refusals += 1
        delay = min(_AUTH_RETRY_FIRST_S * 2 ** (self._auth_refusals - 1), _AUTH_RETRY_MAX_S)
        log.error("%s; this broker is out of the cluster until ZooKeeper accepts it: "
                  "trying a new session in %.0f s (refusal %d in a row)",
                  self.security.auth_failed(self._hosts), delay, self._auth_refusals)
        with self._retry_lock:
            if self._closing:
                return
            timer = threading.Timer(delay, self._restart_client)
            timer.name = "odradek-zk-auth-retry"
            timer.daemon = True
            self._retry_timer = timer
            timer.start()

    def _restart_client(self) -> None:
        with self._retry_lock:
            if self._closing:
                return
            try:
                self._client.start_async()  # a new session (kazoo forgot the refused one)
            except Exception:
                log.exception("could not start the ZooKeeper client again")
                failed = True
            else:
                failed = False
        if failed:
            self._retry_after_auth_failure()

    def _notify(self, event: SessionEvent) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                log.exception("session listener failed on %s", event.value)

    def add_session_listener(self, listener: SessionListener) -> None:
        self._listeners.append(listener)

    def remove_session_listener(self, listener: SessionListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _watch(self, watcher: Watcher, path: str) -> Callable[[WatchedEvent], None]:
        def on_event(event: WatchedEvent) -> None:
            if event.type == EventType.NONE:  # kazoo dropped the watch with the connection
                with self._state_lock:
                    if self._phase != KazooState.CONNECTED:
                        self._deferred.append((watcher, path))
                        return
            self._dispatch(lambda: watcher(path))

        return on_event

    # -- requests ---------------------------------------------------------------------------
    def request_bytes(self, path: str, data: bytes = b"") -> int:
        """The base's count, and the ACLs this path's nodes get (a long SASL user name
        in them): each its perms and two strings."""
        acl_bytes = sum(12 + len(a.id.scheme.encode()) + len(a.id.id.encode())
                        for a in self.security.acls(path))
        return super().request_bytes(path, data) + acl_bytes

    @contextmanager
    def _errors(self, path: str, data: bytes = b"") -> Iterator[None]:
        self.check_size([(path, data)])
        if asyncio._get_running_loop() is not None:
            # Every call waits for a round trip: a broker's event loop must never make one
            # (its ZooKeeper work runs in worker threads or on the store's own thread).
            log.warning("ZooKeeper call on the event loop (%s)", shown_path(path),
                        stack_info=log.isEnabledFor(logging.DEBUG))
        try:
            yield
        except KazooTimeoutError:
            raise ConnectionLossError(
                f"{shown_path(path)}: no answer from ZooKeeper at {self._hosts} within "
                f"{self.settings.effective_connection_timeout_ms} ms"
            ) from None
        except kz.KazooException as exc:
            raise _translate(exc, path) from exc

    def _node(self, data: bytes | None, stat: ZnodeStat, path: str) -> Node:
        owner = int(stat.ephemeralOwner)
        return Node(data or b"", int(stat.version), owner != 0, owner, path, int(stat.czxid))

    def get(self, path: str, watch: Watcher | None = None) -> Node | None:
        w = self._watch(watch, path) if watch is not None else None
        with self._errors(path):
            while True:
                try:
                    data, stat = self._client.get_async(path, watch=w).get(timeout=self._timeout_s)
                    return self._node(data, stat, path)
                except kz.NoNodeError:
                    if w is None:
                        return None
                # Missing: watch for its creation (ZooKeeper's exists watch), unless it was
                # created in between, then read it again (the same watcher object: one watch).
                if self._client.exists_async(path, watch=w).get(timeout=self._timeout_s) is None:
                    return None

    def get_many(self, paths: Sequence[str], watch: Watcher | None = None) -> list[Node | None]:
        """Pipelined gets: up to :data:`_PIPELINE` requests in flight on the one connection,
        so reading N nodes costs about one round trip per window rather than N."""
        results: list[Node | None] = []
        for start in range(0, len(paths), _PIPELINE):
            window = paths[start:start + _PIPELINE]
            for p in window:
                self.check_size([(p, b"")])
            with self._errors(window[0] if window else "/"):
                pending = [
                    self._client.get_async(p, watch=self._watch(watch, p) if watch else None)
                    for p in window
                ]
                for p, request in zip(window, pending, strict=True):
                    try:
                        data, stat = request.get(timeout=self._timeout_s)
                        results.append(self._node(data, stat, p))
                    except kz.NoNodeError:
                        # Missing: get() also arms the creation watch when asked to.
                        results.append(self.get(p, watch) if watch is not None else None)
        return results

    def children(self, path: str, watch: Watcher | None = None) -> list[str]:
        w = self._watch(watch, path) if watch is not None else None
        with self._errors(path):
            while True:
                try:
                    names = self._client.get_children_async(path, watch=w).get(
                        timeout=self._timeout_s
                    )
                    return sorted(names)
                except kz.NoNodeError:
                    if w is None:
                        return []
                if self._client.exists_async(path, watch=w).get(timeout=self._timeout_s) is None:
                    return []

    def create(
        self, path: str, data: bytes, ephemeral: bool = False, sequential: bool = False
    ) -> Node:
        with self._errors(path, data):
            try:
                created = self._create(path, data, ephemeral, sequential)
            except kz.NoNodeError:
                # kazoo's makepath would give the parents the child's ACLs: make each
                # missing parent with its own (a sensitive child under a readable parent).
                self._ensure_parents(path)
                created = self._create(path, data, ephemeral, sequential)
        owner = self.session_id if ephemeral else 0
        return Node(data, 0, ephemeral, owner, str(created))

    def _create(self, path: str, data: bytes, ephemeral: bool, sequential: bool) -> str:
        return str(self._client.create_async(
            path, data, acl=self.security.acls(path), ephemeral=ephemeral, sequence=sequential
        ).get(timeout=self._timeout_s))

    def _ensure_parents(self, path: str) -> None:
        parts = path.strip("/").split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            parent = "/" + "/".join(parts[:depth])
            if self._client.exists_async(parent).get(timeout=self._timeout_s) is not None:
                continue
            with suppress(kz.NodeExistsError):
                self._create(parent, b"", ephemeral=False, sequential=False)

    def set(self, path: str, data: bytes, expected_version: int = -1) -> Node:
        with self._errors(path, data):
            stat = self._client.set_async(path, data, version=expected_version).get(
                timeout=self._timeout_s
            )
        return self._node(data, stat, path)

    def delete(self, path: str, expected_version: int = -1, recursive: bool = False) -> None:
        with self._errors(path):
            if not recursive:
                self._client.delete_async(path, version=expected_version).get(
                    timeout=self._timeout_s
                )
                return
            # kazoo's recursive delete ignores the version: check it first (not atomically).
            stat = self._client.exists_async(path).get(timeout=self._timeout_s)
            if stat is None:
                raise NoNodeError(path)
            if expected_version != -1 and stat.version != expected_version:
                raise BadVersionError(
                    f"{path}: expected version {expected_version}, found {stat.version}"
                )
            self._client.delete(path, recursive=True)

    def multi(self, ops: Sequence[Op]) -> list[Node | None]:
        if not ops:
            return []
        self.check_size(op_sizes(ops))
        txn = self._client.transaction()
        for op in ops:
            if isinstance(op, CheckVersion):
                txn.check(op.path, op.version)
            elif isinstance(op, CreateOp):
                txn.create(op.path, op.data, acl=self.security.acls(op.path),
                           ephemeral=op.ephemeral, sequence=op.sequential)
            elif isinstance(op, SetOp):
                txn.set_data(op.path, op.data, version=op.expected_version)
            elif isinstance(op, DeleteOp):
                txn.delete(op.path, version=op.expected_version)
        with self._errors(ops[0].path):
            answers: list[Any] = txn.commit_async().get(timeout=self._timeout_s)
        for index, answer in enumerate(answers):
            if isinstance(answer, Exception) and not isinstance(answer, kz.RolledBackError):
                error = _translate(answer, ops[index].path)
                error.failed_op = index
                raise error
        results: list[Node | None] = []
        for op, answer in zip(ops, answers, strict=True):
            if isinstance(op, CreateOp):  # the answer is the created path
                owner = self.session_id if op.ephemeral else 0
                results.append(Node(op.data, 0, op.ephemeral, owner, str(answer)))
            elif isinstance(op, SetOp):
                results.append(self._node(op.data, answer, op.path))
            else:
                results.append(None)
        return results

    def close(self) -> None:
        with self._state_lock:
            if self._closing:
                return
            self._closing = True
        with self._retry_lock:
            if self._retry_timer is not None:
                self._retry_timer.cancel()
        try:
            self._client.stop()
            self._client.close()
        finally:
            self._events.put(None)
            if threading.current_thread() is not self._event_thread:
                self._event_thread.join(_CLOSE_JOIN_S)


def _translate(exc: Exception, path: str) -> StoreError:
    for kazoo_type, ours in _ERRORS.items():
        if isinstance(exc, kazoo_type):
            return ours(f"{shown_path(path)}: {type(exc).__name__}")
    return StoreError(f"{shown_path(path)}: ZooKeeper error {type(exc).__name__}: {exc}")
