"""A broker's view of the cluster kept in step with ZooKeeper (the broker side of Kafka's
LeaderAndIsr / UpdateMetadata, and of its topic and config change watches).

How it works: everything here runs on the store's callback thread or at start in a worker
thread, never on the event loop. What it learns is handed to the event loop with ``post``
(``loop.call_soon_threadsafe``), where :class:`~odradek.cluster.metadata.ClusterMetadata`
applies it and tells its listeners (the replica manager hosts logs and updates partitions).

- *Topics.* A children watch on ``/brokers/topics`` finds topics created or deleted through
  any broker; a data watch on each ``/brokers/topics/<t>`` finds partitions added; a data
  watch on each ``/config/topics/<t>`` finds configs changed. Each watch fires once, so each
  read sets it again. A new session reads every topic again, and drops those deleted
  while the old one was lost. A topic deleted and created again between two looks (its
  data watch reads the new one under the same name) comes as a new topic id: the view
  replaces the old topic (:meth:`ClusterMetadata.apply_topic`).
- *Partition states.* The controller writes ``/brokers/topics/<t>/partitions/<p>/state``
  and then one ``/partition_state_notification/state_change_<seq>`` naming the partitions
  it wrote; a leader changing its ISR writes one too. A children watch on the
  notification parent reads the notifications newer than the last one handled, in
  sequence order, and reads the states they name with pipelined reads. A notification's
  controller epoch decides nothing: the states are read from ZooKeeper, where only fenced
  or version-conditional writes change them. At start, after a new ZooKeeper session,
  whenever the last notification handled is gone (purged: unread ones may have gone with
  it), and when one listed is gone before it is read (purged meanwhile: a broker that
  fell behind the purge), every state is read once instead.
- *Dynamic broker configs.* Data watches on ``/config/brokers/<default>`` and
  ``/config/brokers/<id>``: a change made through any broker is layered again here.
- *Client quotas.* A children watch on ``/config/clients`` finds client entities added or
  removed; a data watch on each ``/config/clients/<entity>`` finds its quotas changed.
  Likewise for users (KIP-55): a children watch on ``/config/users`` and, for each user,
  a data watch on ``/config/users/<user>`` (the node its SCRAM credentials share, left
  out of the quotas) and a children watch on ``/config/users/<user>/clients``, whose
  nodes get a data watch each. What is read is kept in the metadata, whose listeners
  (the client quota managers) take it at once.
- *Group configs (KIP-848).* A children watch on ``/config/groups`` and a data watch on
  each ``/config/groups/<group>``, kept in the metadata, where the group coordinator
  reads them at each heartbeat; a new session reads them all again.
- *Watches whose read failed.* A watch fires once; the read that sets it again can fail
  when the connection drops at that moment (ConnectionLoss), and the same session may
  then come back (RECONNECTED) with no watch left there and no event to say so. Each
  such read is remembered and run again when the session is back (RECONNECTED or, for
  what a new session does not re-read, NEW_SESSION), as Kafka's ZooKeeperClient re-sends
  its registrations after a reconnection.
- *Brokers.* The live brokers (``/brokers/ids``) and the controller are read by
  :class:`~odradek.cluster.membership.BrokerChangeWatcher` and the election; this module
  only carries topics and states.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from odradek.cluster.leader_election import NOTIFICATION_PATH, decode_state, state_path
from odradek.cluster.metadata import ClusterMetadata, TopicInfo
from odradek.cluster.partition import PartitionState
from odradek.cluster.store import MetadataStore, SessionEvent, StoreError

__all__ = ["MetadataSync"]

log = logging.getLogger(__name__)

TOPICS = ClusterMetadata.TOPICS
CONFIGS = ClusterMetadata.CONFIGS
CLIENTS = ClusterMetadata.CLIENT_CONFIGS
USERS = ClusterMetadata.USER_CONFIGS
GROUPS = ClusterMetadata.GROUP_CONFIGS

Post = Callable[[Callable[[], None]], None]


class MetadataSync:
    def __init__(
        self, store: MetadataStore, metadata: ClusterMetadata, post: Post,
        broker_id: int = -1, on_broker_configs: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.metadata = metadata
        self.post = post
        self.broker_id = broker_id
        # Called on the event loop when /config/brokers/<default> or /config/brokers/<id>
        # changed (the dynamic broker configs, layered again by the caller).
        self.on_broker_configs = on_broker_configs
        self._lock = threading.RLock()
        self._topics: set[str] = set()  # names whose data and config watches are set
        self._rewatch_topics = False  # a new session: every topic read and watched again
        self._clients: set[str] = set()  # client quota nodes whose data watch is set
        self._users: set[str] = set()  # user nodes whose data and clients watches are set
        self._user_clients: set[tuple[str, str]] = set()  # (user node, client node) watched
        self._groups: set[str] = set()  # group config nodes whose data watch is set
        self._last_notification = ""  # name of the newest notification handled
        self._controller_epoch = 0  # newest controller epoch seen in a notification
        self._closed = False
        # Reads that set a watch and failed (the connection dropped): run again when the
        # session is back. Keyed by what they watch, so a path is retried once.
        self._retry: dict[str, Callable[[], None]] = {}

    # -- life cycle ----------------------------------------------------------------------
    def start(self) -> dict[tuple[str, int], PartitionState]:
        """Set the watches and read every state (blocking: call it off the event loop).
        Returns the states, for the caller to apply before it serves."""
        self.store.add_session_listener(self._on_session)
        with self._lock:
            self._watch_topics()
            self._watch_broker_configs(starting=True)
            self._watch_clients()
            self._watch_users()
            self._watch_groups()
            return self._reload_states()

    def close(self) -> None:
        self._closed = True
        self.store.remove_session_listener(self._on_session)

    def _failed(self, key: str, again: Callable[[], None]) -> None:
        """A read that sets a watch failed: that watch is gone until ``again`` runs."""
        with self._lock:
            self._retry[key] = again

    def _children(self, path: str, watch: Callable[[str], None], key: str,
                  again: Callable[[], None]) -> set[str] | None:
        """The children of ``path``, setting ``watch``; None if the read failed (logged,
        and ``again`` kept to run when the session is back)."""
        try:
            return set(self.store.children(path, watch=watch))
        except StoreError:
            log.exception("cannot read %s", path)
            self._failed(key, again)
            return None

    def _config_node(self, path: str, watch: Callable[[str], None], key: str,
                     again: Callable[[], None]) -> tuple[bool, dict[str, str]] | None:
        """Whether the config node ``path`` exists and its ``config`` map, setting
        ``watch``; None if the read failed (logged, and ``again`` kept as above)."""
        try:
            found = self.store.get(path, watch=watch)
            configs = (dict(json.loads(found.data)["config"])
                       if found is not None and found.data else {})
        except (StoreError, ValueError, KeyError, TypeError):
            log.exception("cannot read %s", path)
            self._failed(key, again)
            return None
        return found is not None, configs

    def _run_retries(self, skip: Callable[[str], bool] = lambda key: False) -> None:
        with self._lock:
            retry, self._retry = self._retry, {}
            for key, again in retry.items():
                if not skip(key):
                    again()

    # -- topics --------------------------------------------------------------------------
    def _watch_topics(self, _path: str = "") -> None:
        if self._closed:
            return
        with self._lock:
            names = self._children(TOPICS, self._watch_topics, "topics", self._watch_topics)
            if names is None:
                return
            if self._rewatch_topics:
                # A new session: every topic's watches went with the old one, so each is
                # read again (a new one, and one deleted and created again, included);
                # those no longer listed were deleted meanwhile, unheard.
                self._rewatch_topics = False
                for name in sorted(self._topics - names):
                    self.post(lambda name=name: self.metadata.apply_topic(name, None))  # type: ignore[misc]
                self._topics = set()
            for name in sorted(names - self._topics):
                self._topics.add(name)
                self._refresh_topic(name)
            for name in sorted(self._topics - names):
                self._topics.discard(name)
                self.post(lambda name=name: self.metadata.apply_topic(name, None))  # type: ignore[misc]

    def _refresh_topic(self, name: str, _path: str = "") -> None:
        """Read the topic (assignment and configs), setting both watches again."""
        if self._closed or name not in self._topics:
            return
        refresh = self._refresher(name)
        try:
            node = self.store.get(f"{TOPICS}/{name}", watch=refresh)
            config = self.store.get(f"{CONFIGS}/{name}", watch=refresh)
        except StoreError:
            log.exception("cannot read topic %s from ZooKeeper", name)
            self._failed(f"topic:{name}", lambda: self._refresh_topic(name))
            return
        if node is None:
            return  # deleted: the children watch reports it
        doc: Any = json.loads(node.data)
        configs = dict(json.loads(config.data)["config"]) if config is not None else {}
        info = self.metadata.topic_from_doc(name, doc, configs, node.version,
                                            -1 if config is None else config.version)
        self.post(lambda: self.metadata.apply_topic(name, info))

    def _refresher(self, name: str) -> Callable[[str], None]:
        return lambda path: self._refresh_topic(name, path)

    # -- client quotas -------------------------------------------------------------------
    def _watch_clients(self, _path: str = "") -> None:
        if self._closed:
            return
        with self._lock:
            nodes = self._children(CLIENTS, self._watch_clients, "clients",
                                   self._watch_clients)
            if nodes is None:
                return
            for node in sorted(nodes - self._clients):
                self._clients.add(node)
                self._refresh_client(node)
            for node in sorted(self._clients - nodes):
                self._clients.discard(node)
                self._forget((None, ClusterMetadata.desanitize(node)))

    def _refresh_client(self, node: str, _path: str = "") -> None:
        """Read one client entity's quotas, setting its data watch again."""
        if self._closed or node not in self._clients:
            return
        read = self._config_node(f"{CLIENTS}/{node}",
                                 lambda path: self._refresh_client(node, path),
                                 f"client:{node}", lambda: self._refresh_client(node))
        if read is None:
            return
        exists, configs = read
        if not exists:
            # Deleted: the watch just set waits for a creation, which the children watch
            # reports too; forgetting the node here keeps one watch per node, not two.
            with self._lock:
                self._clients.discard(node)
        entity = (None, ClusterMetadata.desanitize(node))
        self.post(lambda: self.metadata.cache_client_quotas(entity, configs))

    # -- user quotas (KIP-55) ---------------------------------------------------------
    def _watch_users(self, _path: str = "") -> None:
        if self._closed:
            return
        with self._lock:
            nodes = self._children(USERS, self._watch_users, "users", self._watch_users)
            if nodes is None:
                return
            for node in sorted(nodes - self._users):
                self._users.add(node)
                self._refresh_quota(node, None)
                self._watch_user_clients(node)
            for node in sorted(self._users - nodes):
                self._drop_user(node)

    def _watch_user_clients(self, user: str, _path: str = "") -> None:
        """The client-id entities below one user, setting the children watch again."""
        if self._closed:
            return
        with self._lock:
            if user not in self._users:
                return
            nodes = self._children(f"{USERS}/{user}/clients",
                                   lambda path: self._watch_user_clients(user, path),
                                   f"user-clients:{user}",
                                   lambda: self._watch_user_clients(user))
            if nodes is None:
                return
            known = {c for u, c in self._user_clients if u == user}
            for node in sorted(nodes - known):
                self._user_clients.add((user, node))
                self._refresh_quota(user, node)
            for node in sorted(known - nodes):
                self._user_clients.discard((user, node))
                self._forget((ClusterMetadata.desanitize(user),
                              ClusterMetadata.desanitize(node)))

    def _drop_user(self, user: str) -> None:
        """The user's node is gone, and with it every entity below it (locked)."""
        self._users.discard(user)
        name = ClusterMetadata.desanitize(user)
        self._forget((name, None))
        for u, c in sorted(self._user_clients):
            if u == user:
                self._user_clients.discard((u, c))
                self._forget((name, ClusterMetadata.desanitize(c)))

    def _forget(self, entity: tuple[str | None, str | None]) -> None:
        self.post(lambda: self.metadata.cache_client_quotas(entity, {}))

    def _refresh_quota(self, user: str, client: str | None, _path: str = "") -> None:
        """Read a user's (or a user and client id's) quotas, setting the data watch again."""
        if self._closed:
            return
        watched = user in self._users if client is None else (user, client) in self._user_clients
        if not watched:
            return
        path = f"{USERS}/{user}" if client is None else f"{USERS}/{user}/clients/{client}"
        read = self._config_node(path, lambda p: self._refresh_quota(user, client, p),
                                 f"quota:{path}", lambda: self._refresh_quota(user, client))
        if read is None:
            return
        exists, configs = read
        if not exists:
            with self._lock:  # deleted: the children watch reports it too
                if client is None:
                    self._drop_user(user)
                else:
                    self._user_clients.discard((user, client))
        entity = (ClusterMetadata.desanitize(user),
                  None if client is None else ClusterMetadata.desanitize(client))
        self.post(lambda: self.metadata.cache_client_quotas(entity, configs))

    # -- group configs (KIP-848) -------------------------------------------------------
    def _watch_groups(self, _path: str = "") -> None:
        if self._closed:
            return
        with self._lock:
            nodes = self._children(GROUPS, self._watch_groups, "groups", self._watch_groups)
            if nodes is None:
                return
            for node in sorted(nodes - self._groups):
                self._groups.add(node)
                self._refresh_group(node)
            for node in sorted(self._groups - nodes):
                self._groups.discard(node)
                self._forget_group(node)

    def _rewatch_groups(self) -> None:
        """A new session: every group's data watch went with the old one (locked)."""
        before, self._groups = self._groups, set()
        self._watch_groups()
        for node in sorted(before - self._groups):
            self._forget_group(node)

    def _forget_group(self, node: str) -> None:
        group_id = ClusterMetadata.desanitize(node)
        self.post(lambda: self.metadata.cache_group_configs(group_id, {}))

    def _refresh_group(self, node: str, _path: str = "") -> None:
        """Read one group's configs, setting its data watch again."""
        if self._closed or node not in self._groups:
            return
        read = self._config_node(f"{GROUPS}/{node}",
                                 lambda path: self._refresh_group(node, path),
                                 f"group:{node}", lambda: self._refresh_group(node))
        if read is None:
            return
        exists, configs = read
        if not exists:
            with self._lock:  # deleted: the children watch reports it too
                self._groups.discard(node)
        group_id = ClusterMetadata.desanitize(node)
        self.post(lambda: self.metadata.cache_group_configs(group_id, configs))

    # -- dynamic broker configs ----------------------------------------------------------
    def _watch_broker_configs(self, path: str = "", *, starting: bool = False) -> None:
        """Set the watches on this broker's and the cluster-wide dynamic configs; when one
        fired (or a new session read them again), have the event loop keep them and layer
        the dynamic configs again. Only at start, before the loop reads the metadata, are
        they kept here at once."""
        if self._closed:
            return
        base = ClusterMetadata.BROKER_CONFIGS
        for entity in (ClusterMetadata.DEFAULT_BROKER_ENTITY, str(self.broker_id)):
            watched = f"{base}/{entity}"
            if path and path != watched:
                continue
            read = self._config_node(watched, self._watch_broker_configs,
                                     f"broker-configs:{watched}",
                                     lambda w=watched: self._watch_broker_configs(w))  # type: ignore[misc]
            if read is None:
                continue
            _exists, configs = read
            if starting:  # before the broker serves: the loop does not read them yet
                self.metadata.cache_broker_configs(entity, configs)
            else:
                self.post(lambda entity=entity, configs=configs: self._configs_changed(  # type: ignore[misc]
                    entity, configs))

    def _configs_changed(self, entity: str, configs: dict[str, str]) -> None:
        """On the event loop: keep the new configs, and have them layered again."""
        self.metadata.cache_broker_configs(entity, configs)
        if self.on_broker_configs is not None:
            self.on_broker_configs()

    # -- partition states ----------------------------------------------------------------
    def _reload_states(self) -> dict[tuple[str, int], PartitionState]:
        """Every state of every topic, and the newest notification as the starting point."""
        names = self.store.children(NOTIFICATION_PATH, watch=self._on_notifications)
        if names:
            self._last_notification = names[-1]
        infos = [self.metadata.read_topic(name) for name in sorted(self._topics)]
        states = self._read_states(
            (info.name, p) for info in infos if info is not None for p in info.partitions
        )
        self.post(lambda: self.metadata.apply_partition_states(states))
        return states

    def _read_states(
        self, keys: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], PartitionState]:
        wanted = list(keys)
        nodes = self.store.get_many([state_path(t, p) for t, p in wanted])
        replicas_of: dict[str, TopicInfo | None] = {}
        states: dict[tuple[str, int], PartitionState] = {}
        for (topic, partition), node in zip(wanted, nodes, strict=True):
            if node is None:
                continue
            if topic not in replicas_of:
                replicas_of[topic] = self.metadata.read_topic(topic)
            info = replicas_of[topic]
            replicas = tuple(info.partitions.get(partition, ())) if info is not None else ()
            try:
                stored = decode_state(node.data, node.version)
            except StoreError as exc:
                log.error("ignoring the state of %s-%d: %s", topic, partition, exc)
                continue
            states[(topic, partition)] = PartitionState(
                stored.leader, stored.leader_epoch, stored.isr, replicas, node.version,
                stored.controller_epoch,
            )
        return states

    def _on_notifications(self, _path: str = "") -> None:
        if self._closed:
            return
        with self._lock:
            try:
                names = self.store.children(NOTIFICATION_PATH, watch=self._on_notifications)
            except StoreError:
                log.exception("cannot read %s", NOTIFICATION_PATH)
                self._failed("notifications", self._on_notifications)
                return
            last = self._last_notification
            if last and last not in names:
                # Ours was purged, and unread ones after it may have gone with it: the
                # survivors, all newer, would not say so (the controller keeps the newest
                # 1,000, or 15 minutes' worth, and always the newest).
                log.warning("notifications were purged past %s: reading every state", last)
                self._reload_states()
                return
            fresh = [n for n in names if n > last]
            if not fresh:
                return
            nodes = self.store.get_many([f"{NOTIFICATION_PATH}/{n}" for n in fresh])
            if any(node is None for node in nodes):
                # Purged between the listing and the read (this broker fell behind by more
                # than the controller keeps): the partitions it named are unknown.
                log.warning("notifications were purged before they were read: reading "
                            "every state")
                self._reload_states()
                return
            self._last_notification = fresh[-1]
            keys: dict[tuple[str, int], None] = {}
            for name, node in zip(fresh, nodes, strict=True):
                assert node is not None
                try:
                    doc = json.loads(node.data)
                    epoch = int(doc["controller_epoch"])
                    named = [(str(p["topic"]), int(p["partition"])) for p in doc["partitions"]]
                except (ValueError, KeyError, TypeError) as exc:
                    log.error("ignoring unreadable notification %s: %s", name, exc)
                    continue
                self._controller_epoch = max(self._controller_epoch, epoch)
                keys.update(dict.fromkeys(named))
            if keys:
                states = self._read_states(keys)
                self.post(lambda: self.metadata.apply_partition_states(states))

    def _on_session(self, event: SessionEvent) -> None:
        if self._closed:
            return
        if event is SessionEvent.NEW_SESSION:
            # Watches were lost with the old session, and notifications may have been
            # purged meanwhile: read everything again.
            with self._lock:
                self._rewatch_topics = True  # kept until a listing succeeds (a retry)
                self._watch_topics()
                self._watch_broker_configs()
                self._rewatch_groups()
                self._reload_states()
                # What the reads above set again needs no retry; quotas' watches do.
                self._run_retries(skip=lambda key: key.startswith(
                    ("topics", "topic:", "broker-configs:", "notifications", "groups",
                     "group:")))
        elif event is SessionEvent.RECONNECTED:
            self._run_retries()
