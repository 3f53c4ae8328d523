"""``odradek groups`` sees both kinds of group (issue 50): a KIP-848 consumer group of two
confluent-kafka members (``group.protocol=consumer``) and a classic group, on a real broker,
through the real command in a subprocess.

``list`` names each group's type and ``--type`` filters (ListGroups v5); ``describe`` of a
consumer group shows the group epoch, the target assignment epoch, the assignor and each
member's epoch with its current and target assignment (ConsumerGroupDescribe), with its lag
as for a classic group; kafka-consumer-groups.sh's own flags give its columns
(``--describe --members --verbose``, ``--describe --state --verbose``,
``--list --type --state``).
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import confluent_kafka as ck
import pytest
from tests._deadlines import expired
from tests._zygote import run as run_odradek
from tests.interop._broker import odradek_executable

from odradek.testing import RunningBroker, running_broker

CLI_TIMEOUT_S = 60.0
DEADLINE_S = 60.0
PARTITIONS = 4
RECORDS = 40
OVERRIDES = {
    "num.partitions": "1",
    "group.consumer.heartbeat.interval.ms": "200",
    "group.consumer.min.heartbeat.interval.ms": "100",
}


def odradek(*args: str) -> subprocess.CompletedProcess[str]:
    return run_odradek([str(odradek_executable()), *args], timeout=CLI_TIMEOUT_S)


def ok(*args: str) -> str:
    res = odradek(*args)
    assert res.returncode == 0, (args, res.stdout, res.stderr[-3000:])
    return res.stdout


def wait_until(condition: Callable[[], bool], what: str) -> None:
    started = time.monotonic()
    while not condition():
        assert not expired(started, DEADLINE_S), f"not in time: {what}"
        time.sleep(0.05)


class Polling:
    """Consumers polled on a thread of their own (their callbacks and reconciliation run
    there), each counting the records it reads and committing them synchronously."""

    def __init__(self, consumers: list[ck.Consumer]) -> None:
        self.consumers = consumers
        self.read = [0] * len(consumers)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            for i, c in enumerate(self.consumers):
                msg = c.poll(0.02)
                if msg is not None and msg.error() is None:
                    self.read[i] += 1
                    c.commit(message=msg, asynchronous=False)

    def __enter__(self) -> Polling:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        for c in self.consumers:
            c.close()


@pytest.fixture(scope="module")
def broker() -> Iterator[RunningBroker]:
    with running_broker(overrides=OVERRIDES) as b:
        yield b


def _member(bootstrap: str, group: str, protocol: str, client_id: str) -> ck.Consumer:
    config = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
              "auto.offset.reset": "earliest", "enable.auto.commit": False,
              "group.protocol": protocol}
    if protocol == "classic":
        config["session.timeout.ms"] = 6000
    return ck.Consumer(config)


def _rows(text: str, first: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.split()[:1] == [first]]


def test_consumer_and_classic_groups_through_the_tools(broker: RunningBroker) -> None:
    b = broker.bootstrap
    topic = f"gt-{uuid.uuid4().hex[:8]}"
    ok("topics", "create", "-b", b, "--topic", topic, "--partitions", str(PARTITIONS))
    producer = ck.Producer({"bootstrap.servers": b})
    for i in range(RECORDS):
        producer.produce(topic, f"v{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    cg, classic = f"cg-{uuid.uuid4().hex[:6]}", f"old-{uuid.uuid4().hex[:6]}"
    members = [_member(b, cg, "consumer", "new-a"), _member(b, cg, "consumer", "new-b"),
               _member(b, classic, "classic", "old-a")]
    for m in members:
        m.subscribe([topic])
    with Polling(members) as polling:
        wait_until(lambda: sum(polling.read[:2]) == RECORDS and polling.read[2] == RECORDS,
                   "every record read by both groups")

        def settled() -> bool:
            out = odradek("groups", "--describe", "--group", cg, "--members", "--verbose",
                          "--bootstrap-server", b).stdout
            rows = _rows(out, cg)
            # both members own two partitions each, and own what their target gives them
            return len(rows) == 2 and all(r[4] == "2" and r[6] == r[8] for r in rows)

        wait_until(settled, "the consumer group reconciled")

        # --list: one name a line; --type filters on the group type (ListGroups v5)
        listed = ok("groups", "--list", "--bootstrap-server", b).split()
        assert cg in listed and classic in listed
        # with --type (or --state) a table, as kafka-consumer-groups.sh prints it
        assert ok("groups", "--list", "--type", "consumer", "--bootstrap-server",
                  b).split() == ["GROUP", "TYPE", cg, "Consumer"]
        assert ok("groups", "--list", "--type", "classic", "--bootstrap-server",
                  b).split() == ["GROUP", "TYPE", classic, "Classic"]
        table = ok("groups", "--list", "--type", "--state", "--bootstrap-server", b)
        assert table.splitlines()[0].split() == ["GROUP", "TYPE", "STATE"]
        assert [cg, "Consumer", "Stable"] in _rows(table, cg)
        assert [classic, "Classic", "Stable"] in _rows(table, classic)
        assert ok("groups", "--list", "--type", "consumer", "--state", "Empty",
                  "--bootstrap-server", b).splitlines()[1:] == []
        sub = ok("groups", "list", "--type", "consumer", "-b", b)
        assert [r[:3] for r in _rows(sub, cg)] == [[cg, "Stable", "consumer"]]
        assert not _rows(sub, classic)
        bad = odradek("groups", "--list", "--type", "share", "--bootstrap-server", b)
        assert bad.returncode == 2 and "Invalid types list 'share'" in bad.stderr

        # --describe --members --verbose: epochs, current and target assignments
        out = ok("groups", "--describe", "--group", cg, "--members", "--verbose",
                 "--bootstrap-server", b)
        header = out.strip().splitlines()[0].split()
        assert header == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                          "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH",
                          "TARGET-ASSIGNMENT"], out
        rows = _rows(out, cg)
        assert sorted(r[3] for r in rows) == ["new-a", "new-b"]
        owned = []
        for r in rows:
            assert int(r[5]) >= 1 and int(r[7]) >= 1, r  # member epoch, target epoch
            assert re.fullmatch(rf"{topic}:\d,\d", r[6]), r
            owned += [int(p) for p in r[6].split(":")[1].split(",")]
        assert sorted(owned) == list(range(PARTITIONS))

        # --describe --state --verbose: the group epoch, target epoch, assignor
        state = ok("groups", "--describe", "--group", cg, "--state", "--verbose",
                   "--bootstrap-server", b)
        head, row = state.strip().splitlines()
        assert "GROUP-EPOCH" in head and "TARGET-ASSIGNMENT-EPOCH" in head
        values = row.split()
        # GROUP, COORDINATOR (ID) (two words), ASSIGNMENT-STRATEGY, STATE, the epochs, #MEMBERS
        assert values[0] == cg and values[3:5] == ["uniform", "Stable"], row
        group_epoch, target_epoch, count = (int(v) for v in values[5:8])
        assert group_epoch >= target_epoch >= 1 and count == 2

        # a classic group: no epochs, its assignment decoded from the consumer protocol
        out = ok("groups", "--describe", "--group", classic, "--members", "--verbose",
                 "--bootstrap-server", b)
        (row_classic,) = _rows(out, classic)
        assert row_classic[4:] == ["4", "-", f"{topic}:0,1,2,3", "-", "-"], out

        # the sub-command: type, epochs, assignor, lag 0 once all is committed
        described = ok("groups", "describe", "--group", cg, "-b", b)
        assert (f"GROUP {cg}  TYPE consumer  STATE Stable  ASSIGNOR uniform  GROUP-EPOCH "
                f"{group_epoch}  TARGET-ASSIGNMENT-EPOCH {target_epoch}  MEMBERS 2"
                ) in described
        assert "CURRENT-EPOCH" in described and "TARGET-ASSIGNMENT" in described
        wait_until(lambda: [r[4] for r in _rows(odradek("groups", "describe", "--group", cg,
                                                        "-b", b).stdout, topic)]
                   == ["0"] * PARTITIONS, "lag 0 on every partition")
        # lag through kafka-consumer-groups.sh's form, after more records
        for i in range(8):
            producer.produce(topic, b"late", partition=i % PARTITIONS)
        assert producer.flush(30) == 0
        offsets = ok("groups", "--describe", "--group", classic, "--bootstrap-server", b)
        assert offsets.strip().splitlines()[0].split()[:6] == [
            "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
        assert len(_rows(offsets, classic)) == PARTITIONS
        classic_describe = ok("groups", "describe", "--group", classic, "-b", b)
        assert "TYPE classic  STATE Stable  PROTOCOL consumer/" in classic_describe
    gone = odradek("groups", "--describe", "--group", "nobody", "--bootstrap-server", b)
    assert gone.returncode == 1 and "Consumer group 'nobody' does not exist." in gone.stdout
    deleted = ok("groups", "--delete", "--group", cg, "--bootstrap-server", b)
    assert deleted.strip() == f"Deletion of requested consumer groups ('{cg}') was successful."
    assert cg not in ok("groups", "--list", "--bootstrap-server", b).split()


def test_members_of_both_protocols_show_which_is_upgraded(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A consumer group being migrated (Kafka's online migration) has classic and consumer
    protocol members: ``--members --verbose`` adds kafka-consumer-groups.sh's UPGRADED
    column then, and only then (ConsumerGroupDescribe v1's member type)."""
    from odradek.cli.groups import GroupView, MemberView, _print_members_kafka

    def view(*upgraded: bool | None) -> GroupView:
        members = tuple(
            MemberView(f"m{i}", None, "/127.0.0.1", f"c{i}", {"t": (i,)}, 3, {"t": (i,)}, u)
            for i, u in enumerate(upgraded))
        return GroupView("g", "consumer", "Stable", "consumer", "uniform", (0, "h", 9092),
                         members, {}, {}, 4, 3)

    _print_members_kafka(view(True, False), verbose=True)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split()[-2:] == ["TARGET-ASSIGNMENT", "UPGRADED"]
    assert [line.split()[-1] for line in lines[1:]] == ["true", "false"]
    assert [line.split()[5:8] for line in lines[1:]] == [["3", "t:0", "3"], ["3", "t:1", "3"]]
    _print_members_kafka(view(True, True), verbose=True)
    assert "UPGRADED" not in capsys.readouterr().out
    _print_members_kafka(view(True, False), verbose=False)
    assert "UPGRADED" not in capsys.readouterr().out


