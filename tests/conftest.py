"""Shared fixtures: real brokers on free loopback ports (see odradek.testing)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from odradek.testing import RunningBroker, odradek_broker, running_broker

__all__ = ["odradek_broker", "shared_broker"]


@pytest.fixture(scope="session")
def shared_broker() -> Iterator[RunningBroker]:
    """One broker for the whole run, for tests that only need their own topics."""
    with running_broker() as broker:
        yield broker
