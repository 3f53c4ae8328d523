"""The cleaner's fixed-memory offset map: key hash -> latest offset (Kafka's SkimpyOffsetMap).

How it works: one preallocated buffer (an anonymous ``mmap``) holds ``slots`` fixed-size entries of
``HASH_SIZE`` (16) bytes of the key's MD5 digest followed by an 8-byte big-endian offset,
24 bytes per entry. Lookups and inserts hash the key
once, start at the slot the digest's first 8 bytes name and probe linearly. An all-zero
digest marks an empty slot (an MD5 of all zeros is treated as a collision we accept, as
Kafka does). Memory never grows: the map is *full* at ``load_factor`` x slots entries
(``log.cleaner.io.buffer.load.factor``, 0.9) and the cleaner stops filling it there,
recording how far it got instead of failing (as Kafka's cleaner does since it cleans
part of a segment).

Two keys with the same digest share an entry: the older record of the pair may be dropped
as if superseded. With a 128-bit digest this is the same (negligible) risk Kafka takes.

``reset(expected)`` starts a pass: only as many slots as the pass can use (at most one per
offset of the dirty section, over the load factor) are zeroed and probed, so a small log
neither touches nor scans the whole buffer, while the buffer itself is allocated once.
"""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import struct

HASH_SIZE = 16
OFFSET_SIZE = 8
ENTRY_SIZE = HASH_SIZE + OFFSET_SIZE  # 24 bytes, Kafka's figure
_EMPTY = bytes(HASH_SIZE)
_OFFSET = struct.Struct(">q")
_SLOT = struct.Struct(">Q")
# Below this many slots a pass still uses this many (cheap, and keeps probing short).
_MIN_ACTIVE_SLOTS = 1024


class OffsetMapFullError(RuntimeError):
    """Raised by :meth:`SkimpyOffsetMap.put` only when called past :attr:`is_full`."""


class SkimpyOffsetMap:
    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        if not 0.0 < load_factor <= 1.0:
            raise ValueError(f"load factor {load_factor} must be in (0, 1]")
        self.slots = memory // ENTRY_SIZE
        if self.slots < 1:
            raise ValueError(f"offset map memory {memory} holds no {ENTRY_SIZE}-byte entry")
        self.memory = self.slots * ENTRY_SIZE
        self.load_factor = load_factor
        # An anonymous mapping: zero pages cost no memory until a pass touches them (a
        # ``bytearray`` would be written through at once: the whole budget resident).
        self._buf = mmap.mmap(-1, self.memory)
        self._active = self.slots
        self.size = 0
        self.latest_offset = -1
        self.lookups = 0
        self.probes = 0

    # -- capacity --------------------------------------------------------------------------
    @property
    def active_slots(self) -> int:
        return self._active

    @property
    def max_entries(self) -> int:
        """Entries this pass may hold before :attr:`is_full`."""
        return max(1, int(self._active * self.load_factor))

    @property
    def capacity(self) -> int:
        """Entries the whole buffer can hold at the load factor."""
        return max(1, int(self.slots * self.load_factor))

    @property
    def is_full(self) -> bool:
        return self.size >= self.max_entries

    @property
    def utilization(self) -> float:
        return self.size / self._active

    @property
    def bytes_per_entry(self) -> float:
        """Buffer bytes per slot (fixed: :data:`ENTRY_SIZE`)."""
        return self.memory / self.slots

    def reset(self, expected_entries: int | None = None) -> None:
        """Empty the map for a new pass; ``expected_entries`` bounds the slots it uses."""
        if expected_entries is None:
            active = self.slots
        else:
            wanted = int(expected_entries / self.load_factor) + 1
            active = min(self.slots, max(_MIN_ACTIVE_SLOTS, wanted))
        self._active = active
        nbytes = active * ENTRY_SIZE
        # Zero in place (memset) rather than allocating a fresh buffer each pass.
        ctypes.memset((ctypes.c_char * nbytes).from_buffer(self._buf), 0, nbytes)
        self.size = 0
        self.latest_offset = -1
        self.lookups = 0
        self.probes = 0

    # -- operations ------------------------------------------------------------------------
    @staticmethod
    def digest(key: bytes) -> bytes:
        h = hashlib.md5(key, usedforsecurity=False).digest()
        return h if h != _EMPTY else b"\x00" * (HASH_SIZE - 1) + b"\x01"

    def _find(self, digest: bytes) -> tuple[int, bool]:
        """(byte position of the slot holding ``digest`` or of the empty slot where it
        goes, found)."""
        buf = self._buf
        active = self._active
        slot = _SLOT.unpack_from(digest)[0] % active
        self.lookups += 1
        for _ in range(active):
            pos = slot * ENTRY_SIZE
            stored = buf[pos : pos + HASH_SIZE]
            if stored == digest:
                return pos, True
            if stored == _EMPTY:
                return pos, False
            self.probes += 1
            slot += 1
            if slot == active:
                slot = 0
        return -1, False  # every slot holds another key

    def put(self, key: bytes, offset: int) -> None:
        """Record ``offset`` as the latest for ``key`` (offsets are put in increasing order)."""
        digest = self.digest(key)
        pos, found = self._find(digest)
        if not found:
            if pos < 0:  # every slot taken (only possible at load factor 1)
                raise OffsetMapFullError(f"offset map of {self._active} slots is full")
            self._buf[pos : pos + HASH_SIZE] = digest
            self.size += 1
        _OFFSET.pack_into(self._buf, pos + HASH_SIZE, offset)
        if offset > self.latest_offset:
            self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset recorded for ``key``, or -1."""
        pos, found = self._find(self.digest(key))
        if not found:
            return -1
        value: int = _OFFSET.unpack_from(self._buf, pos + HASH_SIZE)[0]
        return value

    def __contains__(self, key: bytes) -> bool:
        return self._find(self.digest(key))[1]

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return (
            f"SkimpyOffsetMap(slots={self.slots}, active={self._active}, size={self.size}, "
            f"memory={self.memory})"
        )
