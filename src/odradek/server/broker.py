"""One broker process: storage, metadata, handlers and listeners wired together.

How it works (Kafka's request processing: ``SocketServer``, ``KafkaApis``): every listener
accepts connections on one asyncio event loop; the network layer decodes frames and
dispatches each request to its handler through the registry. This module is the wiring: it
builds the parts (log manager, metadata, replica manager, group coordinator, producer ids,
dynamic configs) and hands the handlers a
:class:`~odradek.server.services.BrokerServices`, never itself. Handlers reach partitions
through the replica manager (``cluster/``). Background work (retention, flushes,
checkpoints) runs on the same loop's scheduler, with disk-heavy steps in a worker thread.

Start: open the metadata store, layer the dynamic broker configs, load logs (recovery if
the last shutdown was unclean), host every partition of every known topic (the replica
manager restores high watermarks), load the groups of the ``__consumer_offsets``
partitions led here, register handlers, listen. Stop (SIGTERM): close listeners and let
in-flight requests finish, then checkpoint high watermarks, flush every log, write
checkpoints and the clean-shutdown marker.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import inspect
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from odradek.client.connection import BrokerConnection, ClientError
from odradek.client.security import PLAINTEXT
from odradek.cluster.acl_store import AclStore
from odradek.cluster.loop_owned import loop_dict
from odradek.cluster.membership import EndPoint
from odradek.cluster.metadata import ClusterMetadata
from odradek.cluster.replica_fetcher import FetcherConfig, ReplicaFetcherManager
from odradek.cluster.replica_manager import ReplicaManager
from odradek.cluster.replication_quota import UNLIMITED, ReplicationQuota
from odradek.cluster.store import EmbeddedStore, MetadataStore
from odradek.cluster.user_credentials import scram_credential
from odradek.coordinator.group_coordinator import CoordinatorConfig, GroupCoordinator
from odradek.coordinator.offsets_topic import OFFSETS_TOPIC, OffsetsTopic
from odradek.coordinator.producer_ids import ProducerIdManager
from odradek.coordinator.transaction_coordinator import (
    TRANSACTION_STATE_TOPIC,
    TransactionConfig,
    TransactionCoordinator,
)
from odradek.protocol.registry import HandlerRegistry
from odradek.security.acl import (
    CLUSTER_NAME,
    AclAuthorizer,
    AclEntry,
    AclOperation,
    ResourcePattern,
    ResourceType,
    parse_super_users,
)
from odradek.server.broker_stats import BrokerTopicStats, RequestStats
from odradek.server.client_quotas import ClientQuotas, QuotaWindow
from odradek.server.config import BrokerConfig, parse_metrics_listener
from odradek.server.connection_quotas import ConnectionLimits, parse_per_ip_overrides
from odradek.server.dynamic_config import CLEANER_KEYS, DynamicBrokerConfig
from odradek.server.fetch_session import FetchSessionCache
from odradek.server.flow_control import RequestMemoryPool
from odradek.server.handlers import register_all
from odradek.server.handlers._group_log import group_log_replicated, txn_log_replicated
from odradek.server.handlers.init_producer_id import allocate_producer_id
from odradek.server.handlers.txn_markers import write_markers_locally
from odradek.server.listener_security import inter_broker_security, listener_security
from odradek.server.metrics import MetricsServer, require_prometheus_client
from odradek.server.network import KafkaServer, NetworkConfig
from odradek.server.purgatory import Purgatory
from odradek.server.services import BrokerServices
from odradek.server.tls_reload import TlsReloader
from odradek.server.txn_markers import TxnMarkerSender
from odradek.server.txn_verification import TxnVerifier
from odradek.server.watchdog import LoopWatchdog
from odradek.server.zk_cluster import ZkCluster
from odradek.storage import LogAppendInfo, LogManager, PartitionLog, TopicPartition
from odradek.storage.cleaner_manager import LogCleaner
from odradek.storage.files import META_PROPERTIES, atomic_write
from odradek.storage.segment import MAX_OPEN_COLD_SEGMENTS
from odradek.text import plural

log = logging.getLogger(__name__)
T = TypeVar("T")

METADATA_FILE = "odradek-metadata.json"
ANONYMOUS = "User:ANONYMOUS"  # the principal of a connection that did not authenticate
# Open files a partition's log holds at most (its active segment's .log, .index and
# .timeindex), and the share of the open-files limit kept for connections and the rest;
# the older segments held open for reads (at most MAX_OPEN_COLD_SEGMENTS of them, three
# files each) are kept aside too.
DESCRIPTORS_PER_LOG = 3
RESERVED_DESCRIPTORS_SHARE = 0.25
# How often dead cleaner threads are looked for and cleaner-status.json rewritten.
CLEANER_HEALTH_INTERVAL_MS = 5000
# The most one step of the shutdown (leaving the cluster, the cleaner, closing the
# ZooKeeper session...) is waited for before the next one goes on.
STOP_STEP_S = 5.0


class Broker:
    def __init__(self, config: BrokerConfig, store: MetadataStore | None = None) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.log_manager = LogManager(config.log_dirs, config.values)
        self._store = store
        self.fetch_purgatory = Purgatory()
        self.produce_purgatory = Purgatory()
        self.registry = HandlerRegistry()
        self.servers: list[KafkaServer] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.log_cleaner: LogCleaner | None = None
        self.started = asyncio.Event()
        self.metadata: ClusterMetadata
        self._cluster: ZkCluster | None = None
        self._logs_loaded = False
        self.replica_manager: ReplicaManager
        self.group_coordinator: GroupCoordinator
        self.transaction_coordinator: TransactionCoordinator
        self._txn_markers: TxnMarkerSender | None = None
        self.services: BrokerServices
        self._cleaner_values: dict[str, Any] | None = None
        # How this broker reaches the others' inter-broker listener (cluster mode).
        self._inter_broker = PLAINTEXT
        # metrics.listener: counters for the Prometheus endpoint (None: not counted at all)
        self.metrics_listener = parse_metrics_listener(config["metrics.listener"])
        self.topic_stats: BrokerTopicStats | None = None
        self.request_stats: RequestStats | None = None
        self.metrics_server: MetricsServer | None = None
        self.watchdog: LoopWatchdog | None = None  # event.loop.stall.threshold.ms
        self.authorizer: AclAuthorizer | None = None  # authorizer.class.name
        self.acl_store: AclStore | None = None

    # -- life cycle ----------------------------------------------------------------------
    async def start(self) -> None:
        self.config.report_unknown()
        if self.metrics_listener is not None:
            require_prometheus_client()  # before anything is loaded: one line, at once
            self.topic_stats = BrokerTopicStats(lambda name: name in self.metadata.topics)
            self.request_stats = RequestStats()
        # Listeners are bound first (accepting only once everything is loaded): a port in
        # use fails start-up before the log dirs or the metadata are touched.
        net = NetworkConfig(
            socket_request_max_bytes=self.config["socket.request.max.bytes"],
            queued_max_requests=self.config["queued.max.requests"],
            queued_max_request_bytes=self.config["queued.max.request.bytes"],
            connections_max_idle_ms=self.config["connections.max.idle.ms"],
            socket_send_buffer_bytes=self.config["socket.send.buffer.bytes"],
            socket_receive_buffer_bytes=self.config["socket.receive.buffer.bytes"],
            listen_backlog=self.config["socket.listen.backlog.size"],
            max_connections=self.config["max.connections"],
            max_connections_per_ip=self.config["max.connections.per.ip"],
            max_connections_per_ip_overrides=parse_per_ip_overrides(
                self.config["max.connections.per.ip.overrides"]
            ),
            max_connection_creation_rate=self.config["max.connection.creation.rate"],
        )
        # queued.max.request.bytes is broker-wide: one pool for every listener
        pool = (RequestMemoryPool(net.queued_max_request_bytes)
                if net.queued_max_request_bytes > 0 else None)
        if self.config["zookeeper.connect"]:
            self._inter_broker = inter_broker_security(self.config)
        for listener in self.config.listeners:
            security = listener_security(self.config, listener.name, self._scram_credential)
            server = KafkaServer(self.registry, listener.host, listener.port, net,
                                 memory_pool=pool, request_stats=self.request_stats,
                                 security=security)
            self.servers.append(server)
            await server.bind()
        store: MetadataStore
        if self.config["zookeeper.connect"]:
            store = await self._join_cluster()
        else:
            store = self._store or EmbeddedStore(
                self.config.log_dirs[0].absolute() / METADATA_FILE
            )
            self.metadata = ClusterMetadata(
                store, lambda: [self.broker_id], self.config.values | self.config.log_defaults()
            )
        self._store = store
        self.metadata.max_broker_partitions = partition_limit(
            self.config["max.broker.partitions"]
        )
        dynamic_config = DynamicBrokerConfig(self.config, self.metadata, self.log_manager)
        # Stored passwords of the old secret (or in clear) encoded with password.encoder.secret
        if self._cluster is not None:
            await asyncio.to_thread(self.metadata.off_loop(dynamic_config.reencode_passwords))
        else:
            dynamic_config.reencode_passwords()
        # Dynamic broker configs (/config/brokers/…) layer over the static ones before
        # any log is loaded, so logs start with the topic defaults in effect.
        dynamic_config.apply(reconfigure_logs=False)
        if self._cluster is not None:  # changed through another broker
            self._cluster.on_broker_configs = dynamic_config.apply
        self.log_manager.startup(self.metadata.log_config)
        self._logs_loaded = True
        if self.topic_stats is not None:  # a deleted topic's counters go, the totals stay
            self.metadata.add_listener(self._forget_topic_stats)
        self._write_meta_properties()
        self.replica_manager = ReplicaManager(
            self.broker_id, self.log_manager, self.metadata,
            self.fetch_purgatory, self.produce_purgatory,
        )
        self.replica_manager.create_logs_off_loop = self._cluster is not None
        if self._cluster is not None:
            self._start_replication(self._cluster)
        self.replica_manager.startup()
        # Groups of the __consumer_offsets partitions this broker leads are loaded
        # before the listeners open.
        self.group_coordinator = self._make_group_coordinator()
        self.metadata.add_listener(self.group_coordinator.on_topic_changed)
        self.group_coordinator.startup()
        self.transaction_coordinator = self._make_transaction_coordinator()
        await self._start_authorizer(store)
        self.replica_manager.on_leadership_change = self._on_leadership_change
        self.services = BrokerServices(
            broker_id=self.broker_id,
            config=self.config,
            metadata=self.metadata,
            replica_manager=self.replica_manager,
            fetch_purgatory=self.fetch_purgatory,
            fetch_sessions=FetchSessionCache(
                int(self.config["max.incremental.fetch.session.cache.slots"]),
                int(self.config.get("min.incremental.fetch.session.eviction.ms", 120_000)),
            ),
            group_coordinator=self.group_coordinator,
            producer_ids=ProducerIdManager(store, self.broker_id),
            dynamic_config=dynamic_config,
            advertised_endpoint=self._advertised_endpoint,
            live_brokers=self._live_brokers,
            controller_id=self._controller_id,
            reassignments=self._cluster,
            elect_preferred=self._elect_preferred,
            elect_unclean=self._elect_unclean,
            client_quotas=self._client_quotas(),
            tls_reloader=TlsReloader(self.config, self.servers),
            topic_stats=self.topic_stats,
            authorizer=self.authorizer,
            acl_store=self.acl_store,
            transaction_coordinator=self.transaction_coordinator,
            txn_offsets_completed=self._txn_offsets_completed,
        )
        self._wire_transaction_coordinator()
        # The group record a static member's JoinGroup stores waits for the ISR (acks=-1).
        self.group_coordinator.wait_replicated = functools.partial(
            group_log_replicated, self.services)
        # KIP-848's group configs, as this broker's metadata view holds them
        self.group_coordinator.group_configs = (
            lambda group_id: self.metadata.group_configs.get(group_id, {}))
        register_all(self.registry, self.services)
        threshold_ms = int(self.config["event.loop.stall.threshold.ms"])
        if threshold_ms > 0:
            self.watchdog = LoopWatchdog(asyncio.get_running_loop(), threshold_ms)
            self.watchdog.start()
        # Keystores and truststores set dynamically (KIP-226), before anyone connects.
        reloader = self.services.tls_reloader
        if reloader is not None:
            dynamic_config.add_reconfigurable(lambda _values: reloader.apply(
                dynamic_config.broker_configs(str(self.broker_id))))  # passwords decoded
        for listener, server in zip(self.config.listeners, self.servers, strict=True):
            server.request_quota = self.services.client_quotas.request  # KIP-124
            await server.start()
            log.info("listening on %s://%s:%d", listener.name, listener.host, server.port)
        if self.metrics_listener is not None:
            self.metrics_server = MetricsServer(self, self.metrics_listener)
            self.metrics_server.start()
            log.info("metrics at %s", self.metrics_server.url)
        if self._cluster is not None:
            await self._cluster.register(self._endpoints())
        periodic = [
            *self.log_manager.periodic_tasks(),
            ("high-watermark-checkpoint",
             int(self.config["replica.high.watermark.checkpoint.interval.ms"]),
             self.replica_manager.checkpoint_high_watermarks_off_loop),
        ]
        for name, interval_ms, fn in periodic:
            if interval_ms < (1 << 40):
                self._tasks.append(asyncio.create_task(self._every(name, interval_ms, fn)))
        # Compaction runs in its own threads; the loop only checks their health.
        self.log_cleaner = LogCleaner(self.log_manager, dynamic_config.effective_values())
        self.log_cleaner.startup()
        dynamic_config.add_reconfigurable(self._reconfigure_connections)
        dynamic_config.add_reconfigurable(self._reconfigure_cleaner)
        self._tasks.append(asyncio.create_task(
            self._every("log-cleaner-health", CLEANER_HEALTH_INTERVAL_MS,
                        self.log_cleaner.check_threads)
        ))
        self.started.set()

    async def _start_authorizer(self, store: MetadataStore) -> None:
        """authorizer.class.name set: load every ACL and follow their changes, made
        through any broker, before the listeners open."""
        if not self.config["authorizer.class.name"]:
            return
        authorizer = AclAuthorizer(parse_super_users(self.config["super.users"]),
                                   bool(self.config["allow.everyone.if.no.acl.found"]),
                                   new_dict=loop_dict)
        acl_store = AclStore(store)
        if self._cluster is None:
            # the embedded store fires its watches on the writer's thread: the loop's
            acl_store.follow(authorizer.set_acls, authorizer.replace_all)
        else:
            loop = asyncio.get_running_loop()

            def on_change(pattern: ResourcePattern, entries: frozenset[AclEntry]) -> None:
                loop.call_soon_threadsafe(authorizer.set_acls, pattern, entries)

            def on_reload(acls: dict[ResourcePattern, frozenset[AclEntry]]) -> None:
                loop.call_soon_threadsafe(authorizer.replace_all, acls)

            await asyncio.to_thread(acl_store.follow, on_change, on_reload)
            # after the ACLs just posted to the loop are in place
            loop.call_soon(self._warn_if_followers_refused, authorizer)
        self.authorizer, self.acl_store = authorizer, acl_store
        log.info("authorizer %s on; super users: %s", self.config["authorizer.class.name"],
                 ", ".join(sorted(authorizer.super_users)) or "none")

    def _warn_if_followers_refused(self, authorizer: AclAuthorizer) -> None:
        """Other brokers fetch as the inter-broker principal: the SASL user of the
        inter-broker listener, ``User:ANONYMOUS`` on PLAINTEXT or TLS without a client
        certificate. Say so at start if the ACLs refuse it ClusterAction (replication would
        stall). A principal from a client certificate is known only to the leader that maps
        it, so that case is not checked here."""
        security = self._inter_broker
        if security.protocol == "SSL" and str(self.config.listener_value(
                self.config.inter_broker_listener, "ssl.client.auth")).lower() != "none":
            return
        principal = f"User:{security.username}" if security.sasl else ANONYMOUS
        host = self.config.advertised_listeners[0].host or "127.0.0.1"
        if not authorizer.authorize(principal, host, AclOperation.CLUSTER_ACTION,
                                    ResourceType.CLUSTER, CLUSTER_NAME):
            log.warning("the ACLs refuse %s ClusterAction on the cluster: other brokers' "
                        "replica fetches come as %s and will be refused (grant it, list it "
                        "in super.users, or set allow.everyone.if.no.acl.found)",
                        principal, principal)

    @property
    def client_quotas(self) -> ClientQuotas | None:
        """The quota managers once the broker serves (the metrics page reads them)."""
        services = getattr(self, "services", None)
        return None if services is None else services.client_quotas

    def _client_quotas(self) -> ClientQuotas:
        """The quota managers, kept in step with the stored client quotas."""
        quotas = ClientQuotas(
            QuotaWindow(self.config["quota.window.num"], self.config["quota.window.size.seconds"]),
            QuotaWindow(self.config["controller.quota.window.num"],
                        self.config["controller.quota.window.size.seconds"]),
        )
        self.metadata.add_client_quota_listener(quotas.apply)
        return quotas

    def _reconfigure_connections(self, values: Mapping[str, Any]) -> None:
        """Dynamic max.connections* / max.connection.creation.rate: every listener's."""
        limits = ConnectionLimits(
            max_connections=int(values["max.connections"]),
            max_connections_per_ip=int(values["max.connections.per.ip"]),
            max_connections_per_ip_overrides=parse_per_ip_overrides(
                str(values["max.connections.per.ip.overrides"])),
            max_connection_creation_rate=int(values["max.connection.creation.rate"]),
        )
        for server in self.servers:
            if server.quotas.limits != limits:
                log.info("connection limits are now %s", limits)
                server.quotas.update_limits(limits)

    def _reconfigure_cleaner(self, values: Mapping[str, Any]) -> None:
        """Dynamic log.cleaner.*: restart the cleaner threads off the loop when they
        changed (Kafka's LogCleaner.reconfigure)."""
        wanted = {k: values[k] for k in sorted(CLEANER_KEYS)}
        current = self._cleaner_values
        self._cleaner_values = wanted
        cleaner = self.log_cleaner
        if current is None or current == wanted or cleaner is None:
            return
        threading.Thread(target=cleaner.reconfigure, args=(dict(values),),
                         name="log-cleaner-reconfigure", daemon=True).start()

    async def _join_cluster(self) -> MetadataStore:
        """Cluster mode: connect to ZooKeeper, read the cluster's topics, states and live
        brokers (all off the event loop), before any log is loaded."""
        loop = asyncio.get_running_loop()

        def post(fn: Callable[[], None]) -> None:
            loop.call_soon_threadsafe(fn)

        cluster = ZkCluster(self.config, post)
        self._cluster = cluster
        await asyncio.to_thread(cluster.connect, self.broker_id)
        self.metadata = await asyncio.to_thread(
            lambda: ClusterMetadata(
                cluster.store, cluster.live_broker_ids,
                self.config.values | self.config.log_defaults(),
                broker_racks=cluster.live_broker_racks,
            )
        )
        self.metadata.partition_states = {}
        # ZooKeeper writes run in worker threads; the local view changes on the loop.
        self.metadata.defer_local = post
        states = await asyncio.to_thread(cluster.follow, self.metadata)
        self.metadata.apply_partition_states(states)
        return cluster.store

    def _start_replication(self, cluster: ZkCluster) -> None:
        """Cluster mode: followers fetch from leaders; leaders change their ISRs."""
        rm = self.replica_manager
        metadata = self.metadata
        rm.fetchers = ReplicaFetcherManager(
            self.broker_id, self._connect_to_broker, FetcherConfig.from_broker(self.config),
            ReplicationQuota(lambda: int(metadata.broker_defaults.get(
                "follower.replication.throttled.rate", UNLIMITED))),
        )
        rm.isr_writer = cluster.write_isr
        rm.broker_alive = cluster.isr_eligible
        rm.isr_reader = cluster.read_state
        rm.replica_lag_time_max_ms = int(self.config["replica.lag.time.max.ms"])
        self._tasks.append(asyncio.create_task(self._isr_expiration()))

    async def _isr_expiration(self) -> None:
        """Kafka's isr-expiration task: every replica.lag.time.max.ms / 2, on the loop."""
        interval = int(self.config["replica.lag.time.max.ms"]) / 2000
        while True:
            await asyncio.sleep(interval)
            try:
                self.replica_manager.shrink_isrs()
            except Exception:
                log.exception("shrinking ISRs failed")

    async def _connect_to_broker(self, broker_id: int) -> BrokerConnection | None:
        """A connection to another broker's inter-broker listener (a follower's fetcher)."""
        assert self._cluster is not None
        for found, host, port, _rack in self._cluster.live_endpoints(
                self.config.inter_broker_listener):
            if found == broker_id:
                try:
                    return await BrokerConnection.open(
                        f"{host}:{port}", timeout=10.0,
                        client_id=f"broker-{self.broker_id}-fetcher",
                        security=self._inter_broker,
                    )
                except (OSError, ClientError, TimeoutError) as exc:
                    log.info("cannot connect to broker %d at %s:%d: %s", broker_id, host,
                             port, exc)
                    return None
        return None

    async def _controlled_shutdown(self, cluster: ZkCluster) -> None:
        """Kafka's controlled shutdown: while still registered, ask the controller to move
        this broker's leaderships and take it out of the ISRs it follows in, asking again
        while it answers that partitions remain (controlled.shutdown.max.retries times, each
        answer waited for at most controlled.shutdown.retry.backoff.ms); then keep serving
        until the partition states applied here agree (no partition led here with another
        replica in its ISR, none followed with this broker in the ISR of a live leader), so
        that clients only see a metadata refresh."""
        retries = max(1, int(self.config["controlled.shutdown.max.retries"]))
        backoff = int(self.config["controlled.shutdown.retry.backoff.ms"]) / 1000
        started = time.monotonic()
        deadline = started + retries * backoff
        answer = None
        if not cluster.registered:
            return  # not a member (yet): nothing to hand over
        for attempt in range(1, retries + 1):
            answer = await self._bounded_step(
                f"controlled shutdown: asking the controller (attempt {attempt} of {retries})",
                _in_daemon_thread(functools.partial(cluster.request_controlled_shutdown,
                                                    backoff)), backoff + 1)
            if answer is None:
                log.warning("controlled shutdown: no answer from the controller in %.0f s",
                            backoff)
            elif answer.error_code:
                log.warning("controlled shutdown: refused by the controller (error %d)",
                            answer.error_code)
                break
            elif answer.remaining:
                log.info("controlled shutdown: %s still led here with other ISR replicas",
                         plural(answer.remaining, "partition"))
                if attempt < retries:
                    await asyncio.sleep(backoff)  # Kafka's back-off before asking again
            else:
                break
        rm = self.replica_manager

        def remaining() -> tuple[int, int]:
            # every state this broker knows, hosted here yet or not (logs being created)
            leading = following = 0
            for state in list((self.metadata.partition_states or {}).values()):
                if state.leader == self.broker_id:
                    leading += len(state.isr) > 1
                elif (self.broker_id in state.isr and state.leader != -1
                      and cluster.is_alive(state.leader)):
                    following += 1
            return leading, following

        while any(left := remaining()) and time.monotonic() < deadline:
            rm.states_changed.clear()
            # states applied wake us; a leader's registration going away does not: look
            # again a little later in any case
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(rm.states_changed.wait(),
                                       min(0.25, max(0.0, deadline - time.monotonic())))
        if any(left) or answer is None or answer.error_code or answer.remaining:
            log.warning("controlled shutdown: stopping with %s led here with other ISR "
                        "replicas and in %s as a follower, after %.1f s",
                        plural(left[0], "partition"), plural(left[1], "ISR"),
                        time.monotonic() - started)
        else:
            log.info("controlled shutdown: leaderships moved and out of every ISR in %.1f s",
                     time.monotonic() - started)

    async def _bounded_step(self, what: str, step: Awaitable[T], timeout: float) -> T | None:
        """One step of the shutdown, said in the log and waited for at most ``timeout``
        seconds (None when it did not finish: the shutdown goes on)."""
        log.info("shutdown: %s (waiting at most %.0f s)", what, timeout)
        try:
            return await asyncio.wait_for(step, timeout)
        except TimeoutError:
            log.warning("shutdown: %s did not finish in %.0f s; going on", what, timeout)
            return None

    def _endpoints(self) -> list[EndPoint]:
        """This broker's advertised listeners, with the ports actually bound."""
        return [self._advertised(listener.name) for listener in self.config.advertised_listeners]

    def _advertised(self, name: str) -> EndPoint:
        """The advertised endpoint of listener ``name`` (its bound port for port 0)."""
        listener = next(a for a in self.config.advertised_listeners if a.name == name)
        port = listener.port
        if port == 0:
            server = next((s for lst, s in zip(self.config.listeners, self.servers,
                                               strict=False) if lst.name == name), None)
            port = server.port if server is not None else 0
        return EndPoint(name, listener.host, port, self.config.listener_protocols[name])

    def _live_brokers(self, listener: str | None = None) -> list[tuple[int, str, int, str | None]]:
        """(id, host, port, rack) of every live broker on ``listener`` (default: the
        inter-broker listener), for Metadata, FindCoordinator and DescribeCluster: each
        client is given the endpoints of the listener it came in on, and a broker without
        that listener is left out, as Kafka's metadata cache does."""
        name = listener or self.config.inter_broker_listener
        if self._cluster is None:
            if not any(a.name == name for a in self.config.advertised_listeners):
                return []
            endpoint = self._advertised(name)
            rack = self.config["broker.rack"] or None
            return [(self.broker_id, endpoint.host, endpoint.port, rack)]
        return self._cluster.live_endpoints(name)

    async def _scram_credential(self, mechanism: str, user: str) -> str | None:
        """A user's stored SCRAM credential (read off the loop in cluster mode)."""
        store = self.metadata.store
        if self._cluster is None:
            return scram_credential(store, mechanism, user)
        return await asyncio.to_thread(scram_credential, store, mechanism, user)

    def _forget_topic_stats(self, name: str, info: object) -> None:
        if info is None and self.topic_stats is not None:
            self.topic_stats.forget(name)

    def _controller_id(self) -> int:
        return self.broker_id if self._cluster is None else self._cluster.controller_id

    def controller_id(self) -> int:
        """The active controller's broker id as this broker knows it (-1: none)."""
        return self._controller_id()

    def controller_epoch(self) -> int:
        """This broker's controller epoch while it is the controller, else -1 (the single
        node is its own controller, in no ZooKeeper epoch: 0)."""
        return 0 if self._cluster is None else self._cluster.controller_epoch

    async def _elect_preferred(
        self, partitions: list[tuple[str, int]]
    ) -> list[tuple[str, int]] | None:
        """A preferred leader election by this broker's controller (None: not the
        controller). The single node leads every partition it has: nothing to move."""
        if self._cluster is None:
            return []
        return await self._ask_controller(self._cluster.elect_preferred, partitions)

    async def _elect_unclean(
        self, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], int] | None:
        """An unclean election by this broker's controller (None: not the controller)."""
        if self._cluster is None:
            return {}
        return await self._ask_controller(self._cluster.elect_unclean, partitions)

    async def _ask_controller(
        self, ask: Callable[[list[tuple[str, int]], Callable[[T], None]], bool],
        partitions: list[tuple[str, int]],
    ) -> T | None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()

        def settle(result: T) -> None:
            if not done.done():
                done.set_result(result)

        def on_done(result: T) -> None:  # on the controller's thread
            loop.call_soon_threadsafe(settle, result)

        if not ask(partitions, on_done):
            return None
        return await done

    def _on_leadership_change(self, moved: list[TopicPartition]) -> None:
        if any(tp.topic == OFFSETS_TOPIC for tp in moved):
            self.group_coordinator.refresh_leadership()
        if any(tp.topic == TRANSACTION_STATE_TOPIC for tp in moved):
            self.transaction_coordinator.refresh_leadership()

    def _make_transaction_coordinator(self) -> TransactionCoordinator:
        """The transaction coordinator over the ``__transaction_state`` partitions led
        here; its writes are acks=all (min.insync.replicas = transaction.state.log.min.isr)."""
        config = TransactionConfig.from_broker(self.config.values)
        replica_manager = self.replica_manager

        def led_log(topic: str, index: int) -> PartitionLog | None:
            partition = replica_manager.get_partition(topic, index)
            return partition.log if partition is not None and partition.is_leader else None

        def append(partition_log: PartitionLog, records: bytes) -> LogAppendInfo:
            # the coordinator's own batch (OffsetsTopic.append built it)
            partition = replica_manager.leader_partition(
                partition_log.topic, partition_log.partition)
            return partition.append_coordinator_records(records)

        topic = OffsetsTopic(
            self.metadata, self.broker_id, led_log, append,
            num_partitions=config.num_partitions,
            replication_factor=config.replication_factor,
            segment_bytes=config.segment_bytes, name=TRANSACTION_STATE_TOPIC,
            load_buffer_size=config.load_buffer_size,
            topic_configs={"min.insync.replicas": str(config.min_isr),
                           "unclean.leader.election.enable": "false"},
        )
        return TransactionCoordinator(topic, config)

    def _txn_offsets_completed(self, producer_id: int, commit: bool,
                               partitions: list[int]) -> None:
        """A transaction's markers reached these ``__consumer_offsets`` partitions."""
        for partition in partitions:
            self.group_coordinator.on_txn_marker(partition, producer_id, commit)

    def _wire_transaction_coordinator(self) -> None:
        """Producer ids, the ISR wait and the markers' connections, then load."""
        txn = self.transaction_coordinator
        txn.allocate_producer_id = functools.partial(allocate_producer_id, self.services)
        txn.wait_replicated = functools.partial(
            txn_log_replicated, self.services, TRANSACTION_STATE_TOPIC)
        try:
            security = inter_broker_security(self.config)
        except Exception:  # a single node without inter-broker credentials
            security = self._inter_broker
        self._txn_markers = TxnMarkerSender(
            self.broker_id, self._live_brokers, security,
            local=functools.partial(write_markers_locally, self.services))
        txn.send_markers = self._txn_markers
        if self.config["transaction.partition.verification.enable"]:
            # KIP-890: leaders verify first transactional appends with the coordinator
            self.services.txn_verifier = TxnVerifier(
                self.broker_id, lambda: self.services.transaction_coordinator,
                self._txn_markers)
        txn.startup()

    def _make_group_coordinator(self) -> GroupCoordinator:
        """The group coordinator over the ``__consumer_offsets`` partitions led here."""
        config = self.config
        replica_manager = self.replica_manager

        def led_log(topic: str, index: int) -> PartitionLog | None:
            partition = replica_manager.get_partition(topic, index)
            return partition.log if partition is not None and partition.is_leader else None

        def append(partition_log: PartitionLog, records: bytes) -> LogAppendInfo:
            partition = replica_manager.leader_partition(
                partition_log.topic, partition_log.partition
            )
            return partition.append_records_as_leader(records)

        topic = OffsetsTopic(
            self.metadata, self.broker_id, led_log, append,
            num_partitions=int(config["offsets.topic.num.partitions"]),
            replication_factor=int(config["offsets.topic.replication.factor"]),
            segment_bytes=int(config["offsets.topic.segment.bytes"]),
        )
        return GroupCoordinator(topic, CoordinatorConfig.from_broker(config.values))

    def _advertised_endpoint(self) -> tuple[str, int]:
        endpoint = self._advertised(self.config.inter_broker_listener)
        return endpoint.host, endpoint.port

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._cluster is not None:
            # Controlled shutdown first, still registered (and still the controller, if it
            # is): the controller moves leaderships away and takes this broker out of the
            # ISRs; then leave (resign, unregister). Without it, unregistering alone has
            # the controller treat this broker as failed.
            if hasattr(self, "replica_manager") and self.config["controlled.shutdown.enable"]:
                await self._controlled_shutdown(self._cluster)
            await self._bounded_step("leaving the cluster (resigning, unregistering)",
                                     _in_daemon_thread(self._cluster.leave), STOP_STEP_S)
        if hasattr(self, "group_coordinator"):
            # answer parked JoinGroup/SyncGroup requests (NOT_COORDINATOR) so that
            # in-flight requests can finish
            await self.group_coordinator.stop_regex_workers()
            self.group_coordinator.shutdown()
        if hasattr(self, "transaction_coordinator"):
            self.transaction_coordinator.shutdown()
        if self._txn_markers is not None:
            await self._txn_markers.close()
        # Parked Fetches (a consumer's long poll) and acks=all Produces are answered now,
        # as their timeouts would, not waited out by the listeners' shutdown below.
        self.fetch_purgatory.shutdown()
        self.produce_purgatory.shutdown()
        # every listener at once: one still reading would have its Fetches answered at
        # once, again and again, while another waits for its requests in flight
        await asyncio.gather(*(server.stop() for server in self.servers))
        if self.metrics_server is not None:
            await self._bounded_step("stopping the metrics listener",
                                     _in_daemon_thread(self.metrics_server.stop), STOP_STEP_S)
            self.metrics_server = None
        if hasattr(self, "replica_manager"):
            await self.replica_manager.shutdown()
        if self.log_cleaner is not None:
            await self._bounded_step("stopping the log cleaner",
                                     _in_daemon_thread(self.log_cleaner.shutdown), STOP_STEP_S)
        if self._logs_loaded:
            # deleted topics' dirs and segments (file.delete.delay.ms not passed yet):
            # removing gigabytes held the loop for seconds; what is left when the step
            # gives up is removed at the next start (-delete dirs) or by the daemon thread
            await self._bounded_step(
                "removing the logs and segments pending deletion",
                _in_daemon_thread(functools.partial(self.log_manager.delete_pending,
                                                    force=True)), STOP_STEP_S)
            log.info("shutdown: flushing and closing the logs")
            self.log_manager.shutdown()
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.acl_store is not None:
            self.acl_store.close()
        if self._cluster is not None:
            await self._bounded_step("closing the ZooKeeper session",
                                     _in_daemon_thread(self._cluster.close), STOP_STEP_S)
        elif self._store is not None:
            self._store.close()
        if self.started.is_set():
            log.info("broker %d stopped cleanly", self.broker_id)

    async def _every(self, name: str, interval_ms: int, fn: Any) -> None:
        """``fn`` every interval: in a worker thread, or awaited on the loop when it is a
        coroutine function (which hands its own blocking part to a worker)."""
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                if inspect.iscoroutinefunction(fn):
                    await fn()
                else:
                    await asyncio.to_thread(fn)
            except Exception:
                log.exception("background task %s failed", name)

    @property
    def port(self) -> int:
        return self.servers[0].port

    def bound_ports(self) -> dict[str, int]:
        """Each listener's port as bound, by listener name: a listener configured on port
        0 is given one by the system, which it advertises (:meth:`_advertised`) and a
        test harness or supervisor reads back (``--ready-file``)."""
        return {listener.name: server.port
                for listener, server in zip(self.config.listeners, self.servers, strict=False)}

    def _write_meta_properties(self) -> None:
        body = (
            f"version=0\nbroker.id={self.broker_id}\ncluster.id={self.metadata.cluster_id}\n"
        ).encode()
        for log_dir in self.log_manager.online_dirs:
            path = log_dir / META_PROPERTIES
            if path.exists():
                existing = dict(
                    line.split("=", 1) for line in path.read_text().splitlines() if "=" in line
                )
                if existing.get("cluster.id", self.metadata.cluster_id) != self.metadata.cluster_id:
                    raise RuntimeError(
                        f"{path} belongs to cluster {existing.get('cluster.id')}, not "
                        f"{self.metadata.cluster_id}: refusing to mix data directories"
                    )
                continue
            atomic_write(path, body)

    # -- conveniences for tests and tools --------------------------------------------------
    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        """The log of a partition hosted here (tests and tools; handlers go through the
        replica manager)."""
        found = self.replica_manager.get_partition(topic, partition)
        return found.log if found is not None else None


