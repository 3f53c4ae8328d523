"""Broker membership: ephemeral ``/brokers/ids/<id>`` nodes (KafkaZkClient.registerBroker,
BrokerInfo and BrokerIdZNode in Kafka's ZkData, the controller's BrokerChangeHandler).

How it works: a broker registers by creating the ephemeral node ``/brokers/ids/<id>`` holding
Kafka's v5 JSON (``version``, ``host``/``port`` of the first PLAINTEXT endpoint or
null/-1, ``endpoints`` as ``LISTENER://host:port``, ``listener_security_protocol_map``,
``jmx_port`` -1, ``rack`` when set, ``timestamp`` in ms as a string, ``features``). The node
lives as long as the broker's session. If it already exists and belongs to another live
session, the id is taken and registration is refused (Kafka's broker refuses to start);
if it belongs to our own session (a retried create), it is ours. After the session
expires the store opens a new one and :class:`BrokerRegistration` registers again, as
Kafka's broker does on a new session; a registration that meets a lost connection or an
expired session midway (the broker paused, at start too) is tried again until ZooKeeper
answers, for up to :data:`REGISTER_RETRY_S`, as Kafka's requests retry until connected.
:class:`BrokerChangeWatcher` keeps a child watch on ``/brokers/ids`` and reports the set of
live brokers whenever it changes.

A registration's creation zxid (``czxid``) is the broker's epoch (KIP-380, as Kafka's
ZooKeeper mode takes it): a broker that lost its session and registered again, however
quickly, has a new one, so whoever compares epochs sees it gone and back, and a request
carrying an older one comes from a previous incarnation (``STALE_BROKER_EPOCH``).

Controlled shutdown (Kafka's ControlledShutdownRequest and its response, exchanged here
through ZooKeeper as every controller exchange is): a stopping broker, still registered,
creates the ephemeral ``/controlled_shutdown/<id>`` holding
``{"version":1,"broker_epoch":E}`` (:func:`request_controlled_shutdown`); the controller
watches those children, moves the broker's leaderships and takes it out of the ISRs it
follows (:mod:`odradek.cluster.controller`), then answers in the same node: its data set
to ``{"version":1,"broker_epoch":E,"error_code":C,"remaining":N}``, N the partitions the
broker still leads with other ISR replicas (Kafka's RemainingPartitions), C 0 or
``STALE_BROKER_EPOCH`` for a request whose epoch is not the registration's. The broker
waits for the answer on a data watch and asks again (a new node) while partitions remain,
``controlled.shutdown.max.retries`` times. Unregistering removes the request.
:class:`ChildrenWatcher` reports the brokers shutting down to the leaders, which do not
take them into an ISR again (KIP-841's eligibility).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from odradek.cluster.store import (
    ConnectionLossError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    SessionEvent,
    SessionExpiredError,
    StoreError,
)

__all__ = [
    "BROKER_IDS_PATH",
    "CONTROLLED_SHUTDOWN_PATH",
    "BrokerChangeWatcher",
    "BrokerIdInUseError",
    "BrokerInfo",
    "BrokerRegistration",
    "ChildrenWatcher",
    "EndPoint",
    "ShutdownRequest",
    "decode_shutdown_request",
    "live_brokers",
    "request_controlled_shutdown",
    "wait_out_previous_registration",
]

#: how long a registration is tried again while ZooKeeper does not answer
REGISTER_RETRY_S = 30.0
REGISTER_RETRY_BACKOFF_S = 0.2

log = logging.getLogger(__name__)

BROKER_IDS_PATH = "/brokers/ids"
BROKER_INFO_VERSION = 5  # BrokerIdZNode's JSON version since Kafka 2.7 (IBP_2_7_IV0)
CONTROLLED_SHUTDOWN_PATH = "/controlled_shutdown"
SHUTDOWN_REQUEST_VERSION = 1
NO_BROKER_EPOCH = -1
STALE_BROKER_EPOCH = 77  # Kafka's error code (Errors.STALE_BROKER_EPOCH)


class BrokerIdInUseError(StoreError):
    """Another live broker holds this broker.id."""


@dataclass(frozen=True, slots=True)
class EndPoint:
    """One advertised listener (Kafka's EndPoint)."""

    listener_name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"

    @classmethod
    def parse(cls, text: str, protocol_map: Mapping[str, str] | None = None) -> EndPoint:
        name, sep, address = text.partition("://")
        host, colon, port = address.rpartition(":")
        if not sep or not colon or not port.isdigit():
            raise ValueError(f"invalid endpoint {text!r}: expected LISTENER://host:port")
        name = name.upper()
        protocol = (protocol_map or {}).get(name, name)
        return cls(name, host.strip("[]"), int(port), protocol)


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """What a broker publishes about itself (Kafka's BrokerInfo / Broker)."""

    broker_id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None
    timestamp_ms: int = 0
    features: Mapping[str, Any] = field(default_factory=dict)
    # The registration's czxid as read (not part of its JSON): the broker epoch.
    broker_epoch: int = NO_BROKER_EPOCH

    @property
    def path(self) -> str:
        return f"{BROKER_IDS_PATH}/{self.broker_id}"

    @property
    def address(self) -> str:
        """``host:port`` of the first endpoint (for messages)."""
        if not self.endpoints:
            return "?"
        return f"{self.endpoints[0].host}:{self.endpoints[0].port}"

    def endpoint(self, listener_name: str) -> EndPoint | None:
        return next((e for e in self.endpoints if e.listener_name == listener_name), None)

    def to_json(self) -> dict[str, Any]:
        # host/port are for old clients: the first PLAINTEXT endpoint, or null/-1 (Kafka).
        plaintext = next(
            (e for e in self.endpoints if e.security_protocol == "PLAINTEXT"), None
        )
        doc: dict[str, Any] = {
            "version": BROKER_INFO_VERSION,
            "host": plaintext.host if plaintext else None,
            "port": plaintext.port if plaintext else -1,
            "endpoints": [e.connection_string for e in self.endpoints],
            "listener_security_protocol_map": {
                e.listener_name: e.security_protocol for e in self.endpoints
            },
            "jmx_port": -1,
            "timestamp": str(self.timestamp_ms),
            "features": dict(self.features),
        }
        if self.rack is not None:  # Kafka writes "rack" only when one is set
            doc["rack"] = self.rack
        return doc

    def encode(self) -> bytes:
        return json.dumps(self.to_json()).encode()

    @classmethod
    def decode(cls, broker_id: int, data: bytes) -> BrokerInfo:
        try:
            doc = json.loads(data)
            version = int(doc["version"])
            if version == 1:
                endpoints: tuple[EndPoint, ...] = (
                    EndPoint("PLAINTEXT", str(doc["host"]), int(doc["port"])),
                )
            else:
                protocols = doc.get("listener_security_protocol_map") or {}
                endpoints = tuple(EndPoint.parse(e, protocols) for e in doc["endpoints"])
            return cls(
                broker_id, endpoints, doc.get("rack"), int(doc.get("timestamp", 0)),
                doc.get("features") or {},
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(
                f"failed to parse the registration of broker {broker_id}: {data!r}"
            ) from exc


def live_brokers(store: MetadataStore) -> dict[int, BrokerInfo]:
    """Every registered broker, by id (nodes that vanish while we read are skipped)."""
    return _read_brokers(store, store.children(BROKER_IDS_PATH))


def _read_brokers(store: MetadataStore, names: Sequence[str]) -> dict[int, BrokerInfo]:
    brokers = {}
    for name in names:
        if not name.isdigit():
            continue
        node = store.get(f"{BROKER_IDS_PATH}/{name}")
        if node is not None:
            info = BrokerInfo.decode(int(name), node.data)
            brokers[int(name)] = replace(info, broker_epoch=node.czxid or NO_BROKER_EPOCH)
    return brokers


@dataclass(frozen=True, slots=True)
class ShutdownRequest:
    """A controlled-shutdown request as stored, with the controller's answer once set
    (``error_code`` None: not answered yet)."""

    broker_epoch: int
    error_code: int | None = None
    remaining: int = 0

    def encode(self) -> bytes:
        doc: dict[str, Any] = {"version": SHUTDOWN_REQUEST_VERSION,
                               "broker_epoch": self.broker_epoch}
        if self.error_code is not None:
            doc["error_code"] = self.error_code
            doc["remaining"] = self.remaining
        return json.dumps(doc).encode()


def decode_shutdown_request(data: bytes) -> ShutdownRequest:
    """A stored request (an unreadable one: broker epoch -1, which no registration has)."""
    try:
        doc = json.loads(data)
        code = doc.get("error_code")
        return ShutdownRequest(int(doc["broker_epoch"]), None if code is None else int(code),
                               int(doc.get("remaining", 0)))
    except (ValueError, KeyError, TypeError, AttributeError):
        return ShutdownRequest(NO_BROKER_EPOCH)


def request_controlled_shutdown(store: MetadataStore, broker_id: int, broker_epoch: int,
                                timeout_s: float) -> ShutdownRequest | None:
    """Ask the controller to move this broker's leaderships and take it out of the ISRs:
    a new ephemeral ``/controlled_shutdown/<id>`` (replacing one asked before, or left by
    an older session about to expire), then wait up to ``timeout_s`` for the answer in it.
    Returns the answered request, or None when no answer came in time."""
    path = f"{CONTROLLED_SHUTDOWN_PATH}/{broker_id}"
    data = ShutdownRequest(broker_epoch).encode()
    while True:
        try:
            store.create(path, data, ephemeral=True)
            break
        except NodeExistsError:
            with contextlib.suppress(NoNodeError):
                store.delete(path)
    deadline = time.monotonic() + timeout_s
    changed = threading.Event()
    while True:
        changed.clear()
        node = store.get(path, watch=lambda _path: changed.set())
        if node is None:
            return None  # removed (our session expired): nothing more to hear
        request = decode_shutdown_request(node.data)
        if request.error_code is not None:
            return request
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not changed.wait(remaining):
            return None


# ZooKeeper expires a session in buckets of its tickTime (2 s by default) once the timeout
# has passed, and a loaded server later still: how long after the timeout a registration
# of a dead session may linger.
EXPIRY_MARGIN_S = 5.0


def wait_out_previous_registration(
    store: MetadataStore, broker_id: int, endpoints: Sequence[EndPoint],
    session_timeout_s: float,
) -> None:
    """Before registering: a registration of ``broker_id`` by another session that holds
    this broker's own ``endpoints`` is most likely this broker's before a kill -9 and a
    restart within the session timeout. Wait (saying so) until ZooKeeper expires that
    session and deletes it, instead of refusing to start as Kafka does (KAFKA-7165), so
    that a supervisor's restart does not become a crash loop. Refuse
    (:class:`BrokerIdInUseError`) a registration with other endpoints, or one still
    there ``session_timeout_s`` + :data:`EXPIRY_MARGIN_S` later: a live broker holds it."""
    path = f"{BROKER_IDS_PATH}/{broker_id}"
    wait_s = session_timeout_s + EXPIRY_MARGIN_S
    deadline = time.monotonic() + wait_s
    ours = {(e.listener_name, e.host, e.port) for e in endpoints}
    waiting = False
    changed = threading.Event()  # the watch: deleted (or changed: read again)
    while True:
        changed.clear()
        node = store.get(path, watch=lambda _path: changed.set())
        if node is None or node.ephemeral_owner == store.session_id:
            if waiting:
                log.info("the previous registration of broker %d is gone", broker_id)
            return
        holder = BrokerInfo.decode(broker_id, node.data)
        held = {(e.listener_name, e.host, e.port) for e in holder.endpoints}
        if not ours or held != ours or 0 in {e.port for e in endpoints}:
            raise BrokerIdInUseError(
                f"broker.id {broker_id} is already registered by a live broker at "
                f"{holder.address}"
            )
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BrokerIdInUseError(
                f"broker.id {broker_id} is still registered at {holder.address}, this "
                f"broker's own endpoints, {wait_s:.1f} s later: a live broker holds it"
            )
        if not waiting:
            log.warning(
                "broker.id %d is registered at %s, this broker's own endpoints, by another "
                "ZooKeeper session: most likely this broker's before a restart; waiting up "
                "to %.1f s for ZooKeeper to expire it (zookeeper.session.timeout.ms)",
                broker_id, holder.address, remaining)
            waiting = True
        changed.wait(remaining)


class BrokerRegistration:
    """This broker's ephemeral registration, kept alive across session expiries."""

    def __init__(
        self,
        store: MetadataStore,
        broker_id: int,
        endpoints: Sequence[EndPoint],
        rack: str | None = None,
        on_error: Callable[[Exception], None] | None = None,
        retry_s: float = REGISTER_RETRY_S,
    ) -> None:
        self.store = store
        self.broker_id = broker_id
        self.endpoints = tuple(endpoints)
        self.rack = rack
        self._on_error = on_error
        self._retry_s = retry_s
        self._registered = False
        self._lock = threading.Lock()
        # The czxid of the registration made (KIP-380's broker epoch), -1 before.
        self.broker_epoch = NO_BROKER_EPOCH

    def register(self) -> BrokerInfo:
        """Create ``/brokers/ids/<id>``; raise :class:`BrokerIdInUseError` if it is taken.
        The session listener comes first: a session that expires while this runs (the
        process paused, ZooKeeper unreachable) is followed by a registration on the new
        one, as after any expiry."""
        self.store.add_session_listener(self._on_session)
        try:
            return self._register()
        except BaseException:
            self.store.remove_session_listener(self._on_session)
            raise

    def _register(self) -> BrokerInfo:
        """:meth:`_register_once`, again while ZooKeeper does not answer (a lost
        connection, an expired session: the client reconnects, on a new session if need
        be), for up to ``retry_s`` seconds, as Kafka's ``KafkaZkClient`` retries its
        requests until connected."""
        deadline = time.monotonic() + self._retry_s
        while True:
            try:
                return self._register_once()
            except (ConnectionLossError, SessionExpiredError) as exc:
                if time.monotonic() >= deadline:
                    raise
                log.warning("broker %d: registering: %s; trying again", self.broker_id, exc)
                time.sleep(REGISTER_RETRY_BACKOFF_S)

    def _register_once(self) -> BrokerInfo:
        with self._lock:
            while True:
                info = BrokerInfo(
                    self.broker_id, self.endpoints, self.rack, int(time.time() * 1000)
                )
                try:
                    self.store.create(info.path, info.encode(), ephemeral=True)
                    node = self.store.get(info.path)
                    if node is not None:
                        self.broker_epoch = node.czxid or NO_BROKER_EPOCH
                    break
                except NodeExistsError:
                    node = self.store.get(info.path)
                    if node is None:  # its owner went away in between: try again
                        continue
                    if node.ephemeral_owner == self.store.session_id:
                        # ours already (a create retried after a lost answer)
                        self.broker_epoch = node.czxid or NO_BROKER_EPOCH
                        break
                    holder = BrokerInfo.decode(self.broker_id, node.data)
                    raise BrokerIdInUseError(
                        f"broker.id {self.broker_id} is already registered by a live broker "
                        f"at {holder.address}"
                    ) from None
            self._registered = True
        log.info("registered broker %d at %s (broker epoch %d)", self.broker_id, info.path,
                 self.broker_epoch)
        return info

    def _on_session(self, event: SessionEvent) -> None:
        if event is SessionEvent.EXPIRED:
            self._registered = False
            log.warning("broker %d: ZooKeeper session expired, registration lost",
                        self.broker_id)
        elif event is SessionEvent.NEW_SESSION:
            try:
                self._register()
            except Exception as exc:
                log.error("broker %d could not register again: %s", self.broker_id, exc)
                if self._on_error is not None:
                    self._on_error(exc)

    @property
    def registered(self) -> bool:
        return self._registered

    def request_controlled_shutdown(self, timeout_s: float) -> ShutdownRequest | None:
        """:func:`request_controlled_shutdown` with this registration's broker epoch."""
        return request_controlled_shutdown(self.store, self.broker_id, self.broker_epoch,
                                           timeout_s)

    def unregister(self) -> None:
        """Remove our node now (a clean shutdown), rather than when the session ends, and
        our controlled-shutdown request with it."""
        self.store.remove_session_listener(self._on_session)
        with self._lock:
            path = f"{BROKER_IDS_PATH}/{self.broker_id}"
            node = self.store.get(path)
            if node is not None and node.ephemeral_owner == self.store.session_id:
                with contextlib.suppress(NoNodeError):
                    self.store.delete(path, expected_version=node.version)
            request = self.store.get(f"{CONTROLLED_SHUTDOWN_PATH}/{self.broker_id}")
            if request is not None and request.ephemeral_owner == self.store.session_id:
                with contextlib.suppress(NoNodeError):
                    self.store.delete(request.path or
                                      f"{CONTROLLED_SHUTDOWN_PATH}/{self.broker_id}")
            self._registered = False


class BrokerChangeWatcher:
    """Calls ``on_change(brokers)`` with the live brokers whenever the set changes
    (the controller's BrokerChangeHandler on ``/brokers/ids``). ``on_change`` runs under
    the watcher's lock, so it must only hand the change on (post it to a loop)."""

    def __init__(
        self, store: MetadataStore, on_change: Callable[[dict[int, BrokerInfo]], None]
    ) -> None:
        self.store = store
        self._on_change = on_change
        self._lock = threading.Lock()
        self._last: dict[int, BrokerInfo] | None = None
        self._closed = False

    def start(self) -> dict[int, BrokerInfo]:
        """Arm the watch; returns (and reports) the current brokers."""
        self.store.add_session_listener(self._on_session)
        self._refresh()
        return dict(self._last or {})

    def _refresh(self, _path: str = "") -> None:
        with self._lock:
            if self._closed:
                return
            try:
                names = self.store.children(BROKER_IDS_PATH, watch=self._refresh)
                brokers = _read_brokers(self.store, names)
            except StoreError as exc:  # connection trouble: the session listener retries
                log.warning("could not read %s: %s", BROKER_IDS_PATH, exc)
                return
            if brokers == self._last:
                return
            self._last = brokers
            # Reported under the lock: a watch and a session event refreshing at once
            # must report in the order they read, or the older read lands last and
            # stays until the next change.
            self._on_change(dict(brokers))

    def _on_session(self, event: SessionEvent) -> None:
        if event in (SessionEvent.RECONNECTED, SessionEvent.NEW_SESSION):
            self._refresh()

    @property
    def brokers(self) -> dict[int, BrokerInfo]:
        return dict(self._last or {})

    def close(self) -> None:
        self._closed = True
        self.store.remove_session_listener(self._on_session)


class ChildrenWatcher:
    """Calls ``on_change(names)`` with the children of ``path`` whenever they change (a
    broker's view of the brokers in controlled shutdown); the same rules as
    :class:`BrokerChangeWatcher`."""

    def __init__(self, store: MetadataStore, path: str,
                 on_change: Callable[[frozenset[str]], None]) -> None:
        self.store = store
        self.path = path
        self._on_change = on_change
        self._lock = threading.Lock()
        self._last: frozenset[str] | None = None
        self._closed = False

    def start(self) -> frozenset[str]:
        self.store.add_session_listener(self._on_session)
        self._refresh()
        return self._last or frozenset()

    def _refresh(self, _path: str = "") -> None:
        with self._lock:
            if self._closed:
                return
            try:
                names = frozenset(self.store.children(self.path, watch=self._refresh))
            except StoreError as exc:
                log.warning("could not read %s: %s", self.path, exc)
                return
            if names == self._last:
                return
            self._last = names
            self._on_change(names)

    def _on_session(self, event: SessionEvent) -> None:
        if event in (SessionEvent.RECONNECTED, SessionEvent.NEW_SESSION):
            self._refresh()

    def close(self) -> None:
        self._closed = True
        self.store.remove_session_listener(self._on_session)
