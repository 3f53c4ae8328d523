"""``odradek groups export-offsets`` / ``import-offsets``: ExportZkOffsets and
ImportZkOffsets of Kafka 0.8, for the committed offsets of today's groups.

How it works: ``export-offsets`` reads a group's committed offsets (OffsetFetch from its
coordinator) and writes one ``topic,partition,offset`` line per partition, sorted: the CSV
that ``kafka-consumer-groups.sh --reset-offsets --from-file`` reads (and that its
``--export`` writes). ``import-offsets`` reads such a file, checks every line (three
fields, a topic that exists, a partition it has, an offset >= 0), clamps each offset to
the partition's earliest..latest range as reset-offsets does, prints the plan (current and
new offset per partition) and commits it (OffsetCommit with generation -1, as an admin
client does) only with ``--execute``, and only while the group has no active members.
A dry run is the default. The verbs are registered on ``odradek groups`` by groups.py.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from odradek.cli._common import EXIT_USAGE, print_table, run_with_admin
from odradek.text import plural

if TYPE_CHECKING:
    from odradek.client.routing import ClusterAdmin

EARLIEST = -2
LATEST = -1
INACTIVE_STATES = frozenset({"Empty", "Dead"})


class OffsetsFileError(ValueError):
    """A line of an offsets file that is not ``topic,partition,offset``."""


def add_verbs(verbs: Any, add_bootstrap: Callable[[argparse.ArgumentParser], None]) -> None:
    export = verbs.add_parser("export-offsets",
                              help="write a group's committed offsets as topic,partition,offset")
    export.add_argument("--group", required=True, help="the group to export")
    export.add_argument("--output", "-o", type=Path, help="file to write (default: stdout)")
    export.set_defaults(func=_export)
    imp = verbs.add_parser("import-offsets",
                           help="commit offsets from a topic,partition,offset file "
                                "(dry run unless --execute; only while the group is empty)")
    imp.add_argument("--group", required=True, help="the group to commit into")
    imp.add_argument("--from-file", required=True, type=Path,
                     help="CSV as written by export-offsets or kafka-consumer-groups.sh "
                          "--reset-offsets --export")
    mode = imp.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the plan (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the offsets")
    imp.set_defaults(func=_import)
    for parser in (export, imp):
        add_bootstrap(parser)


def format_offsets(offsets: dict[tuple[str, int], int]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for (topic, partition), offset in sorted(offsets.items()):
        writer.writerow([topic, partition, offset])
    return out.getvalue()


def parse_offsets(text: str, source: str) -> dict[tuple[str, int], int]:
    """``{(topic, partition): offset}`` from CSV lines; blank lines are skipped."""
    out: dict[tuple[str, int], int] = {}
    for lineno, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != 3:
            raise OffsetsFileError(f"{source}:{lineno}: expected topic,partition,offset, "
                                   f"got {','.join(row)!r}")
        topic, partition_text, offset_text = (cell.strip() for cell in row)
        try:
            partition, offset = int(partition_text), int(offset_text)
        except ValueError:
            raise OffsetsFileError(f"{source}:{lineno}: partition and offset must be "
                                   f"integers, got {','.join(row)!r}") from None
        if not topic or partition < 0 or offset < 0:
            raise OffsetsFileError(f"{source}:{lineno}: a topic, a partition >= 0 and an "
                                   f"offset >= 0 are needed, got {','.join(row)!r}")
        if (topic, partition) in out:
            raise OffsetsFileError(f"{source}:{lineno}: {topic}-{partition} appears twice")
        out[(topic, partition)] = offset
    return out


def _export(args: argparse.Namespace) -> int:
    async def body(admin: ClusterAdmin) -> int:
        fetched = await admin.on_coordinator(args.group,
                                             lambda c: c.fetch_offsets(args.group))
        offsets = {(c.topic, c.partition): c.offset for c in fetched if c.offset >= 0}
        if not offsets:
            print(f"odradek: group {args.group} has no committed offsets", file=sys.stderr)
            return 1
        text = format_offsets(offsets)
        if args.output is None:
            sys.stdout.write(text)
        else:
            try:
                args.output.write_text(text)
            except OSError as exc:
                print(f"odradek: cannot write {args.output}: {exc}", file=sys.stderr)
                return 1
            print(f"Exported {len(offsets)} offsets of group {args.group} to {args.output}.",
                  file=sys.stderr)
        return 0

    return run_with_admin(args, body)


def _import(args: argparse.Namespace) -> int:
    from odradek.client.connection import ClientError

    try:
        wanted = parse_offsets(args.from_file.read_text(), str(args.from_file))
    except OSError as exc:  # the file named on the command line: a usage error
        print(f"odradek: cannot read {args.from_file}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OffsetsFileError as exc:
        print(f"odradek: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not wanted:
        print(f"odradek: {args.from_file} has no offsets", file=sys.stderr)
        return EXIT_USAGE

    async def body(admin: ClusterAdmin) -> int:
        description = await admin.on_coordinator(args.group,
                                                 lambda c: c.describe_group(args.group))
        if args.execute and description.state not in INACTIVE_STATES:
            print(f"odradek: group {args.group} is {description.state} with "
                  f"{plural(len(description.members), 'member')}; stop its consumers before "
                  "importing "
                  "offsets", file=sys.stderr)
            return 1
        topics = sorted({t for t, _ in wanted})
        partitions: dict[str, set[int]] = {}
        for described in await admin.metadata(topics):
            if described.error == "none":
                partitions[described.name] = {p.partition for p in described.partitions}
        for topic, partition in sorted(wanted):
            if topic not in partitions:
                raise ClientError(f"topic {topic} does not exist")
            if partition not in partitions[topic]:
                raise ClientError(f"topic {topic} has no partition {partition}")
        committed = {(c.topic, c.partition): c.offset for c in await admin.on_coordinator(
            args.group, lambda c: c.fetch_offsets(args.group))}
        plan: dict[tuple[str, int], int] = {}
        rows: list[list[Any]] = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET",
                                  "NOTE"]]
        for (topic, partition), offset in sorted(wanted.items()):
            earliest, _ = await admin.list_offset(topic, partition, EARLIEST)
            latest, _ = await admin.list_offset(topic, partition, LATEST)
            new = min(max(offset, earliest), latest)
            plan[(topic, partition)] = new
            current = committed.get((topic, partition), -1)
            note = "" if new == offset else f"clamped from {offset} to {earliest}..{latest}"
            rows.append([args.group, topic, partition, "-" if current < 0 else current, new,
                         note])
        print_table(rows)
        if not args.execute:
            print("(dry run: nothing committed; add --execute to apply)")
            return 0
        await admin.on_coordinator(args.group, lambda c: c.commit_offsets(args.group, plan))
        print(f"Committed {len(plan)} offsets for group {args.group}.")
        return 0

    return run_with_admin(args, body)
