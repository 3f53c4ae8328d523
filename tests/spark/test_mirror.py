"""``odradek mirror`` end to end: two brokers on loopback, the mirror as a subprocess
(its own Spark), kill -9 mid-stream and restart from the same checkpoint, then every
record compared on both sides, topic configs, partition counts, translated group offsets
and the mirror's own lag on the source."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from odradek.spark.mirror import MirrorConfig, MirrorJob, combined_pattern
from odradek.testing import running_broker
from tests._deadlines import describe, expired
from tests.interop._broker import odradek_executable, refusing_address

PREFIX = "a."
DEADLINE_S = 240.0

Record = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]] | None, int]


def wait_until(cond: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> None:
    started = time.monotonic()
    while not cond():
        if expired(started, timeout):
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def read_all(bootstrap: str, topic: str, partition: int) -> list[Record]:
    """(offset, key, value, headers, timestamp) of every record of one partition."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                     "enable.auto.commit": False, "enable.partition.eof": False})
    try:
        low, high = c.get_watermark_offsets(ck.TopicPartition(topic, partition), timeout=30)
        if high <= low:
            return []
        c.assign([ck.TopicPartition(topic, partition, ck.OFFSET_BEGINNING)])
        out: list[Record] = []
        started = time.monotonic()
        while not out or out[-1][0] < high - 1:
            if c.position([ck.TopicPartition(topic, partition)])[0].offset >= high:
                break
            assert not expired(started, 60), (
                f"reading {topic}-{partition}: {len(out)} records of {high - low} "
                f"in {describe(started, 60)}")
            for m in c.consume(10_000, timeout=0.5):
                assert m.error() is None, m.error()
                out.append(cast(Record, (m.offset(), m.key(), m.value(), m.headers(),
                                         m.timestamp()[1])))
        return out
    finally:
        c.close()


def ends(bootstrap: str, topic: str, partitions: int) -> list[int]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    try:
        return [c.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)]
    except ck.KafkaException:
        return [-1] * partitions
    finally:
        c.close()


def partition_count(admin: Any, topic: str) -> int:
    md = admin.list_topics(timeout=30)
    tm = md.topics.get(topic)
    return 0 if tm is None or tm.error is not None else len(tm.partitions)


def mirror(source: str, target: str, ckpt: Path, log: Path) -> Any:
    return mirror_of(source, target, ckpt, log, r"m\..*", "--exclude", r"m\.skip",
                     "--topic-prefix", PREFIX)


@contextlib.contextmanager
def mirror_of(
    source: str, target: str, ckpt: Path, log: Path, include: str, *extra: str
) -> Iterator[subprocess.Popen[bytes]]:
    cmd = [
        str(odradek_executable()), "mirror",
        "--source-bootstrap-server", source, "--target-bootstrap-server", target,
        "--include", include, *extra,
        "--checkpoint-dir", str(ckpt), "--master", "local[2]",
        "--sync-interval", "1", "--max-records-per-batch", "20000",
    ]
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(60)


class SessionMirror:
    """A mirror whose query runs in the tests' shared Spark session (``MirrorJob.run``
    given the session), in a thread: see :func:`mirror_in_session`."""

    def __init__(self, job: MirrorJob, spark: Any) -> None:
        self.job = job
        self.spark = spark
        self.result: int | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="mirror-in-session",
                                       daemon=True)

    def _run(self) -> None:
        try:
            self.result = self.job.run(self.spark)
        except BaseException as exc:
            self.error = exc

    def running(self) -> bool:
        """True while the mirror runs (``odradek mirror``'s process has not exited)."""
        return self.thread.is_alive()

    def stop(self) -> int:
        """Stop it (as SIGTERM stops ``odradek mirror``); what ``run`` returned."""
        self.job.stop()
        self.thread.join(120)
        assert not self.thread.is_alive(), "the mirror did not stop within 120 s"
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


