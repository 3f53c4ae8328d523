"""The broker's Prometheus endpoint: ``GET /metrics`` on ``metrics.listener``.

How it works: Kafka publishes its metrics as JMX MBeans, and Prometheus reads them through
the JMX exporter, whose common Kafka rules turn ``kafka.server:type=BrokerTopicMetrics,
name=BytesInPerSec,topic=t`` into ``kafka_server_brokertopicmetrics_bytesin_total{topic="t"}``
(lower case; ``PerSec`` meters become counters). This endpoint serves the same names, so
dashboards and alerts written for Kafka behind the exporter read Odradek unchanged; the
table is in docs/operations.md ("Metrics").

- *Counting* happens elsewhere, in plain ints (:mod:`odradek.server.broker_stats`): per
  topic in the Produce and Fetch handlers, per request in the network layer's writer.
- *Gauges* (partitions, leaders, under-replicated, log sizes, groups, lag, the cleaner)
  are computed when scraped, from the broker's own state, by :meth:`BrokerCollector.collect`.
- *Where it runs.* The HTTP server (:mod:`odradek.server.metrics_http`: TLS, basic auth,
  loopback by default) answers in its own threads; the
  collector asks the event loop for a snapshot of plain numbers (:func:`snapshot`, run
  on the loop so that no dict changes under it, and short: one pass over the hosted
  partitions and the coordinated groups), then builds the text in the HTTP thread.
- *Process.* ``prometheus_client``'s ProcessCollector adds ``process_cpu_seconds_total``,
  ``process_resident_memory_bytes``, ``process_open_fds`` and the rest.

``prometheus_client`` is the ``metrics`` extra: this module is imported only when
``metrics.listener`` is set, and its absence is a one-line start-up error
(:func:`require_prometheus_client`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from odradek.histogram import LATENCY_BOUNDS_MS
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.server.broker_stats import REQUEST_BOUNDS_MS, TIME_NAMES, MetricsError
from odradek.storage.log import LOG_FLUSH_STATS, TRUNCATION_STATS

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from odradek.cluster.metadata import ClusterMetadata
    from odradek.cluster.replica_manager import ReplicaManager
    from odradek.coordinator.group_coordinator import GroupCoordinator
    from odradek.server.broker_stats import BrokerTopicStats, RequestStats
    from odradek.server.client_quotas import ClientQuotas
    from odradek.server.config import BrokerConfig, MetricsListener
    from odradek.server.flow_control import RequestMemoryPool
    from odradek.server.network.security import ListenerSecurity
    from odradek.server.watchdog import LoopWatchdog
    from odradek.storage.cleaner_manager import LogCleaner

__all__ = ["BrokerCollector", "MetricsServer", "Snapshot", "require_prometheus_client", "snapshot"]

log = logging.getLogger(__name__)


class _Listener(Protocol):
    @property
    def connections(self) -> Collection[object]: ...

    security: ListenerSecurity
    memory_pool: RequestMemoryPool | None


class BrokerView(Protocol):
    """What the page reads of the broker (``server/broker.py``'s ``Broker``, which starts
    this module's server: a protocol here rather than an import back)."""

    broker_id: int
    config: BrokerConfig
    metadata: ClusterMetadata
    replica_manager: ReplicaManager
    group_coordinator: GroupCoordinator
    log_cleaner: LogCleaner | None
    topic_stats: BrokerTopicStats | None
    request_stats: RequestStats | None
    watchdog: LoopWatchdog | None

    @property
    def servers(self) -> Sequence[_Listener]: ...

    def controller_id(self) -> int: ...

    def controller_epoch(self) -> int: ...

    @property
    def client_quotas(self) -> ClientQuotas | None: ...

#: Kafka's MemoryPool.NONE (queued.max.request.bytes=-1): Long.MAX_VALUE available.
_UNBOUNDED = 2**63 - 1
#: How long a scrape waits for the event loop's snapshot before answering an error.
SNAPSHOT_TIMEOUT_S = 10.0
#: The group states Kafka's GroupMetadataManager counts (NumGroups<State>).
_GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")
#: a KIP-848 consumer group's states (Kafka's ConsumerGroup.ConsumerGroupState)
_CONSUMER_GROUP_STATES = ("Empty", "Assigning", "Reconciling", "Stable", "Dead")
_TOPIC_METERS = (  # (BrokerTopicMetrics meter, TopicCounters attribute)
    ("bytesin", "bytes_in"),
    ("bytesout", "bytes_out"),
    ("messagesin", "messages_in"),
    ("totalproducerequests", "produce_requests"),
    ("failedproducerequests", "failed_produce_requests"),
    ("totalfetchrequests", "fetch_requests"),
    ("failedfetchrequests", "failed_fetch_requests"),
)


def require_prometheus_client() -> None:
    """Refuse to start, in one line, when metrics are asked for and cannot be served."""
    for module in ("prometheus_client", "numpy"):
        try:
            __import__(module)
        except ImportError as exc:
            raise MetricsError(
                f"metrics.listener is set but {module} is not installed: "
                "pip install 'odradek[metrics]'"
            ) from exc


def request_name(api_key: int) -> str:
    """Kafka's request name (``Produce``, ``ApiVersions``, ``OffsetForLeaderEpoch``)."""
    try:
        return ApiKey(api_key).name.title().replace("_", "")
    except ValueError:
        return str(api_key)


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)


