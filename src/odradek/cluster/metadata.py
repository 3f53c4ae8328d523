"""Topic metadata kept in the metadata store (Kafka's ZooKeeper layout, AdminZkClient).

How it works: a topic is ``/brokers/topics/<name>`` holding its id and replica assignment
(``{"version": 3, "topic_id": ..., "partitions": {"0": [replicas]}}``) and
``/config/topics/<name>`` holding its config overrides. :class:`ClusterMetadata` validates
requests (names, partition counts, replication factor, configs), writes through the store
with compare-and-set, and tells listeners (the broker, which creates and deletes logs) what
changed. Replica assignment follows Kafka's ``AdminUtils``
(:func:`assign_replicas`): leaders round-robin from a random start, followers at
increasing shifts, a rack-alternating broker order when brokers have racks; with one
broker every replica list is ``[broker_id]``.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import json
import logging
import random
import threading
import urllib.parse
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from odradek.cluster import loop_owned, topic_names
from odradek.cluster.loop_owned import loop_dict
from odradek.cluster.partition import PartitionState
from odradek.cluster.store import (
    UPDATE_ATTEMPTS,
    BadVersionError,
    CreateOp,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    config_of,
)
from odradek.storage.config import ConfigError, LogConfig
from odradek.storage.errors import ApiError
from odradek.text import plural

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_CLIENT_ENTITY = "<default>"
QuotaEntity = tuple[str | None, str | None]
"""A client quota entity: (user, client id), a name, ``<default>``, or None (absent)."""
# A user's config map holds its SCRAM credentials too (cluster/user_credentials.py).
SCRAM_CONFIG_KEYS = frozenset({"SCRAM-SHA-256", "SCRAM-SHA-512"})


def quota_configs(configs: Mapping[str, str]) -> dict[str, str]:
    """An entity's configs without the SCRAM credentials a user's node also holds."""
    return {k: v for k, v in configs.items() if k not in SCRAM_CONFIG_KEYS}
MAX_PARTITIONS = 100_000  # bound on one topic's partition count
# Kafka's controller refuses a single user operation of more records than this
# (QuorumController.MAX_RECORDS_PER_USER_OP): one partition is one record.
MAX_PARTITIONS_PER_OPERATION = 10_000
# Recursive deletes of a topic's node tried when a child created meanwhile (a partition
# state the controller writes) made one fail: each attempt removes what it listed.
DELETE_ATTEMPTS = 5
# Ids of deleted topics a view remembers, to refuse a copy of one read before its
# deletion and applied after it (a late notification, or a write of this broker's).
GONE_TOPIC_IDS_KEPT = 10_000


class MetadataError(ApiError):
    """A refused metadata change; ``kafka_error`` names the Kafka error code."""

    def __init__(self, kafka_error: str, message: str) -> None:
        super().__init__(message)
        self.kafka_error = kafka_error


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, list[int]]
    configs: dict[str, str] = field(default_factory=dict)
    # The store's versions of the two nodes these came from (``/brokers/topics/<t>`` and
    # ``/config/topics/<t>``; -1: not known). A view is built from writes of its own
    # broker and from watch notifications, which arrive in any order against each other:
    # :meth:`ClusterMetadata.apply_topic` keeps each half at its newer version. Not
    # part of equality: the same topic read again is no change.
    partitions_version: int = field(default=-1, compare=False)
    config_version: int = field(default=-1, compare=False)

    @property
    def is_internal(self) -> bool:
        return topic_names.is_internal(self.name)

    def newest(self, held: TopicInfo) -> TopicInfo:
        """This topic, each half (the assignment, the configs) taken from whichever of
        this and ``held`` has it at the newer store version. Both must be the same topic
        (its id); a half of an unknown version (-1) loses to a known one."""
        if (self.partitions_version >= held.partitions_version
                and self.config_version >= held.config_version):
            return self
        partitions, partitions_version = (
            (self.partitions, self.partitions_version)
            if self.partitions_version >= held.partitions_version
            else (held.partitions, held.partitions_version))
        configs, config_version = (
            (self.configs, self.config_version)
            if self.config_version >= held.config_version
            else (held.configs, held.config_version))
        return TopicInfo(self.name, self.topic_id, partitions, configs, partitions_version,
                         config_version)


def encode_topic_id(topic_id: uuid.UUID) -> str:
    """Kafka writes topic ids in base64 (url-safe, unpadded) — ``Uuid.toString``."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def decode_topic_id(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def rack_alternated_brokers(racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered so each is followed by one of another rack where possible (Kafka's
    ``AdminUtils.getRackAlternatedBrokerList``): racks in name order, each rack's brokers
    in id order, one broker from each rack in turn, a rack that ran out skipped. Racks A
    (0, 1, 2) and B (3, 4, 5) give 0, 3, 1, 4, 2, 5."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in sorted(racks.items()):
        by_rack.setdefault(rack, []).append(broker)
    queues = [by_rack[rack] for rack in sorted(by_rack)]
    order: list[int] = []
    for i in range(max((len(q) for q in queues), default=0)):
        order.extend(q[i] for q in queues if i < len(q))
    return order


def continuing_start_index(order: Sequence[int], leader: int) -> int:
    """The start index that gives partition 0 the leader ``leader`` in ``order``, so new
    partitions continue a topic's leader pattern (Kafka's ``addPartitions`` takes the
    first broker whose id is at least partition 0's leader; a broker that left is
    replaced by the next one)."""
    if leader in order:
        return list(order).index(leader)
    return next((i for i, b in enumerate(order) if b >= leader), 0)


