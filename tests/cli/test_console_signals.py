"""How ``odradek consume`` takes SIGINT and SIGTERM (odradek.cli.console._StopSignals),
in-process; tests/cli/test_first_hour.py stops the real command with each."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from odradek.cli.console import _StopSignals


@pytest.fixture
def saved_handlers() -> Iterator[None]:
    saved = {sig: signal.getsignal(sig) for sig in _StopSignals.SIGNALS}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("sig", _StopSignals.SIGNALS)
def test_a_signal_while_consuming_is_noted_and_sets_the_exit_status(
    saved_handlers: None, sig: signal.Signals
) -> None:
    before = signal.getsignal(sig)
    with _StopSignals() as stop:
        stop.deferred = True
        assert stop.exit_status() == 0
        os.kill(os.getpid(), sig)
        assert stop.signum == sig
        assert stop.exit_status() == 128 + sig
    assert signal.getsignal(sig) is before


def test_before_the_loop_a_signal_interrupts(saved_handlers: None) -> None:
    with pytest.raises(KeyboardInterrupt), _StopSignals() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
    assert stop.exit_status() == 143


def test_a_signal_ignored_at_start_stays_ignored(saved_handlers: None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with _StopSignals() as stop:
        stop.deferred = True
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) != signal.SIG_DFL
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.signum is None
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
