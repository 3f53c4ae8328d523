"""The hot path's guard: instructions per request for HEAD and a base commit, side by side.

How it works: each tree's broker (``odradek serve`` with that tree's ``src/`` first on
the path, metrics off) runs under valgrind's callgrind, which counts every instruction
the process executes. After a warm-up of 300 requests the counters are zeroed, the
counted requests are pipelined over one connection, and the counters are dumped: the
dump's total divided by the requests is the figure (bench/metrics_instructions.py has
the details and the caveats). Unlike time on this shared two-core machine, the count
repeats to about 0.1 % for the Produce cases, so a change of a few hundred instructions a
request shows even while other work runs beside it. The Fetch case depends more on the
client's pace (the writer's drain loop), so read it to about 1 %.

Cases (one partition, one connection):
- ``produce 1 record``: a one-record Produce (acks=1), the per-request overhead;
- ``produce 64 KB``: 610 uncompressed 100-byte records, the cost per byte of validation
  and append;
- ``fetch 1 MB``: a 1 MiB Fetch (v12) of the same 9,000-record batch, the read path;
- ``fetch 8 MiB``: bench/peers.py's consume p=1 cell (``max.partition.fetch.bytes`` 8 MiB,
  ``fetch.max.bytes`` 64 MiB) against a partition of ten such batches;
- ``fetch 8 partitions``: its consume p=8 cell, the same limits over eight such
  partitions; ``fetch 100 partitions``: its scale-consume cell at 100 partitions (two
  batches each), where most partitions named are answered empty. How much an answer
  holds is the broker's to choose (its ``fetch.max.bytes`` and answer cap), so the
  trees' answers may differ in size: the Fetch cases also print instructions per MiB
  answered, the figure that compares when they do (and fewer counted requests,
  ``--requests`` scaled down by the answer's size).

``--base REF`` is any git commit; its tree is checked out once with ``git worktree``
under ``.bench-tmp`` (as bench/peers.py's ``odradek@REF``). Run it for every change to
the produce or fetch path, before committing:

    .venv/bin/python bench/hot_path_instructions.py --base main
    .venv/bin/python bench/hot_path_instructions.py --base fadb458 --case "produce 1 record"

Needs valgrind (Debian's ``valgrind``); each case takes 1-3 minutes per tree.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from metrics_cost import ROOT, FetchShape, log_dirs_root, response_bytes, start, warm_up
from metrics_instructions import count
from peers import odradek_at

# The event-loop watchdog off: under callgrind a turn of the loop takes ~50 times as long
# and passes its stall threshold, and the stack dumps that follow are no request's cost.
# (A tree that predates the key reports it as unknown and starts.)
QUIET = ("event.loop.stall.threshold.ms=0",)

# bench/peers.py's consumer limits (CONSUMER_X)
PEERS_FETCH = {"batches": 10, "partition_max_bytes": 8 << 20, "max_bytes": 64 << 20}
CASES: dict[str, tuple[str, int, bool, int, bool | FetchShape]] = {
    # name -> metrics_cost's case shape: (name, records, lz4, unused, fetch)
    "produce 1 record": ("produce 1 record", 1, False, 0, False),
    "produce 64 KB": ("produce 64 KB", 610, False, 0, False),
    "fetch 1 MB": ("fetch 1 MB", 9_000, False, 0, True),
    "fetch 8 MiB": ("fetch 8 MiB", 9_000, False, 0, FetchShape(1, **PEERS_FETCH)),
    "fetch 8 partitions": ("fetch 8 partitions", 9_000, False, 0,
                           FetchShape(8, **PEERS_FETCH)),
    "fetch 100 partitions": ("fetch 100 partitions", 9_000, False, 0,
                             FetchShape(100, **{**PEERS_FETCH, "batches": 2})),
}
# Counted requests of a case whose answers are larger than 1 MiB: about 4 GiB answered.
ANSWERED_BYTES = 4 << 30


def answer_size(tree: Path, case: tuple[str, int, bool, int, bool | FetchShape],
                data_root: Path) -> int:
    """The bytes of one answer to a Fetch case from a broker of ``tree`` (not under
    callgrind)."""
    fetch = case[4]
    partitions = fetch.partitions if isinstance(fetch, FetchShape) else 1
    broker = start(f"{tree.name} answer size", tree, False, data_root, overrides=QUIET,
                   partitions=partitions)
    try:
        warm_up(broker, case, 1, 1)
        return response_bytes(broker, case)
    finally:
        broker.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--base", required=True, help="the git commit to compare against")
    parser.add_argument("--requests", type=int, default=4096, help="counted a broker")
    parser.add_argument("--case", action="append", choices=list(CASES),
                        help="only these cases (default: all)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind: apt-get install valgrind")
    os.environ["PYTHONHASHSEED"] = "0"
    base_src = odradek_at(args.base).source
    assert base_src is not None
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
                          check=True, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "src"],
                           check=True, capture_output=True, text=True).stdout.strip()
    trees = [(f"HEAD {head}{' + changes' if dirty else ''}", ROOT),
             (f"base {args.base} ({base_src.parent.name.removeprefix('odradek-')})",
              base_src.parent)]
    data_root = log_dirs_root()
    print(f"Command: `.venv/bin/python bench/hot_path_instructions.py {' '.join(sys.argv[1:])}`"
          f" ({args.requests:,} requests counted a broker)")
    print()
    print(f"| case | {trees[0][0]} | {trees[1][0]} | HEAD - base | HEAD / base |")
    print("|---|---:|---:|---:|---:|")
    per_mib: list[str] = []
    with tempfile.TemporaryDirectory(prefix="callgrind-") as scratch:
        for name in args.case or list(CASES):
            case = CASES[name]
            sizes = [answer_size(tree, case, data_root) if case[4] else 0
                     for _label, tree in trees]
            requests = args.requests
            if max(sizes) > 2 << 20:
                requests = max(64, min(requests, ANSWERED_BYTES // max(sizes)))
            figures = [count(tree, False, case, requests, data_root,
                             Path(scratch) / f"{name}-{i}".replace(" ", "-"), QUIET)
                       for i, (_label, tree) in enumerate(trees)]
            head_n, base_n = figures
            print(f"| {name} | {head_n:,.0f} | {base_n:,.0f} | {head_n - base_n:+,.0f} "
                  f"| {head_n / base_n:.3f} |", flush=True)
            if case[4]:
                head_m, base_m = (n / (size / (1 << 20))
                                  for n, size in zip(figures, sizes, strict=True))
                per_mib.append(f"| {name} ({requests:,} requests) | {sizes[0]:,} B: "
                               f"{head_m:,.0f} | {sizes[1]:,} B: {base_m:,.0f} "
                               f"| {head_m / base_m:.3f} |")
    if per_mib:
        print()
        print(f"| Fetch case | {trees[0][0]}: answer, instructions a MiB | "
              f"{trees[1][0]}: answer, instructions a MiB | HEAD / base |")
        print("|---|---:|---:|---:|")
        print("\n".join(per_mib))
    return 0


if __name__ == "__main__":
    sys.exit(main())
