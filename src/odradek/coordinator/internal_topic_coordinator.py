"""What the group and the transaction coordinators share: owning the partitions of their
internal topic (in the spirit of Kafka's ``CoordinatorRuntime`` and its
``CoordinatorLoader``, and of the partition bookkeeping ``GroupMetadataManager`` and
``TransactionStateManager`` each kept).

How it works:

- **A key's partition.** A coordinator serves the keys (group ids, transactional ids) of
  the partitions of its topic (``__consumer_offsets``, ``__transaction_state``) this
  broker leads; :meth:`InternalTopicCoordinator.partition_for` says which partition holds
  a key, and :meth:`~InternalTopicCoordinator.coordinator_for` answers FindCoordinator
  with that partition's leader, creating the topic on first use
  (:meth:`~InternalTopicCoordinator.ensure_topic`; COORDINATOR_NOT_AVAILABLE when it
  cannot be created or the partition has no leader).
- **Partition states** (:class:`CoordinatorPartitions`): a partition is *loading* while
  its log is replayed into the coordinator's cache, then *owned*, with the leader epoch it
  was loaded at (the *coordinator epoch* transaction markers carry). A request for a key
  of a loading partition gets COORDINATOR_LOAD_IN_PROGRESS, of a partition not owned
  NOT_COORDINATOR (:meth:`~InternalTopicCoordinator.check_coordinator`).
- **Election and resignation** (Kafka's ``onElection`` / ``onResignation``): on start and
  on every leadership change (:meth:`~InternalTopicCoordinator.refresh_leadership`) the
  partitions led here and neither owned nor loading yet are loaded (:meth:`on_elected`,
  one summary line for them all; a coordinator may load in steps on the event loop,
  :meth:`CoordinatorPartitions.start_loading`) and the owned or loading ones led
  elsewhere are unloaded (:meth:`on_resigned`). A
  coordinator whose cache depends on the coordinator epoch
  (``RELOAD_ON_NEW_EPOCH``) also reloads a partition still led here whose leader epoch
  moved. What loading and unloading do to the cache is each coordinator's own.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import ClassVar, TypeVar

from odradek.coordinator.offsets_topic import OffsetsTopic, OffsetsTopicUnavailableError
from odradek.protocol.errors import ErrorCode
from odradek.text import plural

__all__ = [
    "APPEND_ERRORS",
    "CoordinatorPartitions",
    "InternalTopicCoordinator",
    "append_error",
]

log = logging.getLogger(__name__)

_Loaded = TypeVar("_Loaded")

# What a failed append to the internal topic means to the coordinator's clients (Kafka's
# GroupMetadataManager and TransactionStateManager map them alike).
APPEND_ERRORS: Mapping[str, ErrorCode] = {
    "UNKNOWN_TOPIC_OR_PARTITION": ErrorCode.coordinator_not_available,
    "NOT_ENOUGH_REPLICAS": ErrorCode.coordinator_not_available,
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND": ErrorCode.coordinator_not_available,
    "REQUEST_TIMED_OUT": ErrorCode.coordinator_not_available,
    "COORDINATOR_NOT_AVAILABLE": ErrorCode.coordinator_not_available,
    "NOT_LEADER_OR_FOLLOWER": ErrorCode.not_coordinator,
    "KAFKA_STORAGE_ERROR": ErrorCode.not_coordinator,
}
# Append errors caused by the request, not the broker: logged at DEBUG.
_CLIENT_ERRORS = frozenset({"INVALID_PRODUCER_EPOCH", "INVALID_TXN_STATE"})


def append_error(
    exc: BaseException, errors: Mapping[str, ErrorCode], topic: str, what: str
) -> ErrorCode:
    """The error code for an append to ``topic`` (for ``what``, e.g. "group g") that
    raised ``exc``: its Kafka error mapped by ``errors``, else UNKNOWN_SERVER_ERROR."""
    name = getattr(exc, "kafka_error", None)
    if isinstance(name, str) and name.upper() in errors:
        # A client's bad request (a fenced producer's TxnOffsetCommit) is answered, not
        # a broker's trouble to log.
        level = logging.DEBUG if name.upper() in _CLIENT_ERRORS else logging.WARNING
        log.log(level, "writing to %s for %s failed: %s", topic, what, exc)
        return errors[name.upper()]
    log.error("writing to %s for %s failed", topic, what, exc_info=exc)
    return ErrorCode.unknown_server_error


class CoordinatorPartitions:
    """Which partitions of the internal topic are loading, and which are owned at which
    coordinator epoch."""

    def __init__(self) -> None:
        self._owned: dict[int, int] = {}  # partition -> coordinator epoch
        self._loading: dict[int, int] = {}  # partition -> the epoch it is loaded at

    def load(self, partition: int, epoch: int, replay: Callable[[int], _Loaded]) -> _Loaded:
        """Run ``replay(partition)`` with the partition loading, then own it at
        ``epoch``; returns what the replay returned. A replay that raises leaves the
        partition neither loading nor owned."""
        self._loading[partition] = epoch
        try:
            loaded = replay(partition)
        finally:
            self._loading.pop(partition, None)
        self._owned[partition] = epoch
        return loaded

    def start_loading(self, partition: int, epoch: int) -> None:
        """A load in steps begins (:meth:`finish_loading` or :meth:`stop_loading` ends it)."""
        self._loading[partition] = epoch

    def finish_loading(self, partition: int) -> None:
        """The load in steps is done: own the partition at the epoch it was loaded at."""
        epoch = self._loading.pop(partition, None)
        if epoch is not None:
            self._owned[partition] = epoch

    def stop_loading(self, partition: int) -> None:
        """The load in steps was given up (resigned, failed): neither loading nor owned."""
        self._loading.pop(partition, None)

    def loading(self) -> dict[int, int]:
        """The partitions loading, with the epoch each is loaded at."""
        return dict(self._loading)

    def unload(self, partition: int) -> None:
        self._owned.pop(partition, None)

    def is_owned(self, partition: int) -> bool:
        return partition in self._owned

    def is_loading(self, partition: int) -> bool:
        return partition in self._loading

    def any_loading(self) -> bool:
        return bool(self._loading)

    def owned(self) -> list[int]:
        return sorted(self._owned)

    def epoch_of(self, partition: int) -> int | None:
        """The coordinator epoch ``partition`` is owned at (None: not owned)."""
        return self._owned.get(partition)

    def check(self, partition: int) -> ErrorCode:
        """COORDINATOR_LOAD_IN_PROGRESS while ``partition`` loads, NOT_COORDINATOR when
        it is not owned, else NONE."""
        if partition in self._loading:
            return ErrorCode.coordinator_load_in_progress
        if partition not in self._owned:
            return ErrorCode.not_coordinator
        return ErrorCode.none


class InternalTopicCoordinator(ABC):
    """The base of a coordinator whose keys live in the partitions of an internal topic."""

    #: What the topic's partitions hold, for the log line of a load ("group").
    LOADED_NOUN: ClassVar[str]
    #: Reload a partition still led here when its leader epoch moved (the cache holds the
    #: coordinator epoch).
    RELOAD_ON_NEW_EPOCH: ClassVar[bool] = False

    def __init__(self, topic: OffsetsTopic, partitions: CoordinatorPartitions) -> None:
        self.topic = topic
        self.partitions = partitions
        self._active = False

    # ---------------------------------------------------------------- the subclass's part
    @abstractmethod
    def partition_for(self, key: str) -> int:
        """The topic's partition holding ``key``."""

    @abstractmethod
    def on_elected(self, partition: int) -> None:
        """This broker leads ``partition`` now: load it (through
        :meth:`CoordinatorPartitions.load`)."""

    @abstractmethod
    def on_resigned(self, partition: int) -> None:
        """Leadership of ``partition`` moved away: unload it
        (:meth:`CoordinatorPartitions.unload`) and drop its keys."""

    @abstractmethod
    def cached_count(self) -> int:
        """How many keys the cache holds (the load's log line counts the new ones)."""

    # ---------------------------------------------------------------- life cycle
    def startup(self) -> None:
        """Load the partitions this broker leads (if the topic exists)."""
        self._active = True
        self._elect_led_partitions()

    def shutdown(self) -> None:
        """Unload every owned partition; requests get COORDINATOR_NOT_AVAILABLE."""
        self._active = False
        for partition in sorted({*self.partitions.owned(), *self.partitions.loading()}):
            self.on_resigned(partition)

    def refresh_leadership(self) -> None:
        """Leadership of the topic's partitions moved (cluster mode): unload the partitions
        led elsewhere now, load those led here (Kafka's onElection / onResignation)."""
        if not self._active:
            return
        led = set(self.topic.led_partitions())
        held = {p: self.partitions.epoch_of(p) for p in self.partitions.owned()}
        held.update(self.partitions.loading())
        for partition, epoch in sorted(held.items()):
            if partition not in led or (
                    self.RELOAD_ON_NEW_EPOCH
                    and self.topic.leader_epoch(partition) != epoch):
                self.on_resigned(partition)
        self._elect_led_partitions()

    def _elect_led_partitions(self) -> None:
        """Load every partition led here and not owned yet; one summary line for them all."""
        started = time.monotonic()
        before = self.cached_count()
        elected = 0
        for partition in self.topic.led_partitions():
            if not (self.partitions.is_owned(partition)
                    or self.partitions.is_loading(partition)):
                self.on_elected(partition)
                elected += 1
        loaded = self.cached_count() - before
        if loaded > 0:
            log.info("loaded %s from %s of %s in %.0f ms", plural(loaded, self.LOADED_NOUN),
                     plural(elected, "partition"), self.topic.name,
                     (time.monotonic() - started) * 1000)

    # ---------------------------------------------------------------- ownership
    def ensure_topic(self) -> ErrorCode:
        """Create the topic if needed and load the partitions this broker leads; NONE, or
        COORDINATOR_NOT_AVAILABLE."""
        if not self._active:
            return ErrorCode.coordinator_not_available
        try:
            self.topic.ensure()
        except OffsetsTopicUnavailableError as exc:
            log.warning("%s", exc)
            return ErrorCode.coordinator_not_available
        self._elect_led_partitions()
        return ErrorCode.none

    def coordinator_for(self, key: str) -> tuple[ErrorCode, int]:
        """(error, node id) for FindCoordinator: the leader of the key's partition."""
        error = self.ensure_topic()
        if error != ErrorCode.none:
            return error, -1
        leader = self.topic.leader_of(self.partition_for(key))
        if leader is None:
            return ErrorCode.coordinator_not_available, -1
        return ErrorCode.none, leader

    def check_coordinator(self, key: str) -> ErrorCode:
        """NONE when this broker coordinates ``key`` now, else COORDINATOR_NOT_AVAILABLE
        (stopped, or the topic cannot be created), COORDINATOR_LOAD_IN_PROGRESS or
        NOT_COORDINATOR."""
        if not self._active:
            return ErrorCode.coordinator_not_available
        if not self.topic.exists():
            error = self.ensure_topic()
            if error != ErrorCode.none:
                return error
        return self.partitions.check(self.partition_for(key))

    def check_listing(self) -> ErrorCode:
        """Whether the cache may be listed (ListGroups, ListTransactions): NONE, or
        COORDINATOR_NOT_AVAILABLE when stopped, COORDINATOR_LOAD_IN_PROGRESS while any
        partition loads."""
        if not self._active:
            return ErrorCode.coordinator_not_available
        if self.partitions.any_loading():
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.none
