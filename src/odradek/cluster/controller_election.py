"""Controller election through ``/controller`` and ``/controller_epoch`` (Kafka's
KafkaController.elect / maybeResign and KafkaZkClient.registerControllerAndIncrementControllerEpoch,
ZooKeeper mode).

How it works: every broker runs a :class:`ControllerElector`. To run for election it reads
``/controller_epoch`` (creating it at 0 if absent, as Kafka does) and then, in ONE multi,
creates the ephemeral ``/controller`` (``{"version":2,"brokerid":N,"timestamp":"...",
"kraftControllerEpoch":-1}``) and sets ``/controller_epoch`` to epoch+1 conditional on the
version it read. NodeExists means another broker is controller; BadVersion means another
broker bumped the epoch first: either way we lost and keep watching. The winner's epoch and
the epoch node's new version (Kafka's ``controllerEpochZkVersion``) fence every later
controller write: :meth:`ControllerElector.fenced_multi` adds a version check of
``/controller_epoch`` so a deposed controller's writes fail with :class:`ControllerMovedError`.

Every broker keeps a data watch on ``/controller``. When it changes, a controller that is no
longer named there resigns; when it is deleted, everyone runs again (the first create wins).
When the session expires the controller resigns at once (its ephemeral node is gone with
the session), and after the new session every broker runs again. Callbacks
(``on_become_controller(epoch)``, ``on_resign()``) run on the store's event thread (or the
calling thread for the embedded store) and must not block for long.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence

from odradek.cluster.store import (
    BadVersionError,
    CheckVersion,
    CreateOp,
    MetadataStore,
    Node,
    NodeExistsError,
    NoNodeError,
    Op,
    SessionEvent,
    SetOp,
    StoreError,
)

__all__ = [
    "CONTROLLER_EPOCH_PATH",
    "CONTROLLER_PATH",
    "ControllerElector",
    "ControllerMovedError",
    "current_controller",
]

log = logging.getLogger(__name__)

CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
INITIAL_CONTROLLER_EPOCH = 0  # KafkaController.InitialControllerEpoch: the first winner gets 1
NO_CONTROLLER = -1


class ControllerMovedError(StoreError):
    """This broker is no longer the controller (Kafka's ControllerMovedException)."""


def encode_controller(broker_id: int) -> bytes:
    """ControllerZNode.encode (Kafka 3.x: version 2, kraftControllerEpoch -1 in ZK mode)."""
    return json.dumps({
        "version": 2, "brokerid": broker_id, "timestamp": str(int(time.time() * 1000)),
        "kraftControllerEpoch": -1,
    }).encode()


def decode_controller(data: bytes) -> int:
    """The broker id in ``/controller`` (version 1 or 2)."""
    try:
        return int(json.loads(data)["brokerid"])
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"unreadable {CONTROLLER_PATH}: {data!r}") from exc


def current_controller(store: MetadataStore) -> tuple[int, int]:
    """(controller id or -1, controller epoch or 0) as stored now."""
    node = store.get(CONTROLLER_PATH)
    epoch = store.get(CONTROLLER_EPOCH_PATH)
    return (
        decode_controller(node.data) if node is not None else NO_CONTROLLER,
        int(epoch.data) if epoch is not None else INITIAL_CONTROLLER_EPOCH,
    )