async def _in_daemon_thread(fn: Callable[[], T]) -> T:
    """``fn()`` on a daemon thread of its own: unlike ``asyncio.to_thread`` (the loop's
    executor, joined when the loop closes), a step that never returns cannot hold the
    process after the shutdown gave up waiting for it."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, exc: BaseException | None) -> None:
        if done.done():
            return
        if exc is not None:
            done.set_exception(exc)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            result, exc = fn(), None
        except BaseException as raised:
            result, exc = None, raised
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(settle, result, exc)

    threading.Thread(target=run, name=f"odradek-stop-{getattr(fn, '__name__', 'step')}",
                     daemon=True).start()
    return await done


def partition_limit(configured: int) -> int:
    """``max.broker.partitions``, lowered to the partitions whose logs fit in the process's
    open-files limit once a share is kept for everything else: past it, creating one more
    log fails every append and the restart alike, so refusing the creation is kinder."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    reserved = max(256, int(soft * RESERVED_DESCRIPTORS_SHARE)) + 3 * MAX_OPEN_COLD_SEGMENTS
    fits = max(1, (soft - reserved) // DESCRIPTORS_PER_LOG)
    if fits < configured:
        log.debug("at most %d partitions on this broker: %d open files allowed, %d per log",
                  fits, soft, DESCRIPTORS_PER_LOG)
    return min(configured, fits)


async def run_broker(config: BrokerConfig, ready_file: Path | None = None) -> None:
    """Run until SIGTERM/SIGINT, then stop gracefully. Once started, ``ready_file`` (``odradek
    serve --ready-file``) is written whole at once (a reader never sees half of it): JSON
    with the first listener's ``port``, every listener's bound port by name
    (``listeners``) and the metrics URL (``metrics``, or null), so that a harness starting
    a broker on port 0 learns where it listens, with no free port probed beforehand."""
    import signal

    from odradek.server.limits import raise_open_files_limit

    raise_open_files_limit()
    broker = Broker(config)
    started = time.monotonic()
    # Handled from the start: a SIGTERM while the broker starts (registered already, say)
    # stops it cleanly once started, rather than killing it half-way.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
    except BaseException:
        # what was started (listeners, the ZooKeeper session, logs) is stopped again
        with contextlib.suppress(Exception):
            await broker.stop()
        raise
    log.info("broker %d started in %.0f ms", broker.broker_id, (time.monotonic() - started) * 1000)
    # What start-up built (modules, schemas, the loaded logs' objects) lives as long as the
    # process: out of the collector's reach, a full collection walks only what came after
    # and holds every thread (the event loop's) for that much less (watchdog.py).
    gc.collect()
    gc.freeze()
    if ready_file is not None:
        metrics = broker.metrics_server.url if broker.metrics_server is not None else None
        atomic_write(ready_file, json.dumps({"port": broker.port,
                                             "listeners": broker.bound_ports(),
                                             "metrics": metrics}).encode())
    await stop.wait()
    log.info("shutting down")
    await broker.stop()
    # Stopped: what is left is the process's exit (asyncio's executor threads joined, the
    # interpreter finalized). A SIGTERM repeated meanwhile (a supervisor's, a second Ctrl-C)
    # must not turn a clean stop into death by signal, as the JVM ignores signals once its
    # shutdown hooks run; asyncio would put the default handlers back when its loop closes.
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, ValueError):
            loop.remove_signal_handler(sig)
            signal.signal(sig, signal.SIG_IGN)
