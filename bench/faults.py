"""The long fault run of issue 15: hundreds of faults against three brokers on a real
ZooKeeper while an idempotent acks=all producer and a consumer run (the harness of
``tests/interop/_faults.py``; the short run is ``tests/interop/test_faults.py``).

Usage: ``.venv/bin/python bench/faults.py [--faults 200] [--seed 1]``; ``--cycle KIND...``
injects the given kinds in turn instead of at random (to reproduce a sequence).

Each round picks one fault at random (kill -9 of a partition leader, kill -9 of the
controller, SIGSTOP of a leader past its session timeout, a rolling restart of every
broker, a leader cut off the network by a proxy, with or without its ZooKeeper
connection, SIGTERM of a leader under load, kill -9 of every broker at once, a follower
paused past its session, ZooKeeper paused for less and for more than the session
timeout), waits until every partition acknowledges again (timed), then heals the cluster
(every broker up, every partition fully in sync). At the end everything is read back and
checked (lost, moved, duplicated, retracted, diverged replicas). Prints one JSON document.

SIGTERM or SIGINT stops the run early: the fault in progress gives up at its next wait
(not counted), the cluster is healed, the producer finishes, everything is verified as at
the normal end and the summary covers the faults done. Handlers are installed for both
signals, since a process started in the background from a non-interactive shell inherits
SIGINT ignored (Python then installs no KeyboardInterrupt handler).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.interop import _cluster
from tests.interop._broker import BrokerStartError
from tests.interop._cluster import running_cluster
from tests.interop._faults import FaultRun, Interrupted


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--faults", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rate", type=float, default=300.0,
                        help="records per second (0: as fast as the producer goes)")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="keep ZooKeeper's and the brokers' data and logs here")
    parser.add_argument("--cycle", nargs="+", metavar="KIND", default=None,
                        help="inject these fault kinds in this order, over and over, "
                             "instead of at random (to reproduce a sequence)")
    parser.add_argument("--startup-timeout", type=float, default=120.0,
                        help="seconds a restarted broker may take to start (log recovery "
                             "after kill -9 grows with the run; a loaded machine is slower)")
    args = parser.parse_args()
    _cluster.STARTUP_TIMEOUT = args.startup_timeout  # type: ignore[attr-defined]
    random.seed(args.seed)
    started = time.monotonic()
    stopped_by: list[str] = []
    runs: list[FaultRun] = []

    def stop(signum: int, _frame: object) -> None:
        # no print(): the main thread may be inside a write to stderr
        name = signal.Signals(signum).name
        if not stopped_by:
            os.write(2, f"{name}: stopping: healing, then verifying\n".encode())
        stopped_by.append(name)
        for run in runs:
            run.interrupt()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    failure: str | None = None
    overrides = {"offsets.topic.replication.factor": 3, "replica.lag.time.max.ms": 5000}
    with contextlib.ExitStack() as stack:
        root = args.data_dir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        root.mkdir(parents=True, exist_ok=True)
        c = stack.enter_context(running_cluster(root, 3, overrides, proxied=True))
        run = FaultRun(c, f"faults-{uuid.uuid4().hex[:8]}", partitions=3,
                       rate_per_s=args.rate)
        runs.append(run)
        if stopped_by:
            run.interrupt()
        run.create_topic()
        run.start()
        kinds = {
            "kill -9 of a leader": run.kill9_leader,
            "kill -9 of the controller": run.kill9_controller,
            "SIGSTOP of a leader past its session": run.pause_past_session,
            "rolling restart": run.rolling_restart,
            "a leader cut off from the others": run.isolate_leader,
            "a leader cut off from the others and ZooKeeper":
                lambda: run.isolate_leader(zookeeper=True),
            "SIGTERM of a leader under load": run.sigterm_leader,
            "kill -9 of every broker at once": run.kill9_all,
            "SIGSTOP of a follower past its session": run.pause_follower_past_session,
            "SIGSTOP of ZooKeeper within the session": lambda: run.pause_zookeeper(False),
            "SIGSTOP of ZooKeeper past the session": lambda: run.pause_zookeeper(True),
        }
        weights = [6, 3, 2, 1, 2, 2, 3, 1, 2, 1, 1]
        unknown = sorted(set(args.cycle or ()) - set(kinds))
        if unknown:
            raise SystemExit(f"unknown fault kinds {unknown}; the kinds: {sorted(kinds)}")
        try:
            for i in range(args.faults):
                if run.interrupted:
                    break
                name = (args.cycle[i % len(args.cycle)] if args.cycle
                        else random.choices(list(kinds), weights)[0])
                try:
                    took = run.inject(name, kinds[name])
                    run.heal()
                except Interrupted:
                    print(f"{i + 1}/{args.faults} {name}: interrupted (not counted)",
                          file=sys.stderr)
                    run.heal()
                    break
                except (AssertionError, BrokerStartError) as exc:
                    # a wait ran out or a broker did not start: keep what the run found,
                    # heal and verify anyway
                    failure = f"{i + 1}/{args.faults} {name}: {exc}"
                    print(failure, file=sys.stderr, flush=True)
                    with contextlib.suppress(AssertionError, BrokerStartError):
                        run.heal()
                    break
                print(f"{i + 1}/{args.faults} {name}: {took:.1f} s", file=sys.stderr,
                      flush=True)
        finally:
            run.finish()
        verify_error: str | None = None
        try:
            report = run.verify()
        except Exception as exc:  # e.g. a partition without a leader after a failed heal
            verify_error = repr(exc)
            report = run.report
            report.acknowledged, report.failed_sends = run.acks(), run.failed
    by_kind: dict[str, list[float]] = collections.defaultdict(list)
    for name, took in report.faults:
        by_kind[name].append(took)
    print(json.dumps({
        "faults": len(report.faults), "acknowledged": report.acknowledged,
        "failed_sends": report.failed_sends, "lost": report.lost, "moved": report.moved,
        "duplicated": report.duplicated, "retracted": report.retracted,
        "diverged": report.diverged, "duplicates": report.duplicates,
        "client_errors": run.errors, "notes": run.notes, "faults_planned": args.faults,
        "stopped_by": stopped_by[0] if stopped_by else None, "harness_failure": failure,
        "verify_error": verify_error,
        "seconds_to_next_ack": {
            k: {"count": len(v), "median": round(sorted(v)[len(v) // 2], 2),
                "max": round(max(v), 2)} for k, v in sorted(by_kind.items())
        },
        "wall_s": round(time.monotonic() - started),
    }, indent=2), flush=True)
    if not report.ok or run.errors or failure or verify_error:
        sys.exit(1)


if __name__ == "__main__":
    main()
