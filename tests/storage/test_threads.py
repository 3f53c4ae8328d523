"""Storage state touched from more than one thread (docs/architecture.md, "Threads"; issue
52): the event loop appends and reads, the cleaner's threads and the log manager's
periodic workers read and change the same logs."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from odradek.storage import manager as manager_module
from odradek.storage.manager import LogManager, TopicPartition
from odradek.storage.producer_state import ProducerStateManager
from tests.storage._util import NOW, config, make_batch

TRANSACTIONS = 20_000


@pytest.fixture
def frequent_switches() -> Iterator[None]:
    """Threads switch every microsecond, so that a race shows within the test's time."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def _run_together(*fns: Callable[[], None], deadline_s: float = 60.0) -> list[BaseException]:
    """Run each function in a thread of its own; the exceptions they raised."""
    failures: list[BaseException] = []

    def guarded(fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=guarded, args=(fn,), daemon=True) for fn in fns]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(deadline_s)
        assert not thread.is_alive(), "a thread did not finish within the deadline"
    return failures


def test_first_unstable_offset_from_the_loop_and_the_cleaner(
        tmp_path: Path, frequent_switches: None) -> None:
    """A fetch on the loop and the cleaner's thread both ask a log's last stable offset;
    each forgets the transactions the high watermark passed. The walk of the ended
    transactions raced the other thread's removals ("dictionary changed size during
    iteration" in a fetch, or in the cleaner)."""
    state = ProducerStateManager(tmp_path)
    for first in range(TRANSACTIONS):  # ended transactions waiting for the high watermark
        state.unreplicated[first] = (first, first)

    def fetches() -> None:  # the high watermark moves: passed transactions are forgotten
        for hw in range(0, TRANSACTIONS + 1, 100):
            state.first_unstable_offset(hw)

    def cleaner() -> None:  # the high watermark the cleaner read is old: nothing forgotten
        while state.unreplicated:
            state.first_unstable_offset(0)

    assert _run_together(fetches, cleaner) == []
    assert state.first_unstable_offset(TRANSACTIONS) is None


def test_retention_loses_no_deletion_to_the_pending_deletes_worker(tmp_path: Path) -> None:
    """Retention (``log-retention``) and the removal of due deletions (``delete-pending``)
    run in two workers. Retention added its segments to the pending list without the
    manager's lock: when the other worker replaced the list between retention reading it
    and appending to it, the segments went into the old list and their ``.deleted`` files
    stayed until the next start. Here the pending deletes run at that moment: when the
    manager reads the clock for the entry it adds."""
    manager: LogManager

    class Clock:
        def __init__(self) -> None:
            self.now = NOW
            self.armed = False

        def __call__(self) -> int:
            # the manager's own clock read (its entry's due time), not the log's
            if self.armed and sys._getframe(1).f_code.co_filename == manager_module.__file__:
                self.armed = False
                manager.delete_pending()  # as the delete-pending worker would, meanwhile
            return self.now

    clock = Clock()
    manager = LogManager([tmp_path / "d"], time_ms=clock)
    manager.startup()
    plog = manager.get_or_create_log(
        TopicPartition("t", 0), config(segment_bytes=300, retention_ms=1000,
                                       file_delete_delay_ms=5000))
    for i in range(12):
        plog.append_as_leader(make_batch(2, NOW, seed=i))
    assert len(plog.segments) > 2
    clock.now += 2000
    clock.armed = True
    assert manager.cleanup_logs() > 0
    assert not clock.armed
    assert list(plog.dir.glob("*.deleted")) != []
    clock.now += 5000
    manager.delete_pending()
    assert list(plog.dir.glob("*.deleted")) == []
    manager.shutdown()
