"""The hot path's guard in Python calls: calls per request for HEAD and a base commit.

How it works: the same cases as bench/hot_path_instructions.py (one partition, one
connection, metrics and the event-loop watchdog off), but the broker runs under cProfile
(bench/_tools/profiled_broker.py) instead of callgrind. After a warm-up of 300 requests
the profiler is switched on, the counted requests are pipelined, and it is dumped; the
figure is the difference of a run of 2,500 and one of 500 requests, divided by 2,000, so
start-up and one-off work cancel out. It counts Python-level calls (functions and
builtins), not instructions: unlike callgrind's counts of the 64 KB Produce and the
Fetch, which follow how fast client and broker go (frames joined from more ``recv``
chunks, more turns of asyncio's ``sendfile`` loop) and so move on a loaded machine, the
calls of the handler's path do not depend on the load. With ``--top N`` the N functions
whose counts differ most between the trees are listed.

    .venv/bin/python bench/hot_path_calls.py --base fadb458
    .venv/bin/python bench/hot_path_calls.py --base main --case "produce 1 record" --top 20
"""

from __future__ import annotations

import argparse
import os
import pstats
import re
import signal
import sys
import time
from pathlib import Path

from hot_path_instructions import CASES, QUIET
from metrics_cost import ROOT, FetchShape, log_dirs_root, run_round, start, warm_up
from peers import odradek_at

WARM_UP = 300
COUNTED = (500, 2500)
WRAPPER = ROOT / "bench" / "_tools" / "profiled_broker.py"
Key = tuple[str, int, str]
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def profile(tree: Path, case: tuple[str, int, bool, int, bool | FetchShape], requests: int,
            out: Path) -> dict[Key, int]:
    """Calls of each function over ``requests`` counted requests of one broker."""
    done = Path(f"{out}.done")
    done.unlink(missing_ok=True)
    os.environ["PROFILE_OUT"] = str(out)
    partitions = case[4].partitions if isinstance(case[4], FetchShape) else 1
    broker = start(f"{tree.name} profiled", tree, False, log_dirs_root(),
                   (sys.executable, str(WRAPPER)), overrides=QUIET, partitions=partitions)
    try:
        blob = warm_up(broker, case, min(WARM_UP, requests), requests)
        os.kill(broker.proc.pid, signal.SIGUSR1)
        run_round(broker, blob, requests)
        os.kill(broker.proc.pid, signal.SIGUSR2)
        deadline = time.monotonic() + 120
        while not done.exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"{tree.name}: no profile written")
            time.sleep(0.1)
    finally:
        broker.stop()
    stats = pstats.Stats(str(out)).stats  # type: ignore[attr-defined]
    src = str(tree.resolve() / "src") + "/"
    # (a builtin's name carries its type's address, which differs between processes)
    return {(file.replace(src, ""), line, _ADDRESS.sub("", name)): calls
            for (file, line, name), (_cc, calls, *_rest) in stats.items()}


def per_request(tree: Path, case: tuple[str, int, bool, int, bool | FetchShape],
                scratch: Path) -> dict[Key, float]:
    # answers of several MiB (the peers.py-shaped Fetch cases): a tenth as many requests
    counted = (COUNTED if not isinstance(case[4], FetchShape) or case[4].batches == 1
               else tuple(n // 10 for n in COUNTED))
    low, high = (profile(tree, case, n, scratch / f"{tree.name}-{n}.prof") for n in counted)
    span = counted[1] - counted[0]
    return {key: (calls - low.get(key, 0)) / span for key, calls in high.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--base", required=True, help="the git commit to compare against")
    parser.add_argument("--case", action="append", choices=list(CASES),
                        help="only these cases (default: all)")
    parser.add_argument("--top", type=int, default=0, help="list the N largest differences")
    args = parser.parse_args()
    os.environ["PYTHONHASHSEED"] = "0"
    base_src = odradek_at(args.base).source
    assert base_src is not None
    scratch = ROOT / ".bench-tmp" / "hot-path-calls"
    scratch.mkdir(parents=True, exist_ok=True)
    print(f"Command: `.venv/bin/python bench/hot_path_calls.py {' '.join(sys.argv[1:])}`")
    for name in args.case or list(CASES):
        head, base = (per_request(tree, CASES[name], scratch)
                      for tree in (ROOT, base_src.parent))
        h, b = sum(v for v in head.values() if v > 0), sum(v for v in base.values() if v > 0)
        print(f"\n{name}: {h:,.1f} calls a request against {b:,.1f} ({h / b:.3f})")
        if args.top:
            # functions are matched by file and name (line numbers move between trees)
            def by_name(calls: dict[Key, float]) -> dict[tuple[str, str], float]:
                out: dict[tuple[str, str], float] = {}
                for (file, _line, fn), v in calls.items():
                    out[(file, fn)] = out.get((file, fn), 0.0) + v
                return out

            hn, bn = by_name(head), by_name(base)
            diffs = sorted(((hn.get(k, 0.0) - bn.get(k, 0.0), k) for k in {*hn, *bn}),
                           key=lambda d: -abs(d[0]))
            for diff, (file, fn) in diffs[:args.top]:
                print(f"  {diff:+7.2f}  {fn}  {file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
