"""The codec's schema table (odradek.protocol.codec): what registration checks without
importing kio's schema modules agrees with what importing them gives."""

from __future__ import annotations

import pytest
from kio.schema.index import api_key_map

from odradek.protocol.codec import (
    LEGACY_VERSIONS,
    LegacyBody,
    has_kio_schema,
    kio_versions,
    schema,
)
from odradek.protocol.errors import LocalProtocolError


def _imports(api_key: int, version: int) -> bool:
    try:
        return schema(api_key, version).request_type is not LegacyBody
    except LocalProtocolError:
        return False


@pytest.mark.parametrize("api_key", sorted(api_key_map))
def test_has_kio_schema_is_what_importing_says(api_key: int) -> None:
    known = kio_versions(api_key)
    assert known is not None
    for version in range(-1, known[1] + 3):
        assert has_kio_schema(api_key, version) == _imports(api_key, version), version


def test_has_kio_schema_refuses_what_kio_lacks() -> None:
    assert not has_kio_schema(4, 0)  # LeaderAndIsr: gone in Kafka 4
    assert not has_kio_schema(31_999, 0)
    low, high = LEGACY_VERSIONS[0]
    assert not any(has_kio_schema(0, v) for v in range(low, high + 1))  # Produce v0-2
    assert has_kio_schema(0, 3) and has_kio_schema(3, 12)
