"""``odradek dump-log``: print and check segment files (Kafka's DumpLogSegments, same output).

How it works:
- ``.log``: batches are streamed one at a time (a ``pread`` of the 61-byte header, then one
  of the whole batch), never the whole file. Each batch is checked (magic 2, CRC32C, length,
  record count) and printed as one line in Kafka's format; ``--deep-iteration`` also decodes
  and prints every record, ``--print-data-log`` (which implies it) adds keys and values;
  ``--offsets-decoder`` (which implies both) prints the keys and values of
  ``__consumer_offsets`` decoded, as Kafka's (offset commits, classic groups and KIP-848's
  consumer group records: :mod:`odradek.cli._offsets_decoder`). A
  length that runs past the end of the file (a torn write) or is too small to be a batch
  ends the walk: "Found N invalid bytes at the end of <file>".
- Entries of message formats v0/v1 (magic 0/1, segments left by a Kafka before 0.11) are
  printed one per line as the DumpLogSegments of those Kafkas did:
  ``offset: O position: P isvalid: true payloadsize: N magic: 1 compresscodec:
  NoCompressionCodec crc: C`` (and ``keysize``, ``key``, ``payload``); a wrapper message is
  one line, and ``--deep-iteration`` prints the messages inside it instead.
- ``.index``: ``offset: X position: Y`` per entry, each checked against the ``.log`` next
  to it (the batch starting at that position must end at that offset; offsets and
  positions increase).
- ``.timeindex``: ``timestamp: T offset: O`` per entry, checked against the ``.log``: the
  batch holding that offset has that max timestamp; timestamps increase.

- ``.txnindex``: ``version: V producerId: P firstOffset: F lastOffset: L lastStableOffset:
  S`` per aborted transaction (Kafka's ``dumpTxnIndex``); a file that is not a whole number
  of 34-byte entries, or holds an entry of an unknown version, is reported corrupt.

Both offset index kinds stop at the first all-zero entry after the first one (the preallocated
tail of an active segment's index). ``--index-sanity-check`` and ``--verify-index-only``
check an index without printing its entries.

Exit status: 0 when everything checked is valid, 1 when any corruption was found, 2 on a
usage error (bad arguments, missing file).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

# The segment files are read by odradek.cli._segment_dump, imported where the command runs:
# every ``odradek`` command builds this sub-command's parser (tests/cli/test_main.py)

EXIT_OK = 0
EXIT_CORRUPT = 1
EXIT_USAGE = 2

DESCRIPTION = (
    "Print the contents of log segment files (.log, .index, .timeindex, .txnindex) and "
    "check them."
)
EPILOG = (
    "Exit status: 0 when every file checked is valid, 1 when any corruption was found "
    "(an invalid or torn batch, offsets going backwards, an index entry that does not match "
    "the log), 2 on a usage error (bad arguments, a missing file)."
)


def _non_negative(value: str) -> int:
    n = int(value)
    if n < 0:
        raise argparse.ArgumentTypeError("must be at least 0")
    return n


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--files", nargs="+", required=True, metavar="FILE", type=Path,
        help="segment files to dump: .log, .index, .timeindex, .txnindex (also with "
        ".deleted, .cleaned or .swap)",
    )
    parser.add_argument(
        "--deep-iteration", action="store_true",
        help="decode and print every record, not only batch headers",
    )
    parser.add_argument(
        "--print-data-log", action="store_true",
        help="print record keys and values (implies --deep-iteration)",
    )
    parser.add_argument(
        "--offsets-decoder", action="store_true",
        help="decode the records as those of __consumer_offsets (offset commits, classic and "
        "consumer groups), in Kafka's JSON; implies --print-data-log",
    )
    parser.add_argument(
        "--index-sanity-check", action="store_true",
        help="check index files against their log without printing entries",
    )
    parser.add_argument(
        "--verify-index-only", action="store_true",
        help="verify index entries against the log, printing only problems",
    )
    parser.add_argument(
        "--max-bytes", type=_non_negative, default=(1 << 31) - 1, metavar="N",
        help="read at most N bytes of each .log file (default %(default)s)",
    )
    parser.set_defaults(func=run)


def add_parser(subparsers: Any) -> None:
    """Register ``dump-log`` on an argparse subparsers object (``odradek dump-log``)."""
    parser = subparsers.add_parser(
        "dump-log", help="print and check log segment files",
        description=DESCRIPTION, epilog=EPILOG,
    )
    _configure(parser)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Dump every file of ``args.files``; 0 all valid, 1 corruption found, 2 usage error."""
    from odradek.cli._segment_dump import Options, dump_file

    stream = out if out is not None else sys.stdout
    options = Options(
        deep_iteration=bool(args.deep_iteration),
        print_data_log=bool(args.print_data_log),
        index_sanity_check=bool(args.index_sanity_check),
        verify_index_only=bool(args.verify_index_only),
        max_bytes=int(args.max_bytes),
        offsets_decoder=bool(getattr(args, "offsets_decoder", False)),
    )
    paths: list[Path] = [Path(p) for p in args.files]
    missing = [p for p in paths if not p.is_file()]
    if missing:
        for p in missing:
            sys.stderr.write(f"dump-log: {p}: no such file\n")
        return EXIT_USAGE
    corrupt = False
    try:
        for path in paths:
            if dump_file(path, options, stream):
                corrupt = True
        stream.flush()
    except BrokenPipeError:
        # Output piped into head(1): not an error of the files.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_CORRUPT if corrupt else EXIT_OK
    return EXIT_CORRUPT if corrupt else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="odradek dump-log", description=DESCRIPTION, epilog=EPILOG,
    )
    _configure(parser)
    args = parser.parse_args(argv)  # exits with 2 on a usage error
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
