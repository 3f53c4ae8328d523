"""The broker's counters: plain ints bumped on the request path, read at scrape time.

How it works: Kafka keeps Yammer meters per topic (``BrokerTopicStats``:
``kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=…`` and the others) and
per request type (``RequestChannel.Metrics`` / ``kafka.network:type=RequestMetrics``:
RequestsPerSec, ErrorsPerSec and the TotalTimeMs histogram split into RequestQueueTimeMs,
LocalTimeMs, RemoteTimeMs, ResponseQueueTimeMs and ResponseSendTimeMs). Here they are
written only on the broker's event loop, with no lock and no per-record work, and as
little per request as can be:

- *Per topic*, integer attributes: a Produce adds its partitions' request count once per
  topic and, per partition appended, its bytes and records (the batch headers already
  counted the records); a failed produce is one counted but not appended, so failing
  costs nothing extra. A Fetch adds its region sizes. The broker's totals are summed
  over the topics when read (plus what deleted and unknown topics had counted), not kept
  alongside.
- *Per request*, the network layer notes one request's timestamps (eight integers
  packed into a preallocated buffer, :meth:`RequestStats.note`); every
  :data:`FOLD_REQUESTS` requests,
  and before a scrape reads them, the noted requests are folded into the counts and
  histograms by numpy, a few array operations for the whole lot: folding each request
  on its own in Python was a large share of what metrics added to a small Produce
  request (bench/README.md, "Metrics", has the figures).

Rates are Prometheus' job (``rate()`` over the counters). Nothing here imports
``prometheus_client``: the collector in :mod:`odradek.server.metrics` turns these into
metric families when scraped, and when ``metrics.listener`` is unset none of these
objects exists and the request path does not count at all.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np
    from numpy.typing import NDArray

__all__ = ["REQUEST_BOUNDS_MS", "TIME_NAMES", "BrokerTopicStats", "MetricsError",
           "RequestStats", "RequestTimes", "TopicCounters"]


class MetricsError(RuntimeError):
    """The metrics endpoint cannot start (no prometheus_client, port taken): one line."""


class TopicCounters:
    """One topic's counters (or, from :meth:`BrokerTopicStats.totals`, the broker's)."""

    __slots__ = ("appended", "bytes_in", "bytes_out", "failed_fetch_requests", "fetch_requests",
                 "messages_in", "produce_requests")

    def __init__(self) -> None:
        self.bytes_in = 0
        self.messages_in = 0
        self.bytes_out = 0
        self.produce_requests = 0   # one per partition of a Produce request
        self.appended = 0           # of those, the ones appended
        self.fetch_requests = 0
        self.failed_fetch_requests = 0

    @property
    def failed_produce_requests(self) -> int:
        """Partitions of Produce requests that were not appended (Kafka's
        FailedProduceRequestsPerSec: an append that failed)."""
        return self.produce_requests - self.appended

    def add(self, other: TopicCounters) -> None:
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


class BrokerTopicStats:
    """Kafka's ``BrokerTopicStats``: per-topic counters and the broker's totals.

    The totals are the topics' sums plus what deleted topics had counted (as Kafka's
    ``allTopicsStats``, they keep growing when a topic is deleted and its counters are
    dropped). A topic has counters only while it exists (``exists``, the broker's
    metadata): a request naming a topic the broker does not know, or one deleted while
    the request waited, counts in the totals only. Otherwise any client could grow the
    label set without bound with made-up names, and a late Fetch would bring back a
    deleted topic's counters."""

    def __init__(self, exists: Callable[[str], bool] = lambda name: True) -> None:
        self.topics: dict[str, TopicCounters] = {}
        self._exists = exists
        # deleted topics', and unknown topics' counts: in the totals, under no topic
        self._unattributed = TopicCounters()
        # followers' fetches (Kafka's ReplicationBytesOutPerSec / ReplicationBytesInPerSec)
        self.replication_bytes_out = 0

    def topic(self, name: str) -> TopicCounters:
        found = self.topics.get(name)
        if found is None:
            if not self._exists(name):
                return self._unattributed
            found = self.topics[name] = TopicCounters()
        return found

    def forget(self, name: str) -> None:
        """A deleted topic's counters go (the totals keep them)."""
        gone = self.topics.pop(name, None)
        if gone is not None:
            self._unattributed.add(gone)

    def totals(self) -> TopicCounters:
        """The broker's counters across all topics, deleted and unknown ones included."""
        total = TopicCounters()
        total.add(self._unattributed)
        for counters in self.topics.values():
            total.add(counters)
        return total


#: The parts of a request's time, Kafka's RequestMetrics histogram names, in order.
TIME_NAMES = ("RequestQueueTimeMs", "LocalTimeMs", "RemoteTimeMs", "ResponseQueueTimeMs",
              "ResponseSendTimeMs", "TotalTimeMs")
#: Request time buckets are powers of two of nanoseconds, so that a duration's bucket is
#: the bit length of ``ns >> SHIFT`` (numpy's ``frexp`` exponent, for a whole fold): bucket 0
#: holds durations below 2**16 ns (65.5 us), bucket i those below 2**(16+i) ns, up to
#: 2**35 ns (34.4 s); the rest is the overflow (+Inf).
SHIFT = 16
BUCKETS = 20
REQUEST_BOUNDS_MS = tuple((1 << (SHIFT + i)) / 1e6 for i in range(BUCKETS))
_WIDTH = 64  # counted slots per histogram: every bit_length of a 64-bit duration


