"""The ``odradek`` Spark data source: batch and streaming reads of Kafka topics.

Built on Spark 4's Python Data Source API (``pyspark.sql.datasource``). Rows have the
schema of Spark's own Kafka source. Planning (partition discovery, offset resolution,
admission control) runs on the driver; each input partition is one offset range
``[from, until)`` of one topic-partition (or a slice of it, with ``minPartitions``),
read on a worker into Arrow record batches.

The driver's partition discovery (Metadata) and watermark queries (ListOffsets through
librdkafka) ride out a broker lost under a running stream: each attempt bounded, a failed
one retried with a new client until ``kafka.default.api.timeout.ms`` has passed
(:func:`odradek.spark.client.ride_out`).

Streaming offsets are JSON objects ``{"topic": {"0": 42, ...}}`` — the next offset to read
per partition — the same shape as Spark's Kafka source uses in its checkpoints.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from odradek.spark import client as kc
from odradek.spark.options import OdradekOptionError, ReadOptions, parse_read_options

__all__ = ["OdradekBatchReader", "OdradekDataSource", "OdradekStreamReader", "OffsetRange"]

_T = TypeVar("_T")

_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
_HEADERS = "headers array<struct<key:string,value:binary>>"


@dataclass
class OffsetRange(InputPartition):
    topic: str
    partition: int
    start: int
    until: int

    def __init__(self, topic: str, partition: int, start: int, until: int) -> None:
        super().__init__((topic, partition, start, until))
        self.topic, self.partition, self.start, self.until = topic, partition, start, until


def split_ranges(
    ranges: list[OffsetRange], min_partitions: int | None, max_records: int | None = None
) -> list[OffsetRange]:
    """Split ranges as Spark's Kafka source does: first so that none holds more than
    ``max_records`` offsets (``maxRecordsPerPartition``), then, if there are still fewer
    than ``min_partitions``, the big ones in proportion to their size (``minPartitions``)."""
    ranges = [r for r in ranges if r.until > r.start]
    if max_records:
        ranges = [
            piece for r in ranges
            for piece in _pieces(r, -(-(r.until - r.start) // max_records))  # ceil
        ]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.until - r.start for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        size = r.until - r.start
        out.extend(_pieces(r, max(1, min(size, round(size * min_partitions / total)))))
    return out


def _pieces(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """``r`` cut into ``parts`` consecutive ranges of (nearly) equal size."""
    size = r.until - r.start
    return [
        OffsetRange(r.topic, r.partition, r.start + size * i // parts,
                    r.start + size * (i + 1) // parts)
        for i in range(parts)
    ]


def read_offset_range(opts: ReadOptions, r: OffsetRange) -> Iterator[pa.RecordBatch]:
    """One task's read: raw batches decoded to Arrow in C (:mod:`odradek.spark.fetcher`)
    when it can honour every ``kafka.*`` option, librdkafka otherwise.

    The fetcher (Odradek's own client, the protocol's schemas, the record format) is
    imported here, in the task: the processes that only plan (Spark starts one per
    planned query, lookup and create, and the streaming source's runner) never need it,
    and its import was a quarter of theirs (about 0.25 s of CPU each, pyspark 4.3).
    The worker daemon (:mod:`odradek.spark.daemon`) preloads it for the tasks."""
    from odradek.spark import fetcher

    if fetcher.supports(opts.client):
        return fetcher.read_range(opts, r.topic, r.partition, r.start, r.until)
    return kc.read_range(opts, r.topic, r.partition, r.start, r.until)


def to_json(offsets: kc.Offsets) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (t, p), off in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = off
    return out


def from_json(offsets: dict[str, Any]) -> kc.Offsets:
    return {(t, int(p)): int(off) for t, parts in offsets.items() for p, off in parts.items()}


def rate_limit(start: kc.Offsets, latest: kc.Offsets, limit: int) -> kc.Offsets:
    """Cap the total number of offsets at ``limit``, shared in proportion to each backlog."""
    sizes = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(sizes.values())
    if total <= limit:
        return dict(latest)
    take = {tp: limit * size // total for tp, size in sizes.items()}
    left = limit - sum(take.values())
    for tp in sorted(sizes, key=lambda k: (-(sizes[k] - take[k]), k)):
        if left == 0:
            break
        if take[tp] < sizes[tp]:
            take[tp] += 1
            left -= 1
    return {tp: start.get(tp, latest[tp]) + take[tp] for tp in latest}


class OdradekDataSource(DataSource):
    """``spark.read.format("odradek")`` / ``spark.readStream.format("odradek")`` and writes."""

    @classmethod
    def name(cls) -> str:
        return "odradek"

    def schema(self) -> StructType | str:
        # Fail at load() rather than when a stream starts: subscriptions must not clash.
        given = [
            k for k in self.options if str(k).lower() in ("subscribe", "subscribepattern", "assign")
        ]
        if len(given) > 1:
            raise OdradekOptionError(
                "exactly one of the options 'subscribe', 'subscribePattern', 'assign' is "
                f"required; got {', '.join(given)}"
            )
        headers = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return _SCHEMA + (", " + _HEADERS if headers else "")

    def reader(self, schema: StructType) -> DataSourceReader:
        return OdradekBatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return OdradekStreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        from odradek.spark.sink import OdradekBatchWriter

        return OdradekBatchWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from odradek.spark.sink import OdradekStreamWriter

        return OdradekStreamWriter(self.options, schema, overwrite)


class OdradekBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        c = kc.consumer(opts.client)
        try:
            tps = kc.discover(c, opts, require_topics=True)
            marks = kc.watermarks(c, tps, opts.api_timeout_ms)
            start = kc.resolve(c, opts.starting, tps, marks, opts, starting=True)
            end = kc.resolve(c, opts.ending, tps, marks, opts, starting=False)
        finally:
            kc.close_consumer(c)
        ranges = [OffsetRange(t, p, start[(t, p)], end[(t, p)]) for t, p in tps]
        for r in ranges:
            if r.start > r.until:
                raise kc.OdradekSparkError(
                    f"the starting offset {r.start} of {r.topic}-{r.partition} is after its "
                    f"ending offset {r.until} (startingOffsets / endingOffsets)"
                )
        return split_ranges(ranges, opts.min_partitions, opts.max_records_per_partition) or [
            OffsetRange("", -1, 0, 0)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        if partition.partition < 0:
            return iter(())
        return read_offset_range(self.opts, partition)


class OdradekStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._consumer: Any = None
        self._latest: kc.Offsets | None = None
        self._available_now: kc.Offsets | None = None
        self._last_trigger = time.monotonic()

    # The consumer is a driver-side cache; workers get a pickled copy without it.
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_consumer"] = None
        return state

    def _client(self) -> Any:
        if self._consumer is None:
            self._consumer = kc.consumer(self.opts.client)
        return self._consumer

    def _current(self) -> tuple[list[tuple[str, int]], dict[tuple[str, int], tuple[int, int]]]:
        def current(c: Any, attempt_ms: int) -> tuple[
                list[tuple[str, int]], dict[tuple[str, int], tuple[int, int]]]:
            tps = kc.discover(c, self.opts, require_topics=False, timeout_ms=attempt_ms)
            return tps, kc.watermarks(c, tps, attempt_ms)

        return self._riding_out(current)

    def _watermarks(
        self, tps: list[tuple[str, int]]
    ) -> dict[tuple[str, int], tuple[int, int]]:
        return self._riding_out(lambda c, attempt_ms: kc.watermarks(c, tps, attempt_ms))

    def _riding_out(self, query: Callable[[Any, int], _T]) -> _T:
        """``query(client, attempt_ms)`` (partition discovery, watermarks) through the
        cached client, ridden out (:func:`odradek.spark.client.ride_out`): a failed
        attempt drops the client and the next one builds a new one."""
        return kc.ride_out(lambda attempt_ms: query(self._client(), attempt_ms),
                           self.opts.api_timeout_ms, self.stop)

    def initialOffset(self) -> dict[str, Any]:
        tps, marks = self._current()
        start = kc.resolve(self._client(), self.opts.starting, tps, marks, self.opts, starting=True)
        return to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        _, marks = self._current()
        self._available_now = {tp: high for tp, (_, high) in marks.items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = from_json(start)
        tps, marks = self._current()
        latest: kc.Offsets = {}
        for tp in tps:
            low, high = marks[tp]
            if self._available_now is not None:
                high = min(high, self._available_now.get(tp, begin.get(tp, low)))
            latest[tp] = high
        self._check_loss(begin, latest, marks)
        for tp in tps:  # partitions that appeared since `start` begin at their earliest offset
            begin.setdefault(tp, marks[tp][0])
        self._latest = dict(latest)
        # Partitions that disappeared keep their last offset so the JSON stays comparable.
        for tp, off in from_json(start).items():
            latest.setdefault(tp, off)
        backlog = sum(max(0, latest[tp] - begin.get(tp, latest[tp])) for tp in latest)
        now = time.monotonic()
        min_rows = self.opts.min_offsets_per_trigger
        if isinstance(limit, ReadMinRows):
            min_rows = limit.min_rows
        if (
            min_rows is not None
            and not isinstance(limit, ReadAllAvailable)
            and backlog < min_rows
            and (now - self._last_trigger) * 1000 < self.opts.max_trigger_delay_ms
        ):
            return start
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        end = {tp: max(off, begin.get(tp, off)) for tp, off in latest.items()}
        if end != from_json(start):
            self._last_trigger = now
        return to_json(end)

    def _check_loss(
        self, begin: kc.Offsets, latest: kc.Offsets, marks: dict[tuple[str, int], tuple[int, int]]
    ) -> None:
        if not self.opts.fail_on_data_loss:
            return
        for tp, off in begin.items():
            if tp not in latest and (self.opts.subscribe or self.opts.assign):
                raise kc.OdradekSparkError(
                    f"data loss: partition {tp[0]}-{tp[1]} disappeared (topic deleted?); "
                    "set failOnDataLoss=false to continue without it"
                )
            if tp in latest and latest[tp] < off and self._available_now is None:
                raise kc.OdradekSparkError(
                    f"data loss: {tp[0]}-{tp[1]} now ends at {latest[tp]}, before the checkpointed "
                    f"offset {off}; set failOnDataLoss=false to continue"
                )

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None if self._latest is None else to_json(self._latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, finish = from_json(start), from_json(end)
        missing = [tp for tp in finish if tp not in begin]
        lows: dict[tuple[str, int], int] = {}
        if missing:
            marks = self._watermarks(missing)
            lows = {tp: marks[tp][0] for tp in missing}
        ranges = []
        for tp, until in sorted(finish.items()):
            frm = begin.get(tp, lows.get(tp, until))
            if until > frm:
                ranges.append(OffsetRange(tp[0], tp[1], frm, until))
        return split_ranges(
            ranges, self.opts.min_partitions, self.opts.max_records_per_partition
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        return read_offset_range(self.opts, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: offsets live in Spark's checkpoint (idempotent by construction)."""

    def stop(self) -> None:
        if self._consumer is not None:
            kc.close_consumer(self._consumer)
            self._consumer = None
