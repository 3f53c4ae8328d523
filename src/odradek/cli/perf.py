"""``odradek perf produce`` / ``odradek perf consume``: kafka-producer-perf-test and
kafka-consumer-perf-test.

How it works: both tools drive librdkafka through confluent-kafka, so the producer costs
what librdkafka costs plus one Python call per record; they must not be the bottleneck of
a broker benchmark (bench/README.md, "Perf tools", compares them with librdkafka's
rdkafka_performance).

``perf produce`` follows Kafka's ProducerPerformance: it sends ``--num-records`` records of
``--record-size`` random bytes (or lines of ``--payload-file``), paced to ``--throughput``
records/s (-1: unlimited) the way Kafka's ThroughputThrottler does (sleep when ahead of
the schedule), and takes every record's latency (send to acknowledgement) from its
delivery report. Every ``--reporting-interval`` ms (5 s) it prints one window line, and at
the end the totals with the 50th, 95th, 99th and 99.9th percentiles, in Kafka's words.

``perf consume`` follows Kafka's ConsumerPerformance: a consumer in group ``--group``
subscribes to the topic, reads ``--messages`` records (or until ``--timeout`` ms pass
without one) and prints Kafka's CSV line: start and end time, MB and records consumed and
per second, rebalance time (subscribe until the first assignment), fetch time (the rest)
and the rates over the fetch time. The group is librdkafka's, but the records are read by
the native batch reader of ``_perf_fetch.py`` (no Python object per record, over TLS and
SASL too) unless ``--librdkafka-fetch`` is given or a setting asks for what that reader
lacks.

Security: ``--command-config client.properties`` (as the other verbs) and the
``--producer.config`` / ``--consumer.config`` files take the Java client's keys or
librdkafka's; the Java ones are translated for librdkafka
(:func:`odradek.client.security.librdkafka_config`). A secret is never printed: a bad
configuration's message names the key.

On a terminal (standard error is a TTY) a progress bar is redrawn below the output.
``--histogram FILE.png`` plots the latency distribution; it needs matplotlib (the
``perf`` extra).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from odradek.cli._common import UsageError, librdkafka_security_of, parse_pairs
from odradek.cli._perf_report import (
    CONSUMER_HEADER,
    DETAILED_HEADER,
    LIBRDKAFKA_LOGGER,
    MB,
    ProgressBar,
    consumer_line,
    print_detailed,
)

#: librdkafka's queue is full: serve delivery reports for this long, then retry
QUEUE_FULL_POLL_S = 0.005


def _confluent() -> Any:
    try:
        import confluent_kafka
    except ImportError:
        raise UsageError("odradek: perf needs confluent-kafka: pip install 'odradek[perf]'") \
            from None
    return confluent_kafka


# --------------------------------------------------------------------------- producer


@dataclass
class Window:
    """Kafka's per-window stats: records, bytes, latency sum and max since ``start``."""

    start: float
    count: int = 0
    nbytes: int = 0
    latency_sum: float = 0.0
    latency_max: float = 0.0


@dataclass
class ProducerStats:
    """Every record's latency (ms) from its delivery report, plus the current window."""

    started: float
    interval_s: float
    record_size: int
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""
    window: Window = field(init=False)

    def __post_init__(self) -> None:
        self.window = Window(self.started)

    def on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors += 1
            if not self.first_error:
                self.first_error = str(err)
            return
        latency_ms = msg.latency() * 1000.0
        self.latencies.append(latency_ms)
        w = self.window
        w.count += 1
        w.nbytes += self.record_size
        w.latency_sum += latency_ms
        if latency_ms > w.latency_max:
            w.latency_max = latency_ms

    def maybe_report(self, now: float, bar: ProgressBar) -> None:
        w = self.window
        if now - w.start < self.interval_s:
            return
        elapsed = now - w.start
        bar.clear()
        print(f"{w.count} records sent, {w.count / elapsed:.1f} records/sec "
              f"({w.nbytes / elapsed / MB:.2f} MB/sec), "
              f"{w.latency_sum / max(w.count, 1):.1f} ms avg latency, "
              f"{w.latency_max:.1f} ms max latency.", flush=True)
        self.window = Window(now)


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """The value at ``fraction`` of a sorted list (Kafka's index ``(int)(n * fraction)``)."""
    if not ordered:
        return 0.0
    return ordered[min(int(len(ordered) * fraction), len(ordered) - 1)]


