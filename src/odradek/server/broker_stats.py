"""The broker's counters: plain ints bumped on the request path, read at scrape time.

How it works: Kafka keeps Yammer meters per topic (``BrokerTopicStats``:
``kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=…`` and the others) and
per request type (``RequestChannel.Metrics`` / ``kafka.network:type=RequestMetrics``:
RequestsPerSec, ErrorsPerSec and the TotalTimeMs histogram split into RequestQueueTimeMs,
LocalTimeMs, RemoteTimeMs, ResponseQueueTimeMs and ResponseSendTimeMs). Here they are
integer attributes and bucket counts (the bounds of :mod:`odradek.histogram`), written only on the
broker's event loop, with no lock and no per-record work: a Produce adds its partition's
byte and record counts (the batch headers already counted the records), a Fetch its
region sizes, the network layer one request's timestamps. Rates are Prometheus' job
(``rate()`` over the counters). Nothing here imports ``prometheus_client``: the collector
in :mod:`odradek.server.metrics` turns these into metric families when scraped, and when
``metrics.listener`` is unset none of these objects exists and the request path does not
count at all.
"""

from __future__ import annotations

from bisect import bisect_left

from odradek.histogram import LATENCY_BOUNDS_MS

__all__ = ["TIME_NAMES", "BrokerTopicStats", "MetricsError", "RequestStats", "RequestTimes",
           "TopicCounters"]


class MetricsError(RuntimeError):
    """The metrics endpoint cannot start (no prometheus_client, port taken): one line."""


class TopicCounters:
    """One topic's counters (or the broker's total across topics)."""

    __slots__ = ("bytes_in", "bytes_out", "failed_fetch_requests", "failed_produce_requests",
                 "fetch_requests", "messages_in", "produce_requests")

    def __init__(self) -> None:
        self.bytes_in = 0
        self.messages_in = 0
        self.bytes_out = 0
        self.produce_requests = 0
        self.failed_produce_requests = 0
        self.fetch_requests = 0
        self.failed_fetch_requests = 0


class BrokerTopicStats:
    """Kafka's ``BrokerTopicStats``: per-topic counters and the broker's totals.

    ``total`` is counted apart from the topics (as Kafka's ``allTopicsStats``), so the
    totals keep growing when a topic is deleted and its counters are dropped."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicCounters] = {}
        self.total = TopicCounters()
        # followers' fetches (Kafka's ReplicationBytesOutPerSec / ReplicationBytesInPerSec)
        self.replication_bytes_out = 0

    def topic(self, name: str) -> TopicCounters:
        found = self.topics.get(name)
        if found is None:
            found = self.topics[name] = TopicCounters()
        return found

    def forget(self, name: str) -> None:
        """A deleted topic's counters go (the totals stay)."""
        self.topics.pop(name, None)


#: The parts of a request's time, Kafka's RequestMetrics histogram names, in order.
TIME_NAMES = ("RequestQueueTimeMs", "LocalTimeMs", "RemoteTimeMs", "ResponseQueueTimeMs",
              "ResponseSendTimeMs", "TotalTimeMs")
_BOUNDS_NS = [int(b * 1_000_000) for b in LATENCY_BOUNDS_MS]
_WIDTH = len(_BOUNDS_NS) + 1  # buckets per histogram, the overflow one included


class RequestTimes:
    """The six time histograms of one request type, as one flat list of bucket counts
    (histogram i at ``[i * _WIDTH, (i + 1) * _WIDTH)``) and six sums in ns: recording a
    request is six bisects and twelve additions, with no call per histogram."""

    __slots__ = ("counts", "sums")

    def __init__(self) -> None:
        self.counts = [0] * (_WIDTH * len(TIME_NAMES))
        self.sums = [0] * len(TIME_NAMES)

    def snapshot(self) -> list[tuple[list[int], int]]:
        """Per histogram: (bucket counts, sum in ns), copied."""
        counts = list(self.counts)
        return [(counts[i * _WIDTH:(i + 1) * _WIDTH], self.sums[i])
                for i in range(len(TIME_NAMES))]


class RequestStats:
    """Per request type: requests by version, errors by code, time histograms."""

    def __init__(self) -> None:
        self.requests: dict[tuple[int, int], int] = {}     # (api key, version) -> count
        self.errors: dict[tuple[int, int], int] = {}       # (api key, error code) -> count
        self.times: dict[int, RequestTimes] = {}           # api key -> histograms

    def record(
        self, api_key: int, api_version: int, received: int, started: int, suspended: int,
        done: int, taken: int, sent: int, error: int,
    ) -> None:
        """One answered request's timestamps (``time.monotonic_ns()``): received (frame
        complete), started (handler began, after earlier requests it had to wait for),
        suspended (the handler's first wait, 0 if it never waited), done (handler
        returned), taken (the writer took the response, after those before it), sent
        (handed to the socket). ``error``: the request's error code, 0 for none."""
        key = (api_key, api_version)
        requests = self.requests
        requests[key] = requests.get(key, 0) + 1
        if error:
            ekey = (api_key, error)
            self.errors[ekey] = self.errors.get(ekey, 0) + 1
        times = self.times.get(api_key)
        if times is None:
            times = self.times[api_key] = RequestTimes()
        counts = times.counts
        sums = times.sums
        bounds = _BOUNDS_NS
        if suspended:
            local = suspended - started
            remote = done - suspended
        else:
            local = done - started
            remote = 0
        queue = started - received
        response_queue = taken - done
        send = sent - taken
        total = sent - received
        counts[bisect_left(bounds, queue)] += 1
        counts[_WIDTH + bisect_left(bounds, local)] += 1
        counts[2 * _WIDTH + bisect_left(bounds, remote)] += 1
        counts[3 * _WIDTH + bisect_left(bounds, response_queue)] += 1
        counts[4 * _WIDTH + bisect_left(bounds, send)] += 1
        counts[5 * _WIDTH + bisect_left(bounds, total)] += 1
        sums[0] += queue
        sums[1] += local
        sums[2] += remote
        sums[3] += response_queue
        sums[4] += send
        sums[5] += total
