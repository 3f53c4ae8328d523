"""Producer id blocks (odradek.coordinator.producer_ids): unique ids across managers,
restarts and lost conditional writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odradek.cluster.store import EmbeddedStore, Node
from odradek.coordinator.producer_ids import (
    MAX_PRODUCER_ID,
    PRODUCER_ID_BLOCK_PATH,
    ProducerIdBlock,
    ProducerIdManager,
    ProducerIdsExhaustedError,
)


def test_ids_come_from_blocks(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path / "meta.json")
    manager = ProducerIdManager(store, broker_id=3, block_size=10)
    assert [manager.generate_producer_id() for _ in range(25)] == list(range(25))
    found = store.get_json(PRODUCER_ID_BLOCK_PATH)
    assert found is not None
    doc, _ = found
    assert doc == {"version": 1, "broker": 3, "block_start": "20", "block_end": "29"}


def test_restart_never_repeats_an_id(tmp_path: Path) -> None:
    path = tmp_path / "meta.json"
    store = EmbeddedStore(path)
    first = [ProducerIdManager(store, 0, 10).generate_producer_id() for _ in range(3)]
    store.close()
    store = EmbeddedStore(path)
    again = ProducerIdManager(store, 0, 10).generate_producer_id()
    assert again > max(first)
    assert len(set(first)) == 3  # each new manager claims its own block


def test_two_brokers_share_the_store(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path / "meta.json")
    a, b = ProducerIdManager(store, 0, 5), ProducerIdManager(store, 1, 5)
    ids = [m.generate_producer_id() for _ in range(12) for m in (a, b)]
    assert len(set(ids)) == len(ids)


class _RacingStore(EmbeddedStore):
    """Another broker claims a block between our read and our conditional write, once."""

    raced = False

    def set(self, path: str, data: bytes, expected_version: int = -1) -> Node:
        if not self.raced:
            self.raced = True
            node = self.get(path)
            assert node is not None
            other = ProducerIdBlock(9, ProducerIdBlock.decode(node.data).last + 1, 10)
            super().set(path, other.encode())
        return super().set(path, data, expected_version)


def test_lost_conditional_write_retries(tmp_path: Path) -> None:
    store = _RacingStore(tmp_path / "meta.json")
    ProducerIdManager(store, 0, 10).generate_producer_id()  # creates block 0..9
    second = ProducerIdManager(store, 0, 10).generate_producer_id()
    assert second == 20  # 10..19 went to broker 9


def test_exhausted(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path / "meta.json")
    store.create(PRODUCER_ID_BLOCK_PATH, json.dumps({
        "version": 1, "broker": 0, "block_start": "0", "block_end": str(MAX_PRODUCER_ID - 5),
    }).encode())
    with pytest.raises(ProducerIdsExhaustedError):
        ProducerIdManager(store, 0, 10).generate_producer_id()
