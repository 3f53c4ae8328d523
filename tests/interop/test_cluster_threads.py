"""Acceptance (issue 52): admin requests racing each other through the three brokers of a
cluster never break a broker's view of the metadata.

A broker hands the ZooKeeper round trips of a CreateTopics to a worker thread while its
event loop goes on applying the changes other brokers make (docs/architecture.md,
"Threads"). The worker once walked the loop's own topic dictionary while the loop changed
it, and a CreateTopics of 100 topics failed whole with UNKNOWN_SERVER_ERROR
("dictionary changed size during iteration"). The cluster is this module's own
(:func:`tests.interop._cluster.cluster3`); requests go to one broker each, over raw
connections, so that every answer's error code is checked as the broker gave it.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from odradek.client.connection import BrokerConnection

from ._cluster import Cluster, cluster3, running_cluster

__all__ = ["cluster3", "cluster3_shared"]  # the fixtures, used by name

pytestmark = pytest.mark.interop

#: Topics of one CreateTopics (the issue's request), and topics that exist beforehand:
#: each creation in the worker thread walks all of them (the partition limits), so the
#: more there are, the wider the window in which the loop applies a change meanwhile.
BATCH = 100
EXISTING = 300
#: How many CreateTopics of BATCH topics the test sends while the churn runs.
ROUNDS = 3
DEADLINE_S = 120.0


#: The stress test's run, and the most its final checks wait for the brokers to agree.
STRESS_S = 45.0
SETTLE_S = 60.0
#: An authorizer that allows what no ACL names: the stress test changes ACLs of names no
#: other request uses.
OPEN = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "true"}


@pytest.fixture(scope="module")
def cluster3_shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """This module's cluster (taken by :func:`tests.interop._cluster.cluster3`): three
    brokers, with an authorizer (:data:`OPEN`)."""
    with running_cluster(tmp_path_factory.mktemp("cluster3"), overrides=OPEN) as cluster:
        yield cluster


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def _create(conn: BrokerConnection, names: list[str], timeout_ms: int = 60_000) -> Any:
    from kio.schema.create_topics.v5 import request as m
    from kio.schema.types import TopicName
    from kio.static.primitive import i16, i32, i32Timedelta

    return await conn.send(m.CreateTopicsRequest(
        topics=tuple(m.CreatableTopic(name=TopicName(n), num_partitions=i32(1),
                                      replication_factor=i16(1), assignments=(), configs=())
                     for n in names),
        timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=timeout_ms)),
        validate_only=False))


async def _delete(conn: BrokerConnection, names: list[str]) -> Any:
    from kio.schema.delete_topics.v4 import request as m
    from kio.schema.types import TopicName
    from kio.static.primitive import i32Timedelta

    return await conn.send(m.DeleteTopicsRequest(
        topic_names=tuple(TopicName(n) for n in names),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30))))


def _codes(response: Any) -> Counter[int]:
    return Counter(int(t.error_code) for t in response.topics)


def _failures(response: Any) -> list[tuple[str, int, str | None]]:
    """(topic, error code, message) of every topic not created: the assertion's story."""
    return [(t.name, int(t.error_code), t.error_message) for t in response.topics
            if int(t.error_code) != 0][:3]


def test_create_100_topics_while_another_broker_creates_and_deletes(cluster3: Cluster) -> None:
    """CreateTopics of 100 topics through broker 1, three times, while broker 2 creates and
    deletes topics in a loop: every topic of every request is created (error code 0),
    none answered UNKNOWN_SERVER_ERROR (-1); the churn's own requests all succeed too."""
    stop = threading.Event()
    churn_codes: Counter[int] = Counter()
    churn_errors: list[BaseException] = []

    async def churn() -> None:
        conn = await BrokerConnection.open(cluster3.address(2))
        try:
            while not stop.is_set():
                names = [_name("churn") for _ in range(5)]
                churn_codes.update(_codes(await _create(conn, names)))
                deleted = await _delete(conn, names)
                churn_codes.update(int(r.error_code) for r in deleted.responses)
        finally:
            await conn.close()

    def run_churn() -> None:
        try:
            asyncio.run(churn())
        except BaseException as exc:  # reported by the test, not lost in the thread
            churn_errors.append(exc)

    failures: list[tuple[str, int, str | None]] = []

    async def main() -> list[Counter[int]]:
        conn = await BrokerConnection.open(cluster3.address(1))
        try:
            existing = await _create(conn, [_name("existing") for _ in range(EXISTING)])
            assert _codes(existing) == Counter({0: EXISTING}), _failures(existing)
            churner = threading.Thread(target=run_churn, name="churn", daemon=True)
            churner.start()
            try:
                rounds = []
                for _ in range(ROUNDS):
                    response = await _create(conn, [_name("batch") for _ in range(BATCH)])
                    rounds.append(_codes(response))
                    failures.extend(_failures(response))
                return rounds
            finally:
                stop.set()
                await asyncio.to_thread(churner.join, DEADLINE_S)
        finally:
            await conn.close()

    rounds = asyncio.run(asyncio.wait_for(main(), DEADLINE_S))
    assert churn_errors == []
    assert rounds == [Counter({0: BATCH})] * ROUNDS, failures
    assert churn_codes and set(churn_codes) == {0}, churn_codes


