"""tests/_deadlines.py: a wait's deadline grows with the machine's slowness, and only past
the deadline it names."""

from __future__ import annotations

import time

import pytest

from tests import _deadlines


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """A two-core machine at a whole run's usual load, as fast as the reference."""
    monkeypatch.setattr(_deadlines.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(_deadlines.os, "getloadavg", lambda: (4.0, 4.0, 4.0))
    monkeypatch.setenv(_deadlines.ENV, "1.00")
    return monkeypatch


def test_a_usual_machine_keeps_the_deadline(machine: pytest.MonkeyPatch) -> None:
    assert _deadlines.slowness() == 1.0
    now = time.monotonic()
    assert not _deadlines.expired(now - 9.9, 10.0)
    assert _deadlines.expired(now - 10.1, 10.0)


def test_a_loaded_machine_waits_longer(machine: pytest.MonkeyPatch) -> None:
    machine.setattr(_deadlines.os, "getloadavg", lambda: (10.0, 8.0, 6.0))  # 2x the usual
    assert _deadlines.slowness() == 2.0
    now = time.monotonic()
    assert not _deadlines.expired(now - 19.0, 10.0)
    assert _deadlines.expired(now - 20.5, 10.0)
    assert "the machine 2.0x slow" in _deadlines.describe(now - 20.5, 10.0)


def test_a_slow_machine_waits_longer(machine: pytest.MonkeyPatch) -> None:
    machine.setenv(_deadlines.ENV, "1.50")
    assert _deadlines.slowness() == 1.5
    assert not _deadlines.expired(time.monotonic() - 14.0, 10.0)


def test_the_growth_is_capped(machine: pytest.MonkeyPatch) -> None:
    machine.setattr(_deadlines.os, "getloadavg", lambda: (100.0, 100.0, 100.0))
    assert _deadlines.slowness() == _deadlines.MAX_SLOWNESS
    assert _deadlines.expired(time.monotonic() - 10.0 * _deadlines.MAX_SLOWNESS - 1, 10.0)


def test_a_bad_speed_in_the_environment_counts_as_usual(machine: pytest.MonkeyPatch) -> None:
    machine.setenv(_deadlines.ENV, "fast")
    assert _deadlines.slowness() == 1.0

