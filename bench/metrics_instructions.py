"""What metrics (``metrics.listener``) cost the broker per request, in instructions.

How it works: the broker runs under valgrind's callgrind, which counts every instruction
it executes (all threads) and no other event: unlike time on this shared virtual
machine, where the same broker's cost per request moved by ±10 % between rounds of one
sitting (bench/metrics_cost.py), the count repeats to 0.1 % from run to run, so a change
of a few hundred instructions a request shows. A broker with topic ``t`` gets 300
requests to warm up (not instrumented: ``--instr-atstart=no``, which keeps the start
fast on a loaded machine), then callgrind's instrumentation is switched on and its
counters zeroed (``callgrind_control -i on``, ``-z``),
``--requests`` pre-encoded requests (bench/metrics_cost.py's cases) are pipelined to it,
and the counters are dumped (``-d``): the dump's total divided by the requests is the
figure. The default of 4,096 requests includes exactly one fold of the request timings
(``FOLD_REQUESTS``), so the fold's share per request is in the figure as in a long run.

Instructions are not time: callgrind counts user space only (not the kernel's copy of
a 38 KB request into the page cache), and the extra instructions are the interpreter's,
which run at about the rate of a one-record request's (bench/README.md, "Metrics",
turns counts into µs). ``PYTHONHASHSEED=0`` keeps dict layouts the same from run to
run. What depends on the clock is not fixed per request: under callgrind a request
takes ~50 times as long, so timers (the retention check, the metrics thread's poll)
count more per request than in a real run, and more again when the machine is busy;
and Fetch's 1 MB answers meet a client that reads at its own pace, so the writer's
drain and retry loop runs a varying number of times (its figures moved by 80,000
instructions a request between runs). Run it on a machine left alone, and compare
the Produce cases.

Needs valgrind (Debian's ``valgrind`` package). A run of one case takes 1-3 minutes per
broker (callgrind runs the broker about 50 times slower).

    .venv/bin/python bench/metrics_instructions.py --tree .bench-tmp/odradek-<sha>
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from metrics_cost import CASES, ROOT, FetchShape, log_dirs_root, run_round, start, warm_up

WARM_UP = 300
_SUMMARY = re.compile(rb"^summary: (\d+)$", re.MULTILINE)


def count(tree: Path, metrics: bool, case: tuple[str, int, bool, int, bool | FetchShape],
          requests: int,
          data_root: Path, out: Path, overrides: tuple[str, ...] = ()) -> float:
    """Instructions per request of one broker of ``tree``, metrics on or off (and
    ``overrides``, ``key=value`` configs)."""
    out.mkdir()
    # Not instrumented until the warm-up is over (``-i on`` below): the broker's start
    # and warm-up run several times faster, which on a loaded machine is the difference
    # between minutes and passing the start-up deadline; what is counted is the same.
    wrapper = ("valgrind", "--quiet", "--tool=callgrind", "--dump-instr=no",
               "--instr-atstart=no", f"--callgrind-out-file={out}/callgrind.%p")
    partitions = case[4].partitions if isinstance(case[4], FetchShape) else 1
    broker = start(f"{tree.name} metrics {'on' if metrics else 'off'}", tree, metrics,
                   data_root, wrapper, startup_s=600, overrides=overrides,
                   partitions=partitions)
    try:
        broker.sock.settimeout(600)
        blob = warm_up(broker, case, min(WARM_UP, requests), requests)
        control = ["callgrind_control"]
        for command in ("-i", "on"), ("-z",):
            subprocess.run([*control, *command, str(broker.proc.pid)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        run_round(broker, blob, requests)
        subprocess.run([*control, "-d", str(broker.proc.pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    finally:
        broker.stop()
    dumps = sorted(out.glob("callgrind.*.1"))  # the dump after the zeroing
    if len(dumps) != 1:
        raise SystemExit(f"expected one callgrind dump in {out}, found {dumps}")
    found = _SUMMARY.search(dumps[0].read_bytes())
    if found is None:
        raise SystemExit(f"no summary line in {dumps[0]}")
    return int(found.group(1)) / requests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--tree", type=Path, help="another checkout, measured beside")
    parser.add_argument("--requests", type=int, default=4096, help="counted a broker")
    parser.add_argument("--case", action="append", choices=[c[0] for c in CASES],
                        help="only these cases (default: 1 record, 650 records lz4)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind: apt-get install valgrind")
    os.environ["PYTHONHASHSEED"] = "0"
    data_root = log_dirs_root()
    trees = [ROOT] + ([args.tree] if args.tree else [])
    cases = [c for c in CASES
             if c[0] in (args.case or ["1 record", "650 records lz4"])]
    command = [".venv/bin/python bench/metrics_instructions.py", *sys.argv[1:]]
    print(f"Command: `{' '.join(command)}`")
    print()
    print("| case | tree | off instructions/request | on | on - off | on / off |")
    print("|---|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="callgrind-") as scratch:
        for case in cases:
            for tree in trees:
                off, on = (count(tree, metrics, case, args.requests, data_root,
                                 Path(scratch) / f"{case[0]}-{tree.name}-{metrics}")
                           for metrics in (False, True))
                print(f"| {case[0]} | {tree.name} | {off:,.0f} | {on:,.0f} | {on - off:+,.0f} "
                      f"| {on / off:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