@contextlib.contextmanager
def mirror_in_session(
    spark: Any, source: str, target: str, ckpt: Path, log: Path, include: str,
    **settings: Any,
) -> Iterator[SessionMirror]:
    """The mirror of :func:`mirror_of` (same settings; ``settings`` are MirrorConfig's
    fields), its query run in the tests' shared Spark session rather than in an
    ``odradek mirror`` process with a Spark application of its own. For the tests whose
    subject is what the mirror copies and rides out; those about the command's process
    (its signals, exit status, output, kill -9 and restart) run :func:`mirror_of`. The
    mirror's log lines go to ``log``."""
    handler = logging.FileHandler(log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("odradek.mirror")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    cfg = MirrorConfig(source=source, target=target, include=include,
                       checkpoint_dir=ckpt.resolve(), sync_interval_s=1.0,
                       max_records_per_batch=20_000, **settings)
    mirror = SessionMirror(MirrorJob(cfg), spark)
    try:
        mirror.thread.start()
        yield mirror
    finally:
        if mirror.running():
            mirror.job.stop()
            mirror.thread.join(120)
        logger.removeHandler(handler)
        logger.setLevel(level)
        handler.close()


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """kill -9 the mirror, its Spark JVM and Python workers (one process group)."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(60)

    def gone() -> bool:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_until(gone, "the mirror's processes to exit", 60)


class Producer(threading.Thread):
    """Writes records with headers and explicit timestamps to the given topics until
    stopped; what it sent is known per partition."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topics: dict[str, int] = {"m.headers": 3}
        self.stop = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None
        self.rnd = random.Random(7)

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                for topic, parts in list(self.topics.items()):
                    for _ in range(10):
                        i = self.sent
                        self.p.produce(topic, f"v{i}".encode(), f"k{i}".encode(),
                                       self.rnd.randrange(parts),
                                       timestamp=1_700_000_000_000 + i,
                                       headers=[("n", str(i).encode()), ("e", None)]
                                       if i % 3 else None)
                        self.sent += 1
                assert self.p.flush(30) == 0
                time.sleep(0.05)
        except BaseException as exc:
            self.error = exc


@pytest.mark.timeout(900)
def test_mirror_survives_kill9_with_nothing_lost_or_doubled(tmp_path: Path) -> None:
    with (
        running_broker({"log.cleaner.backoff.ms": "20",
                        "log.cleaner.dedupe.buffer.size": str(24 * 4096)},
                       data_dir=tmp_path / "a") as a,
        # the target keeps every mirrored record: compaction there would hide the comparison
        running_broker({"log.cleaner.enable": "false"}, data_dir=tmp_path / "b") as b,
    ):
        src = AdminClient({"bootstrap.servers": a.bootstrap})
        tgt = AdminClient({"bootstrap.servers": b.bootstrap})
        compact = {"cleanup.policy": "compact", "segment.bytes": "2048",
                   "min.cleanable.dirty.ratio": "0.01", "retention.ms": "86400000",
                   "compression.type": "lz4", "file.delete.delay.ms": "0"}
        futures = src.create_topics([
            NewTopic("m.compact", 2, 1, config=compact),
            NewTopic("m.headers", 3, 1, config={"retention.ms": "3600000"}),
            NewTopic("m.skip", 1, 1),
        ])
        for f in futures.values():
            f.result(30)
        p = ck.Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 5,
                         "compression.type": "lz4", "batch.num.messages": 20})
        for i in range(3000):
            p.produce("m.compact", f"value-{i}".encode(), f"key-{i % 50}".encode(), i % 2,
                      timestamp=1_600_000_000_000 + i)
        p.produce("m.skip", b"not mirrored")
        assert p.flush(30) == 0

        def compacted() -> bool:
            return all(len(read_all(a.bootstrap, "m.compact", q)) < 1500 for q in (0, 1))

        wait_until(compacted, "the source's cleaner to compact m.compact", 120)
        counts: list[list[int]] = []

        def cleaner_idle() -> bool:  # the mirror must copy what the test compares
            counts.append([len(read_all(a.bootstrap, "m.compact", q)) for q in (0, 1)])
            time.sleep(1)
            return len(counts) > 2 and counts[-1] == counts[-2] == counts[-3]

        wait_until(cleaner_idle, "the source's cleaner to finish", 120)

        producer = Producer(a.bootstrap)
        producer.start()
        wait_until(lambda: producer.sent > 500, "the producer")
        # a group that consumed part of the source: its offsets must be translated
        app = ck.Consumer({"bootstrap.servers": a.bootstrap, "group.id": "app"})
        compact0 = read_all(a.bootstrap, "m.compact", 0)
        present = {r[0] for r in compact0}
        gap = next(o for o in range(compact0[-1][0]) if o not in present)  # compacted away
        committed = {("m.compact", 0): gap, ("m.compact", 1): 3,
                     ("m.headers", 0): 100, ("m.headers", 2): 7}
        app.commit(offsets=[ck.TopicPartition(t, q, o) for (t, q), o in committed.items()],
                   asynchronous=False)
        app.close()

        ckpt, log = tmp_path / "ckpt", tmp_path / "mirror.log"
        try:
            with mirror(a.bootstrap, b.bootstrap, ckpt, log) as first:
                wait_until(lambda: sum(ends(b.bootstrap, PREFIX + "m.headers", 3)) > 0,
                           "the first mirrored records")
                src.create_topics([NewTopic("m.late", 2, 1)])["m.late"].result(30)
                producer.topics["m.late"] = 2
                wait_until(lambda: sum(ends(b.bootstrap, PREFIX + "m.late", 2)) > 0,
                           "the topic created while mirroring to be mirrored")
                assert first.poll() is None
                kill_group(first)  # mid-stream: the producer is still writing
            with mirror(a.bootstrap, b.bootstrap, ckpt, log) as second:
                src.create_partitions([NewPartitions("m.headers", 4)])["m.headers"].result(30)
                wait_until(lambda: partition_count(tgt, PREFIX + "m.headers") == 4,
                           "a partition added at the source to be added at the target")
                producer.topics["m.headers"] = 4
                wait_until(lambda: producer.sent > 4000, "more records after the restart")
                producer.stop.set()
                producer.join(60)
                assert producer.error is None, producer.error
                layout = {"m.compact": 2, "m.headers": 4, "m.late": 2}
                source_records = {(t, q): read_all(a.bootstrap, t, q)
                                  for t, n in layout.items() for q in range(n)}

                def caught_up() -> bool:
                    return all(ends(b.bootstrap, PREFIX + t, n) ==
                               [len(source_records[(t, q)]) for q in range(n)]
                               for t, n in layout.items())

                wait_until(caught_up, "the target to catch up")
                for (t, q), s in source_records.items():
                    d = read_all(b.bootstrap, PREFIX + t, q)
                    # same partition, same order, none missing, none doubled
                    assert [r[1:] for r in d] == [r[1:] for r in s], f"{t}-{q}"
                    assert [r[0] for r in d] == list(range(len(s)))
                assert partition_count(tgt, PREFIX + "m.skip") == 0  # --exclude
                assert partition_count(tgt, "m.compact") == 0  # --topic-prefix
                res = ConfigResource("topic", PREFIX + "m.compact")
                configs = tgt.describe_configs([res])[res].result(30)
                for key in ("cleanup.policy", "retention.ms", "compression.type"):
                    assert configs[key].value == compact[key], key
                assert any(len(v) < v[-1][0] + 1 for v in source_records.values())  # gaps

                # the group's offsets, translated: same records on the target
                def translated() -> dict[tuple[str, int], int]:
                    from confluent_kafka import ConsumerGroupTopicPartitions

                    got = tgt.list_consumer_group_offsets(
                        [ConsumerGroupTopicPartitions("app")])["app"].result(30)
                    return {(tp.topic[len(PREFIX):], tp.partition): tp.offset
                            for tp in got.topic_partitions if tp.offset >= 0}

                expected = {
                    tp: next(i for i, r in enumerate(source_records[tp]) if r[0] >= c)
                    for tp, c in committed.items()
                }
                wait_until(lambda: translated() == expected,
                           f"translated offsets {expected} of group 'app' on the target")
                for tp, off in expected.items():  # the same record on both sides
                    target_records = read_all(b.bootstrap, PREFIX + tp[0], tp[1])
                    assert target_records[off][1:] == source_records[tp][off][1:]

                # the mirror's own progress on the source: lag 0 once caught up
                def mirror_lag_zero() -> bool:
                    out = subprocess.run(
                        [str(odradek_executable()), "groups", "describe", "--group",
                         "odradek-mirror", "--bootstrap-server", a.bootstrap],
                        capture_output=True, text=True, timeout=60, check=False)
                    rows = [line.split() for line in out.stdout.splitlines()
                            if line.startswith("m.")]
                    return len(rows) == 8 and all(r[4] == "0" for r in rows)

                wait_until(mirror_lag_zero, "the mirror's group to show lag 0 on the source")
                second.send_signal(signal.SIGTERM)
                assert second.wait(120) == 0
        except BaseException:
            print(log.read_text(errors="replace")[-6000:])
            raise
        finally:
            producer.stop.set()
        text = log.read_text(errors="replace")
        assert "created target topic a.m.late" in text