def test_a_regex_member_shows_its_expression(broker: RunningBroker) -> None:
    """A member subscribed with a regular expression (KIP-848's SubscribedTopicRegex,
    librdkafka's "^" subscription): ``groups describe`` and ``--describe --members``
    show it in a TOPIC-REGEX column."""
    b = broker.bootstrap
    uid = uuid.uuid4().hex[:6]
    topic = f"rx-{uid}-a"
    ok("topics", "create", "-b", b, "--topic", topic, "--partitions", "2")
    group = f"cg-{uid}"
    member = _member(b, group, "consumer", "regex-a")
    member.subscribe([f"^rx-{uid}-.*"])
    with Polling([member]):
        def assigned() -> bool:
            out = odradek("groups", "--describe", "--group", group, "--members",
                          "--bootstrap-server", b).stdout
            return any(r[-2:] == ["2", f"(^rx-{uid}-.*)"] for r in _rows(out, group))

        wait_until(assigned, "the member assigned the matching topic, with its regex")
        out = ok("groups", "describe", "-b", b, "--group", group)
        lines = out.splitlines()
        at = next(i for i, line in enumerate(lines) if "TOPIC-REGEX" in line)
        header, row = lines[at].split(), lines[at + 1].split()
        assert row[header.index("TOPIC-REGEX")] == f"(^rx-{uid}-.*)"