# -- the snapshot (on the event loop) -------------------------------------------------------
@dataclass
class Snapshot:
    topics: list[tuple[str, list[int]]] = field(default_factory=list)
    total: list[int] = field(default_factory=list)
    replication_bytes_out: int = 0
    requests: list[tuple[tuple[int, int], int]] = field(default_factory=list)
    errors: list[tuple[tuple[int, int], int]] = field(default_factory=list)  # (key, code)
    times: list[tuple[int, list[tuple[list[int], int]]]] = field(default_factory=list)
    replica_manager: dict[str, int] = field(default_factory=dict)
    controller: dict[str, int] = field(default_factory=dict)
    logs: list[tuple[str, int, int, int, int, int]] = field(default_factory=list)
    # (topic, partition, high watermark - last stable offset) of each partition led here
    stable_lag: list[tuple[str, int, int]] = field(default_factory=list)
    cleaner: dict[str, float] = field(default_factory=dict)
    groups: dict[str, int] = field(default_factory=dict)
    # KIP-848 consumer groups coordinated here, by state
    consumer_groups: dict[str, int] = field(default_factory=dict)
    offsets: int = 0
    lag: list[tuple[str, str, int, int, int]] = field(default_factory=list)
    connections: list[tuple[str, int]] = field(default_factory=list)
    # listener -> (successful, failed, successful re-authentications, expired connections
    # killed, failed re-authentications)
    authentications: list[tuple[str, int, int, int, int, int]] = field(default_factory=list)
    # listener -> (average, maximum) re-authentication latency in ms (NaN before the first)
    reauthentication_latency: list[tuple[str, float, float]] = field(default_factory=list)
    # the request memory pool (queued.max.request.bytes): (available, used) bytes
    memory_pool: tuple[int, int] = (_UNBOUNDED, 0)
    # (metric, user tag, client-id tag, rate) of each entity a client quota measures
    quotas: list[tuple[str, str, str, float]] = field(default_factory=list)
    took_s: float = 0.0


