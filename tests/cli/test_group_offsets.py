"""``odradek groups export-offsets`` / ``import-offsets`` (cli/_group_offsets.py): the CSV of
``kafka-consumer-groups.sh --reset-offsets --from-file``, dry run first, only into an empty
group, round trip across a broker restart and into another broker; real clients."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import confluent_kafka as ck
from tests._deadlines import describe, expired
from tests._zygote import run as run_odradek
from tests.interop._broker import odradek_executable, start_broker

from odradek.cli._group_offsets import OffsetsFileError, format_offsets, parse_offsets

TOPIC = "orders"
PARTITIONS = 3
PER_PARTITION = 20
COMMITTED = {(TOPIC, 0): 5, (TOPIC, 1): 7, (TOPIC, 2): 20}
CSV = "orders,0,5\norders,1,7\norders,2,20\n"
DEADLINE_S = 30.0


def _odradek(*args: str) -> subprocess.CompletedProcess[str]:
    return run_odradek([str(odradek_executable()), *args], timeout=120)


def _fill(bootstrap: str) -> None:
    """The topic with the same records on any broker: value ``p-i`` at offset i of p."""
    created = _odradek("topics", "create", "-b", bootstrap, "--topic", TOPIC,
                       "--partitions", str(PARTITIONS))
    assert created.returncode == 0, created.stderr
    producer = ck.Producer({"bootstrap.servers": bootstrap})
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            producer.produce(TOPIC, f"{p}-{i}".encode(), partition=p)
    assert producer.flush(30) == 0


def _commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[ck.TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                        asynchronous=False)
    finally:
        consumer.close()


def _first_values(bootstrap: str, group: str) -> dict[int, str]:
    """The first record a member of ``group`` reads on each partition (from its offsets)."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                            "auto.offset.reset": "latest", "enable.auto.commit": False})
    seen: dict[int, str] = {}
    try:
        consumer.subscribe([TOPIC])
        started = time.monotonic()
        # partition 2 is committed at its end: nothing to read there
        while len(seen) < 2 and not expired(started, DEADLINE_S):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                partition, value = msg.partition(), msg.value()
                assert partition is not None and value is not None
                seen.setdefault(partition, value.decode())
    finally:
        consumer.close()
    return seen


def test_export_import_round_trip_restart_and_another_broker(tmp_path: Path) -> None:
    csv_file = tmp_path / "offsets.csv"
    a = start_broker(tmp_path / "a")
    try:
        _fill(a.bootstrap)
        _commit(a.bootstrap, "app", COMMITTED)
        out = _odradek("groups", "export-offsets", "-b", a.bootstrap, "--group", "app")
        assert out.returncode == 0, out.stderr
        assert out.stdout == CSV
        out = _odradek("groups", "export-offsets", "-b", a.bootstrap, "--group", "app",
                       "--output", str(csv_file))
        assert out.returncode == 0 and csv_file.read_text() == CSV

        # dry run (the default): the plan, nothing committed
        dry = _odradek("groups", "import-offsets", "-b", a.bootstrap, "--group", "copy",
                       "--from-file", str(csv_file))
        assert dry.returncode == 0, dry.stderr
        assert "dry run" in dry.stdout and "NEW-OFFSET" in dry.stdout
        none = _odradek("groups", "export-offsets", "-b", a.bootstrap, "--group", "copy")
        assert none.returncode == 1 and "no committed offsets" in none.stderr

        # a group with an active member refuses the import
        member = ck.Consumer({"bootstrap.servers": a.bootstrap, "group.id": "busy"})
        try:
            member.subscribe([TOPIC])
            started = time.monotonic()
            while not member.assignment() and not expired(started, DEADLINE_S):
                member.poll(0.2)
            assert member.assignment(), f"no assignment in {describe(started, DEADLINE_S)}"
            busy = _odradek("groups", "import-offsets", "-b", a.bootstrap, "--group", "busy",
                            "--from-file", str(csv_file), "--execute")
            assert busy.returncode == 1 and "stop its consumers" in busy.stderr
        finally:
            member.close()

        done = _odradek("groups", "import-offsets", "-b", a.bootstrap, "--group", "copy",
                        "--from-file", str(csv_file), "--execute")
        assert done.returncode == 0, done.stderr
        assert "Committed 3 offsets for group copy." in done.stdout
    finally:
        a.stop()

    # across a restart of the same broker
    a2 = start_broker(tmp_path / "a", data_dir=a.data_dir)
    try:
        for group in ("app", "copy"):
            out = _odradek("groups", "export-offsets", "-b", a2.bootstrap, "--group", group)
            assert out.returncode == 0 and out.stdout == CSV, (group, out.stderr)
        assert _first_values(a2.bootstrap, "copy") == {0: "0-5", 1: "1-7"}
    finally:
        a2.stop()

    # into another broker holding the same records
    b = start_broker(tmp_path / "b")
    try:
        _fill(b.bootstrap)
        done = _odradek("groups", "import-offsets", "-b", b.bootstrap, "--group", "app",
                        "--from-file", str(csv_file), "--execute")
        assert done.returncode == 0, done.stderr
        out = _odradek("groups", "export-offsets", "-b", b.bootstrap, "--group", "app")
        assert out.stdout == CSV
        assert _first_values(b.bootstrap, "app") == {0: "0-5", 1: "1-7"}

        # offsets past the end are clamped, as reset-offsets does; unknown topics refused
        (tmp_path / "far.csv").write_text("orders,0,999\n")
        far = _odradek("groups", "import-offsets", "-b", b.bootstrap, "--group", "far",
                       "--from-file", str(tmp_path / "far.csv"))
        assert far.returncode == 0 and "clamped from 999 to 0..20" in far.stdout
        (tmp_path / "bad.csv").write_text("nope,0,1\n")
        bad = _odradek("groups", "import-offsets", "-b", b.bootstrap, "--group", "x",
                       "--from-file", str(tmp_path / "bad.csv"))
        assert bad.returncode == 1 and "topic nope does not exist" in bad.stderr
        (tmp_path / "short.csv").write_text("orders,0,1\n\norders,1\n")
        short = _odradek("groups", "import-offsets", "-b", b.bootstrap, "--group", "x",
                         "--from-file", str(tmp_path / "short.csv"))
        assert short.returncode == 2  # a usage error: the file given is not an offsets file
        assert "short.csv:3: expected topic,partition,offset" in short.stderr
        assert "Traceback" not in short.stderr + bad.stderr
    finally:
        b.stop()


def test_parse_and_format() -> None:
    assert parse_offsets(CSV, "f") == COMMITTED
    assert format_offsets(COMMITTED) == CSV
    for bad, reason in (("t,x,1", "integers"), ("t,0,-1", "offset >= 0"),
                        ("t,0,1\nt,0,2", "appears twice"), (",0,1", "a topic"),
                        ("t,0,1,2", "expected topic,partition,offset")):
        try:
            parse_offsets(bad, "f")
        except OffsetsFileError as exc:
            assert reason in str(exc)
        else:
            raise AssertionError(bad)
