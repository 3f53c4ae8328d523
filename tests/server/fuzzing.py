"""A seeded request fuzzer over real sockets, shared by test_fuzz.py and bench/fuzz.py.

Seeds: the request frames real clients sent (``golden/client-requests.bin``: librdkafka,
kafka-python and aiokafka producing, consuming in groups and administering, captured by
``golden/capture.py``), and a valid request of every (API key, version) the broker serves,
built from kio's classes (``tests/protocol/samples.py``) or, for the old versions kio
lacks, by hand (``tests/protocol/legacy_samples.py``).

Each connection gets one to four items, each a seed frame through one mutation: bit flips,
truncation (with the size prefix kept or fixed), a wild int16/int32/varint length or count
written into the body, a random API key and version, a wild size prefix, random bytes, a
splice of two frames, the frame duplicated (pipelined) or concatenated with others, or the
frame as is. The bytes go out in random chunks; then the client half-closes and reads
until the broker closes or ``read_deadline_s`` passes. Everything is drawn from one
``random.Random(seed)``: a seed gives the same bytes on every run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import random
import struct
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from odradek.protocol.codec import LEGACY_VERSIONS, decode_request, encode_body, schema
from odradek.protocol.headers import parse_request_header, peek_request
from odradek.protocol.registry import HandlerRegistry
from tests.protocol.legacy_samples import legacy_request_frame
from tests.protocol.samples import sample_request
from tests.protocol.wire import request_frame

GOLDEN = Path(__file__).with_name("golden") / "client-requests.bin"
# Record batches real clients built (tests/records/golden): what a mutated ``records``
# field is set to, whole or damaged.
GOLDEN_BATCHES = sorted((Path(__file__).parent.parent / "records" / "golden").glob("*.bin"))
# Values a length, count or size field may be mutated to: the edges of int16/int32 and a
# few that ask for a lot of memory.
_WILD_INT32 = (0x7FFFFFFF, 0xFFFFFFFF, 0x80000000, 0x7FFFFFFE, 0x00100000, 0x0FFFFFFF, 0)
_WILD_INT16 = (0x7FFF, 0xFFFF, 0x8000, 0x0000, 0x0100)
_WILD_INTS = {
    "int8": (-128, 127, -1, 0),
    "int16": (-32768, 32767, -1, 0, 1),
    "uint16": (0, 65535),
    "int32": (-(2**31), 2**31 - 1, -1, 0, 1, 1 << 20),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1, -1, 0, 1),
}
_WILD_STRINGS = ("", ".", "..", "a/b", "\u00e9\u00e8-\u2603", "__consumer_offsets", "corpus-a",
                 "x" * 249, "x" * 3000, " ", "-1")
_WILD_MS = (-1, 0, 2**31 - 1, -(2**31))
_WILD_VARINT = (b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x07", b"\x80\x80\x80\x80\x08",
                b"\xfe\xff\xff\x7f", b"\x00")


def client_frames(path: Path = GOLDEN) -> list[bytes]:
    """The captured frames, size prefixes included."""
    data = path.read_bytes()
    frames = []
    position = 0
    while position < len(data):
        (size,) = struct.unpack_from(">i", data, position)
        frames.append(data[position:position + 4 + size])
        position += 4 + size
    return frames


def served_versions(registry: HandlerRegistry) -> dict[int, tuple[int, int]]:
    return {r.api_key: (r.min_version, r.max_version) for r in registry.supported_versions()}


def sample_frames(served: Mapping[int, tuple[int, int]]) -> list[bytes]:
    """A valid request of every served (key, version): ``served`` maps key to
    (min, max), as :func:`served_versions` or an ApiVersions answer gives it. The old
    versions kio has no schema for are built by hand (``legacy_samples.py``)."""
    frames = []
    for api_key, (low, high) in sorted(served.items()):
        legacy = LEGACY_VERSIONS.get(api_key, (0, -1))
        for version in range(low, high + 1):
            if legacy[0] <= version <= legacy[1]:
                frames.append(legacy_request_frame(api_key, version, version + 1))
                continue
            request = sample_request(api_key, version)
            frames.append(request_frame(request, correlation_id=version + 1))
    return frames


def _with_size(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


class Mutator:
    """Turns seed frames into hostile ones, deterministically from ``rng``."""

    def __init__(self, corpus: list[bytes], rng: random.Random) -> None:
        self.corpus = corpus
        self.rng = rng
        self.mutations: list[Callable[[bytes], list[bytes]]] = [
            self.as_is, self.bit_flips, self.bit_flips, self.truncate, self.wild_length,
            self.wild_length, self.wild_header, self.wild_size_prefix, self.garbage,
            self.splice, self.duplicate, self.concatenate,
            self.semantic, self.semantic, self.semantic, self.semantic,
        ]
        self.batches = [p.read_bytes() for p in GOLDEN_BATCHES]
        self.used: Counter[str] = Counter()

    def item(self) -> list[bytes]:
        """One seed through one mutation: the frames (or fragments) to send."""
        mutation = self.rng.choice(self.mutations)
        self.used[mutation.__name__] += 1
        return mutation(self.rng.choice(self.corpus))

    def as_is(self, frame: bytes) -> list[bytes]:
        return [frame]

    def bit_flips(self, frame: bytes) -> list[bytes]:
        data = bytearray(frame[4:])
        for _ in range(self.rng.randint(1, 8)):
            position = self.rng.randrange(len(data))
            data[position] ^= 1 << self.rng.randrange(8)
        return [_with_size(bytes(data))]

    def truncate(self, frame: bytes) -> list[bytes]:
        payload = frame[4:self.rng.randrange(4, len(frame))]
        if self.rng.random() < 0.5:
            return [frame[:4] + payload]  # the prefix still promises the whole frame
        return [_with_size(payload)]

    def wild_length(self, frame: bytes) -> list[bytes]:
        data = bytearray(frame[4:])
        for _ in range(self.rng.randint(1, 3)):
            position = self.rng.randrange(8, max(len(data), 9))
            kind = self.rng.randrange(3)
            if kind == 0:
                value = struct.pack(">I", self.rng.choice(_WILD_INT32))
            elif kind == 1:
                value = struct.pack(">H", self.rng.choice(_WILD_INT16))
            else:
                value = self.rng.choice(_WILD_VARINT)
            data[position:position + len(value)] = value
        return [_with_size(bytes(data))]

    def wild_header(self, frame: bytes) -> list[bytes]:
        key = self.rng.choice((self.rng.randrange(-3, 100), self.rng.randrange(-32768, 32768)))
        version = self.rng.choice((self.rng.randrange(-2, 20), self.rng.randrange(-32768, 32768)))
        if self.rng.random() < 0.5:  # keep the key, change only the version
            (key,) = struct.unpack_from(">h", frame, 4)
        return [_with_size(struct.pack(">hh", key, version) + frame[8:])]

    def wild_size_prefix(self, frame: bytes) -> list[bytes]:
        size = self.rng.choice((-1, -0x80000000, 0, 1, 3, 0x7FFFFFFF, 104857601,
                                self.rng.randrange(-0x80000000, 0x80000000)))
        return [struct.pack(">i", size) + frame[4:]]

    def garbage(self, frame: bytes) -> list[bytes]:
        return [self.rng.randbytes(self.rng.randrange(1, 64))]

    def splice(self, frame: bytes) -> list[bytes]:
        other = self.rng.choice(self.corpus)
        cut = self.rng.randrange(8, max(len(frame), 9))
        other_cut = self.rng.randrange(4, len(other))
        return [_with_size(frame[4:cut] + other[other_cut:])]

    def semantic(self, frame: bytes) -> list[bytes]:
        """Decode the request, set one field (at any depth) to a wild value of its type,
        encode it again: well-formed frames with hostile contents, which reach handlers."""
        payload = frame[4:]
        try:
            key, version, _ = peek_request(payload)
            header = parse_request_header(payload, schema(key, version).request_header_version)
            request = decode_request(key, version, payload, header.size)
            for _ in range(self.rng.randint(1, 3)):
                request = self._mutate_entity(request)
            body = encode_body(request)
        except Exception:  # a seed kio cannot decode, or a value its type cannot hold
            return self.bit_flips(frame)
        return [_with_size(bytes(payload[:header.size]) + body)]

    def _mutate_entity(self, entity: Any) -> Any:
        fields = dataclasses.fields(entity)
        if not fields:
            return entity
        chosen = self.rng.choice(fields)
        value = getattr(entity, chosen.name)
        if dataclasses.is_dataclass(value) and self.rng.random() < 0.7:
            new = self._mutate_entity(value)
        elif (isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0])
              and self.rng.random() < 0.6):
            i = self.rng.randrange(len(value))
            new = (*value[:i], self._mutate_entity(value[i]), *value[i + 1:])
        else:
            new = self._wild_value(chosen, value)
        return dataclasses.replace(entity, **{chosen.name: new})

    def _wild_value(self, chosen: dataclasses.Field[Any], value: Any) -> Any:
        rng = self.rng
        if isinstance(value, tuple):
            if not value or rng.random() < 0.3:
                return ()
            return value * rng.randint(2, 30)
        if rng.random() < 0.1:
            return None
        kafka_type = chosen.metadata.get("kafka_type", "")
        if kafka_type in _WILD_INTS:
            return rng.choice(_WILD_INTS[kafka_type])
        if kafka_type == "string":
            return rng.choice(_WILD_STRINGS)
        if kafka_type == "records":
            batch = bytearray(rng.choice(self.batches))
            if rng.random() < 0.5:
                batch[rng.randrange(len(batch))] ^= 1 << rng.randrange(8)
            return bytes(batch[:rng.randrange(1, len(batch) + 1)] if rng.random() < 0.3
                         else batch)
        if kafka_type == "bytes":
            return rng.randbytes(rng.randrange(0, 100))
        if kafka_type == "uuid":
            return rng.choice((uuid.UUID(int=0), uuid.UUID(int=rng.getrandbits(128))))
        if kafka_type == "bool":
            return not value
        if kafka_type == "float64":
            return rng.choice((float("nan"), float("inf"), -1.0))
        if kafka_type in ("timedelta_i32", "timedelta_i64"):
            return datetime.timedelta(milliseconds=rng.choice(_WILD_MS))
        if kafka_type == "datetime_i64":
            return datetime.datetime.fromtimestamp(rng.choice((0, 1, 2**31)), tz=datetime.UTC)
        return value

    def duplicate(self, frame: bytes) -> list[bytes]:
        return [frame] * self.rng.randint(2, 20)

    def concatenate(self, frame: bytes) -> list[bytes]:
        frames = [frame]
        for _ in range(self.rng.randint(1, 5)):
            frames.extend(self.rng.choice(self.mutations)(self.rng.choice(self.corpus)))
        return frames


@dataclass
class FuzzStats:
    frames: int = 0
    connections: int = 0
    bytes_sent: int = 0
    answered: int = 0  # connections that got at least one response byte
    closed_by_broker: int = 0
    reset: int = 0
    slow: int = 0  # the broker neither answered nor closed within the read deadline
    api_keys: Counter[int] = field(default_factory=Counter)
    seconds: float = 0.0
    slow_examples: list[bytes] = field(default_factory=list)  # the first few, to replay

    def merge(self, other: FuzzStats) -> None:
        for name in ("frames", "connections", "bytes_sent", "answered", "closed_by_broker",
                     "reset", "slow", "seconds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.api_keys.update(other.api_keys)
        self.slow_examples.extend(other.slow_examples[:5 - len(self.slow_examples)])


def _chunks(data: bytes, rng: random.Random) -> Iterable[bytes]:
    position = 0
    while position < len(data):
        size = rng.choice((1, 3, 7, 64, 1500, len(data)))
        yield data[position:position + size]
        position += size


async def _connection(port: int, data: bytes, chunks: list[bytes], stats: FuzzStats,
                      read_deadline_s: float) -> None:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        stats.reset += 1
        return
    stats.connections += 1
    try:
        for chunk in chunks:
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        received = 0
        async with asyncio.timeout(read_deadline_s):
            while data := await reader.read(65536):
                received += len(data)
        stats.closed_by_broker += 1
        if received:
            stats.answered += 1
    except TimeoutError:
        stats.slow += 1
        if len(stats.slow_examples) < 5:
            stats.slow_examples.append(data)
    except OSError:  # reset: the broker closed while we were still writing
        stats.reset += 1
    finally:
        writer.transport.abort()


async def fuzz(port: int, corpus: list[bytes], seed: int, frames: int, concurrency: int = 32,
               read_deadline_s: float = 3.0,
               progress: Callable[[FuzzStats], None] | None = None) -> FuzzStats:
    """Send at least ``frames`` mutated frames over many connections to 127.0.0.1:port."""
    rng = random.Random(seed)
    mutator = Mutator(corpus, rng)
    stats = FuzzStats()
    start = time.monotonic()
    pending: set[asyncio.Task[None]] = set()
    last_report = start
    while stats.frames < frames:
        items = [f for _ in range(rng.randint(1, 4)) for f in mutator.item()]
        data = b"".join(items)
        stats.frames += len(items)
        stats.bytes_sent += len(data)
        for item in items:
            if len(item) >= 6:
                stats.api_keys[struct.unpack_from(">h", item, 4)[0]] += 1
        chunks = list(_chunks(data, rng))
        pending.add(asyncio.ensure_future(
            _connection(port, data, chunks, stats, read_deadline_s)))
        if len(pending) >= concurrency:
            _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        if progress is not None and time.monotonic() - last_report >= 5:
            last_report = time.monotonic()
            stats.seconds = last_report - start
            progress(stats)
    if pending:
        await asyncio.wait(pending)
    stats.seconds = time.monotonic() - start
    return stats