def snapshot(broker: BrokerView) -> Snapshot:
    """Every number the page shows, read on the event loop (nothing changes meanwhile)."""
    started = time.perf_counter()
    snap = Snapshot()
    stats = broker.topic_stats
    if stats is not None:
        attrs = [attr for _, attr in _TOPIC_METERS]
        snap.topics = [(name, [getattr(c, a) for a in attrs]) for name, c in stats.topics.items()]
        totals = stats.totals()
        snap.total = [getattr(totals, a) for a in attrs]
        snap.replication_bytes_out = stats.replication_bytes_out
    requests = broker.request_stats
    if requests is not None:
        requests.fold()
        snap.requests = [((k >> 16, k & 0xFFFF), n) for k, n in requests.requests.items()]
        snap.errors = [((k >> 16, k & 0xFFFF), n) for k, n in requests.errors.items()]
        snap.times = [(key, t.snapshot()) for key, t in requests.times.items()]

    rm = broker.replica_manager
    broker_id = broker.broker_id
    leaders = under_replicated = under_min_isr = at_min_isr = 0
    for tp, partition in rm.partitions.items():
        state = partition.state
        partition_log = partition.log
        if state.leader == broker_id:
            leaders += 1
            in_sync = len(state.isr)
            if in_sync < len(state.replicas):
                under_replicated += 1
            min_isr = partition_log.config.min_insync_replicas
            if in_sync < min_isr:
                under_min_isr += 1
            elif in_sync == min_isr:
                at_min_isr += 1
            snap.stable_lag.append((tp.topic, tp.partition, partition_log.high_watermark
                                    - partition_log.last_stable_offset))
        segments = partition_log.segments
        snap.logs.append((tp.topic, tp.partition, sum(s.size for s in segments), len(segments),
                          partition_log.log_start_offset, partition_log.log_end_offset))
    snap.replica_manager = {
        "partitioncount": len(rm.partitions), "leadercount": leaders,
        "underreplicatedpartitions": under_replicated,
        "underminisrpartitioncount": under_min_isr, "atminisrpartitioncount": at_min_isr,
        "isrshrinks": rm.isr_shrinks, "isrexpands": rm.isr_expands,
    }

    controller_id = broker.controller_id()
    active = controller_id == broker_id
    controller = {"activecontrollercount": int(active), "currentcontrollerid": controller_id}
    if active:
        metadata = broker.metadata
        states = metadata.partition_states
        offline = sum(1 for s in states.values() if s.leader < 0) if states is not None else 0
        controller["offlinepartitionscount"] = offline
        controller["globaltopiccount"] = len(metadata.topics)
        controller["globalpartitioncount"] = sum(
            len(t.partitions) for t in metadata.topics.values())
        controller["controllerepoch"] = broker.controller_epoch()
    snap.controller = controller

    cleaner = broker.log_cleaner
    if cleaner is not None:
        status = cleaner.status()
        snap.cleaner = {name: float(value) for name, value in status["metrics"].items()}

    coordinator = broker.group_coordinator
    counts = dict.fromkeys(_GROUP_STATES, 0)
    consumer_counts = dict.fromkeys(_CONSUMER_GROUP_STATES, 0)
    consumer_groups = coordinator.consumer_groups
    for consumer_group in consumer_groups.values():
        consumer_state = consumer_group.state.value
        consumer_counts[consumer_state] = consumer_counts.get(consumer_state, 0) + 1
    offsets = 0
    for group_id, group in coordinator.groups.items():
        if group_id not in consumer_groups:  # not a consumer group's offsets holder
            counts[group.state.value] = counts.get(group.state.value, 0) + 1
        offsets += len(group.offsets)
        for (topic, index), committed in group.offsets.items():
            hosted = rm.get_partition(topic, index)
            if hosted is None:
                continue  # hosted elsewhere: that broker's coordinator view cannot tell
            end = hosted.high_watermark
            snap.lag.append((group_id, topic, index, committed.offset,
                             max(end - committed.offset, 0)))
    snap.groups = counts
    snap.consumer_groups = consumer_counts
    snap.offsets = offsets
    snap.connections = [(listener.name, len(server.connections))
                        for listener, server in zip(broker.config.listeners, broker.servers,
                                                    strict=False)]
    snap.authentications = [
        (server.security.name, server.security.stats.successful, server.security.stats.failed,
         server.security.stats.successful_reauthentication,
         server.security.stats.expired_connections_killed,
         server.security.stats.failed_reauthentication) for server in broker.servers]
    for server in broker.servers:
        auth = server.security.stats
        count = auth.reauthentication_latency_count
        snap.reauthentication_latency.append(
            (server.security.name,
             auth.reauthentication_latency_total_ms / count if count else math.nan,
             auth.reauthentication_latency_max_ms if count else math.nan))
    pool = next((s.memory_pool for s in broker.servers if s.memory_pool is not None), None)
    if pool is not None:  # one pool, shared by every listener
        snap.memory_pool = (pool.available, pool.used)
    quotas = broker.client_quotas
    if quotas is not None:
        now_ms = time.monotonic() * 1000.0
        for metric, manager in (("produce_byte_rate", quotas.produce),
                                ("fetch_byte_rate", quotas.fetch),
                                ("request_request_time", quotas.request)):
            snap.quotas.extend((metric, user or "", client_id or "", value)
                               for (user, client_id), value in manager.rates(now_ms))
    snap.took_s = time.perf_counter() - started
    return snap