# -- the stress test ----------------------------------------------------------------------
@dataclass
class _Expected:
    """What one worker's requests, all answered with success, must have left."""

    topics: dict[str, int] = field(default_factory=dict)  # topic -> partition count
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    moved: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)
    acls: set[tuple[str, str]] = field(default_factory=set)  # (resource, principal)
    done: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)


def _check(expected: _Expected, what: str, code: int, message: str | None = None) -> bool:
    if code != 0:
        expected.failures.append(f"{what}: error {code} ({message})")
        return False
    return True


async def _worker(cluster: Cluster, broker: int, deadline: float, seed: int) -> _Expected:
    """Admin requests of every kind through ``broker``, on topics and ACL names of its own,
    until ``deadline``; each answer checked."""
    from kio.schema.alter_partition_reassignments.v0 import request as reassign
    from kio.schema.create_acls.v3 import request as create_acls
    from kio.schema.create_partitions.v3 import request as grow
    from kio.schema.delete_acls.v3 import request as delete_acls
    from kio.schema.incremental_alter_configs.v1 import request as alter
    from kio.schema.types import BrokerId, TopicName
    from kio.static.primitive import i8, i32, i32Timedelta

    rng = random.Random(seed)
    out = _Expected()
    timeout = i32Timedelta.parse(datetime.timedelta(seconds=30))
    others = [b for b in (1, 2, 3) if b != broker]
    conn = await BrokerConnection.open(cluster.address(broker))
    try:
        while time.monotonic() < deadline:
            movable = sorted(t for t in out.topics if not any(k[0] == t for k in out.moved))
            step = rng.choice(["create", "create", "delete", "grow", "config", "acl", "acl",
                               "reassign"])
            if step == "create" or not movable:
                names = [_name(f"stress-{broker}") for _ in range(2)]
                response = await _create(conn, names)
                for t in response.topics:
                    if _check(out, f"create {t.name}", int(t.error_code), t.error_message):
                        out.topics[t.name] = 1
            elif step == "delete":
                name = rng.choice(movable)
                deleted = await _delete(conn, [name])
                if _check(out, f"delete {name}", int(deleted.responses[0].error_code)):
                    del out.topics[name]
                    out.configs.pop(name, None)
            elif step == "grow":
                name = rng.choice(movable)
                grown = await conn.send(grow.CreatePartitionsRequest(
                    topics=(grow.CreatePartitionsTopic(name=TopicName(name),
                                                       count=i32(out.topics[name] + 1),
                                                       assignments=None),),
                    timeout=timeout, validate_only=False))
                r = grown.results[0]
                if _check(out, f"grow {name}", int(r.error_code), r.error_message):
                    out.topics[name] += 1
            elif step == "config":
                name = rng.choice(movable)
                value = str(rng.randrange(60_000, 10_000_000))
                altered = await conn.send(alter.IncrementalAlterConfigsRequest(
                    resources=(alter.AlterConfigsResource(
                        resource_type=i8(2), resource_name=name,
                        configs=(alter.AlterableConfig(name="retention.ms",
                                                       config_operation=i8(0),
                                                       value=value),)),),
                    validate_only=False))
                r = altered.responses[0]
                if _check(out, f"config {name}", int(r.error_code), r.error_message):
                    out.configs[name] = {"retention.ms": value}
            elif step == "acl":
                mine = sorted(out.acls)
                if mine and rng.random() < 0.4:
                    resource, principal = rng.choice(mine)
                    removed = await conn.send(delete_acls.DeleteAclsRequest(filters=(
                        delete_acls.DeleteAclsFilter(
                            resource_type_filter=i8(2), resource_name_filter=resource,
                            pattern_type_filter=i8(3), principal_filter=principal,
                            host_filter="*", operation=i8(3), permission_type=i8(3)),)))
                    r = removed.filter_results[0]
                    if not _check(out, f"delete ACL {resource}", int(r.error_code),
                                  r.error_message):
                        pass
                    elif len(r.matching_acls) == 1:
                        out.acls.discard((resource, principal))
                    else:
                        out.failures.append(f"delete ACL {resource}: {r.matching_acls}")
                else:
                    resource = _name(f"stress-acl-{broker}")
                    principal = f"User:stress-{rng.randrange(3)}"
                    made = await conn.send(create_acls.CreateAclsRequest(creations=(
                        create_acls.AclCreation(
                            resource_type=i8(2), resource_name=resource,
                            resource_pattern_type=i8(3), principal=principal, host="*",
                            operation=i8(3), permission_type=i8(3)),)))
                    r = made.results[0]
                    if _check(out, f"create ACL {resource}", int(r.error_code),
                               r.error_message):
                        out.acls.add((resource, principal))
            else:  # reassign partition 0 of a topic of replication factor 1 elsewhere
                name = rng.choice(movable)
                target = (rng.choice(others),)
                moved = await conn.send(reassign.AlterPartitionReassignmentsRequest(
                    timeout=timeout, topics=(reassign.ReassignableTopic(
                        name=TopicName(name), partitions=(reassign.ReassignablePartition(
                            partition_index=i32(0),
                            replicas=tuple(BrokerId(b) for b in target)),)),)))
                r = moved.responses[0].partitions[0]
                if _check(out, f"reassign {name}", int(r.error_code), r.error_message):
                    out.moved[(name, 0)] = target
            out.done[step] += 1
    finally:
        await conn.close()
    return out