def test_unreachable_cluster_and_small_target_are_clear_errors(tmp_path: Path) -> None:
    with running_broker(data_dir=tmp_path / "a") as a, running_broker(data_dir=tmp_path / "b") as b:
        for admin, topic, n in ((AdminClient({"bootstrap.servers": a.bootstrap}), "m.x", 3),
                                (AdminClient({"bootstrap.servers": b.bootstrap}), "m.x", 1)):
            admin.create_topics([NewTopic(topic, n, 1)])[topic].result(30)
        base = [str(odradek_executable()), "mirror", "--include", r"m\..*",
                "--checkpoint-dir", str(tmp_path / "ckpt"), "--timeout", "3000"]
        small = subprocess.run(
            [*base, "--source-bootstrap-server", a.bootstrap,
             "--target-bootstrap-server", b.bootstrap],
            capture_output=True, text=True, timeout=120, check=False)
        assert small.returncode == 1
        assert "target topic 'm.x' exists with 1 partition(s), fewer than the 3" in small.stderr
        with refusing_address() as dead:
            down = subprocess.run(
                [*base, "--source-bootstrap-server", a.bootstrap,
                 "--target-bootstrap-server", dead],
                capture_output=True, text=True, timeout=120, check=False)
        assert down.returncode == 1
        assert f"cannot reach the target cluster at {dead}" in down.stderr