# -- the collector (in the HTTP thread) -----------------------------------------------------
class BrokerCollector:
    """A ``prometheus_client`` collector over one broker (see the module docstring)."""

    def __init__(self, broker: BrokerView, loop: asyncio.AbstractEventLoop) -> None:
        self._broker = broker
        self._loop = loop
        self.last_snapshot_s = 0.0

    def _snapshot(self) -> Snapshot:
        async def take() -> Snapshot:
            return snapshot(self._broker)

        return asyncio.run_coroutine_threadsafe(take(), self._loop).result(SNAPSHOT_TIMEOUT_S)

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        snap = self._snapshot()
        self.last_snapshot_s = snap.took_s

        # the event-loop watchdog (odradek.server.watchdog): plain numbers, read here
        watchdog = self._broker.watchdog
        if watchdog is not None:
            yield CounterMetricFamily(
                "odradek_event_loop_stalls", "times the event loop was held past "
                "event.loop.stall.threshold.ms", value=watchdog.stalls)
            yield CounterMetricFamily(
                "odradek_event_loop_stall_seconds", "seconds the event loop was held, summed "
                "over the stalls", value=watchdog.stall_seconds)
            yield GaugeMetricFamily(
                "odradek_event_loop_longest_stall_seconds", "the longest stall of the event "
                "loop since the broker started", value=watchdog.longest_stall_s)
            yield GaugeMetricFamily(
                "odradek_gc_longest_collection_seconds", "the longest garbage collection "
                "(every thread held) since the broker started", value=watchdog.longest_gc_s)

        # kafka.server:type=BrokerTopicMetrics,name=<X>PerSec[,topic=<t>]
        for i, (meter, _) in enumerate(_TOPIC_METERS):
            family = CounterMetricFamily(
                f"kafka_server_brokertopicmetrics_{meter}",
                f"Kafka's BrokerTopicMetrics {meter}: per topic, and the broker total without "
                "a topic label", labels=["topic"])
            if snap.total:
                family.samples.append(_sample(
                    f"kafka_server_brokertopicmetrics_{meter}_total", {}, snap.total[i]))
            for name, values in snap.topics:
                family.add_metric([name], values[i])
            yield family
        yield CounterMetricFamily(
            "kafka_server_brokertopicmetrics_replicationbytesout",
            "bytes sent to followers (BrokerTopicMetrics ReplicationBytesOutPerSec)",
            value=snap.replication_bytes_out)

        # kafka.network:type=RequestMetrics,name=RequestsPerSec|ErrorsPerSec|<part>TimeMs
        requests = CounterMetricFamily(
            "kafka_network_requestmetrics_requests", "requests answered, by type and version",
            labels=["request", "version"])
        for (api_key, version), count in sorted(snap.requests):
            requests.add_metric([request_name(api_key), str(version)], count)
        yield requests
        errors = CounterMetricFamily(
            "kafka_network_requestmetrics_errors",
            "requests answered with an error code (whole-request failures and top-level "
            "codes), by type and code", labels=["request", "error"])
        for (api_key, code), count in sorted(snap.errors):
            errors.add_metric([request_name(api_key), error_name(code)], count)
        yield errors
        bounds = [str(b) for b in REQUEST_BOUNDS_MS] + ["+Inf"]
        for part, part_name in enumerate(TIME_NAMES):
            family_h = HistogramMetricFamily(
                f"kafka_network_requestmetrics_{part_name.lower()}",
                f"Kafka's RequestMetrics {part_name}, in milliseconds", labels=["request"])
            for api_key, histograms in sorted(snap.times):
                counts, sum_ns = histograms[part]
                cumulative, running = [], 0
                for bound, count in zip(bounds, counts, strict=True):
                    running += count
                    cumulative.append((bound, float(running)))
                family_h.add_metric([request_name(api_key)], cumulative, sum_ns / 1e6)
            yield family_h

        # kafka.server:type=ReplicaManager,name=...
        for name, value in snap.replica_manager.items():
            if name in ("isrshrinks", "isrexpands"):
                yield CounterMetricFamily(f"kafka_server_replicamanager_{name}",
                                          f"ReplicaManager {name} (PerSec meter)", value=value)
            else:
                yield GaugeMetricFamily(f"kafka_server_replicamanager_{name}",
                                        f"ReplicaManager {name}", value=value)
        # kafka.controller:type=KafkaController,name=...; MetadataLoader's CurrentControllerId
        for name, value in snap.controller.items():
            prefix = ("kafka_server_metadataloader_" if name == "currentcontrollerid"
                      else "kafka_controller_kafkacontroller_")
            yield GaugeMetricFamily(prefix + name, f"controller {name}", value=value)

        # kafka.log:type=Log,name=Size|NumLogSegments|LogStartOffset|LogEndOffset
        sizes = GaugeMetricFamily("kafka_log_log_size", "bytes of a partition's log",
                                  labels=["topic", "partition"])
        segments = GaugeMetricFamily("kafka_log_log_numlogsegments",
                                     "segments of a partition's log", labels=["topic", "partition"])
        starts = GaugeMetricFamily("kafka_log_log_logstartoffset", "log start offset",
                                   labels=["topic", "partition"])
        ends = GaugeMetricFamily("kafka_log_log_logendoffset", "log end offset",
                                 labels=["topic", "partition"])
        for topic, index, size, count, start, end in snap.logs:
            labels = [topic, str(index)]
            sizes.add_metric(labels, size)
            segments.add_metric(labels, count)
            starts.add_metric(labels, start)
            ends.add_metric(labels, end)
        yield from (sizes, segments, starts, ends)
        # kafka.cluster:type=Partition,name=LastStableOffsetLag (an open transaction's hold)
        lso_lag = GaugeMetricFamily(
            "kafka_cluster_partition_laststableoffsetlag",
            "high watermark minus last stable offset of a partition led here",
            labels=["topic", "partition"])
        for topic, index, behind_lso in snap.stable_lag:
            lso_lag.add_metric([topic, str(index)], behind_lso)
        yield lso_lag
        flush_counts, flush_ns = LOG_FLUSH_STATS.snapshot()
        flush = HistogramMetricFamily("kafka_log_logflushstats_logflushrateandtimems",
                                      "time of log flushes (fsync), in milliseconds")
        flushed = 0
        buckets = []
        flush_bounds = [str(b) for b in LATENCY_BOUNDS_MS] + ["+Inf"]
        for bound, count in zip(flush_bounds, flush_counts, strict=True):
            flushed += count
            buckets.append((bound, float(flushed)))
        flush.add_metric([], buckets, flush_ns / 1e6)
        yield flush
        # truncations of logs' ends (storage/log.py), every log of the process
        truncations, truncated, below_hw = TRUNCATION_STATS.snapshot()
        yield CounterMetricFamily(
            "odradek_log_truncations", "truncations of a log's end (a follower dropping "
            "what its leader does not hold)", value=truncations)
        yield CounterMetricFamily(
            "odradek_log_truncated_offsets", "offsets removed by those truncations",
            value=truncated)
        yield CounterMetricFamily(
            "odradek_log_truncations_below_high_watermark", "truncations that removed "
            "offsets below the high watermark the log knew (acknowledged records)",
            value=below_hw)

        # kafka.log:type=LogCleaner / LogCleanerManager (a dead cleaner thread shows)
        for name, reading in snap.cleaner.items():
            owner = ("logcleanermanager" if name in ("uncleanable-partitions-count",
                                                     "max-dirty-percent")
                     else "logcleaner")
            metric = name.lower().replace("-", "_")
            yield GaugeMetricFamily(f"kafka_log_{owner}_{metric}", f"{owner} {name}",
                                    value=reading)

        # kafka.coordinator.group:type=GroupMetadataManager,name=NumGroups...
        yield GaugeMetricFamily("kafka_coordinator_group_groupmetadatamanager_numgroups",
                                "groups coordinated here", value=sum(snap.groups.values()))
        for state, count in snap.groups.items():
            yield GaugeMetricFamily(
                f"kafka_coordinator_group_groupmetadatamanager_numgroups{state.lower()}",
                f"groups coordinated here in state {state}", value=count)
        yield GaugeMetricFamily("kafka_coordinator_group_groupmetadatamanager_numoffsets",
                                "committed offsets held here", value=snap.offsets)
        # kafka.server:type=group-coordinator-metrics (Kafka 4's GroupCoordinatorMetrics):
        # groups by protocol, and the consumer groups (KIP-848) by state
        by_protocol = GaugeMetricFamily(
            "kafka_server_group_coordinator_metrics_group_count",
            "groups coordinated here, by protocol", labels=["protocol"])
        by_protocol.add_metric(["classic"], sum(snap.groups.values()))
        by_protocol.add_metric(["consumer"], sum(snap.consumer_groups.values()))
        yield by_protocol
        consumer_states = GaugeMetricFamily(
            "kafka_server_group_coordinator_metrics_consumer_group_count",
            "consumer groups (KIP-848) coordinated here, by state", labels=["state"])
        for state, count in snap.consumer_groups.items():
            consumer_states.add_metric([state], count)
        yield consumer_states

        # consumer lag, as kafka-lag-exporter names it
        lag = GaugeMetricFamily("kafka_consumergroup_group_lag",
                                "high watermark minus the group's committed offset",
                                labels=["group", "topic", "partition"])
        offset = GaugeMetricFamily("kafka_consumergroup_group_offset",
                                   "the group's committed offset",
                                   labels=["group", "topic", "partition"])
        max_lag = GaugeMetricFamily("kafka_consumergroup_group_max_lag",
                                    "largest lag of the group's partitions", labels=["group"])
        sum_lag = GaugeMetricFamily("kafka_consumergroup_group_sum_lag",
                                    "sum of the lags of the group's partitions",
                                    labels=["group"])
        per_group: dict[str, list[int]] = {}
        for group_id, topic, index, committed, behind in snap.lag:
            lag.add_metric([group_id, topic, str(index)], behind)
            offset.add_metric([group_id, topic, str(index)], committed)
            per_group.setdefault(group_id, []).append(behind)
        for group_id, lags in sorted(per_group.items()):
            max_lag.add_metric([group_id], max(lags))
            sum_lag.add_metric([group_id], sum(lags))
        yield from (lag, offset, max_lag, sum_lag)

        connections = GaugeMetricFamily("kafka_server_socket_server_metrics_connection_count",
                                        "open client connections", labels=["listener"])
        for listener, count in snap.connections:
            connections.add_metric([listener], count)
        yield connections

        # Kafka's socket-server metrics successful-/failed-authentication-total and
        # successful-/failed-reauthentication-total, expired-connections-killed-count and
        # reauthentication-latency-avg/-max (KIP-368), per listener
        names = ("successful_authentication", "failed_authentication",
                 "successful_reauthentication", "expired_connections_killed_count",
                 "failed_reauthentication")
        families = [CounterMetricFamily(f"kafka_server_socket_server_metrics_{name}",
                                        f"{name.replace('_', ' ')}s (TLS handshakes, SASL)",
                                        labels=["listener"]) for name in names]
        for listener, *counts in snap.authentications:
            for family, count in zip(families, counts, strict=True):
                family.add_metric([listener], count)
        yield from families
        latencies = [GaugeMetricFamily(
            f"kafka_server_socket_server_metrics_reauthentication_latency_{stat}",
            f"{stat} ms from a re-authentication's SaslHandshake to its success, since "
            f"start", labels=["listener"]) for stat in ("avg", "max")]
        for listener, *latency in snap.reauthentication_latency:
            for gauge, ms in zip(latencies, latency, strict=True):
                gauge.add_metric([listener], ms)
        yield from latencies

        # Kafka's kafka.network:type=SocketServer,name=MemoryPoolAvailable|MemoryPoolUsed
        available, used = snap.memory_pool
        yield GaugeMetricFamily("kafka_network_socketserver_memorypoolavailable",
                                "bytes left in the request memory pool "
                                "(queued.max.request.bytes)", value=available)
        yield GaugeMetricFamily("kafka_network_socketserver_memorypoolused",
                                "bytes of requests being received or in flight, charged "
                                "to the pool", value=used)

        # Kafka's client quota sensors (kafka.server:type=Produce|Fetch|Request,user=,
        # client-id=), tagged as DefaultQuotaCallback tags them ("" for an absent tag)
        quota_families = {
            metric: GaugeMetricFamily(f"kafka_server_{metric}", help_text,
                                      labels=["user", "client_id"])
            for metric, help_text in (
                ("produce_byte_rate", "bytes/s produced, per quota entity"),
                ("fetch_byte_rate", "bytes/s fetched by consumers, per quota entity"),
                ("request_request_time", "percent of a thread its requests take, per "
                                         "quota entity"))
        }
        for metric, user, client_id, rate in snap.quotas:
            quota_families[metric].add_metric([user, client_id], rate)
        yield from quota_families.values()


