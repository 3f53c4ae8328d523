"""Every request decoder the broker runs is bounded by the bytes it was given.

The property: for any body, truncated or with a length or count inflated anywhere, the
decoder registered for that (API key, version) either decodes it or raises
:class:`InvalidRequestError`, and the work it does is proportional to the input. Work is
measured deterministically rather than by a clock: Python line events under
``sys.settrace`` (a loop driven by a count from the wire shows up as lines) and peak
Python allocation under ``tracemalloc``. The budgets:

- lines: ``LINES_FIXED + LINES_PER_BYTE * len(body)`` (2,000 + 200 a byte); the 25-byte
  OffsetForLeaderEpoch v0 whose partition count is 2^31 - 1 used to run ~8.6 billion;
- allocation: ``ALLOC_FIXED + ALLOC_PER_BYTE * len(body)`` bytes (256 KiB + 64 a byte).

The trace stops a decoder as soon as it passes its budget, so a regression fails here
instead of hanging the run.

Inputs: a valid body of every (API key, version) the broker serves (kio's versions from
``tests/protocol/samples.py``, the old versions decoded or transcoded by hand from
``tests/protocol/legacy_samples.py``), and of each body:

- every truncation (the first n bytes, n = 0 .. len - 1);
- at every position, an int32 of 2^31 - 1, -2^31 and -1, an int16 of 2^15 - 1 and -1, and
  (flexible versions) a 5-byte varint of 2^32 - 1 written over the bytes there.

The hand-written decoders (``codec.LEGACY_VERSIONS``, and every registration with a
``decode`` of its own, such as the Produce reader) and the versions decoded by the wire
guard and kio alike. The request header parser and the readers of producer input in the
record codecs (message sets v0/v1, record batches v2, the consumer protocol in JoinGroup
metadata) get the same treatment with their own errors.
"""

from __future__ import annotations

import struct
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest

