"""How ``odradek consume`` takes SIGINT and SIGTERM (odradek.cli.console._StopSignals),
in-process; tests/cli/test_first_hour.py stops the real command with each."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from tests._deadlines import describe, expired

from odradek.cli.console import _StopSignals


@pytest.fixture
def saved_handlers() -> Iterator[None]:
    """Python's own dispositions for the test (SIGINT raises KeyboardInterrupt, SIGTERM
    the default), whatever the suite was started with (a shell's background job starts
    with SIGINT ignored), and the suite's back afterwards."""
    saved = {sig: signal.getsignal(sig) for sig in _StopSignals.SIGNALS}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def _send(sig: signal.Signals, until: Callable[[], bool] = lambda: True) -> None:
    """Signal the main thread and return once ``until()`` holds (deadline 10 s, growing on a
    slow machine: tests/_deadlines.py).

    ``os.kill`` of the process may be delivered to any thread (pytest-xdist's workers
    have several), and Python runs the handler on the main thread only at its next check,
    which may come after the assertion that follows; so the signal goes to the main
    thread, and the test waits for what it expects, with a deadline."""
    signal.pthread_kill(threading.main_thread().ident or 0, sig)
    started = time.monotonic()
    while not until():
        assert not expired(started, 10), f"signal {sig!r} not handled in {describe(started, 10)}"
        time.sleep(0.001)  # a call: the interpreter runs pending signal handlers


@pytest.mark.parametrize("sig", _StopSignals.SIGNALS)
def test_a_signal_while_consuming_is_noted_and_sets_the_exit_status(
    saved_handlers: None, sig: signal.Signals
) -> None:
    before = signal.getsignal(sig)
    with _StopSignals() as stop:
        stop.deferred = True
        assert stop.exit_status() == 0
        _send(sig, lambda: stop.signum is not None)
        assert stop.signum == sig
        assert stop.exit_status() == 128 + sig
    assert signal.getsignal(sig) is before


def test_before_the_loop_a_signal_interrupts(saved_handlers: None) -> None:
    with pytest.raises(KeyboardInterrupt), _StopSignals() as stop:
        _send(signal.SIGTERM, lambda: False)  # the handler raises KeyboardInterrupt
    assert stop.exit_status() == 143


def test_a_signal_ignored_at_start_stays_ignored(saved_handlers: None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with _StopSignals() as stop:
        stop.deferred = True
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) != signal.SIG_DFL
        _send(signal.SIGINT)  # ignored: nothing to wait for
        assert stop.signum is None
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