class RequestTimes:
    """The six time histograms of one request type: one flat array of bucket counts
    (histogram i at ``[i * _WIDTH, (i + 1) * _WIDTH)``) and six sums in ns (Python ints:
    they outgrow 64 bits in a broker's life)."""

    __slots__ = ("counts", "sums")

    def __init__(self, counts: NDArray[np.int64]) -> None:
        self.counts = counts
        self.sums = [0] * len(TIME_NAMES)

    def snapshot(self) -> list[tuple[list[int], int]]:
        """Per histogram: (counts of the BUCKETS buckets and the overflow, sum in ns)."""
        counts = self.counts.tolist()
        out = []
        for i in range(len(TIME_NAMES)):
            own = counts[i * _WIDTH:(i + 1) * _WIDTH]
            out.append(([*own[:BUCKETS], sum(own[BUCKETS:])], self.sums[i]))
        return out


#: Requests noted before they are folded into the histograms (the notes' buffer: 64
#: bytes a request, 256 KiB).
FOLD_REQUESTS = 4096
#: A note: api key, version, the five parts of its time in ns (TIME_NAMES but the
#: total), error (int64, native order, read back by numpy without a copy).
_NOTE = struct.Struct("@8q")


class RequestStats:
    """Per request type: requests by version, errors by code, time histograms.

    ``requests``, ``errors`` and ``times`` hold what was folded; call :meth:`fold`
    before reading them."""

    def __init__(self) -> None:
        import numpy  # the metrics extra: imported only when metrics.listener is set

        self._np = numpy
        # int keys, not tuples: nothing the garbage collector tracks is kept per request
        self.requests: dict[int, int] = {}     # api key << 16 | version -> count
        self.errors: dict[int, int] = {}       # api key << 16 | error code -> count
        self.times: dict[int, RequestTimes] = {}           # api key -> histograms
        self._notes = bytearray(FOLD_REQUESTS * _NOTE.size)
        self._at = 0  # where the next note goes

    def note(self, api_key: int, version: int, queue: int, local: int, remote: int,
             response_queue: int, send: int, error: int) -> None:
        """An answered request, the parts of its time in ns: ``queue`` (from its frame
        complete to its handler's start, after earlier requests it had to wait for),
        ``local`` (the handler up to its first wait, or all of it), ``remote`` (from
        that wait to the handler's end: a purgatory, the ISR, a rebalance),
        ``response_queue`` (until the writer took its answer, after those before it),
        ``send`` (handing it to the socket); ``error``: the error code it answered, 0
        for none. (Called once per request: plain ints, no key or object built.)"""
        at = self._at
        _NOTE.pack_into(self._notes, at, api_key, version, queue, local, remote,
                        response_queue, send, error)
        self._at = at = at + _NOTE.size
        if at == len(self._notes):
            self.fold()

    def fold(self) -> None:
        """Add the noted requests to the counts and histograms, all at once: each
        request type's rows are grouped by one stable sort, its six durations summed
        with ``reduceat`` and their buckets counted with one ``bincount``."""
        if not self._at:
            return
        np = self._np
        rows = np.frombuffer(self._notes, dtype=np.int64, count=self._at // 8).reshape(-1, 8)
        self._at = 0  # (the rows are read before the next note overwrites them)
        columns = rows.T
        api, error = columns[0], columns[7]
        key = api << 16 | columns[1]  # api key << 16 | version
        parts = np.empty((len(TIME_NAMES), len(api)), dtype=np.int64)
        np.maximum(columns[2:7], 0, out=parts[:5])  # monotonic clocks: a guard only
        parts[5] = parts[:5].sum(axis=0)  # TotalTimeMs
        order = np.argsort(api, kind="stable")
        api = api[order]
        parts = parts[:, order]
        first = np.concatenate(([True], api[1:] != api[:-1]))  # a type's first row
        starts = np.flatnonzero(first)
        group = np.cumsum(first) - 1  # each row's type, 0..
        # bucket = bit length of duration >> SHIFT (frexp's exponent: exact, those are
        # below 2**48), placed in its type's and histogram's slots
        slots = np.frexp((parts >> SHIFT).astype(np.float64))[1]
        width = _WIDTH * len(TIME_NAMES)
        slots += (np.arange(len(TIME_NAMES)) * _WIDTH)[:, None] + group * width
        counts = np.bincount(slots.ravel(), minlength=len(starts) * width).reshape(-1, width)
        sums = np.add.reduceat(parts, starts, axis=1).T.tolist()
        for i, api_key in enumerate(api[starts].tolist()):
            times = self.times.get(api_key)
            if times is None:
                times = self.times[api_key] = RequestTimes(np.zeros(width, dtype=np.int64))
            times.counts += counts[i]
            kept = times.sums
            for j, total in enumerate(sums[i]):
                kept[j] += total
        _add_counts(self.requests, np.unique(key, return_counts=True))
        failed = error != 0
        if failed.any():
            _add_counts(self.errors, np.unique((key[failed] >> 16) << 16 | error[failed],
                                               return_counts=True))


def _add_counts(into: dict[int, int], unique: tuple[NDArray[np.int64], NDArray[np.intp]]) -> None:
    for k, n in zip(unique[0].tolist(), unique[1].tolist(), strict=True):
        into[k] = into.get(k, 0) + n
