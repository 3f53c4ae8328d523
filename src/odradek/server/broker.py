"""One broker process: storage, metadata, handlers and listeners wired together.

How it works (seed 000 "Request Processing"): every listener accepts connections on one
asyncio event loop; the network layer decodes frames and dispatches each request to its
handler through the registry. Handlers act on partitions through :class:`Broker` (the
logs of :class:`LogManager`, the topic table of :class:`ClusterMetadata`). Background
work (retention, flushes, checkpoints) runs on the same loop's scheduler, with disk-heavy
steps in a worker thread.

Start: load logs (recovery if the last shutdown was unclean), open the metadata store,
make sure every partition of every known topic has a log, register handlers, listen.
Stop (SIGTERM): close listeners and let in-flight requests finish, then flush every log,
write checkpoints and the clean-shutdown marker.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from odradek.cluster.metadata import ClusterMetadata, TopicInfo
from odradek.cluster.store import EmbeddedStore, MetadataStore
from odradek.protocol.registry import HandlerRegistry
from odradek.server.config import BrokerConfig
from odradek.server.network import KafkaServer, NetworkConfig
from odradek.server.purgatory import Purgatory
from odradek.storage import LogAppendInfo, LogManager, PartitionLog, TopicPartition
from odradek.storage.cleaner_manager import LogCleaner
from odradek.storage.config import LogConfig
from odradek.storage.files import META_PROPERTIES, atomic_write

if TYPE_CHECKING:
    from odradek.coordinator.group_coordinator import GroupCoordinator

log = logging.getLogger(__name__)
T = TypeVar("T")

METADATA_FILE = "odradek-metadata.json"
# How often dead cleaner threads are looked for and cleaner-status.json rewritten.
CLEANER_HEALTH_INTERVAL_MS = 5000


class Broker:
    def __init__(self, config: BrokerConfig, store: MetadataStore | None = None) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.log_manager = LogManager(config.log_dirs, config.values)
        self._store = store
        self.fetch_purgatory = Purgatory()
        self.registry = HandlerRegistry()
        self.servers: list[KafkaServer] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.log_cleaner: LogCleaner | None = None
        self.started = asyncio.Event()
        self.metadata: ClusterMetadata
        self.group_coordinator: GroupCoordinator | None = None
        # Logs created off the loop (see change_topics).
        self._pending_logs: set[TopicPartition] = set()
        self._deferred: list[tuple[TopicPartition, LogConfig]] | None = None
        self._log_creation: asyncio.Task[None] | None = None

    # -- life cycle ----------------------------------------------------------------------
    async def start(self) -> None:
        self.config.report_unknown()
        store = self._store or EmbeddedStore(self.config.log_dirs[0].absolute() / METADATA_FILE)
        self._store = store
        self.metadata = ClusterMetadata(
            store, lambda: [self.broker_id], self.config.values | self.config.log_defaults()
        )
        from odradek.server.handlers.configs import apply_dynamic_broker_configs

        # Dynamic broker configs (/config/brokers/…) layer over the static ones before
        # any log is loaded, so logs start with the topic defaults in effect.
        apply_dynamic_broker_configs(self, reconfigure_logs=False)
        self.log_manager.startup(self.metadata.log_config)
        self._write_meta_properties()
        self._reconcile_logs()
        self.metadata.add_listener(self._on_topic_change)
        from odradek.server.handlers import register_all
        from odradek.server.handlers.groups import make_group_coordinator

        # Groups of the __consumer_offsets partitions this broker leads are loaded
        # before the listeners open.
        self.group_coordinator = make_group_coordinator(self)
        self.group_coordinator.startup()
        register_all(self.registry, self)
        net = NetworkConfig(
            socket_request_max_bytes=self.config["socket.request.max.bytes"],
            queued_max_requests=self.config["queued.max.requests"],
            connections_max_idle_ms=self.config["connections.max.idle.ms"],
            socket_send_buffer_bytes=self.config["socket.send.buffer.bytes"],
            socket_receive_buffer_bytes=self.config["socket.receive.buffer.bytes"],
            listen_backlog=self.config["socket.listen.backlog.size"],
        )
        for listener in self.config.listeners:
            server = KafkaServer(self.registry, listener.host, listener.port, net)
            await server.start()
            self.servers.append(server)
            log.info("listening on %s://%s:%d", listener.name, listener.host, server.port)
        for name, interval_ms, fn in self.log_manager.periodic_tasks():
            if interval_ms < (1 << 40):
                self._tasks.append(asyncio.create_task(self._every(name, interval_ms, fn)))
        # Compaction runs in its own threads; the loop only checks their health.
        self.log_cleaner = LogCleaner(self.log_manager, self.config.values)
        self.log_cleaner.startup()
        self._tasks.append(asyncio.create_task(
            self._every("log-cleaner-health", CLEANER_HEALTH_INTERVAL_MS,
                        self.log_cleaner.check_threads)
        ))
        self.started.set()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self.group_coordinator is not None:
            # answer parked JoinGroup/SyncGroup requests (NOT_COORDINATOR) so that
            # in-flight requests can finish
            self.group_coordinator.shutdown()
        for server in self.servers:
            await server.stop()
        if self._log_creation is not None:
            await asyncio.wait((self._log_creation,))
        if self.log_cleaner is not None:
            await asyncio.to_thread(self.log_cleaner.shutdown)
        self.log_manager.shutdown()
        if self._store is not None:
            self._store.close()
        log.info("broker %d stopped cleanly", self.broker_id)

    async def _every(self, name: str, interval_ms: int, fn: Any) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await asyncio.to_thread(fn)
            except Exception:
                log.exception("background task %s failed", name)

    @property
    def port(self) -> int:
        return self.servers[0].port

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

    # -- partitions ----------------------------------------------------------------------
    def _reconcile_logs(self) -> None:
        """Logs for every partition in metadata; logs of deleted topics removed."""
        for info in self.metadata.topics.values():
            self._ensure_logs(info)
        for tp in list(self.log_manager.logs):
            found = self.metadata.get(tp.topic)
            if found is None or tp.partition not in found.partitions:
                log.info("removing log %s of a topic that no longer exists", tp)
                self.log_manager.delete_log(tp)

    def _ensure_logs(self, info: TopicInfo) -> None:
        config = self.metadata.log_config(info.name)
        for partition, replicas in info.partitions.items():
            if self.broker_id in replicas:
                tp = TopicPartition(info.name, partition)
                existing = self.log_manager.get_log(tp)
                if existing is not None:
                    existing.update_config(config)
                    self._watch(existing)
                elif tp in self._pending_logs:
                    continue  # being created off the loop; configured when it lands
                elif self._deferred is not None:
                    self._deferred.append((tp, config))
                    self._pending_logs.add(tp)
                else:
                    self._watch(self.log_manager.get_or_create_log(tp, config))

    async def change_topics(
        self, change: Callable[[], T], wait: datetime.timedelta = datetime.timedelta(0)
    ) -> tuple[T, bool]:
        """Apply ``change`` (synchronous calls on :attr:`metadata`) and create the logs it
        calls for in a worker thread, waiting for them up to ``wait``. Returns the result
        of ``change`` and whether that wait ran out with logs still being created (never
        with a zero ``wait``: the caller then answers without waiting, as Kafka does).

        Creating a log is a directory and five files (about 4 ms each on this machine's
        ext4): a 1,000-partition topic held the event loop for seconds, every connection
        waiting. Until its log lands, a partition is reported LEADER_NOT_AVAILABLE, as
        Kafka reports a partition whose leader has not yet taken it (the admin handler
        waits for the task up to the request's timeout, as Kafka's DelayedCreatePartitions
        does). Changes are applied one at a time, each after the previous one's logs are
        in place, as Kafka's controller handles its events in order: a topic deleted or
        grown while its logs are being created cannot race with their creation."""
        while (previous := self._log_creation) is not None and not previous.done():
            await asyncio.wait((previous,))
        self._deferred = []
        try:
            result = change()
        finally:
            deferred, self._deferred = self._deferred, None
        if not deferred:
            return result, False
        task = asyncio.get_running_loop().create_task(self._create_logs(deferred))
        self._log_creation = task
        if wait <= datetime.timedelta(0):
            return result, False
        await asyncio.wait((task,), timeout=wait.total_seconds())
        return result, not task.done()

    def log_pending(self, tp: TopicPartition) -> bool:
        """True while the log of ``tp`` is being created off the loop."""
        return tp in self._pending_logs

    def topic_logs_pending(self, topic: str) -> bool:
        """True while any log of ``topic`` is being created off the loop."""
        return any(tp.topic == topic for tp in self._pending_logs)

    async def _create_logs(self, wanted: list[tuple[TopicPartition, LogConfig]]) -> None:
        try:
            await asyncio.to_thread(self._create_logs_now, wanted)
        finally:
            configs: dict[str, LogConfig] = {}
            for tp, used in wanted:
                self._pending_logs.discard(tp)
                created = self.log_manager.get_log(tp)
                if created is None:
                    continue
                if tp.topic not in configs:
                    configs[tp.topic] = self.metadata.log_config(tp.topic)
                if configs[tp.topic] != used:  # altered while the log was being created
                    created.update_config(configs[tp.topic])

    def _create_logs_now(self, wanted: list[tuple[TopicPartition, LogConfig]]) -> None:
        """In a worker thread: each log is watched before it is published."""
        for tp, config in wanted:
            try:
                self.log_manager.get_or_create_log(tp, config, prepare=self._watch)
            except Exception:  # e.g. the log dir failed: the partition stays unavailable
                log.exception("cannot create the log of %s", tp)

    def _watch(self, partition_log: PartitionLog) -> None:
        if not getattr(partition_log, "_broker_watched", False):
            tp = TopicPartition(partition_log.topic, partition_log.partition)
            partition_log.add_append_listener(
                lambda _log, nbytes, tp=tp: self.fetch_purgatory.notify(tp, nbytes)  # type: ignore[misc]
            )
            partition_log._broker_watched = True  # type: ignore[attr-defined]

    def _on_topic_change(self, name: str, info: TopicInfo | None) -> None:
        if info is None:
            for tp in [tp for tp in list(self.log_manager.logs) if tp.topic == name]:
                self.log_manager.delete_log(tp)
                self.fetch_purgatory.wake_all(tp)
        else:
            self._ensure_logs(info)

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self.log_manager.get_log(TopicPartition(topic, partition))

    def append_records(
        self, partition_log: PartitionLog, records: bytes | bytearray | memoryview
    ) -> LogAppendInfo:
        """Leader append of a producer's batches (leader epoch 0 on a single broker); a
        writable memoryview (of the request frame) is rewritten in place."""
        return partition_log.append_as_leader(records, leader_epoch=0)


async def run_broker(config: BrokerConfig, ready_file: Path | None = None) -> None:
    """Run until SIGTERM/SIGINT, then stop gracefully."""
    import signal

    from odradek.server.limits import raise_open_files_limit

    raise_open_files_limit()
    broker = Broker(config)
    started = time.monotonic()
    await broker.start()
    log.info("broker %d started in %.0f ms", broker.broker_id, (time.monotonic() - started) * 1000)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    if ready_file is not None:
        ready_file.write_text(str(broker.port))
    await stop.wait()
    log.info("shutting down")
    await broker.stop()
