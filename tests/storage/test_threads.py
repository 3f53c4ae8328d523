"""Storage state touched from more than one thread (docs/architecture.md, "Threads"; issue
52): the event loop appends and reads, the cleaner's threads and the log manager's
periodic workers read and change the same logs."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from odradek.storage import files
from odradek.storage import manager as manager_module
from odradek.storage.manager import LogManager, TopicPartition
from odradek.storage.producer_state import ProducerStateManager
from odradek.storage.segment import LogSegment
from odradek.storage.txn_index import AbortedTxn, TxnIndex
from tests.storage._util import NOW, config, make_batch, open_log

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


class _WatchedLock:
    """A segment's path lock that tells when the thread named reader waits for it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waiting = threading.Event()

    def __enter__(self) -> bool:
        if threading.current_thread().name == "reader":
            self.waiting.set()
        return self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


@pytest.mark.parametrize("paused_after", [0, 1, 2, 3], ids=[
    "log-renamed", "index-renamed", "timeindex-renamed", "txnindex-renamed"])
def test_a_read_of_a_cold_segment_while_it_is_renamed_deleted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, paused_after: int) -> None:
    """Retention and the cleaner rename segments ``.deleted`` on their threads while a
    fetch on the loop may still read them (it took the segment list before). A cold
    segment reopens its files by path: between a file's rename and the segment learning
    its new name the open failed (FileNotFoundError, which takes the whole log dir
    offline), or the transaction index read as empty (aborted records served to
    read_committed consumers). Each rename is paused in turn while a reader goes."""
    plog = open_log(tmp_path, config(segment_bytes=400, index_interval_bytes=1))
    for i in range(8):
        plog.append_as_leader(make_batch(2, NOW, seed=i))
    assert len(plog.segments) > 1
    first = plog.segments[0]
    base, end, size = first.base_offset, first.next_offset, first.size
    plog.close()
    aborted = AbortedTxn(7, base, end - 1, base)
    TxnIndex(files.txn_index_file(plog.dir, base)).append(aborted)
    segment = LogSegment(plog.dir, base, 1, 10 * 1024 * 1024, new=False)  # cold, unmapped
    with open(segment.log_path, "rb") as f:
        expected = f.read()
    assert len(expected) == size

    watched = _WatchedLock()
    for holder in (segment, segment.offset_index, segment.time_index, segment.txn_index):
        holder.path_lock = watched
    renamed, go_on = threading.Event(), threading.Event()
    real_rename = Path.rename
    renames = 0

    def rename(self: Path, target: Path) -> Path:
        nonlocal renames
        done = real_rename(self, target)
        if threading.current_thread().name == "renamer":
            renames += 1
            if renames == paused_after + 1:
                renamed.set()
                assert go_on.wait(30), "the reader never went"
        return done

    monkeypatch.setattr(Path, "rename", rename)
    read: list[tuple[bytes, list[AbortedTxn]]] = []
    failures: list[BaseException] = []

    def reader() -> None:
        try:
            found = segment.read(base, 1 << 20)
            assert found is not None
            handle = segment.file_handle()
            read.append((os.pread(handle.fd, found[1], found[0].position),
                         list(segment.txn_index.entries)))
        except BaseException as exc:
            failures.append(exc)
        finally:
            watched.waiting.set()  # done (before the fix) or about to wait for the lock

    renamer = threading.Thread(target=segment.change_suffix, args=("", files.DELETED_SUFFIX),
                               name="renamer", daemon=True)
    renamer.start()
    assert renamed.wait(30)
    reading = threading.Thread(target=reader, name="reader", daemon=True)
    reading.start()
    assert watched.waiting.wait(30)  # the reader is done, or waits for the rename
    go_on.set()
    renamer.join(30)
    reading.join(30)
    assert not renamer.is_alive() and not reading.is_alive()
    assert failures == []
    assert read == [(expected, [aborted])]
    assert segment.log_path.name.endswith(files.DELETED_SUFFIX)


def test_a_cleaner_swap_after_the_topic_was_deleted_is_dropped(tmp_path: Path) -> None:
    """The loop deletes a topic (its dir renamed ``-delete``) while a cleaner thread is
    cleaning one of its logs. The swap that follows renamed and synced in the old dir:
    FileNotFoundError through the disk-error choke point took the whole log dir offline.
    A deleted log takes no swap (Kafka aborts the cleaning before it deletes)."""
    manager = LogManager([tmp_path / "d"])
    manager.startup()
    tp = TopicPartition("compacted", 0)
    plog = manager.get_or_create_log(tp, config(segment_bytes=300, cleanup_policy="compact"))
    for i in range(8):
        plog.append_as_leader(make_batch(2, NOW, seed=i))
    old = plog.segments[:1]
    manager._io_pool.submit(lambda: None).result(30)  # the rolled segments' flushes done
    # what the cleaner wrote, complete, before the deletion
    cleaned = LogSegment(plog.dir, old[0].base_offset, 1, 10 * 1024 * 1024,
                         suffix=files.CLEANED_SUFFIX, new=True)
    manager.delete_log(tp)
    assert plog.replace_segments(cleaned, old) is False
    assert manager.online_dirs == [tmp_path / "d"]
    manager.shutdown()


def test_a_topic_deleted_while_its_rolled_segment_is_flushed(tmp_path: Path) -> None:
    """The flush of a rolled segment runs on the log-io worker, outside the log's lock; a
    topic deleted while it runs (the loop renames the dir ``-delete``) had the flush fail
    in the dir that was gone, through the disk-error choke point: the whole log dir went
    offline. Here the deletion comes as the flush starts its fsyncs."""
    manager = LogManager([tmp_path / "d"])
    manager.startup()
    tp = TopicPartition("deleted", 0)
    plog = manager.get_or_create_log(tp, config(segment_bytes=300))
    flushes: list[Callable[[], None]] = []
    plog.schedule_io = flushes.append  # the worker's queue, run below by the test
    for i in range(4):
        plog.append_as_leader(make_batch(2, NOW, seed=i))
    assert flushes, "no segment rolled"
    rolled = plog.segments[0]
    real_flush = rolled.flush

    def flush_as_the_topic_goes() -> None:
        manager.delete_log(tp)
        real_flush()

    rolled.flush = flush_as_the_topic_goes  # type: ignore[method-assign]
    flushes[0]()
    assert manager.online_dirs == [tmp_path / "d"]
    manager.shutdown()