async def _broker_view(cluster: Cluster, broker: int, names: list[str]) -> tuple[
        dict[str, dict[int, tuple[int, ...]]], dict[str, dict[str, str]], set[tuple[str, str]]]:
    """Broker ``broker``'s answer: every stress topic's replicas, the topic configs set on
    ``names``, and the stress ACLs."""
    from kio.schema.describe_acls.v3 import request as describe_acls
    from kio.schema.describe_configs.v4 import request as describe_configs
    from kio.schema.metadata.v12 import request as metadata
    from kio.static.primitive import i8

    conn = await BrokerConnection.open(cluster.address(broker))
    try:
        md = await conn.send(metadata.MetadataRequest(
            topics=None, allow_auto_topic_creation=False,
            include_topic_authorized_operations=False))
        topics = {str(t.name): {int(p.partition_index): tuple(int(r) for r in p.replica_nodes)
                                for p in t.partitions}
                  for t in md.topics if str(t.name).startswith("stress-")}
        configs: dict[str, dict[str, str]] = {}
        if names:
            described = await conn.send(describe_configs.DescribeConfigsRequest(
                resources=tuple(describe_configs.DescribeConfigsResource(
                    resource_type=i8(2), resource_name=n, configuration_keys=None)
                    for n in names)))
            for result in described.results:
                overrides = {c.name: c.value or "" for c in result.configs
                             if int(c.config_source) == 1}  # DYNAMIC_TOPIC_CONFIG
                if int(result.error_code) == 0 and overrides:
                    configs[result.resource_name] = overrides
        acls = await conn.send(describe_acls.DescribeAclsRequest(
            resource_type_filter=i8(2), resource_name_filter=None, pattern_type_filter=i8(3),
            principal_filter=None, host_filter=None, operation=i8(1),
            permission_type=i8(1)))
        held = {(r.resource_name, a.principal) for r in acls.resources for a in r.acls
                if r.resource_name.startswith("stress-acl-")}
        return topics, configs, held
    finally:
        await conn.close()


def _zookeeper_view(cluster: Cluster) -> tuple[
        dict[str, dict[int, tuple[int, ...]]], dict[str, dict[str, str]], set[tuple[str, str]]]:
    """The same, as ZooKeeper holds it."""
    zk = cluster.zk
    topics: dict[str, dict[int, tuple[int, ...]]] = {}
    configs: dict[str, dict[str, str]] = {}
    for name in zk.get_children("/brokers/topics"):
        if not name.startswith("stress-"):
            continue
        data = cluster.zk_get(f"/brokers/topics/{name}")
        if data is None:
            continue
        doc = json.loads(data)
        topics[name] = {int(p): tuple(r) for p, r in doc["partitions"].items()}
        config = cluster.zk_get(f"/config/topics/{name}")
        overrides = dict(json.loads(config)["config"]) if config is not None else {}
        if overrides:
            configs[name] = overrides
    acls: set[tuple[str, str]] = set()
    if zk.exists("/kafka-acl/Topic"):
        for name in zk.get_children("/kafka-acl/Topic"):
            data = cluster.zk_get(f"/kafka-acl/Topic/{name}")
            if name.startswith("stress-acl-") and data:
                acls |= {(name, a["principal"]) for a in json.loads(data)["acls"]}
    return topics, configs, acls