from odradek.coordinator.group_protocol import (
    ConsumerAssignment,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from odradek.coordinator.group_records import RecordFormatError
from odradek.protocol.codec import LEGACY_VERSIONS, decode_request, schema
from odradek.protocol.errors import InvalidRequestError
from odradek.protocol.headers import parse_request_header
from odradek.protocol.registry import HandlerRegistry
from odradek.records.batch import (
    BATCH_HEADER_SIZE,
    InvalidRecordError,
    decode_records,
    validate_batches,
)
from odradek.records.builder import build_batch
from odradek.records.legacy import build_message_set, iter_messages, to_record_batch
from odradek.testing import RunningBroker
from tests.protocol.legacy_samples import legacy_sample_body
from tests.protocol.samples import sample_request
from tests.protocol.wire import request_payload

LINES_FIXED = 2_000
LINES_PER_BYTE = 200
ALLOC_FIXED = 256 * 1024
ALLOC_PER_BYTE = 64

_INT32S = (0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)
_INT16S = (0x7FFF, 0xFFFF)
_VARINT_MAX = b"\xff\xff\xff\xff\x0f"


class WorkBudgetExceeded(Exception):
    pass


def mutations(body: bytes, flexible: bool, stride: int = 1) -> Iterator[bytes]:
    """Every truncation of ``body``, and wild lengths written at every ``stride``-th
    position."""
    for n in range(len(body)):
        yield body[:n]
    for position in range(0, len(body), stride):
        for value in _INT32S:
            yield body[:position] + struct.pack(">I", value) + body[position + 4:]
        for value in _INT16S:
            yield body[:position] + struct.pack(">H", value) + body[position + 2:]
        if flexible:
            yield body[:position] + _VARINT_MAX + body[position + 5:]


def run_bounded(decode: Callable[[bytes], Any], data: bytes,
                errors: tuple[type[Exception], ...]) -> None:
    """``decode(data)`` must return or raise one of ``errors`` within the budgets."""
    line_budget = LINES_FIXED + LINES_PER_BYTE * len(data)
    lines = 0

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal lines
        if event == "line":
            lines += 1
            if lines > line_budget:
                raise WorkBudgetExceeded
        return trace

    budget = ALLOC_FIXED + ALLOC_PER_BYTE * len(data)
    peak = _peak_allocation(decode, data, errors, trace, line_budget)
    # tracemalloc counts every thread's allocations, and the session's broker runs in
    # threads of this process: a peak over the budget is measured again, and only one
    # that repeats every time (the decoder's own) fails.
    for _ in range(2):
        if peak <= budget:
            break
        lines = 0
        peak = min(peak, _peak_allocation(decode, data, errors, trace, line_budget))
    assert peak <= budget, f"decoding {data.hex()} allocated {peak} bytes"


def _peak_allocation(decode: Callable[[bytes], Any], data: bytes,
                     errors: tuple[type[Exception], ...], trace: Any, line_budget: int) -> int:
    """Peak traced allocation while ``decode(data)`` runs under ``trace``."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    sys.settrace(trace)
    try:
        decode(data)
    except WorkBudgetExceeded:
        pytest.fail(f"decoding {data.hex()} ran past {line_budget} lines")
    except errors:
        pass
    finally:
        sys.settrace(None)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


def _request_decoder(registry: HandlerRegistry, api_key: int,
                     version: int) -> Callable[[bytes], Any]:
    registration = registry.get(api_key)
    assert registration is not None and registration.supports(version)
    custom = registration.decode
    if custom is not None:
        return lambda body: custom(body, 0, version)
    return lambda body: decode_request(api_key, version, body, 0)


def _served(registry: HandlerRegistry) -> list[tuple[int, int]]:
    return [(r.api_key, v) for r in registry.supported_versions()
            for v in range(r.min_version, r.max_version + 1)]


def _body(api_key: int, version: int) -> bytes:
    legacy = LEGACY_VERSIONS.get(api_key)
    if legacy is not None and legacy[0] <= version <= legacy[1]:
        return legacy_sample_body(api_key, version)
    payload = request_payload(sample_request(api_key, version), correlation_id=1)
    header = parse_request_header(payload, schema(api_key, version).request_header_version)
    return payload[header.size:]


def test_every_served_version_has_a_seed_that_decodes(shared_broker: RunningBroker) -> None:
    registry = shared_broker.broker.registry
    served = _served(registry)
    assert len(served) > 150
    assert {(k, v) for k, (lo, hi) in LEGACY_VERSIONS.items()
            for v in range(lo, hi + 1)} <= set(served)
    for api_key, version in served:
        _request_decoder(registry, api_key, version)(_body(api_key, version))


def _check_served(registry: HandlerRegistry, custom: bool) -> int:
    """Every mutation of every seed through the decoders of the served versions whose
    registration brings its own decode (``custom``) or not; the decodes checked."""
    checked = 0
    for api_key, version in _served(registry):
        registration = registry.get(api_key)
        assert registration is not None
        if (registration.decode is not None) != custom:
            continue
        decode = _request_decoder(registry, api_key, version)
        flexible = schema(api_key, version).request_header_version == 2
        # The seed decoded once untraced first: a version's kio modules are imported at its
        # first decode (and an old version's at the first decode of the version it is
        # transcoded to), a one-off cost that is not the decoder's work on the bytes.
        decode(_body(api_key, version))
        for data in mutations(_body(api_key, version), flexible):
            run_bounded(decode, data, (InvalidRequestError,))
            checked += 1
    return checked


def test_hand_written_request_decoders_are_bounded(shared_broker: RunningBroker) -> None:
    """Old versions (decoded or transcoded by hand) and custom hot-path decoders: every
    mutation of every seed."""
    assert _check_served(shared_broker.broker.registry, custom=True) > 5_000


def test_kio_decoded_versions_are_bounded(shared_broker: RunningBroker) -> None:
    """Versions kio decodes behind the wire guard: every mutation of every seed."""
    assert _check_served(shared_broker.broker.registry, custom=False) > 12_000


def test_the_offset_for_leader_epoch_v0_request_of_25_bytes() -> None:
    body = bytes.fromhex("00000001" "0001" "74" "7fffffff")
    from odradek.server.handlers.offset_for_leader_epoch import _to_v2

    run_bounded(lambda b: _to_v2(b, 0), body, (InvalidRequestError,))
    with pytest.raises(InvalidRequestError, match="2147483647 elements"):
        _to_v2(body, 0)


@pytest.mark.parametrize("header_version", [1, 2])
def test_request_headers_are_bounded(header_version: int) -> None:
    payload = struct.pack(">hhi", 3, 12 if header_version == 2 else 1, 7) + struct.pack(
        ">h", 6) + b"client" + (b"\x00" if header_version == 2 else b"")
    for data in mutations(payload, flexible=header_version == 2):
        run_bounded(lambda d: parse_request_header(d, header_version), data,
                    (InvalidRequestError,))


def _legacy_message_sets() -> list[bytes]:
    from odradek.records.compression import CompressionType

    messages = [(0, 1_000, b"k", b"v" * 20), (1, 1_001, None, b"w")]
    return [build_message_set(magic, messages, codec)
            for magic in (0, 1) for codec in (CompressionType.NONE, CompressionType.GZIP)]


def test_legacy_message_sets_are_bounded() -> None:
    for message_set in _legacy_message_sets():
        for data in mutations(message_set, flexible=False):
            run_bounded(lambda d: list(iter_messages(d)), data, (InvalidRecordError,))
            run_bounded(lambda d: to_record_batch(d, 0), data, (InvalidRecordError,))


def test_record_batches_are_bounded() -> None:
    """A producer's batches are validated (sizes, counts, CRC) before anything else reads
    them; the record reader is checked without the CRC, as the log's readers use it."""
    from odradek.records.compression import CompressionType

    for codec in (CompressionType.NONE, CompressionType.GZIP):
        batch = build_batch([(b"k", b"v" * 10), (None, b"w")], compression=codec)
        for data in mutations(batch, flexible=True):
            run_bounded(validate_batches, data, (InvalidRecordError,))
    payload = build_batch([(b"k", b"v" * 10), (None, b"w")])[BATCH_HEADER_SIZE:]
    for count in (2, 3, 2**31 - 1, -1, 0):  # the header's record count, as stored
        run_bounded(lambda d, n=count: list(decode_records(d, n, 0, 0, 0, False)), payload,
                    (InvalidRecordError,))


def test_consumer_protocol_metadata_is_bounded() -> None:
    subscription = struct.pack(">hi", 0, 2) + b"\x00\x01a\x00\x01b" + struct.pack(">i", 1) + b"u"
    assignment = encode_assignment({"a": [0, 1], "b": [2]})
    assert decode_assignment(assignment) == ConsumerAssignment(0, {"a": (0, 1), "b": (2,)}, b"")
    for data in mutations(subscription, flexible=False):
        run_bounded(decode_subscription, data, (RecordFormatError, UnicodeDecodeError))
    for data in mutations(assignment, flexible=False):
        run_bounded(decode_assignment, data, (RecordFormatError, UnicodeDecodeError))