class ControllerElector:
    def __init__(
        self,
        store: MetadataStore,
        broker_id: int,
        on_become_controller: Callable[[int], None] | None = None,
        on_resign: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.broker_id = broker_id
        self._on_become = on_become_controller
        self._on_resign = on_resign
        self._lock = threading.RLock()
        self._active = False
        self._active_controller = NO_CONTROLLER
        self.epoch = INITIAL_CONTROLLER_EPOCH       # our epoch while we are controller
        self.epoch_zk_version = -1                  # Kafka's controllerEpochZkVersion
        self._closed = False

    # -- public ---------------------------------------------------------------------------
    def start(self) -> None:
        self.store.add_session_listener(self._on_session)
        self.elect()

    @property
    def is_active(self) -> bool:
        return self._active

    @property
    def active_controller_id(self) -> int:
        """The controller as last seen by this broker's watch (-1: none known)."""
        return self._active_controller

    def current(self) -> tuple[int, int]:
        """(controller id, controller epoch) as ZooKeeper has them now."""
        return current_controller(self.store)

    def fenced_multi(self, ops: Sequence[Op], epoch: int | None = None) -> list[Node | None]:
        """Apply ``ops`` only if we are still the controller of our epoch — of ``epoch``
        when given, so that work begun in one term can never be written in a later one."""
        with self._lock:
            if not self._active or (epoch is not None and epoch != self.epoch):
                raise ControllerMovedError(
                    f"broker {self.broker_id} is not the controller"
                    + (f" of epoch {epoch}" if epoch is not None else "")
                )
            fence = CheckVersion(CONTROLLER_EPOCH_PATH, self.epoch_zk_version)
        try:
            return self.store.multi([fence, *ops])[1:]
        except BadVersionError as exc:
            if exc.failed_op == 0:
                self._maybe_resign()
                raise ControllerMovedError(
                    f"controller epoch {self.epoch} was superseded"
                ) from exc
            raise

    def close(self) -> None:
        """Stop taking part; a controller gives up ``/controller`` so others take over now."""
        with self._lock:
            self._closed = True
            self.store.remove_session_listener(self._on_session)
            if self._active:
                self._step_down()

    # -- the election -----------------------------------------------------------------------
    def elect(self) -> None:
        """KafkaController.elect: become controller unless someone already is."""
        with self._lock:
            if self._closed:
                return
            try:
                self._elect()
            except StoreError as exc:  # connection trouble: the session events retry
                log.warning("broker %d: controller election interrupted: %s",
                            self.broker_id, exc)

    def _elect(self) -> None:
        while True:
            node = self.store.get(CONTROLLER_PATH, watch=self._on_controller_change)
            if node is not None:  # there is a controller (maybe us): keep watching it
                self._active_controller = decode_controller(node.data)
                return
            epoch, version = self._read_epoch()
            try:
                results = self.store.multi([
                    CreateOp(CONTROLLER_PATH, encode_controller(self.broker_id), ephemeral=True),
                    SetOp(CONTROLLER_EPOCH_PATH, str(epoch + 1).encode(),
                          expected_version=version),
                ])
                break
            except (NodeExistsError, BadVersionError) as exc:
                # Someone else won (or bumped the epoch first): look again, which sets the
                # watch on the winner — or runs again if the winner is already gone.
                log.info("broker %d lost the controller election (%s)", self.broker_id,
                         type(exc).__name__)
        epoch_node = results[1]
        assert epoch_node is not None
        self.epoch, self.epoch_zk_version = epoch + 1, epoch_node.version
        self._active_controller = self.broker_id
        self._active = True
        log.info("broker %d is the controller, epoch %d (zk version %d)",
                 self.broker_id, self.epoch, self.epoch_zk_version)
        if self._on_become is not None:
            try:
                self._on_become(self.epoch)
            except Exception:
                # Kafka's triggerControllerMove: a failed failover hands the role on.
                log.exception("broker %d failed to take over as controller", self.broker_id)
                self._step_down()

    def _read_epoch(self) -> tuple[int, int]:
        node = self.store.get(CONTROLLER_EPOCH_PATH)
        if node is None:
            try:
                created = self.store.create(
                    CONTROLLER_EPOCH_PATH, str(INITIAL_CONTROLLER_EPOCH).encode()
                )
                return INITIAL_CONTROLLER_EPOCH, created.version
            except NodeExistsError:
                node = self.store.get(CONTROLLER_EPOCH_PATH)
                if node is None:
                    raise NoNodeError(CONTROLLER_EPOCH_PATH) from None
        return int(node.data), node.version

    def _step_down(self) -> None:
        """Give up ``/controller`` (if it is still ours) and resign."""
        with contextlib.suppress(StoreError):
            node = self.store.get(CONTROLLER_PATH)
            if node is not None and node.ephemeral_owner == self.store.session_id:
                self.store.delete(CONTROLLER_PATH, expected_version=node.version)
        self._resign()

    def _resign(self) -> None:
        if not self._active:
            return
        self._active = False
        log.info("broker %d resigns as controller (epoch %d)", self.broker_id, self.epoch)
        if self._on_resign is not None:
            try:
                self._on_resign()
            except Exception:
                log.exception("broker %d: controller resignation failed", self.broker_id)

    def _maybe_resign(self) -> None:
        """KafkaController.maybeResign: resign if /controller no longer names our session."""
        with self._lock:
            if not self._active:
                return
            try:
                node = self.store.get(CONTROLLER_PATH)
            except StoreError:
                return
            if node is None or node.ephemeral_owner != self.store.session_id:
                self._resign()

    # -- events -----------------------------------------------------------------------------
    def _on_controller_change(self, _path: str) -> None:
        """``/controller`` changed or vanished: resign if it is no longer us, then run."""
        self._maybe_resign()
        self.elect()  # re-arms the watch; runs only if /controller is absent

    def _on_session(self, event: SessionEvent) -> None:
        if event is SessionEvent.EXPIRED:
            with self._lock:
                self._active_controller = NO_CONTROLLER
                self._resign()  # our /controller went with the session
        elif event in (SessionEvent.NEW_SESSION, SessionEvent.RECONNECTED):
            self._maybe_resign()
            self.elect()