def test_include_exclude_pattern() -> None:
    import re

    rx = combined_pattern(r"m\..*", r"m\.skip|m\.tmp.*")
    assert [t for t in ("m.a", "m.skip", "m.skipper", "m.tmp1", "x.a")
            if re.fullmatch(rx, t)] == ["m.a", "m.skipper"]


def test_missing_pyspark_names_the_extra(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "pyspark"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('no pyspark here')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "shadow")}
    out = subprocess.run(
        [str(odradek_executable()), "mirror", "--source-bootstrap-server", "127.0.0.1:1",
         "--target-bootstrap-server", "127.0.0.1:2", "--include", "x"],
        capture_output=True, text=True, timeout=120, check=False, env=env)
    assert out.returncode == 1
    assert "needs pyspark" in out.stderr
    assert "pip install 'odradek[spark]'" in out.stderr


@pytest.mark.timeout(900)
@pytest.mark.parametrize("side", ["source", "target"])
def test_mirror_rides_out_a_broker_killed_and_restarted(
        mirror_spark: Any, tmp_path: Path, side: str) -> None:
    """kill -9 of the (only) broker of one side while the mirror runs; the broker comes
    back on the same port and log, and the mirror carries on without a restart of its
    own: every record once, in order, on the target. The mirror's query runs in the
    tests' Spark session (:func:`mirror_in_session`): its process is not the subject."""
    from tests.interop._broker import start_broker

    # each on the port it binds (port 0: the system's choice), back on that port after
    brokers = {name: start_broker(tmp_path / name, data_dir=tmp_path / name / "d")
               for name in ("source", "target")}
    ports = {name: broker.port for name, broker in brokers.items()}
    src_boot, dst_boot = brokers["source"].bootstrap, brokers["target"].bootstrap
    producer = Producer(src_boot)
    try:
        src = AdminClient({"bootstrap.servers": src_boot})
        src.create_topics([NewTopic("r.t", 2, 1)])["r.t"].result(30)
        producer.topics = {"r.t": 2}
        producer.start()
        ckpt, log = tmp_path / "ckpt", tmp_path / "mirror.log"
        with mirror_in_session(mirror_spark, src_boot, dst_boot, ckpt, log, r"r\..*") as mirror:
            wait_until(lambda: sum(ends(dst_boot, "r.t", 2)) > 0, "mirrored records")
            brokers[side].kill9()
            if side == "target":  # the source goes on growing meanwhile
                sent = producer.sent
                wait_until(lambda: producer.sent > sent + 500, "records while it is down")
            brokers[side] = start_broker(tmp_path / side, port=ports[side],
                                         data_dir=tmp_path / side / "d")
            sent = producer.sent
            wait_until(lambda: producer.sent > sent + 500, "records after it is back")
            producer.stop.set()
            producer.join(60)
            assert producer.error is None, producer.error
            source = [read_all(src_boot, "r.t", q) for q in (0, 1)]
            wait_until(lambda: ends(dst_boot, "r.t", 2) == [len(s) for s in source],
                       "the target to catch up")
            for q in (0, 1):
                got = read_all(dst_boot, "r.t", q)
                assert [r[1:] for r in got] == [r[1:] for r in source[q]], q
            assert mirror.running(), f"the mirror did not ride the outage out: {mirror.error}"
            assert mirror.stop() == 0
    except BaseException:
        with contextlib.suppress(OSError):
            print((tmp_path / "mirror.log").read_text(errors="replace")[-6000:])
        raise
    finally:
        producer.stop.set()
        for b in brokers.values():
            b.stop()


