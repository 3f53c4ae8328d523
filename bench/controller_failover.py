"""Controller failover at scale over a real ZooKeeper (the tests' standalone server).

Usage: ``PYTHONPATH=src .venv/bin/python bench/controller_failover.py [--topics 100]
[--partitions 100] [--rounds 3]``

Setup (not timed): ``topics x partitions`` partitions over 3 brokers, each broker
registered in ``/brokers/ids`` by its own session; the topic znodes, partition znodes and
states are written directly with multi (1,000 ops each), as a previous controller would
have left them.

Measured, each in a fresh chroot, ``--rounds`` times (median, range):
- reads: the 10,000 states read one ``get`` at a time vs pipelined ``get_many``;
- (a) failover, RF 1: a new controller (elector + :class:`Controller` on its own session)
  from ``start()`` to ready: reading brokers, every assignment and every state, electing
  (nothing to write: every leader is live);
- (a') first start, RF 1, no states yet: the same, writing 10,000 initial states (10
  transactions, each with its notification);
- (b) a lost broker, RF 3: with the controller ready, one broker's session expires; the
  time from the expiry to the last notification of the ~1/3 of partitions it led, and
  the controller's own processing time of that BrokerChange (reading, electing, writing).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.cluster._zookeeper import (
    ZooKeeperServer,
    expire_session,
    running_zookeeper,
    wait_for,
)

from odradek.cluster.controller import NOTIFICATION_PATH, Controller
from odradek.cluster.controller_election import ControllerElector
from odradek.cluster.leader_election import (
    LeaderAndIsr,
    partition_path,
    partitions_path,
    state_path,
    topic_path,
)
from odradek.cluster.membership import BrokerInfo, EndPoint
from odradek.cluster.metadata import encode_topic_id
from odradek.cluster.store import CreateOp, DeleteOp, Op
from odradek.cluster.zk_store import ZooKeeperStore

BROKERS = (0, 1, 2)


def populate(store: ZooKeeperStore, topics: int, partitions: int, rf: int,
             with_states: bool) -> None:
    if store.get("/brokers/topics") is None:
        store.create("/brokers/topics", b"")
    ops: list[Op] = []

    def flush() -> None:
        store.multi(ops)
        ops.clear()

    for t in range(topics):
        name = f"topic-{t:03d}"
        assignment = {
            p: [BROKERS[(p + j) % len(BROKERS)] for j in range(rf)] for p in range(partitions)
        }
        ops.append(CreateOp(topic_path(name), json.dumps({
            "version": 3, "topic_id": encode_topic_id(uuid.uuid4()),
            "partitions": {str(p): r for p, r in assignment.items()},
        }).encode()))
        if with_states:
            ops.append(CreateOp(partitions_path(name), b""))
        for p, replicas in assignment.items():
            if with_states:
                ops.append(CreateOp(partition_path(name, p), b""))
                state = LeaderAndIsr(replicas[0], 0, tuple(replicas), 1)
                ops.append(CreateOp(state_path(name, p), state.encode()))
            if len(ops) >= 997:
                flush()
    if ops:
        flush()


def clear(store: ZooKeeperStore) -> None:
    """Delete a round's nodes (the server's heap is small), children first, in multis."""
    paths: list[str] = []
    for name in store.children("/brokers/topics"):
        for p in store.children(partitions_path(name)):
            paths += [state_path(name, int(p)), partition_path(name, int(p))]
        if store.get(partitions_path(name)) is not None:
            paths.append(partitions_path(name))
        paths.append(topic_path(name))
    paths += [f"{NOTIFICATION_PATH}/{n}" for n in store.children(NOTIFICATION_PATH)]
    existing = [p for p, n in zip(paths, store.get_many(paths), strict=True) if n is not None]
    for start in range(0, len(existing), 1000):
        store.multi([DeleteOp(p) for p in existing[start:start + 1000]])


def register(server: ZooKeeperServer, chroot: str) -> list[ZooKeeperStore]:
    stores = []
    for b in BROKERS:
        s = server.store(chroot, session_timeout_ms=10_000)
        info = BrokerInfo(b, (EndPoint("PLAINTEXT", "localhost", 9092 + b),))
        s.create(info.path, info.encode(), ephemeral=True)
        stores.append(s)
    return stores


class Candidate:
    """A broker running for controller, with the controller it starts."""

    def __init__(self, server: ZooKeeperServer, chroot: str, broker_id: int) -> None:
        self.store = server.store(chroot, session_timeout_ms=10_000)
        self.controller: Controller | None = None
        self.elector = ControllerElector(self.store, broker_id, self._become, self._resign)

    def _become(self, epoch: int) -> None:
        self.controller = Controller(self.store, self.elector, epoch)
        self.controller.start()

    def _resign(self) -> None:
        if self.controller is not None:
            self.controller.stop()

    def close(self) -> None:
        self.elector.close()
        if self.controller is not None:
            self.controller.join(10)
        self.store.close()


def fmt(values: list[float]) -> str:
    return (f"{statistics.median(values) * 1000:.0f} ms "
            f"({min(values) * 1000:.0f}-{max(values) * 1000:.0f})")


def measure_reads(server: ZooKeeperServer, topics: int, partitions: int) -> tuple[float, float]:
    chroot = server.fresh_chroot()
    store = server.store(chroot)
    try:
        populate(store, topics, partitions, 1, True)
        paths = [state_path(f"topic-{t:03d}", p) for t in range(topics)
                 for p in range(partitions)]
        started = time.perf_counter()
        for p in paths:
            store.get(p)
        one_by_one = time.perf_counter() - started
        started = time.perf_counter()
        nodes = store.get_many(paths)
        pipelined = time.perf_counter() - started
        assert all(nodes)
        return one_by_one, pipelined
    finally:
        clear(store)
        store.close()


def failover(server: ZooKeeperServer, topics: int, partitions: int,
             with_states: bool) -> tuple[float, float, float, int]:
    """(wall time to ready, controller load_s, startup_s, states written)."""
    chroot = server.fresh_chroot()
    setup = server.store(chroot)
    brokers = register(server, chroot)
    populate(setup, topics, partitions, 1, with_states)
    candidate = Candidate(server, chroot, 0)
    try:
        started = time.perf_counter()
        candidate.elector.start()
        c = candidate.controller
        assert c is not None and c.wait_ready(120)
        wall = time.perf_counter() - started
        written = sum(e.states_written for e in c.history)
        return wall, c.load_s, c.startup_s, written
    finally:
        candidate.close()
        clear(setup)
        for s in [*brokers, setup]:
            s.close()


def lost_broker(server: ZooKeeperServer, topics: int,
                partitions: int) -> tuple[float, float, float, int, int]:
    """(expiry → last notification, watch → written (queue + processing), processing,
    states written, multis)."""
    chroot = server.fresh_chroot()
    setup = server.store(chroot)
    brokers = register(server, chroot)
    populate(setup, topics, partitions, 3, True)
    candidate = Candidate(server, chroot, 0)  # broker 0 is the controller; 2 gets lost
    try:
        candidate.elector.start()
        c = candidate.controller
        assert c is not None and c.wait_ready(120)
        before = len(setup.children(NOTIFICATION_PATH))
        seen = len(c.history)
        started = time.perf_counter()
        expire_session(brokers[2], server)
        wait_for(lambda: len(c.history) > seen and c.history[-1].states_written > 0, 120,
                 "the BrokerChange")
        event = c.history[-1]
        wait_for(lambda: len(setup.children(NOTIFICATION_PATH)) >= before + event.multis,
                 60, "the notifications")
        wall = time.perf_counter() - started
        return (wall, event.queue_s + event.process_s, event.process_s, event.states_written,
                event.multis)
    finally:
        candidate.close()
        clear(setup)
        for s in [*brokers, setup]:
            s.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n = args.topics * args.partitions
    print(f"{args.topics} topics x {args.partitions} partitions = {n:,} partitions, "
          f"3 brokers, {args.rounds} rounds (median, min-max)")
    # Kafka's zookeeper-server-start.sh heap: the server keeps its last 500 transactions
    # in memory (commitLogCount), and a 1,000-op multi is ~0.2 MB: the tests' 128 MB heap
    # runs out after a few hundred of them.
    with running_zookeeper(heap_mb=512) as server:
        reads = [measure_reads(server, args.topics, args.partitions) for _ in range(args.rounds)]
        print(f"read {n:,} states one get at a time: {fmt([r[0] for r in reads])}")
        print(f"read {n:,} states with get_many:     {fmt([r[1] for r in reads])}")
        for with_states, label in ((True, "(a) failover, RF 1, states present"),
                                   (False, "(a') first start, RF 1, no states")):
            runs = [failover(server, args.topics, args.partitions, with_states)
                    for _ in range(args.rounds)]
            print(f"{label}: ready in {fmt([r[0] for r in runs])}; reading "
                  f"{fmt([r[1] for r in runs])}; startup (read+elect+write) "
                  f"{fmt([r[2] for r in runs])}; states written {runs[0][3]:,}")
        lost = [lost_broker(server, args.topics, args.partitions) for _ in range(args.rounds)]
        print(f"(b) lost broker, RF 3: {lost[0][3]:,} leaders moved in {lost[0][4]} "
              f"transactions; expiry → last notification {fmt([r[0] for r in lost])} "
              f"(includes the expiry handshake); watch fired → states and notifications "
              f"written {fmt([r[1] for r in lost])}, of which processing the BrokerChange "
              f"{fmt([r[2] for r in lost])}")


if __name__ == "__main__":
    main()