def test_admin_requests_through_every_broker_at_once_leave_one_view(cluster3: Cluster) -> None:
    """Issue 52's stress test: for STRESS_S, one worker per broker sends CreateTopics,
    DeleteTopics, CreatePartitions, IncrementalAlterConfigs, CreateAcls / DeleteAcls and
    AlterPartitionReassignments through its broker, all at once; every answer is a
    success. Then, once the reassignments are done, every broker's Metadata,
    DescribeConfigs and DescribeAcls, ZooKeeper itself, and what the workers' answers
    promised are one and the same."""
    deadline = time.monotonic() + STRESS_S

    async def run() -> list[_Expected]:
        return list(await asyncio.gather(*(
            _worker(cluster3, b, deadline, seed=b) for b in (1, 2, 3))))

    workers = asyncio.run(asyncio.wait_for(run(), STRESS_S + DEADLINE_S))
    assert [w.failures for w in workers] == [[], [], []]
    assert all(sum(w.done.values()) > 10 for w in workers), [w.done for w in workers]

    topics = {t: n for w in workers for t, n in w.topics.items()}
    moved = {k: v for w in workers for k, v in w.moved.items() if k[0] in topics}
    configs = {t: c for w in workers for t, c in w.configs.items() if t in topics}
    acls = set().union(*(w.acls for w in workers))
    problems: list[str] = []

    def differences(what: str, got: dict[Any, Any], wanted: dict[Any, Any]) -> list[str]:
        keys = sorted(set(got) | set(wanted), key=str)
        return [f"{what} {k}: {got.get(k)} != {wanted.get(k)}" for k in keys
                if got.get(k) != wanted.get(k)]

    def agreed() -> bool:
        zk_topics, zk_configs, zk_acls = _zookeeper_view(cluster3)
        found = differences("ZooKeeper: partitions of",
                            {t: len(p) for t, p in zk_topics.items()}, topics)
        found += differences("ZooKeeper: replicas of",
                             {k: zk_topics.get(k[0], {}).get(k[1]) for k in moved}, moved)
        found += differences("ZooKeeper: configs of", zk_configs, configs)
        found += [f"ZooKeeper: ACL {a} {'missing' if a in acls else 'not expected'}"
                  for a in sorted(zk_acls ^ acls)]
        for b in (1, 2, 3):
            b_topics, b_configs, b_acls = asyncio.run(_broker_view(cluster3, b, sorted(topics)))
            found += differences(f"broker {b}: replicas of", b_topics, zk_topics)
            found += differences(f"broker {b}: configs of", b_configs,
                                 {t: c for t, c in zk_configs.items() if t in topics})
            found += [f"broker {b}: ACL {a} {'missing' if a in zk_acls else 'not in ZooKeeper'}"
                      for a in sorted(b_acls ^ zk_acls)]
        problems[:] = found
        return not found

    try:
        cluster3.wait_for(agreed, SETTLE_S, "every broker, ZooKeeper and the answers "
                                            "agreeing on topics, configs and ACLs")
    except AssertionError as exc:
        shown = "\n".join(problems[:20])
        raise AssertionError(f"{len(problems)} differences, the first:\n{shown}\n"
                             f"{str(exc)[-3000:]}") from None


def test_no_loop_owned_container_was_touched_from_another_thread(cluster3: Cluster) -> None:
    """Last in this module, over the logs of its brokers: run with ODRADEK_DEBUG_THREADS=1
    (the suite's conftest sets it, and the brokers inherit it), a loop-owned container
    touched from a worker thread raises WrongThreadError, which the broker logs; none
    did during the requests above."""
    logs = {b.stderr_path.parent for b in cluster3.brokers.values()}
    found = [
        (path.name, line)
        for folder in logs for path in sorted(folder.glob("broker-*.stderr"))
        for line in path.read_text(errors="replace").splitlines()
        if "WrongThreadError" in line or "changed size during iteration" in line
    ]
    assert found == []
