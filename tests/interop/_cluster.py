"""A multi-broker cluster for the interop tests: a real ZooKeeper and N ``odradek serve``.

Not a conftest: import what you need, e.g.::

    from tests.interop._cluster import Cluster, cluster3  # noqa: F401 (the fixture)

    def test_something(cluster3: Cluster) -> None:
        cluster3.kill9(cluster3.controller()[0])
        cluster3.wait_for(lambda: cluster3.controller()[0] not in (None, old), 15, "a new one")

ZooKeeper is started by :mod:`odradek.cluster.local_zookeeper` (200 ms ticks, no fsync);
each cluster has its own chroot. Broker ``id`` (1..N) is :func:`start_broker` with
``broker.id``, ``zookeeper.connect`` and a short ``zookeeper.session.timeout.ms``
(:data:`SESSION_TIMEOUT_MS`: a broker killed -9 is gone from ZooKeeper within it); its port
(bound by the broker itself on port 0 the first time) and data dir are kept, so
:meth:`Cluster.start` after :meth:`Cluster.kill9` or :meth:`Cluster.stop` brings the same
broker back. :meth:`Cluster.start` returns once the broker has started (its ready file
written) and its ``/brokers/ids/<id>`` is registered; :meth:`Cluster.start_all` starts the
brokers side by side.

The module-scoped :func:`cluster3` fixture is shared by the tests of a module;
:func:`cluster3` restarts (and SIGCONTs) whatever a test left down before the next test, so
tests may kill brokers freely as long as they tolerate the restart's own effects.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, NoNodeError, SessionExpiredError

from odradek.cluster.local_zookeeper import LocalZooKeeper, ZooKeeperNotInstalled, start_zookeeper
from tests._deadlines import describe, expired

from ._broker import (
    STARTUP_TIMEOUT,
    BrokerProcess,
    BrokerStartError,
    free_port,
    start_broker,
)
from ._proxy import Proxy

T = TypeVar("T")

#: Short enough that a killed broker (or controller) is noticed in seconds, long enough
#: that a loaded 2-core machine does not expire live sessions.
SESSION_TIMEOUT_MS = 6000
ZK_TICK_MS = 200
#: ZooKeeper's default cap (20 ticks, 4 s here) would cut the brokers' sessions short.
MAX_SESSION_TIMEOUT_MS = 60_000
REGISTER_TIMEOUT_S = 30.0


def wait_for(condition: Callable[[], T | None], timeout: float = 10.0, what: str = "") -> T:
    """Poll ``condition`` until it returns something truthy (returned), failing after
    ``timeout`` seconds (longer on a slow machine: tests/_deadlines.py) with ``what`` and
    the last value seen."""
    started = time.monotonic()
    last: T | None = None
    while True:
        last = condition()
        if last:
            return last
        if expired(started, timeout):
            raise AssertionError(f"timed out after {describe(started, timeout)} waiting "
                                 f"for {what or condition} (last: {last!r})")
        time.sleep(0.05)


def cluster_zookeeper(data_dir: Path) -> LocalZooKeeper:
    """The ZooKeeper a :class:`Cluster` starts (short ticks, no fsync, long sessions
    allowed); start one yourself to share it between clusters (each in its chroot)."""
    try:
        return start_zookeeper(data_dir, tick_ms=ZK_TICK_MS, force_sync=False,
                               max_session_timeout_ms=MAX_SESSION_TIMEOUT_MS)
    except ZooKeeperNotInstalled as exc:
        pytest.fail(str(exc))


class Cluster:
    """ZooKeeper + brokers ``1..size``; everything started is stopped by :meth:`close`."""

    def __init__(self, root: Path, size: int = 3,
                 overrides: Mapping[str, Any] | None = None,
                 per_broker: Mapping[int, Mapping[str, Any]] | None = None,
                 proxied: bool = False, zookeeper: LocalZooKeeper | None = None) -> None:
        self.root = root
        # With ``proxied``, each broker advertises a Proxy in front of its listener and
        # reaches ZooKeeper through another: :meth:`isolate` cuts it off the network.
        self.proxied = proxied
        self.proxies: dict[int, Proxy] = {}
        self.zk_proxies: dict[int, Proxy] = {}
        self.size = size
        self.chroot = f"/odradek-{uuid.uuid4().hex[:8]}"
        self.overrides = dict(overrides or {})
        # Overrides of one broker only (e.g. its broker.rack), over ``overrides``.
        self.per_broker = {b: dict(o) for b, o in (per_broker or {}).items()}
        self.brokers: dict[int, BrokerProcess] = {}
        self.ports: dict[int, int] = {}
        self.zookeeper: LocalZooKeeper | None = None
        self._zk: KazooClient | None = None
        # Given a running ``zookeeper`` (e.g. another cluster's), the cluster lives in its
        # own chroot there and leaves the ZooKeeper running at :meth:`close`.
        self.owns_zookeeper = zookeeper is None
        if zookeeper is not None:
            self.zookeeper = zookeeper
            return
        self.zookeeper = cluster_zookeeper(root / "zookeeper")

    # ---- addresses
    @property
    def zookeeper_connect(self) -> str:
        assert self.zookeeper is not None
        return self.zookeeper.connect_string(self.chroot)

    def address(self, broker_id: int) -> str:
        if broker_id in self.proxies:
            return f"127.0.0.1:{self.proxies[broker_id].port}"
        return f"127.0.0.1:{self.ports[broker_id]}"

    @property
    def bootstrap(self) -> str:
        """Every broker's address (live or not), comma-separated."""
        return ",".join(self.address(i) for i in sorted(self.ports))

    def data_dir(self, broker_id: int) -> Path:
        return self.root / f"broker-{broker_id}"

    def broker_overrides(self, broker_id: int) -> dict[str, Any]:
        overrides: dict[str, Any] = {
            "broker.id": broker_id,
            "zookeeper.connect": self.zookeeper_connect,
            "zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS,
        }
        if self.proxied:
            if broker_id not in self.proxies:
                # forwarding to the broker's port once it has bound one (start)
                self.proxies[broker_id] = Proxy(self.ports.get(broker_id, 0))
                assert self.zookeeper is not None
                self.zk_proxies[broker_id] = Proxy(self.zookeeper.port)
            overrides["advertised.listeners"] = (
                f"PLAINTEXT://127.0.0.1:{self.proxies[broker_id].port}")
            overrides["zookeeper.connect"] = (
                f"127.0.0.1:{self.zk_proxies[broker_id].port}{self.chroot}")
        return {**overrides, **self.overrides, **self.per_broker.get(broker_id, {})}

    def isolate(self, broker_id: int, zookeeper: bool = False) -> None:
        """Cut broker ``broker_id`` off from clients and the other brokers (and, with
        ``zookeeper``, from ZooKeeper too) until :meth:`reconnect`."""
        self.proxies[broker_id].cut()
        if zookeeper:
            self.zk_proxies[broker_id].cut()

    def reconnect(self, broker_id: int) -> None:
        self.proxies[broker_id].heal()
        self.zk_proxies[broker_id].heal()

    # ---- lifecycle of one broker
    def start(self, broker_id: int, wait_registered: bool = True) -> BrokerProcess:
        """Start broker ``broker_id`` (same port and data dir as before, if it ran before)."""
        broker = self._launch(broker_id)
        self._started(broker_id, broker)
        if wait_registered:
            self.wait_for(lambda: self.registered(broker_id) and broker.alive(),
                          REGISTER_TIMEOUT_S, f"broker {broker_id} in /brokers/ids",
                          broker=broker)
        return broker

    def _launch(self, broker_id: int) -> BrokerProcess:
        """Broker ``broker_id``'s process started, not waited for."""
        old = self.brokers.get(broker_id)
        if old is not None and old.alive():
            raise AssertionError(f"broker {broker_id} is already running")
        if old is not None:
            # killed -9: its registration lives until ZooKeeper expires the session, and a
            # broker id a live registration holds is refused (seed 000)
            self.wait_for(lambda: not self.registered(broker_id),
                          2 * SESSION_TIMEOUT_MS / 1000 + 10,
                          f"the old registration of broker {broker_id} expired")
        overrides = self.broker_overrides(broker_id)  # (picks the port of a proxied one)
        broker = start_broker(
            self.root, port=self.ports.get(broker_id), data_dir=self.data_dir(broker_id),
            overrides=overrides, wait=False,
        )
        self.brokers[broker_id] = broker  # stopped by close() whatever happens next
        return broker

    def _started(self, broker_id: int, broker: BrokerProcess) -> None:
        """Wait for ``broker`` to have started; keep the port it bound (on its first start,
        port 0: the system's choice) for its restarts, and point its proxy at it."""
        broker.wait_ready(STARTUP_TIMEOUT)
        self.ports[broker_id] = broker.port
        if broker_id in self.proxies:
            self.proxies[broker_id].target_port = broker.port

    def start_all(self) -> None:
        """Every broker started side by side (each start waits on ZooKeeper and its disk
        part of the time), then waited for."""
        launched = [(i, self._launch(i)) for i in range(1, self.size + 1)]
        for broker_id, broker in launched:
            self._started(broker_id, broker)
        self.wait_for(lambda: all(self.registered(i) for i in range(1, self.size + 1)),
                      REGISTER_TIMEOUT_S, "every broker in /brokers/ids")

    def kill9(self, broker_id: int) -> None:
        self.brokers[broker_id].kill9()

    def stop(self, broker_id: int) -> int | None:
        return self.brokers[broker_id].stop()

    def sigstop(self, broker_id: int) -> None:
        os.killpg(self.brokers[broker_id].pid, signal.SIGSTOP)

    def sigcont(self, broker_id: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.brokers[broker_id].pid, signal.SIGCONT)

    def alive(self, broker_id: int) -> bool:
        broker = self.brokers.get(broker_id)
        return broker is not None and broker.alive()

    def restore(self) -> None:
        """Every broker running again (SIGCONT the paused, restart the dead, side by
        side)."""
        dead = []
        for broker_id in range(1, self.size + 1):
            if broker_id in self.brokers:
                self.sigcont(broker_id)
            if broker_id in self.proxies:
                self.reconnect(broker_id)
            if not self.alive(broker_id):
                dead.append(broker_id)
        launched = [(i, self._launch(i)) for i in dead]
        for broker_id, broker in launched:
            self._started(broker_id, broker)
        for broker_id, broker in launched:
            self.wait_for(lambda: self.registered(broker_id) and broker.alive(),  # noqa: B023
                          REGISTER_TIMEOUT_S, f"broker {broker_id} in /brokers/ids",
                          broker=broker)

    # ---- topics
    def create_topic(self, topic: str, partitions: int = 1, replication_factor: int = 3,
                     config: Mapping[str, str] | None = None,
                     replica_assignment: list[list[int]] | None = None) -> None:
        """CreateTopics through any broker (confluent-kafka's admin client). A broker
        that has just started may not be in every broker's live list yet: a refusal for
        too few brokers is retried until it is."""
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            AdminClient,
            NewTopic,
        )

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        new = (NewTopic(topic, partitions, replica_assignment=replica_assignment,
                        config=dict(config or {}))
               if replica_assignment is not None
               else NewTopic(topic, partitions, replication_factor, config=dict(config or {})))

        def created() -> bool:
            futures = admin.create_topics([new], operation_timeout=30, request_timeout=30)
            try:
                futures[topic].result(60)
            except KafkaException as exc:
                code = exc.args[0].code()
                if code not in (KafkaError.INVALID_REPLICATION_FACTOR,
                                KafkaError.INVALID_REPLICA_ASSIGNMENT):
                    raise
                return False
            return True

        self.wait_for(created, 30, f"{topic} created")

    # ---- ZooKeeper's view
    @property
    def zk(self) -> KazooClient:
        """A kazoo client on the cluster's chroot (opened on first use)."""
        if self._zk is None:
            assert self.zookeeper is not None
            client = KazooClient(hosts=self.zookeeper_connect, timeout=10.0)
            client.start(timeout=15)
            self._zk = client
        return self._zk

    def zk_get(self, path: str) -> bytes | None:
        # A busy machine may expire this observer's own session (or drop its connection):
        # kazoo opens a new one, and the read is asked again once it is connected.
        for attempt in range(3):
            try:
                data, _ = self.zk.get(path)
            except NoNodeError:
                return None
            except (ConnectionLoss, SessionExpiredError):
                if attempt == 2:
                    raise
                wait_for(lambda: self.zk.connected, 30, "the observer's ZooKeeper session")
                continue
            return bytes(data) if data is not None else b""
        raise AssertionError("unreachable")

    def listed_brokers(self, broker_id: int) -> set[int]:
        """The broker ids broker ``broker_id``'s Metadata answer lists (the registrations
        it has seen: those a CreateTopics it answers can place replicas on); empty while
        it does not answer."""
        from odradek.client.admin import Admin
        from odradek.client.connection import BrokerConnection, ClientError

        async def ask() -> set[int]:
            conn = await BrokerConnection.open(self.address(broker_id), timeout=5)
            try:
                return set(await Admin(conn).brokers())
            finally:
                await conn.close()

        try:
            return asyncio.run(asyncio.wait_for(ask(), 5))
        except (ClientError, OSError, TimeoutError):
            return set()

    def whole(self) -> bool:
        """Every broker runs and lists every broker in its Metadata."""
        every = set(range(1, self.size + 1))
        return all(self.listed_brokers(i) == every for i in every)

    def registered(self, broker_id: int) -> bool:
        return self.zk_get(f"/brokers/ids/{broker_id}") is not None

    def live_ids(self) -> set[int]:
        try:
            return {int(c) for c in self.zk.get_children("/brokers/ids")}
        except NoNodeError:
            return set()

    def controller(self) -> tuple[int | None, int | None]:
        """(``/controller``'s brokerid, ``/controller_epoch``), None where absent."""
        raw = self.zk_get("/controller")
        epoch = self.zk_get("/controller_epoch")
        controller_id = int(json.loads(raw)["brokerid"]) if raw else None
        return controller_id, int(epoch) if epoch else None

    def wait_controller(self, timeout: float = 15.0) -> tuple[int, int]:
        """(controller id, epoch) once ``/controller`` and ``/controller_epoch`` exist."""
        def known() -> tuple[int, int] | None:
            controller_id, epoch = self.controller()
            return None if controller_id is None or epoch is None else (controller_id, epoch)

        return self.wait_for(known, timeout, "a controller in /controller")

    # ---- waiting
    def wait_for(self, condition: Callable[[], T | None], timeout: float = 10.0,
                 what: str = "", broker: BrokerProcess | None = None) -> T:
        """:func:`wait_for`, with the brokers' stderr tails in the failure message."""
        try:
            return wait_for(condition, timeout, what)
        except AssertionError as exc:
            shown = [broker] if broker is not None else list(self.brokers.values())
            details = "\n".join(b.describe(tail=2000) for b in shown)
            raise AssertionError(f"{exc}\n{details}") from None

    def describe(self) -> str:
        return "\n".join(b.describe(tail=2000) for b in self.brokers.values())

    # ---- teardown
    def close(self) -> None:
        for broker_id in list(self.brokers):
            self.sigcont(broker_id)
            if broker_id in self.proxies:
                self.reconnect(broker_id)
        for broker in self.brokers.values():
            broker.stop()
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()
        if self.zookeeper is not None and self.owns_zookeeper:
            self.zookeeper.stop()
        for proxy in [*self.proxies.values(), *self.zk_proxies.values()]:
            proxy.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def running_cluster(root: Path, size: int = 3,
                    overrides: Mapping[str, Any] | None = None,
                    per_broker: Mapping[int, Mapping[str, Any]] | None = None,
                    proxied: bool = False,
                    zookeeper: LocalZooKeeper | None = None) -> Iterator[Cluster]:
    with Cluster(root, size, overrides, per_broker, proxied, zookeeper) as cluster:
        cluster.start_all()
        yield cluster
    if os.environ.get("ODRADEK_KEEP_CLUSTER_DIR") is None and zookeeper is None:
        shutil.rmtree(root / "zookeeper", ignore_errors=True)


@pytest.fixture(scope="module")
def cluster3_shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster3")) as cluster:
        yield cluster


@pytest.fixture
def cluster3(cluster3_shared: Cluster) -> Cluster:
    """The module's 3-broker cluster, with every broker running and registered at the start
    of the test (a broker an earlier test started without waiting may still be starting: a
    test that pauses it then would stop its registration midway)."""
    cluster3_shared.restore()
    cluster3_shared.wait_for(
        lambda: all(cluster3_shared.registered(i) for i in range(1, cluster3_shared.size + 1)),
        REGISTER_TIMEOUT_S, "every broker in /brokers/ids")
    # registered is not yet seen: a broker that has not read the others' registrations
    # answers CreateTopics with INVALID_REPLICATION_FACTOR
    cluster3_shared.wait_for(cluster3_shared.whole, REGISTER_TIMEOUT_S,
                             "every broker listing every broker in its Metadata")
    return cluster3_shared


__all__ = ["BrokerStartError", "Cluster", "cluster3", "cluster3_shared", "cluster_zookeeper",
           "free_port",
           "running_cluster", "wait_for"]