def final_line(count: int, seconds: float, record_size: int, latencies: list[float]) -> str:
    """Kafka's closing line: totals, average and max latency and four percentiles."""
    ordered = sorted(latencies)
    avg = sum(ordered) / len(ordered) if ordered else 0.0
    worst = ordered[-1] if ordered else 0.0
    rate = count / seconds if seconds > 0 else 0.0
    p50, p95, p99, p999 = (int(percentile(ordered, f)) for f in (0.5, 0.95, 0.99, 0.999))
    return (f"{count} records sent, {rate:f} records/sec "
            f"({rate * record_size / MB:.2f} MB/sec), {avg:.2f} ms avg latency, "
            f"{worst:.2f} ms max latency, {p50} ms 50th, {p95} ms 95th, {p99} ms 99th, "
            f"{p999} ms 99.9th.")


def _payloads(args: argparse.Namespace) -> list[bytes]:
    if args.payload_file is not None:
        try:
            text = args.payload_file.read_bytes()
        except OSError as exc:
            raise UsageError(f"odradek: cannot read --payload-file: {exc}") from None
        delim = args.payload_delimiter.encode().decode("unicode_escape").encode()
        lines = [p for p in text.split(delim) if p]
        if not lines:
            raise UsageError(f"odradek: --payload-file {args.payload_file} has no payloads")
        return lines
    # Kafka fills the record with random uppercase letters; one payload reused for all.
    rnd = random.Random(0)
    return [bytes(rnd.randrange(65, 91) for _ in range(args.record_size))]


def _for_librdkafka(config: dict[str, str]) -> dict[str, str]:
    from odradek.client.security import librdkafka_config

    try:
        return librdkafka_config(config)
    except (ValueError, OSError) as exc:
        raise UsageError(f"odradek: invalid client configuration: {exc}") from None


def _producer_config(args: argparse.Namespace) -> dict[str, str]:
    config: dict[str, str] = librdkafka_security_of(args.command_config)
    if args.producer_config is not None:
        config.update(_read_properties(args.producer_config))
    config.update(parse_pairs(args.producer_props, "--producer-props"))
    if args.bootstrap_server:
        config["bootstrap.servers"] = args.bootstrap_server
    if args.acks is not None:
        config["acks"] = args.acks
    if "bootstrap.servers" not in config:
        raise UsageError("odradek: set --bootstrap-server or bootstrap.servers in "
                         "--producer-props")
    return _for_librdkafka(config)


def _read_properties(path: Path) -> dict[str, str]:
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise UsageError(f"odradek: cannot read {path}: {exc}") from None
    out: dict[str, str] = {}
    for line in lines:
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise UsageError(f"odradek: {path}: expected key=value, got {line!r}")
        out[key.strip()] = value.strip()
    return out


def _throttle(start: float, sent: int, throughput: float) -> None:
    """Sleep until ``sent`` records are due at ``throughput`` records/s (if ahead)."""
    ahead = sent / throughput - (time.monotonic() - start)
    if ahead > 0:
        time.sleep(ahead)


def _perf_produce(args: argparse.Namespace) -> int:
    ck = _confluent()
    if args.num_records <= 0:
        raise UsageError("odradek: --num-records must be positive")
    if args.payload_file is None and args.record_size is None:
        raise UsageError("odradek: either --record-size or --payload-file is required")
    payloads = _payloads(args)
    size = len(payloads[0]) if len(payloads) == 1 else \
        sum(map(len, payloads)) // len(payloads)
    try:
        producer = ck.Producer({**_producer_config(args), "logger": LIBRDKAFKA_LOGGER})
    except ck.KafkaException as exc:
        raise UsageError(f"odradek: invalid producer configuration: {exc}") from None
    n, topic = args.num_records, args.topic
    start = time.monotonic()
    stats = ProducerStats(start, args.reporting_interval / 1000.0, size)
    bar = ProgressBar(n, "records")
    produce, poll, on_delivery = producer.produce, producer.poll, stats.on_delivery
    throughput = args.throughput if args.throughput > 0 else 0.0
    # Check the clock and the throttle once per step, not per record.
    step = 1000 if not throughput else max(1, min(1000, int(throughput / 100)))
    single = payloads[0] if len(payloads) == 1 else None
    choose = random.Random(0).choice
    sent = 0
    try:
        while sent < n:
            end = min(sent + step, n)
            for _ in range(sent, end):
                value = single if single is not None else choose(payloads)
                while True:
                    try:
                        produce(topic, value, on_delivery=on_delivery)
                        break
                    except BufferError:
                        poll(QUEUE_FULL_POLL_S)
            sent = end
            poll(0)
            now = time.monotonic()
            stats.maybe_report(now, bar)
            bar.update(len(stats.latencies) + stats.errors, now)
            if throughput:
                _throttle(start, sent, throughput)
        while len(producer) > 0:
            poll(0.1)
            now = time.monotonic()
            stats.maybe_report(now, bar)
            bar.update(len(stats.latencies) + stats.errors, now)
    except KeyboardInterrupt:
        producer.flush(5)
    elapsed = time.monotonic() - start
    bar.clear()
    print(final_line(len(stats.latencies), elapsed, size, stats.latencies), flush=True)
    if args.histogram is not None:
        write_histogram(args.histogram, stats.latencies, "produce latency (ms)")
    if stats.errors:
        print(f"odradek: {stats.errors} records failed: {stats.first_error}", file=sys.stderr)
        return 1
    return 0


