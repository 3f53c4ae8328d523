"""The broker's counters: plain ints bumped on the request path, read at scrape time.

How it works: Kafka keeps Yammer meters per topic (``BrokerTopicStats``:
``kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=…`` and the others) and
per request type (``RequestChannel.Metrics`` / ``kafka.network:type=RequestMetrics``:
RequestsPerSec, ErrorsPerSec and the TotalTimeMs histogram split into RequestQueueTimeMs,
LocalTimeMs, RemoteTimeMs, ResponseQueueTimeMs and ResponseSendTimeMs). Here they are
integer attributes and bucket counts (powers of two of nanoseconds), written only on the
broker's event loop, with no lock and no per-record work: a Produce adds its partition's
byte and record counts (the batch headers already counted the records), a Fetch its
region sizes, the network layer one request's timestamps. Rates are Prometheus' job
(``rate()`` over the counters). Nothing here imports ``prometheus_client``: the collector
in :mod:`odradek.server.metrics` turns these into metric families when scraped, and when
``metrics.listener`` is unset none of these objects exists and the request path does not
count at all.
"""

from __future__ import annotations

from time import monotonic_ns

__all__ = ["REQUEST_BOUNDS_MS", "TIME_NAMES", "BrokerTopicStats", "MetricsError",
           "RequestStats", "RequestTimes", "RequestTiming", "TopicCounters"]


class MetricsError(RuntimeError):
    """The metrics endpoint cannot start (no prometheus_client, port taken): one line."""


class TopicCounters:
    """One topic's counters (or the broker's total across topics)."""

    __slots__ = ("bytes_in", "bytes_out", "failed_fetch_requests", "failed_produce_requests",
                 "fetch_requests", "messages_in", "produce_requests", "total")

    def __init__(self, total: TopicCounters | None = None) -> None:
        self.total = total if total is not None else self  # the broker's, counted alongside
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
            found = self.topics[name] = TopicCounters(self.total)
        return found

    def forget(self, name: str) -> None:
        """A deleted topic's counters go (the totals stay)."""
        self.topics.pop(name, None)


#: The parts of a request's time, Kafka's RequestMetrics histogram names, in order.
TIME_NAMES = ("RequestQueueTimeMs", "LocalTimeMs", "RemoteTimeMs", "ResponseQueueTimeMs",
              "ResponseSendTimeMs", "TotalTimeMs")
#: Request time buckets are powers of two of nanoseconds, so that a duration's bucket is
#: ``(ns >> SHIFT).bit_length()``, one C call (a bisect costs four times more): bucket 0
#: holds durations below 2**16 ns (65.5 us), bucket i those below 2**(16+i) ns, up to
#: 2**35 ns (34.4 s); the rest is the overflow (+Inf).
SHIFT = 16
BUCKETS = 20
REQUEST_BOUNDS_MS = tuple((1 << (SHIFT + i)) / 1e6 for i in range(BUCKETS))
_WIDTH = 64  # counted slots per histogram: every bit_length of a 64-bit duration


class RequestTiming:
    """One request's handler timestamps (``time.monotonic_ns()``), noted by the network
    layer: started (after earlier requests it had to wait for), suspended (its first wait,
    0 if it never waited), done; and the error code it answered, 0 for none."""

    __slots__ = ("done", "error", "started", "suspended")

    def __init__(self) -> None:
        self.started = self.suspended = self.done = self.error = 0


class RequestTimes:
    """The six time histograms of one request type, as one flat list of bucket counts
    (histogram i at ``[i * _WIDTH, (i + 1) * _WIDTH)``) and six sums in ns: recording a
    request is six ``bit_length`` s and twelve additions, with no call per histogram."""

    __slots__ = ("counts", "sums")

    def __init__(self) -> None:
        self.counts = [0] * (_WIDTH * len(TIME_NAMES))
        self.sums = [0] * len(TIME_NAMES)

    def snapshot(self) -> list[tuple[list[int], int]]:
        """Per histogram: (counts of the BUCKETS buckets and the overflow, sum in ns)."""
        counts = list(self.counts)
        out = []
        for i in range(len(TIME_NAMES)):
            own = counts[i * _WIDTH:(i + 1) * _WIDTH]
            out.append(([*own[:BUCKETS], sum(own[BUCKETS:])], self.sums[i]))
        return out


class RequestStats:
    """Per request type: requests by version, errors by code, time histograms."""

    def __init__(self) -> None:
        # int keys, not tuples: nothing the garbage collector tracks is made per request
        self.requests: dict[int, int] = {}     # api key << 16 | version -> count
        self.errors: dict[int, int] = {}       # api key << 16 | error code -> count
        self.times: dict[int, RequestTimes] = {}           # api key -> histograms

    def record(self, api_key: int, api_version: int, received: int, timing: RequestTiming,
               taken: int) -> None:
        """An answered request: ``received`` (its frame complete), ``timing`` (its
        handler), ``taken`` (the writer took its response, after those before it); it is
        handed to the socket now."""
        sent = monotonic_ns()
        key = api_key << 16 | api_version
        requests = self.requests
        requests[key] = requests.get(key, 0) + 1
        error = timing.error
        if error:
            ekey = api_key << 16 | error
            self.errors[ekey] = self.errors.get(ekey, 0) + 1
        times = self.times.get(api_key)
        if times is None:
            times = self.times[api_key] = RequestTimes()
        counts = times.counts
        sums = times.sums
        started = timing.started
        suspended = timing.suspended
        done = timing.done
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
        counts[(queue >> SHIFT).bit_length()] += 1
        counts[_WIDTH + (local >> SHIFT).bit_length()] += 1
        counts[2 * _WIDTH + (remote >> SHIFT).bit_length()] += 1
        counts[3 * _WIDTH + (response_queue >> SHIFT).bit_length()] += 1
        counts[4 * _WIDTH + (send >> SHIFT).bit_length()] += 1
        counts[5 * _WIDTH + (total >> SHIFT).bit_length()] += 1
        sums[0] += queue
        sums[1] += local
        sums[2] += remote
        sums[3] += response_queue
        sums[4] += send
        sums[5] += total
