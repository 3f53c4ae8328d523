"""``odradek consume --group`` with the project's own group member (client/consumer.py),
through the real command in a subprocess.

Without confluent-kafka or any plotting library importable, a member joins, reads from
the committed offsets, commits and leaves; two members started together split a
3-partition topic of a three-broker cluster between them (Kafka's range assignment) and
print every record once, wherever the coordinator and the leaders are; a member whose
coordinator is killed -9 under it reads on and commits everything it printed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests._zygote import run as run_odradek
from tests.interop._broker import REPO, odradek_executable, start_broker
from tests.interop._cluster import Cluster, cluster3, cluster3_shared

__all__ = ["cluster3", "cluster3_shared"]  # the fixtures, used by name

CLI_TIMEOUT_S = 120.0
#: the command's own entry point, with the optional extras' packages made unimportable
#: (a None in sys.modules makes ``import`` raise ImportError), as on a base install
WITHOUT_EXTRAS = (
    "import sys\n"
    "for name in ('confluent_kafka', 'matplotlib'):\n"
    "    sys.modules[name] = None\n"
    "from odradek.cli.main import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def odradek(*args: str, stdin: str | None = None,
            base_install: bool = False) -> subprocess.CompletedProcess[str]:
    if base_install:
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        return subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS, *args],
                              capture_output=True, text=True, input=stdin, env=env,
                              timeout=CLI_TIMEOUT_S, check=False)
    return run_odradek([str(odradek_executable()), *args], input=stdin,
                       timeout=CLI_TIMEOUT_S)


def test_consume_group_needs_no_extra_and_resumes_from_its_commits(tmp_path: Path) -> None:
    with start_broker(tmp_path, overrides={"num.partitions": 3}) as broker:
        b = broker.bootstrap
        sent = odradek("produce", "--topic", "g", "-b", b, "--key-separator", ":",
                       stdin="".join(f"k{i}:v{i}\n" for i in range(10)))
        assert sent.returncode == 0, sent.stderr
        first = odradek("consume", "--topic", "g", "--group", "app", "--from-beginning",
                        "--max-messages", "4", "-b", b, base_install=True)
        assert first.returncode == 0, first.stderr
        assert "confluent" not in first.stderr and "pip install" not in first.stderr
        assert len(first.stdout.splitlines()) == 4
        assert first.stderr.endswith("Processed a total of 4 messages\n"), first.stderr
        rest = odradek("consume", "--topic", "g", "--group", "app", "--timeout-ms", "2000",
                       "-b", b, base_install=True)
        assert rest.returncode == 0, rest.stderr
        printed = first.stdout.splitlines() + rest.stdout.splitlines()
        assert sorted(printed) == sorted(f"v{i}" for i in range(10)), (first.stdout,
                                                                      rest.stdout)
        described = odradek("groups", "describe", "--group", "app", "-b", b,
                            base_install=True)
        assert described.returncode == 0, described.stderr
        rows = [r.split() for r in described.stdout.splitlines() if r.startswith("g ")]
        assert len(rows) == 3 and all(r[4] == "0" for r in rows), described.stdout
        assert "Empty" in described.stdout  # the member left


def test_two_members_split_the_partitions_on_a_cluster(cluster3: Cluster) -> None:
    topic = "split"
    made = odradek("topics", "create", "--topic", topic, "--partitions", "3",
                   "--replication-factor", "3", "-b", cluster3.address(1))
    assert made.returncode == 0, made.stderr
    sent = odradek("produce", "--topic", topic, "--key-separator", ":",
                   "-b", cluster3.address(2),
                   stdin="".join(f"k{i}:v{i}\n" for i in range(60)))
    assert sent.returncode == 0, sent.stderr
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    members = [subprocess.Popen(
        [str(odradek_executable()), "consume", "--topic", topic, "--group", "pair",
         "--from-beginning", "--print-offset", "--timeout-ms", "8000",
         "-b", cluster3.address(i)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for i in (1, 3)]
    outputs = []
    try:
        for member in members:
            out, err = member.communicate(timeout=CLI_TIMEOUT_S)
            assert member.returncode == 0, err
            outputs.append(out.splitlines())
    finally:
        for member in members:
            if member.poll() is None:
                member.kill()
                member.wait()
    printed = [line for out in outputs for line in out]
    assert sorted(line.split("\t")[1] for line in printed) == sorted(
        f"v{i}" for i in range(60)), outputs
    described = odradek("groups", "describe", "--group", "pair", "-b", cluster3.address(2))
    rows = [r.split() for r in described.stdout.splitlines() if r.startswith(topic)]
    assert len(rows) == 3 and all(r[4] == "0" for r in rows), described.stdout


def test_a_member_rides_out_its_coordinator_killed(tmp_path: Path) -> None:
    """`consume --group` keeps reading and commits everything it printed when the group's
    coordinator (and the leaders it had) is killed -9 under it: the member finds the new
    coordinator, rejoins if told to, and its final commit reaches it."""
    from confluent_kafka.admin import AdminClient
    from tests.interop._cluster import running_cluster

    with running_cluster(tmp_path / "cluster",
                         overrides={"offsets.topic.replication.factor": 3}) as cluster:
        topic, group = "ridden", "riders"
        made = odradek("topics", "create", "--topic", topic, "--partitions", "3",
                       "--replication-factor", "3", "-b", cluster.address(1))
        assert made.returncode == 0, made.stderr
        sent = odradek("produce", "--topic", topic, "-b", cluster.bootstrap,
                       stdin="".join(f"v{i}\n" for i in range(30)))
        assert sent.returncode == 0, sent.stderr
        member = subprocess.Popen(
            [str(odradek_executable()), "consume", "--topic", topic, "--group", group,
             "--from-beginning", "--max-messages", "60", "--timeout-ms", "90000",
             "-b", cluster.bootstrap],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(REPO / "src")})
        try:
            assert member.stdout is not None
            first = [member.stdout.readline().rstrip("\n") for _ in range(30)]
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            described = admin.describe_consumer_groups([group])[group].result(30)
            victim = described.coordinator.id
            cluster.kill9(victim)
            survivor = next(b for b in (1, 2, 3) if b != victim)
            more = odradek("produce", "--topic", topic, "-b", cluster.address(survivor),
                           stdin="".join(f"v{i}\n" for i in range(30, 60)))
            assert more.returncode == 0, more.stderr
            out, err = member.communicate(timeout=CLI_TIMEOUT_S)
        finally:
            if member.poll() is None:
                member.kill()
                member.wait()
        assert member.returncode == 0, err
        assert sorted(first + out.splitlines()) == sorted(f"v{i}" for i in range(60)), err
        assert err.endswith("Processed a total of 60 messages\n"), err
        described_after = odradek("groups", "describe", "--group", group,
                                  "-b", cluster.address(survivor))
        assert described_after.returncode == 0, described_after.stderr
        rows = [r.split() for r in described_after.stdout.splitlines()
                if r.startswith(topic)]
        assert sum(int(r[2]) for r in rows) == 60, described_after.stdout
