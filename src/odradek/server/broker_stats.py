"""The broker's counters: plain ints bumped on the request path, read at scrape time.

How it works: Kafka keeps Yammer meters per topic (``BrokerTopicStats``:
``kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=…`` and the others) and
per request type (``RequestChannel.Metrics`` / ``kafka.network:type=RequestMetrics``:
RequestsPerSec, ErrorsPerSec and the TotalTimeMs histogram split into RequestQueueTimeMs,
LocalTimeMs, RemoteTimeMs, ResponseQueueTimeMs and ResponseSendTimeMs). Here they are
integer attributes and :class:`~odradek.histogram.Histogram` s, written only on the
broker's event loop, with no lock and no per-record work: a Produce adds its partition's
byte and record counts (the batch headers already counted the records), a Fetch its
region sizes, the network layer one request's timestamps. Rates are Prometheus' job
(``rate()`` over the counters). Nothing here imports ``prometheus_client``: the collector
in :mod:`odradek.server.metrics` turns these into metric families when scraped, and when
``metrics.listener`` is unset none of these objects exists and the request path does not
count at all.
"""

from __future__ import annotations

from odradek.histogram import Histogram

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


class RequestTimes:
    """The six time histograms of one request type."""

    __slots__ = ("histograms",)

    def __init__(self) -> None:
        self.histograms = tuple(Histogram() for _ in TIME_NAMES)


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
        queue, local, remote, response_queue, send, total = times.histograms
        queue.record(started - received)
        if suspended:
            local.record(suspended - started)
            remote.record(done - suspended)
        else:
            local.record(done - started)
            remote.record(0)
        response_queue.record(taken - done)
        send.record(sent - taken)
        total.record(sent - received)
