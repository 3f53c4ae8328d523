"""File names, suffixes and atomic writes in one place (Kafka's LogFileUtils).

Segment files are named by their base offset as 20 zero-padded digits, so that a directory
listing sorts them. Suffixes mark a file's role and life cycle: ``.log``, ``.index``,
``.timeindex``, ``.txnindex`` (aborted transactions), ``.snapshot`` (producer state),
``.cleaned`` and ``.swap`` (the cleaner's crash-safe swap), ``.deleted`` (renamed before
asynchronous deletion).

Small metadata files (checkpoints) are written atomically: write a temporary file, fsync
it, rename it over the old one, fsync the directory.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
DELETE_DIR_SUFFIX = "-delete"
TMP_SUFFIX = ".tmp"

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
META_PROPERTIES = "meta.properties"


#: The longest file name the file systems Kafka runs on take (ext4, xfs: 255 bytes).
MAX_FILE_NAME = 255


def delete_dir_name(topic: str, partition: int, unique_id: str) -> str:
    """``<topic>-<partition>.<unique_id>-delete``: the name a partition dir is renamed to
    before it is removed. A topic name may be 249 characters, which with the suffix
    exceeds a file name's 255 bytes, so the topic is cut to fit, as Kafka's
    ``LocalLog.logDeleteDirName`` does (topic names are ASCII: characters are bytes)."""
    suffix = f"-{partition}.{unique_id}{DELETE_DIR_SUFFIX}"
    return topic[: max(MAX_FILE_NAME - len(suffix), 0)] + suffix


def filename_prefix(offset: int) -> str:
    """The 20-digit zero-padded base offset that names a segment's files."""
    return f"{offset:020d}"


def log_file(dir: Path, offset: int, suffix: str = "") -> Path:
    return dir / (filename_prefix(offset) + LOG_SUFFIX + suffix)


def index_file(dir: Path, offset: int, suffix: str = "") -> Path:
    return dir / (filename_prefix(offset) + INDEX_SUFFIX + suffix)


def time_index_file(dir: Path, offset: int, suffix: str = "") -> Path:
    return dir / (filename_prefix(offset) + TIME_INDEX_SUFFIX + suffix)


def txn_index_file(dir: Path, offset: int, suffix: str = "") -> Path:
    return dir / (filename_prefix(offset) + TXN_INDEX_SUFFIX + suffix)


def offset_from_filename(name: str) -> int:
    return int(name.split(".", 1)[0])


def fsync_dir(dir: Path) -> None:
    fd = os.open(dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a crash leaves either the old or the new file."""
    # A name of its own per write: two writers of one file (threads) never share a tmp.
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}{TMP_SUFFIX}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except OSError as exc:  # a full disk: no tmp file left behind, and the error names it
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)
