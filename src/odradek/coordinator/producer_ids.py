"""Producer id allocation for InitProducerId (Kafka's ZkProducerIdManager, KIP-98).

How it works: producer ids are handed out from blocks of :data:`PRODUCER_ID_BLOCK_SIZE`
consecutive ids. The last block handed to any broker lives in the metadata store at
``/latest_producer_id_block`` as Kafka writes it in ZooKeeper::

    {"version": 1, "broker": 0, "block_start": "0", "block_end": "999"}

A broker claims the next block with a conditional write on the node's version (create when
the node is missing); losing the race to another broker just means reading and trying
again. Ids of a block are then handed out from memory. A restart claims a fresh block, so
an id is never given twice — the ids left in the old block are skipped, as in Kafka.

Claiming a block is a store write (an fsync of the embedded store, or a ZooKeeper round
trip) once per thousand ids; it runs synchronously, as Kafka's ZooKeeper-mode manager does.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass

from odradek.cluster.store import BadVersionError, MetadataStore, NodeExistsError, StoreError

__all__ = [
    "PRODUCER_ID_BLOCK_PATH",
    "PRODUCER_ID_BLOCK_SIZE",
    "ProducerIdBlock",
    "ProducerIdManager",
    "ProducerIdsExhaustedError",
]

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
# Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE: one store write per thousand producers.
PRODUCER_ID_BLOCK_SIZE = 1000
BLOCK_FORMAT_VERSION = 1
# Producer ids are int64 and -1 means "none".
MAX_PRODUCER_ID = (1 << 63) - 1
# Conditional writes lost in a row before giving up (other brokers claiming blocks).
MAX_CLAIM_ATTEMPTS = 100


class ProducerIdsExhaustedError(StoreError):
    """Every int64 producer id has been handed out."""


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    broker_id: int
    first: int
    size: int

    @property
    def last(self) -> int:
        return self.first + self.size - 1

    def encode(self) -> bytes:
        return json.dumps({
            "version": BLOCK_FORMAT_VERSION, "broker": self.broker_id,
            "block_start": str(self.first), "block_end": str(self.last),
        }).encode()

    @classmethod
    def decode(cls, data: bytes) -> ProducerIdBlock:
        try:
            doc = json.loads(data)
            first, last = int(doc["block_start"]), int(doc["block_end"])
            return cls(int(doc["broker"]), first, last - first + 1)
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"{PRODUCER_ID_BLOCK_PATH} holds no producer id block: {exc}") from exc


class ProducerIdManager:
    def __init__(
        self, store: MetadataStore, broker_id: int, block_size: int = PRODUCER_ID_BLOCK_SIZE
    ) -> None:
        self.store = store
        self.broker_id = broker_id
        self.block_size = block_size
        self._block: ProducerIdBlock | None = None
        self._next = 0
        self._lock = threading.Lock()

    def generate_producer_id(self) -> int:
        with self._lock:
            if self._block is None or self._next > self._block.last:
                self._block = self._claim_block()
                self._next = self._block.first
            producer_id = self._next
            self._next += 1
            return producer_id

    def _claim_block(self) -> ProducerIdBlock:
        for _ in range(MAX_CLAIM_ATTEMPTS):
            node = self.store.get(PRODUCER_ID_BLOCK_PATH)
            first = 0 if node is None else ProducerIdBlock.decode(node.data).last + 1
            if first > MAX_PRODUCER_ID - self.block_size:
                raise ProducerIdsExhaustedError("no producer ids are left")
            block = ProducerIdBlock(self.broker_id, first, self.block_size)
            try:
                if node is None:
                    self.store.create(PRODUCER_ID_BLOCK_PATH, block.encode())
                else:
                    self.store.set(PRODUCER_ID_BLOCK_PATH, block.encode(), node.version)
            except (BadVersionError, NodeExistsError):
                continue  # another broker claimed a block first: read it and retry
            log.info("broker %d claimed producer ids %d..%d", self.broker_id, block.first,
                     block.last)
            return block
        raise StoreError(f"could not claim a producer id block in {MAX_CLAIM_ATTEMPTS} tries")
