"""Fixtures for the cluster tests: one real ZooKeeper per test session, a chroot per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.cluster.store import EmbeddedStore, MetadataStore
from odradek.cluster.zk_store import ZooKeeperStore
from tests.cluster._zookeeper import ZooKeeperServer, expire_session, running_zookeeper


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[ZooKeeperServer]:
    with running_zookeeper() as server:
        yield server


@pytest.fixture
def zk_chroot(zookeeper: ZooKeeperServer) -> str:
    """A path of this test's own: stores opened on it never see other tests' nodes."""
    return zookeeper.fresh_chroot()


@pytest.fixture
def zk_stores(zookeeper: ZooKeeperServer, zk_chroot: str) -> Iterator[list[ZooKeeperStore]]:
    """Stores opened by the test (``zk_stores.append(...)``), all closed at its end."""
    stores: list[ZooKeeperStore] = []
    yield stores
    for store in stores:
        store.close()


class Backend:
    """A store backend for contract tests: ``open()`` a store, ``expire()`` its session."""

    def __init__(self, name: str, zookeeper: ZooKeeperServer | None, tmp_path: Path) -> None:
        self.name = name
        self._zookeeper = zookeeper
        self._chroot = zookeeper.fresh_chroot() if zookeeper else ""
        self._path = tmp_path / "meta.json"
        self.opened: list[MetadataStore] = []

    def open(self) -> MetadataStore:
        store: MetadataStore
        if self._zookeeper is not None:
            store = self._zookeeper.store(self._chroot)
        else:
            store = EmbeddedStore(self._path)
        self.opened.append(store)
        return store

    def expire(self, store: MetadataStore) -> None:
        if isinstance(store, ZooKeeperStore):
            assert self._zookeeper is not None
            expire_session(store, self._zookeeper)
        else:
            assert isinstance(store, EmbeddedStore)
            store.expire_session()


@pytest.fixture(params=["embedded", "zookeeper"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    zk = request.getfixturevalue("zookeeper") if request.param == "zookeeper" else None
    b = Backend(request.param, zk, tmp_path)
    yield b
    for store in b.opened:
        store.close()


@pytest.fixture
def store(backend: Backend) -> MetadataStore:
    return backend.open()