def _sample(name: str, labels: dict[str, str], value: float) -> Any:
    from prometheus_client.samples import Sample

    return Sample(name, labels, value)


class MetricsServer:
    """The HTTP endpoint, in its own threads (:mod:`odradek.server.metrics_http`: TLS, basic
    auth, loopback by default); ``prometheus_client``'s WSGI app makes the page."""

    def __init__(self, broker: BrokerView, listener: MetricsListener) -> None:
        self._broker = broker
        self._listener = listener
        self._server: Any = None
        self._thread: Any = None
        self.collector: BrokerCollector | None = None

    def start(self) -> None:
        from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app

        from odradek.server import metrics_http

        scheme, host, port = self._listener
        config = self._broker.config
        tls = None
        if scheme == "https":
            tls = metrics_http.metrics_tls_context(config.__getitem__)
        else:
            for key in ("metrics.ssl.keystore.location", "metrics.ssl.truststore.location"):
                if config[key]:
                    raise MetricsError(f"{key} is set but metrics.listener is "
                                       f"{scheme}://{host}:{port}: use https:// to serve "
                                       "the page over TLS")
        auth_file = str(config["metrics.basic.auth.file"] or "")
        auth = metrics_http.load_basic_auth_file(auth_file) if auth_file else None
        registry = CollectorRegistry(auto_describe=False)
        self.collector = BrokerCollector(self._broker, asyncio.get_running_loop())
        registry.register(self.collector)  # type: ignore[arg-type]
        ProcessCollector(registry=registry)
        app = make_wsgi_app(registry)
        if auth is not None:
            app = metrics_http.with_basic_auth(app, auth)
        try:
            self._server, self._thread = metrics_http.start_server(host, port, app, tls)
        except OSError as exc:
            raise MetricsError(
                f"metrics.listener {scheme}://{host}:{port}: cannot listen: "
                f"{exc.strerror or exc}"
            ) from exc
        warning = metrics_http.exposure_warning(self.address, tls is not None, auth is not None)
        if warning:
            log.warning("%s", warning)

    @property
    def address(self) -> str:
        """The address bound (``127.0.0.1`` for an empty host)."""
        return str(self._server.server_address[0]) if self._server is not None else ""

    @property
    def port(self) -> int:
        return int(self._server.server_address[1]) if self._server is not None else 0

    @property
    def url(self) -> str:
        scheme, host, _ = self._listener
        return f"{scheme}://{f'[{host}]' if ':' in host else host}:{self.port}/metrics"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None