def write_histogram(path: Path, latencies: list[float], label: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("odradek: --histogram needs matplotlib: pip install 'odradek[perf]'",
              file=sys.stderr)
        raise SystemExit(1) from None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.hist(latencies, bins=100)
    ax.set_xlabel(label)
    ax.set_ylabel("records")
    ax.set_yscale("log")
    ordered = sorted(latencies)
    for frac, style in ((0.5, "-"), (0.99, "--"), (0.999, ":")):
        ax.axvline(percentile(ordered, frac), color="red", linestyle=style,
                   label=f"p{frac * 100:g} {percentile(ordered, frac):.1f} ms")
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as exc:
        raise SystemExit(f"odradek: cannot write {path}: {exc}") from None
    finally:
        plt.close(fig)


# --------------------------------------------------------------------------- consumer

def _consumer_config(args: argparse.Namespace) -> dict[str, Any]:
    config: dict[str, Any] = librdkafka_security_of(args.command_config)
    if args.consumer_config is not None:
        config.update(_read_properties(args.consumer_config))
    config.update(parse_pairs(args.consumer_props, "--consumer-props"))
    config["bootstrap.servers"] = args.bootstrap_server
    config.setdefault("group.id", args.group or f"perf-consumer-{uuid.uuid4().hex[:8]}")
    config.setdefault("auto.offset.reset", "latest" if args.from_latest else "earliest")
    config.setdefault("enable.auto.commit", "true")
    if args.fetch_size is not None:
        config["max.partition.fetch.bytes"] = str(args.fetch_size)
    return _for_librdkafka(config)


def _perf_consume(args: argparse.Namespace) -> int:
    if args.messages <= 0:
        raise UsageError("odradek: --messages must be positive")
    config = _consumer_config(args)
    if not args.librdkafka_fetch and fast_path_possible(config):
        from odradek.cli._perf_fetch import consume_fast

        return consume_fast(args, config, _confluent())
    return _consume_librdkafka(args, config)


def _consume_librdkafka(args: argparse.Namespace, config: dict[str, Any]) -> int:
    ck = _confluent()
    try:
        consumer = ck.Consumer({**config, "logger": LIBRDKAFKA_LOGGER})
    except ck.KafkaException as exc:
        raise UsageError(f"odradek: invalid consumer configuration: {exc}") from None
    assigned_at: list[float] = []

    def on_assign(_consumer: Any, partitions: list[Any]) -> None:
        if partitions and not assigned_at:
            assigned_at.append(time.time())

    bar = ProgressBar(args.messages, "records")
    start = time.time()
    consumer.subscribe([args.topic], on_assign=on_assign)
    count = nbytes = 0
    last_record = time.monotonic()
    timeout_s = args.timeout / 1000.0
    interval = args.reporting_interval / 1000.0
    if args.show_detailed_stats and not args.hide_header:
        print(DETAILED_HEADER, flush=True)
    win_t, win_count, win_bytes = time.time(), 0, 0
    value = ck.Message.value
    error: str = ""
    try:
        while count < args.messages:
            msgs = consumer.consume(min(10000, args.messages - count), 0.1)
            now = time.monotonic()
            if msgs:
                bad = [m for m in msgs if m.error() is not None]
                if bad:
                    fatal = [m for m in bad if m.error().fatal() or
                             m.error().code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART]
                    if fatal:
                        error = str(fatal[0].error())
                        break
                    msgs = [m for m in msgs if m.error() is None]
                count += len(msgs)
                nbytes += sum(map(len, filter(None, map(value, msgs))))
                last_record = now
            elif now - last_record > timeout_s:
                error = (f"no record for {args.timeout} ms: consumed {count} of "
                         f"{args.messages}")
                break
            if args.show_detailed_stats and time.time() - win_t >= interval:
                t = time.time()
                rebalance = (assigned_at[0] - start) if assigned_at else t - start
                print_detailed(t, win_t, count - win_count, nbytes - win_bytes, count, nbytes,
                                rebalance, args.date_format)
                win_t, win_count, win_bytes = t, count, nbytes
            bar.update(count, now)
    except KeyboardInterrupt:
        pass
    end = time.time()
    consumer.close()
    bar.clear()
    rebalance_s = (assigned_at[0] - start) if assigned_at else 0.0
    if not args.show_detailed_stats:
        if not args.hide_header:
            print(CONSUMER_HEADER)
        print(consumer_line(start, end, nbytes, count, rebalance_s, args.date_format),
              flush=True)
    if error:
        print(f"odradek: {error}", file=sys.stderr)
        return 1
    return 0


#: settings the native batch reader honours; any other key sends the read through librdkafka
FAST_PATH_KEYS = frozenset({
    "bootstrap.servers", "group.id", "auto.offset.reset", "enable.auto.commit", "client.id",
    "max.partition.fetch.bytes", "fetch.max.bytes", "session.timeout.ms",
    "heartbeat.interval.ms", "max.poll.interval.ms", "partition.assignment.strategy",
    "group.instance.id",
    # security, as Odradek's own client takes it (client/security.py)
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username",
    "sasl.password", "ssl.ca.location", "ssl.certificate.location", "ssl.key.location",
    "ssl.key.password", "ssl.endpoint.identification.algorithm",
})


def fast_path_possible(config: dict[str, Any]) -> bool:
    """read_uncommitted, nothing the batch reader does not implement."""
    from odradek.records.columnar import native_available

    return native_available() and set(config) <= FAST_PATH_KEYS


# --------------------------------------------------------------------------- parser


def add_parser(sub: Any) -> None:
    perf = sub.add_parser("perf", help="load generators: kafka-producer-perf-test and "
                                       "kafka-consumer-perf-test")
    verbs = perf.add_subparsers(dest="perf_command", required=True)

    p = verbs.add_parser("produce", help="send records as fast as asked, report latency")
    p.add_argument("--bootstrap-server", "-b",
                   help="host:port of a broker (or bootstrap.servers in --producer-props)")
    p.add_argument("--topic", required=True, help="the topic to produce to")
    p.add_argument("--num-records", type=int, required=True, help="records to send")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--record-size", type=int, help="bytes per record")
    size.add_argument("--payload-file", type=Path,
                      help="payloads to pick from at random, split by --payload-delimiter")
    p.add_argument("--payload-delimiter", default="\\n",
                   help="between payloads in --payload-file (default a newline)")
    p.add_argument("--throughput", type=float, required=True,
                   help="records/s to aim at; -1 for no limit")
    p.add_argument("--producer-props", nargs="+", metavar="KEY=VALUE",
                   help="librdkafka producer properties")
    p.add_argument("--producer.config", dest="producer_config", type=Path,
                   help="a properties file of producer settings")
    p.add_argument("--command-config", type=Path, metavar="FILE",
                   help="client security properties, as the other verbs take them")
    p.add_argument("--acks", choices=["-1", "0", "1", "all"],
                   help="the producer's acks (default librdkafka's: all)")
    p.add_argument("--reporting-interval", type=int, default=5000, help="ms (default 5000)")
    p.add_argument("--histogram", type=Path, metavar="FILE.png",
                   help="plot the latency distribution (needs matplotlib)")
    p.set_defaults(func=_perf_produce)

    c = verbs.add_parser("consume", help="read records as fast as possible, report rates")
    c.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092",
                   help="host:port of a broker (default 127.0.0.1:9092)")
    c.add_argument("--topic", required=True, help="the topic to read")
    c.add_argument("--messages", type=int, required=True, help="records to consume")
    c.add_argument("--group", help="consumer group (default perf-consumer-<random>)")
    c.add_argument("--fetch-size", type=int, help="max.partition.fetch.bytes")
    c.add_argument("--from-latest", action="store_true",
                   help="start at the log end (default: the start)")
    c.add_argument("--timeout", type=int, default=10000,
                   help="ms without a record before giving up (default 10000)")
    c.add_argument("--consumer-props", nargs="+", metavar="KEY=VALUE",
                   help="librdkafka consumer properties")
    c.add_argument("--consumer.config", dest="consumer_config", type=Path,
                   help="a properties file of consumer settings")
    c.add_argument("--command-config", type=Path, metavar="FILE",
                   help="client security properties, as the other verbs take them")
    c.add_argument("--show-detailed-stats", action="store_true",
                   help="a line every --reporting-interval instead of one at the end")
    c.add_argument("--reporting-interval", type=int, default=5000, help="ms (default 5000)")
    c.add_argument("--hide-header", action="store_true",
                   help="print the stats without their header line")
    c.add_argument("--librdkafka-fetch", action="store_true",
                   help="read the records through librdkafka too (one Python object per "
                        "record: slower) instead of the native batch reader")
    c.add_argument("--date-format", default="kafka",
                   help="strftime pattern (default: Kafka's yyyy-MM-dd HH:mm:ss:SSS)")
    c.set_defaults(func=_perf_consume)


__all__ = ["add_parser", "consumer_line", "fast_path_possible", "final_line", "percentile"]