def _list_offsets_answered(metrics_url: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(metrics_url, timeout=10) as page:
        text = page.read().decode()
    return sum(s.value for family in text_string_to_metric_families(text)
               for s in family.samples
               if s.name == "kafka_network_requestmetrics_requests_total"
               and s.labels.get("request") == "ListOffsets")


def test_an_idle_mirror_asks_the_source_once_an_interval(
    mirror_spark: Any, tmp_path: Path,
) -> None:
    """With nothing to copy, the query asks the source for its offsets (two ListOffsets
    per partition, earliest and latest) once each ``--poll-interval-ms`` (100 ms here, the
    default). With Spark's default trigger (``poll_interval_ms=0``) it asked 10 ms after
    each empty micro-batch: 145 ListOffsets a second in this window, which fails."""
    from tests.interop._broker import start_broker

    poll_interval_ms = 100
    window_s = 5.0
    brokers = {name: start_broker(tmp_path / name, metrics_listener="http://127.0.0.1:0")
               for name in ("source", "target")}
    src_boot, dst_boot = brokers["source"].bootstrap, brokers["target"].bootstrap
    metrics = brokers["source"].metrics_url
    assert metrics is not None
    try:
        src = AdminClient({"bootstrap.servers": src_boot})
        src.create_topics([NewTopic("idle.t", 1, 1)])["idle.t"].result(30)
        dst = AdminClient({"bootstrap.servers": dst_boot})
        ckpt, log = tmp_path / "ckpt", tmp_path / "mirror.log"
        with mirror_in_session(mirror_spark, src_boot, dst_boot, ckpt, log, r"idle\..*",
                               poll_interval_ms=poll_interval_ms) as mirror:
            wait_until(lambda: partition_count(dst, "idle.t") == 1, "the target topic")
            wait_until(lambda: _list_offsets_answered(metrics) > 20, "the query polling")
            before, started = _list_offsets_answered(metrics), time.monotonic()
            time.sleep(window_s)  # the window counted: its length is the measurement
            per_s = (_list_offsets_answered(metrics) - before) / (time.monotonic() - started)
            assert mirror.running(), mirror.error
            assert mirror.stop() == 0
    finally:
        for b in brokers.values():
            b.stop()
    # at most 10 polls a second, 2 requests each, and the sync loop's few beside
    assert per_s <= 2 * 1000 / poll_interval_ms + 4, per_s


@pytest.mark.parametrize("value", ["-1", "3600001", "100000000000000000000"])
def test_a_poll_interval_out_of_range_is_a_usage_error(value: str) -> None:
    """Refused before anything starts (no cluster is reachable here): Spark's trigger
    would fail on a value past a long's milliseconds, after the mirror had started."""
    out = subprocess.run(
        [str(odradek_executable()), "mirror", "--source-bootstrap-server", "127.0.0.1:1",
         "--target-bootstrap-server", "127.0.0.1:2", "--include", "x",
         "--poll-interval-ms", value],
        capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2, out.stderr
    assert "--poll-interval-ms must be from 0 to 3600000 (an hour)" in out.stderr


def test_a_negative_poll_interval_is_refused_by_the_config() -> None:
    with pytest.raises(ValueError, match="poll_interval_ms must be >= 0"):
        MirrorConfig("a:1", "b:1", "x", poll_interval_ms=-5)