def assign_replicas(
    brokers: Sequence[int],
    partitions: int,
    replication_factor: int,
    start_partition: int = 0,
    racks: Mapping[int, str] | None = None,
    *,
    start_index: int | None = None,
    replica_shift: int | None = None,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Replicas of partitions ``start_partition`` .. ``start_partition + partitions - 1``
    (Kafka's ``AdminUtils.assignReplicasToBrokers``).

    The leader of partition ``p`` is ``order[(p + start_index) % n]``: round-robin from a
    random start broker. The ``j``-th follower sits ``1 + (shift + j) % (n - 1)`` places
    after the leader, and the shift grows by one each time ``p`` passes a multiple of
    ``n``, so followers do not always pair with the same brokers. ``order`` is
    ``brokers`` as given, or with ``racks`` (broker id -> rack; every broker or none must
    have one) the rack-alternated list of :func:`rack_alternated_brokers`, the shift
    counted in whole rounds of racks; a follower is then skipped while its rack already
    holds a replica and another rack holds none, so each partition spans
    ``min(replication_factor, racks)`` racks.

    What this guarantees (no more: with ``partitions = q * n + r`` from partition 0 and
    no racks): no broker twice in a partition; each broker leads ``q`` or ``q + 1``
    partitions and holds each replica position ``q`` or ``q + 1`` times; so it holds
    between ``rf * q + max(0, rf - (n - r))`` and ``rf * q + min(rf, r)`` replicas,
    exactly ``rf * q`` when ``n`` divides ``partitions``. 10 partitions of RF 3 on 6
    brokers thus give 4 to 6 replicas a broker, not always 5.

    ``start_index`` fixes the start broker (an index into the order); as in Kafka it is
    then also the initial shift unless ``replica_shift`` is given. Otherwise both are
    drawn from ``rng``."""
    if partitions <= 0:
        raise MetadataError("INVALID_PARTITIONS", "number of partitions must be larger than 0")
    if replication_factor <= 0:
        raise MetadataError(
            "INVALID_REPLICATION_FACTOR", "replication factor must be larger than 0"
        )
    if replication_factor > len(brokers):
        raise MetadataError(
            "INVALID_REPLICATION_FACTOR",
            f"replication factor {replication_factor} is larger than the {len(brokers)} "
            "available brokers",
        )
    broker_racks = {b: racks[b] for b in brokers if b in racks} if racks else {}
    if broker_racks and len(broker_racks) < len(brokers):
        # Kafka's AdminOperationException: not an ApiException, so its brokers answer
        # UNKNOWN_SERVER_ERROR with this message.
        missing = sorted(b for b in brokers if b not in broker_racks)
        raise MetadataError(
            "UNKNOWN_SERVER_ERROR",
            "Not all brokers have rack information for replica rack aware assignment "
            f"(none for broker(s) {missing})",
        )
    order = rack_alternated_brokers(broker_racks) if broker_racks else list(brokers)
    n = len(order)
    draw = rng if rng is not None else random.Random()
    start = start_index % n if start_index is not None else draw.randrange(n)
    shift = replica_shift if replica_shift is not None else (
        start if start_index is not None else draw.randrange(n)
    )
    place = _place_rack_aware(broker_racks) if broker_racks else _place
    assignment: dict[int, list[int]] = {}
    for p in range(max(0, start_partition), max(0, start_partition) + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        assignment[p] = place(order, (p + start) % n, shift, replication_factor)
    return assignment


def _follower_index(first: int, shift: int, j: int, n: int) -> int:
    """Kafka's ``replicaIndex``: the ``j``-th candidate after the leader at ``first``."""
    return (first + 1 + (shift + j) % (n - 1)) % n


def _place(order: Sequence[int], first: int, shift: int, rf: int) -> list[int]:
    return [order[first]] + [
        order[_follower_index(first, shift, j, len(order))] for j in range(rf - 1)
    ]


def _place_rack_aware(
    racks: Mapping[int, str],
) -> Callable[[Sequence[int], int, int, int], list[int]]:
    num_racks = len(set(racks.values()))

    def place(order: Sequence[int], first: int, shift: int, rf: int) -> list[int]:
        n = len(order)
        replicas = [order[first]]
        racks_used = {racks[order[first]]}
        k = 0
        while len(replicas) < rf:
            # n - 1 consecutive candidates are every other broker: one always fits.
            broker = order[_follower_index(first, shift * num_racks, k, n)]
            k += 1
            rack = racks[broker]
            if rack in racks_used and len(racks_used) < num_racks:
                continue  # another rack holds no replica yet
            if broker in replicas:
                continue
            replicas.append(broker)
            racks_used.add(rack)
        return replicas

    return place


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True).encode()


@dataclass(slots=True)
class WorkerView:
    """What a worker thread reads instead of the loop's containers (:meth:`ClusterMetadata.
    off_loop`): copies taken on the loop at the hand-off, then owned by the worker, which
    adds its own changes to them so that the later steps of one request see the earlier
    ones (the loop hears of them through :meth:`ClusterMetadata.apply_locally`)."""

    topics: dict[str, TopicInfo]
    partition_states: dict[tuple[str, int], PartitionState] | None
    broker_configs: dict[str, dict[str, str]]


Listener = Callable[[str, TopicInfo | None], None]
StateListener = Callable[[list[tuple[str, int]]], None]


class ClusterMetadata:
    TOPICS = "/brokers/topics"
    CONFIGS = "/config/topics"
    CLUSTER_ID = "/cluster/id"
    BROKER_CONFIGS = "/config/brokers"  # dynamic broker configs: <id> or <default>
    DEFAULT_BROKER_ENTITY = "<default>"
    CLIENT_CONFIGS = "/config/clients"  # client quotas: <sanitized client id> or <default>
    USER_CONFIGS = "/config/users"  # user quotas (and SCRAM credentials): <user>[/clients/<c>]
    GROUP_CONFIGS = "/config/groups"  # group configs (KIP-848): <sanitized group id>
    CONSUMERS = "/consumers"  # offsets committed by OffsetCommit v0 (Kafka 0.8's layout)

    def __init__(
        self, store: MetadataStore, broker_ids: Callable[[], list[int]],
        broker_defaults: Mapping[str, Any],
        *,
        broker_racks: Callable[[], Mapping[int, str]] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.broker_ids = broker_ids
        # broker id -> rack (broker.rack) of the live brokers; empty: no rack awareness.
        self.broker_racks = broker_racks or dict
        self.rng = rng or random.Random()
        self.broker_defaults = broker_defaults
        # Loop-owned (docs/architecture.md, "Threads"): read and written on the event
        # loop only; a worker reads the copies of off_loop (see _topics_now).
        self.topics: dict[str, TopicInfo] = loop_dict()
        # Ids of topics deleted or replaced in this view, oldest first (apply_topic).
        self._gone_topic_ids: dict[uuid.UUID, None] = loop_dict()
        # Names of topics deleted in this view and not created again (apply_topic).
        self._gone_topic_names: dict[str, None] = loop_dict()
        # Partition replicas a broker may hold (max.broker.partitions, lowered to what
        # its open-files limit allows); None: unbounded.
        self.max_broker_partitions: int | None = None
        # Cluster mode: partition states as the controller wrote them (None: the embedded
        # single node, where partition_state derives them), and the largest replication
        # factor served (1 until replication lands: a follower never catches up).
        self.partition_states: dict[tuple[str, int], PartitionState] | None = None
        self.max_replication_factor: int | None = None
        self._listeners: list[Listener] = []
        self._state_listeners: list[StateListener] = []
        # Cluster mode: changes this broker writes are applied to the local view through
        # this (loop.call_soon_threadsafe), so the store round trips can run in a worker
        # thread while every local change still happens on the event loop. None: at once.
        self.defer_local: Callable[[Callable[[], None]], None] | None = None
        # Dynamic broker configs by entity, read once (cluster mode: kept by the
        # watches of metadata_sync, so DescribeConfigs never waits on ZooKeeper).
        self._broker_configs: dict[str, dict[str, str]] = loop_dict()
        # Client quotas by (user, client id) entity, and who hears of their changes.
        self.client_quotas: dict[QuotaEntity, dict[str, str]] = loop_dict()
        # Group configs (KIP-848's consumer.session.timeout.ms …) by group id, of the
        # groups that have any (cluster mode: kept by the watches of metadata_sync).
        self.group_configs: dict[str, dict[str, str]] = loop_dict()
        # The view of a worker thread running a change handed off by off_loop.
        self._worker = threading.local()
        self._client_quota_listeners: list[
            Callable[[Mapping[QuotaEntity, Mapping[str, str]]], None]] = []
        self.cluster_id = self._ensure_cluster_id()
        self.reload()

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def add_state_listener(self, listener: StateListener) -> None:
        """Called with the partitions whose state changed (cluster mode)."""
        self._state_listeners.append(listener)

    # -- changes made elsewhere in the cluster (cluster mode, on the event loop) ----------
    def apply_topic(self, name: str, info: TopicInfo | None) -> None:
        """A topic created, changed or deleted (through this broker or, in cluster mode,
        another one): the local view follows, and listeners are told."""
        if info is None:
            held = self.topics.pop(name, None)
            if held is None:
                return
            self._forget_topic(held)
        else:
            if info.topic_id in self._gone_topic_ids:
                return  # a late copy of a topic deleted (or replaced) since: ids never return
            held = self.topics.get(name)
            if held is not None and held.topic_id == info.topic_id:
                # A write of this broker's applied after a newer notification (or the
                # other way round) must not set the view back: each half at its newest.
                info = info.newest(held)
                if held == info:
                    self.topics[name] = info  # the same content, perhaps newer versions
                    return
            elif held is not None:
                # Deleted and created again under the name, the deletion unheard (the
                # new topic read before the name was seen gone, or both during a lost
                # session): the old topic goes as a deletion would take it — its states,
                # which the new ones (leader epoch 0, partition epoch 0) would look older
                # than, and through the listeners its logs and partitions.
                log.info("topic %s was deleted and created again (id %s, was %s)", name,
                         encode_topic_id(info.topic_id), encode_topic_id(held.topic_id))
                del self.topics[name]
                self._forget_topic(held)
                self._notify(name, None)
            self._gone_topic_names.pop(name, None)
            self.topics[name] = info
        self._notify(name, info)

    def _forget_topic(self, held: TopicInfo) -> None:
        """A topic gone from the view: its partition states dropped; its id remembered
        (the newest :data:`GONE_TOPIC_IDS_KEPT`) so a copy read before it went is refused,
        and its name until a topic of that name is added again, so a state read before
        it went is too (it would make the next topic's states look older)."""
        name = held.name
        if self.partition_states is not None:
            for key in [k for k in self.partition_states if k[0] == name]:
                del self.partition_states[key]
        ids, names = self._gone_topic_ids, self._gone_topic_names
        ids[held.topic_id] = None
        names[name] = None
        if len(ids) > GONE_TOPIC_IDS_KEPT:
            del ids[next(iter(ids))]
        if len(names) > GONE_TOPIC_IDS_KEPT:
            del names[next(iter(names))]

    def apply_partition_states(self, states: Mapping[tuple[str, int], PartitionState]) -> None:
        """States written by the controller or a leader; stale ones (an older leader epoch,
        or an older version of the state znode at the same epoch) are ignored."""
        if self.partition_states is None or (
            loop_owned.DEBUG and type(self.partition_states) is dict
        ):  # an empty dict set by the broker: checked from now on in debug mode
            self.partition_states = loop_dict(self.partition_states)
        changed = []
        gone = self._gone_topic_names
        for key, state in states.items():
            if key[0] in gone:
                continue  # read before its topic's deletion, applied after it
            old = self.partition_states.get(key)
            if old is not None and (
                state.leader_epoch < old.leader_epoch
                or (state.leader_epoch == old.leader_epoch
                    and state.partition_epoch < old.partition_epoch)
            ):
                continue
            if old != state:
                self.partition_states[key] = state
                changed.append(key)
        if changed:
            for listener in self._state_listeners:
                listener(changed)

    def read_topic(self, name: str) -> TopicInfo | None:
        """The topic as the store has it now (a blocking read: not on the event loop)."""
        found = self.store.get(f"{self.TOPICS}/{name}")
        if found is None:
            return None
        config = self.store.get(self.topic_config_path(name))
        return self.topic_from_doc(name, json.loads(found.data), config_of(config),
                                   found.version, -1 if config is None else config.version)

    @staticmethod
    def topic_from_doc(name: str, doc: Any, configs: Mapping[str, str],
                       partitions_version: int = -1, config_version: int = -1) -> TopicInfo:
        """A topic from its ``/brokers/topics/<t>`` document and its config overrides (and
        the store's versions of both nodes, when known)."""
        return TopicInfo(
            name, decode_topic_id(doc["topic_id"]),
            {int(p): list(r) for p, r in doc["partitions"].items()}, dict(configs),
            partitions_version, config_version,
        )

    def _notify(self, name: str, info: TopicInfo | None) -> None:
        for listener in self._listeners:
            listener(name, info)

    def _ensure_cluster_id(self) -> str:
        found = self.store.get_json(self.CLUSTER_ID)
        if found is not None:
            doc, _ = found
            return str(doc["id"])  # type: ignore[index]
        cluster_id = encode_topic_id(uuid.uuid4())
        try:
            self.store.create_json(self.CLUSTER_ID, {"version": "1", "id": cluster_id})
        except NodeExistsError:
            return self._ensure_cluster_id()
        return cluster_id

    def reload(self) -> None:
        topics = {}
        for name in self.store.children(self.TOPICS):
            info = self.read_topic(name)
            if info is not None:
                topics[name] = info
        self.topics = loop_dict(topics)
        self.client_quotas = loop_dict(self.read_client_quotas())
        self.group_configs = loop_dict(self.read_group_configs())

    # -- handing work to a worker thread ---------------------------------------------------
    def off_loop(self, fn: Callable[[], T]) -> Callable[[], T]:
        """``fn``, to be run in a worker thread (``asyncio.to_thread(metadata.off_loop(fn))``),
        reading a copy of the topics, partition states and broker configs taken now, on
        the loop, instead of the loop's own containers, which the loop changes meanwhile
        (issue 52: a walk over them in the worker raised "dictionary changed size during
        iteration"). The copy is the worker's: it adds its own changes to it; the loop's
        view follows through :meth:`apply_locally`. Copying is a shallow copy of three
        dicts (topics and states are replaced whole, never changed in place)."""
        states = self.partition_states
        view = WorkerView(dict(self.topics), dict(states) if states is not None else None,
                          dict(self._broker_configs))

        def run() -> T:
            self._worker.view = view
            try:
                return fn()
            finally:
                self._worker.view = None

        return run

    def _view(self) -> WorkerView | None:
        """The worker's copy when called in a worker started by :meth:`off_loop`."""
        view: WorkerView | None = getattr(self._worker, "view", None)
        return view

    def _topics_now(self) -> dict[str, TopicInfo]:
        """The topics: the loop's own dict, or in a worker its copy."""
        view = self._view()
        return self.topics if view is None else view.topics

    def _changed_in_worker(self, name: str, info: TopicInfo | None) -> None:
        """A change made by this worker, kept in its copy for its next steps."""
        view = self._view()
        if view is None:
            return
        if info is None:
            view.topics.pop(name, None)
            if view.partition_states is not None:
                for key in [k for k in view.partition_states if k[0] == name]:
                    del view.partition_states[key]
        else:
            view.topics[name] = info

    # -- queries -------------------------------------------------------------------------
    def get(self, name: str) -> TopicInfo | None:
        return self._topics_now().get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        for info in self._topics_now().values():
            if info.topic_id == topic_id:
                return info
        return None

    def partition_state(self, name: str, partition: int) -> PartitionState:
        """Leader, leader epoch and ISR of a partition: the one place they are decided.

        Without a controller (the embedded single node) the first replica leads, every
        replica is in sync and the epoch stays 0: nothing ever moves leadership. In
        cluster mode it is ``/brokers/topics/<t>/partitions/<p>/state`` as the controller
        wrote it; a partition the controller has not decided yet has no leader."""
        view = self._view()
        info = (self.topics if view is None else view.topics).get(name)
        replicas = tuple(info.partitions.get(partition, ())) if info is not None else ()
        if not replicas:
            return PartitionState(-1, -1, (), ())
        states = self.partition_states if view is None else view.partition_states
        if states is not None:
            found = states.get((name, partition))
            if found is None:
                return PartitionState(-1, -1, (), replicas)
            if found.replicas != replicas:  # reassigned since the state was written
                return dataclasses.replace(found, replicas=replicas)
            return found
        return PartitionState(replicas[0], 0, replicas, replicas)

    def log_config(self, name: str) -> LogConfig:
        info = self._topics_now().get(name)
        return LogConfig.build(self.broker_defaults, info.configs if info else {})

    # -- changes -------------------------------------------------------------------------
    def validate_new_topic(
        self, name: str, num_partitions: int, replication_factor: int,
        configs: Mapping[str, str | None],
    ) -> tuple[int, int, dict[str, str]]:
        try:
            topic_names.validate(name)
        except topic_names.InvalidTopicNameError as exc:
            raise MetadataError("INVALID_TOPIC_EXCEPTION", str(exc)) from exc
        topics = self._topics_now()
        if name in topics:
            raise MetadataError("TOPIC_ALREADY_EXISTS", f"topic {name!r} already exists")
        key = topic_names.collision_key(name)
        for other in topics:
            if topic_names.collision_key(other) == key:
                raise MetadataError(
                    "INVALID_TOPIC_EXCEPTION",
                    f"topic {name!r} collides with existing topic {other!r} ('.' and '_' "
                    "are interchangeable in metric names)",
                )
        if num_partitions == -1:
            num_partitions = int(self.broker_defaults.get("num.partitions", 1))
        if replication_factor == -1:
            replication_factor = int(self.broker_defaults.get("default.replication.factor", 1))
        if not 0 < num_partitions <= MAX_PARTITIONS:
            raise MetadataError(
                "INVALID_PARTITIONS", f"number of partitions must be 1..{MAX_PARTITIONS}"
            )
        if replication_factor <= 0 or replication_factor > 32767:
            raise MetadataError("INVALID_REPLICATION_FACTOR", "replication factor must be > 0")
        if self.max_replication_factor is not None and (
            replication_factor > self.max_replication_factor
        ):
            raise MetadataError(
                "INVALID_REPLICATION_FACTOR",
                f"replication factor {replication_factor} is not served yet: replication "
                f"between brokers is not implemented, so a follower would never hold the "
                f"data (at most {self.max_replication_factor})",
            )
        clean = {k: v for k, v in configs.items() if v is not None}
        try:
            LogConfig.build(self.broker_defaults, clean)
        except ConfigError as exc:
            raise MetadataError("INVALID_CONFIG", str(exc)) from exc
        brokers = self.broker_ids()
        if replication_factor > len(brokers):
            raise MetadataError(
                "INVALID_REPLICATION_FACTOR",
                f"replication factor {replication_factor} is larger than the {len(brokers)} "
                "available brokers",
            )
        self.check_partition_limits(num_partitions, replication_factor, len(brokers))
        return num_partitions, replication_factor, clean

    def check_partition_limits(self, new: int, replication_factor: int, brokers: int) -> None:
        """Refuse ``new`` partitions in one operation beyond Kafka's per-operation bound,
        and beyond what the brokers may hold: a log costs open files, and a broker out of
        them can neither append nor restart (POLICY_VIOLATION, as Kafka's controller
        answers an operation it will not carry out)."""
        if new > MAX_PARTITIONS_PER_OPERATION:
            raise MetadataError(
                "POLICY_VIOLATION",
                f"{new} new partitions in one operation is more than the "
                f"{MAX_PARTITIONS_PER_OPERATION} allowed; create them in steps",
            )
        limit = self.max_broker_partitions
        if limit is None:
            return
        held = sum(len(info.partitions) * len(next(iter(info.partitions.values()), ()))
                   for info in self._topics_now().values())
        wanted = held + new * replication_factor
        if wanted > limit * max(brokers, 1):
            raise MetadataError(
                "POLICY_VIOLATION",
                f"{new} more partitions would make {wanted} partition replicas on "
                f"{brokers} broker(s), above the limit of {limit} per broker "
                "(max.broker.partitions, lowered to what the open-files limit allows)",
            )

    def create_topic(
        self, name: str, num_partitions: int = -1, replication_factor: int = -1,
        configs: Mapping[str, str | None] | None = None,
        assignment: Mapping[int, list[int]] | None = None,
    ) -> TopicInfo:
        num_partitions, replication_factor, clean = self.validate_new_topic(
            name, num_partitions, replication_factor, configs or {}
        )
        replicas = dict(assignment) if assignment else assign_replicas(
            sorted(self.broker_ids()), num_partitions, replication_factor,
            racks=self.broker_racks(), rng=self.rng,
        )
        info = TopicInfo(name, uuid.uuid4(), replicas, clean)
        # The configs and the topic in one transaction: two brokers creating the same
        # topic at once (e.g. __consumer_offsets) never mix their configs.
        ops: list[CreateOp] = []
        if clean:
            self._ensure_parent(self.CONFIGS)
            ops.append(CreateOp(f"{self.CONFIGS}/{name}",
                                _json({"version": 1, "config": dict(clean)})))
        self._ensure_parent(self.TOPICS)
        ops.append(CreateOp(f"{self.TOPICS}/{name}", _json(self._topic_doc(info))))
        try:
            self.store.multi(ops)
        except NodeExistsError as exc:
            raise MetadataError("TOPIC_ALREADY_EXISTS", f"topic {name!r} already exists") from exc
        info = dataclasses.replace(info, partitions_version=0,
                                   config_version=0 if clean else -1)
        log.info("created topic %s with %s", name, plural(len(replicas), "partition"))
        self._changed_in_worker(name, info)
        self.apply_locally(lambda: self.apply_topic(name, info))
        return info

    @property
    def remote(self) -> bool:
        """Whether changes go to a shared store over the network (cluster mode): callers
        on the event loop then make them in a worker thread."""
        return self.defer_local is not None

    def apply_locally(self, apply: Callable[[], None]) -> None:
        """Run ``apply`` (a change of the local view) now, or on the event loop in cluster
        mode."""
        if self.defer_local is None:
            apply()
        else:
            self.defer_local(apply)

    def _ensure_parent(self, path: str) -> None:
        if self.store.get(path) is None:
            with contextlib.suppress(NodeExistsError):
                self.store.create(path, b"")

    def _topic_doc(self, info: TopicInfo) -> dict[str, Any]:
        return {
            "version": 3,
            "topic_id": encode_topic_id(info.topic_id),
            "partitions": {str(p): r for p, r in sorted(info.partitions.items())},
        }

    def topic_config_path(self, name: str) -> str:
        return f"{self.CONFIGS}/{name}"

    def broker_config_path(self, entity: str) -> str:
        return f"{self.BROKER_CONFIGS}/{entity}"

    def read_configs(self, path: str) -> dict[str, str]:
        """The configs stored at ``path`` now, from the store itself rather than this
        broker's view (blocking: in cluster mode, not on the event loop)."""
        return config_of(self.store.get(path))

    def delete_topic(self, name: str) -> TopicInfo:
        info = self._topics_now().get(name)
        if info is None:
            raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
        self._delete_topic_node(name)
        if self.store.get(f"{self.CONFIGS}/{name}") is not None:
            self.store.delete(f"{self.CONFIGS}/{name}")
        log.info("deleted topic %s", name)
        # the partition states go with the topic, on the loop (apply_topic)
        self._changed_in_worker(name, None)
        self.apply_locally(lambda: self.apply_topic(name, None))
        return info

    def _delete_topic_node(self, name: str) -> None:
        """``/brokers/topics/<name>`` with what is below it: the controller's partition
        states. A recursive delete lists the children, deletes them, then the node; a
        state the controller writes meanwhile (electing a new topic's leaders) makes that
        last step fail with NotEmptyError: deleted again, a few times (found by the
        stress test of issue 52, answered UNKNOWN_SERVER_ERROR before)."""
        path = f"{self.TOPICS}/{name}"
        for attempt in range(1, DELETE_ATTEMPTS + 1):
            try:
                self.store.delete(path, recursive=True)
                return
            except NoNodeError as exc:  # deleted meanwhile, through another broker
                raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION",
                                    f"topic {name!r} does not exist") from exc
            except NotEmptyError:
                if attempt == DELETE_ATTEMPTS:
                    raise
                log.info("topic %s got a child while it was deleted; deleting again", name)

    def create_partitions(
        self, name: str, count: int, validate_only: bool = False,
        assignment: Mapping[int, list[int]] | None = None,
    ) -> TopicInfo:
        """Grow ``name`` to ``count`` partitions; ``assignment`` (new partition → replicas,
        already validated by the caller) replaces the computed assignment. The count is
        judged, and the new partitions placed, against the assignment as the store holds
        it, written compare-and-set on the version read: another broker may have grown
        the topic since this view heard of it, and its partitions are kept (read again
        when it wrote between the read and the write)."""
        held = self._topics_now().get(name)
        if held is None:
            raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
        path = f"{self.TOPICS}/{name}"
        for _ in range(UPDATE_ATTEMPTS):
            found = self.store.get(path)
            if found is None:
                raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION",
                                    f"topic {name!r} does not exist")
            info = self.topic_from_doc(name, json.loads(found.data), held.configs,
                                       found.version, held.config_version)
            current = len(info.partitions)
            if count <= current:
                raise MetadataError(
                    "INVALID_PARTITIONS",
                    f"topic {name!r} has {current} partitions; the new count must be larger",
                )
            if count > MAX_PARTITIONS:
                raise MetadataError("INVALID_PARTITIONS",
                                    f"at most {MAX_PARTITIONS} partitions")
            rf = len(next(iter(info.partitions.values())))
            self.check_partition_limits(count - current, rf, len(self.broker_ids()))
            more = (dict(assignment) if assignment
                    else self._assign_more(info, count - current, rf))
            if validate_only:
                return info
            updated = dataclasses.replace(info, partitions={**info.partitions, **more})
            try:
                written = self.store.set_json(path, self._topic_doc(updated), found.version)
            except BadVersionError:
                continue  # another writer came between: judge and place again
            grown = dataclasses.replace(updated, partitions_version=written.version)
            self._changed_in_worker(name, grown)
            self.apply_locally(functools.partial(self.apply_topic, name, grown))
            return grown
        raise MetadataError("UNKNOWN_SERVER_ERROR",
                            f"topic {name!r} changed {UPDATE_ATTEMPTS} times while growing it")

    def _assign_more(self, info: TopicInfo, new: int, rf: int) -> dict[int, list[int]]:
        """Replicas of ``new`` partitions after the existing ones, continuing the topic's
        leader pattern from partition 0's leader (Kafka's ``AdminZkClient.addPartitions``
        with ``startPartitionId``)."""
        brokers = sorted(self.broker_ids())
        racks = {b: r for b, r in self.broker_racks().items() if b in brokers}
        order = rack_alternated_brokers(racks) if racks else brokers
        leader = info.partitions[min(info.partitions)][0]
        return assign_replicas(
            brokers, new, rf, len(info.partitions), racks,
            start_index=continuing_start_index(order, leader), rng=self.rng,
        )

    def set_topic_configs(self, name: str, configs: Mapping[str, str], validate_only: bool) -> None:
        """Replace the topic's config overrides."""
        self.update_topic_configs(name, lambda _: dict(configs), validate_only)

    def update_topic_configs(self, name: str, change: Callable[[dict[str, str]], dict[str, str]],
                             validate_only: bool) -> dict[str, str]:
        """Apply ``change`` to the topic's overrides as the store holds them now and write
        the result, validated, compare-and-set (:meth:`MetadataStore.update_config`: a
        change made through another broker that this broker's view has not heard of yet
        is kept); the local view follows. Returns the overrides written."""
        info = self._topics_now().get(name)
        if info is None:
            raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")

        def validated(current: dict[str, str]) -> dict[str, str]:
            configs = change(current)
            try:
                LogConfig.build(self.broker_defaults, configs)
            except ConfigError as exc:
                raise MetadataError("INVALID_CONFIG", str(exc)) from exc
            return configs

        path = self.topic_config_path(name)
        if validate_only:
            return validated(self.read_configs(path))
        configs, version = self.store.update_config_node(path, validated, remove_empty=False)
        changed = TopicInfo(info.name, info.topic_id, info.partitions, dict(configs),
                            info.partitions_version, version)
        self._changed_in_worker(name, changed)
        self.apply_locally(lambda: self.apply_topic(name, changed))
        return configs

    # -- dynamic broker configs (Kafka's /config/brokers/<id> and /config/brokers/<default>)
    def broker_configs(self, entity: str) -> dict[str, str]:
        """Dynamic configs stored for broker ``entity`` (an id or ``<default>``), read once
        and then kept (:meth:`cache_broker_configs`)."""
        view = self._view()
        configs = self._broker_configs if view is None else view.broker_configs
        cached = configs.get(entity)
        if cached is None:
            cached = self.read_broker_configs(entity)
            configs[entity] = cached
        return dict(cached)

    def read_broker_configs(self, entity: str) -> dict[str, str]:
        """From the store (blocking: in cluster mode, not on the event loop)."""
        return self.read_configs(self.broker_config_path(entity))

    def cache_broker_configs(self, entity: str, configs: Mapping[str, str]) -> None:
        self._broker_configs[entity] = dict(configs)

    def set_broker_configs(self, entity: str, configs: Mapping[str, str]) -> None:
        """Replace the dynamic configs of ``entity``; validation is the caller's."""
        self.update_broker_configs(entity, lambda _: dict(configs))

    def update_broker_configs(self, entity: str,
                              change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """Apply ``change`` (which validates) to the dynamic configs of ``entity`` as the
        store holds them now, written compare-and-set (:meth:`update_topic_configs`);
        the local view follows. Returns the configs written."""
        stored = self.store.update_config(self.broker_config_path(entity), change,
                                          remove_empty=False)
        view = self._view()
        if view is not None:
            view.broker_configs[entity] = stored
        self.apply_locally(lambda: self.cache_broker_configs(entity, stored))
        return stored

    # -- group configs (KIP-848; Kafka keeps them in its metadata log as ConfigRecords of
    # GROUP resources; here beside the other entity configs, /config/groups/<group>) ----
    def group_config_path(self, group_id: str) -> str:
        return f"{self.GROUP_CONFIGS}/{self.sanitize(group_id)}"

    def read_group_configs(self) -> dict[str, dict[str, str]]:
        """Every group's stored configs (blocking: in cluster mode, not on the loop)."""
        out: dict[str, dict[str, str]] = {}
        for node in self.store.children(self.GROUP_CONFIGS):
            configs = self.read_configs(f"{self.GROUP_CONFIGS}/{node}")
            if configs:
                out[self.desanitize(node)] = configs
        return out

    def cache_group_configs(self, group_id: str, configs: Mapping[str, str]) -> None:
        """Keep ``group_id``'s configs (empty: none)."""
        if configs:
            self.group_configs[group_id] = dict(configs)
        else:
            self.group_configs.pop(group_id, None)

    def update_group_configs(self, group_id: str,
                             change: Callable[[dict[str, str]], dict[str, str]],
                             ) -> dict[str, str]:
        """Apply ``change`` (which validates) to the configs of group ``group_id`` as the
        store holds them now, written compare-and-set (:meth:`update_topic_configs`), the
        node removed once empty; the local view follows. Returns the configs written."""
        stored = self.store.update_config(self.group_config_path(group_id), change)
        self.apply_locally(lambda: self.cache_group_configs(group_id, stored))
        return stored

    # -- client quotas (Kafka's /config/clients/<client id>, /config/users/<user> and
    # /config/users/<user>/clients/<client id>, any name possibly <default>) -------------
    @staticmethod
    def sanitize(name: str) -> str:
        """A user or client id as a node name (Kafka's ``Sanitizer``: URL encoding, so
        ``/`` and ``*`` cannot break the path; ``<default>`` is kept for the default
        entity). ``.`` and ``..``, which URL encoding keeps, are written ``%2E``, ``%2E%2E``:
        ZooKeeper refuses them as path components (a relative path)."""
        if name in (".", ".."):
            return name.replace(".", "%2E")
        return name if name == DEFAULT_CLIENT_ENTITY else urllib.parse.quote(name, safe="")

    @staticmethod
    def desanitize(node: str) -> str:
        return node if node == DEFAULT_CLIENT_ENTITY else urllib.parse.unquote(node)

    @classmethod
    def quota_path(cls, entity: QuotaEntity) -> str:
        """The node of a quota entity (user, client id), Kafka's ZooKeeper layout."""
        user, client_id = entity
        if user is None:
            assert client_id is not None
            return f"{cls.CLIENT_CONFIGS}/{cls.sanitize(client_id)}"
        path = f"{cls.USER_CONFIGS}/{cls.sanitize(user)}"
        return path if client_id is None else f"{path}/clients/{cls.sanitize(client_id)}"

    def add_client_quota_listener(
        self, listener: Callable[[Mapping[QuotaEntity, Mapping[str, str]]], None]
    ) -> None:
        self._client_quota_listeners.append(listener)
        listener(self.client_quotas)

    def read_client_quotas(self) -> dict[QuotaEntity, dict[str, str]]:
        """Every stored quota entity (blocking: in cluster mode, not on the event loop)."""
        out: dict[QuotaEntity, dict[str, str]] = {}
        entities: list[QuotaEntity] = [
            (None, self.desanitize(node)) for node in self.store.children(self.CLIENT_CONFIGS)
        ]
        for node in self.store.children(self.USER_CONFIGS):
            user = self.desanitize(node)
            entities.append((user, None))
            clients = f"{self.USER_CONFIGS}/{node}/clients"
            entities += [(user, self.desanitize(c)) for c in self.store.children(clients)]
        for entity in entities:
            configs = self.read_quota_node(entity)
            if configs:
                out[entity] = configs
        return out

    def read_quota_node(self, entity: QuotaEntity) -> dict[str, str]:
        """The quotas stored for ``entity`` (a user's SCRAM credentials left out)."""
        path = self.quota_path(entity)
        try:
            found = self.store.get_json(path)
            configs = dict(found[0]["config"]) if found else {}  # type: ignore[index]
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring unreadable client quotas in %s", path)
            return {}
        return quota_configs(configs)

    def cache_client_quotas(self, entity: QuotaEntity, configs: Mapping[str, str]) -> None:
        """Keep ``entity``'s quotas (empty: none) and tell the listeners."""
        configs = quota_configs(configs)
        if configs:
            self.client_quotas[entity] = configs
        elif self.client_quotas.pop(entity, None) is None:
            return
        for listener in self._client_quota_listeners:
            listener(self.client_quotas)

    def set_client_quotas(self, entity: QuotaEntity, configs: Mapping[str, str]) -> None:
        """Replace the quotas of ``entity`` (:meth:`update_client_quotas`)."""
        self.update_client_quotas(entity, lambda _: dict(configs))

    def update_client_quotas(self, entity: QuotaEntity,
                             change: Callable[[dict[str, str]], dict[str, str]],
                             ) -> dict[str, str]:
        """Apply ``change`` to the quotas of ``entity`` ((user, client id), either possibly
        ``<default>``, the user None for a client-id entity) as the store holds them now,
        written compare-and-set (:meth:`MetadataStore.update_config`), so a change made
        through another broker, or a SCRAM credential set meanwhile, is kept; a node left
        with no config and no children is removed. A user's node keeps its SCRAM
        credentials (the config map they share in Kafka). Validation is the caller's.
        Returns the quotas written."""

        def keeping_credentials(stored: dict[str, str]) -> dict[str, str]:
            kept = {k: v for k, v in stored.items() if k in SCRAM_CONFIG_KEYS}
            return {**kept, **change(quota_configs(stored))}

        written = self.store.update_config(self.quota_path(entity), keeping_credentials)
        if entity[0] is not None and entity[1] is not None:
            self._prune_user(entity[0])
        quotas = quota_configs(written)
        self.apply_locally(lambda: self.cache_client_quotas(entity, quotas))
        return quotas

    def _prune_user(self, user: str) -> None:
        """Remove ``/config/users/<user>/clients`` and the user's node once nothing is
        left in them (Kafka leaves them; removing keeps the tree what is stored)."""
        path = self.quota_path((user, None))
        clients = f"{path}/clients"
        with contextlib.suppress(NoNodeError, NotEmptyError):
            if not self.store.children(clients) and self.store.get(clients) is not None:
                self.store.delete(clients)
            node = self.store.get(path)
            if (node is not None and not json.loads(node.data or b"{}").get("config")
                    and not self.store.children(path)):
                self.store.delete(path)

    # -- offsets committed the old way (OffsetCommit v0 / OffsetFetch v0, Kafka 0.8) --------
    def consumer_offset(self, group: str, topic: str, partition: int) -> int:
        """The offset OffsetCommit v0 stored for ``group`` (-1: none), read from Kafka's
        ``/consumers/<group>/offsets/<topic>/<partition>`` (blocking: in cluster mode, not
        on the event loop)."""
        node = self.store.get(self._consumer_offset_path(group, topic, partition))
        return int(node.data) if node is not None and node.data else -1

    def set_consumer_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        """Store ``offset`` as decimal text in that node (Kafka's
        ``ZkUtils.updatePersistentPath``; blocking), whether or not it exists yet."""
        self.store.set_or_create(self._consumer_offset_path(group, topic, partition),
                                 str(offset).encode())

    @classmethod
    def _consumer_offset_path(cls, group: str, topic: str, partition: int) -> str:
        return f"{cls.CONSUMERS}/{group}/offsets/{topic}/{partition}"
