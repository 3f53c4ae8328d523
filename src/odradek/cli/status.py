"""``odradek status [--data-dir DIR] [-b HOST:PORT]``: the broker's health as it last
wrote it to disk, and with ``-b`` whether it answers on the network.

The broker's log cleaner rewrites ``cleaner-status.json`` in its first log dir after every
pass or failure and every few seconds (see :mod:`odradek.storage.cleaner_manager`). This
command reads it without talking to the broker, prints threads, uncleanable partitions
and Kafka's cleaner metrics, and exits 0 when healthy, 1 when not (a dead cleaner thread
or an uncleanable partition), 2 when there is no status file. A file older than
``--stale-seconds`` is flagged: the broker may not be running. ``--data-dir`` defaults to
``./data``, the log dir of ``make serve``.

With ``--bootstrap-server``/``-b`` it first asks the broker over the Kafka protocol
(ApiVersions, then Metadata for the controller) and says whether it is up, or why not
(refused, not a Kafka broker, ...); a broker that does not answer makes the exit status 1.
``--command-config client.properties`` gives the client security settings (TLS, SASL) of
a secured listener, as the other verbs take them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from odradek.cli._common import security_of

if TYPE_CHECKING:
    from odradek.client.security import ClientSecurity


def find_status(data_dir: Path) -> Path | None:
    from odradek.storage.cleaner_manager import STATUS_FILE

    direct = data_dir / STATUS_FILE
    if direct.exists():
        return direct
    found = sorted(data_dir.glob(f"*/{STATUS_FILE}"))
    return found[0] if found else None


def render(status: dict[str, Any], out: TextIO, stale_seconds: float) -> None:
    age = time.time() - status.get("updated_ms", 0) / 1000
    state = "healthy" if status.get("healthy") else "UNHEALTHY"
    stale = " (STALE: is the broker running?)" if age > stale_seconds else ""
    out.write(f"log cleaner: {state}, enabled={status.get('enabled')}, "
              f"updated {age:.1f} s ago{stale}\n")
    for thread in status.get("threads", []):
        alive = "alive" if thread["alive"] else "DEAD"
        if status.get("stopped"):
            alive = "stopped (broker shut down)"
        out.write(f"  thread {thread['name']}: {alive}\n")
    out.write(f"  passes={status.get('passes')} failures={status.get('failures')} "
              f"thread_crashes={status.get('thread_crashes')}\n")
    for name, value in sorted(status.get("metrics", {}).items()):
        out.write(f"  {name}: {value}\n")
    for tp, info in sorted(status.get("uncleanable", {}).items()):
        out.write(f"  UNCLEANABLE {tp}: {info['failures']} failure(s): {info['reason']}\n")
    for tp, info in sorted(status.get("last_cleaned", {}).items()):
        out.write(f"  cleaned {tp}: up to offset {info['end_offset']}, "
                  f"{info['bytes_read']} -> {info['bytes_written']} bytes\n")


def broker_up(bootstrap: str, out: TextIO, security: ClientSecurity | None = None) -> bool:
    """One line: is the broker at ``bootstrap`` up (and which broker is the controller);
    ``security`` None is PLAINTEXT."""
    import asyncio

    from odradek.client.admin import Admin
    from odradek.client.connection import BrokerConnection, ClientError
    from odradek.client.security import PLAINTEXT

    if security is None:
        security = PLAINTEXT


    async def ask() -> str:
        conn = await BrokerConnection.open(bootstrap, client_id="odradek-status",
                                           security=security)
        try:
            controller, host, port = await Admin(conn).controller()
        except ClientError as exc:
            return f"up, but {exc}"
        finally:
            await conn.close()
        return f"up (controller: broker {controller} at {host}:{port})"

    try:
        answer = asyncio.run(ask())
    except (ClientError, OSError) as exc:
        out.write(f"broker {bootstrap}: DOWN ({exc})\n")
        return False
    out.write(f"broker {bootstrap}: {answer}\n")
    return True


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    # the cleaner manager loads the storage layer: imported where the command runs, since
    # every odradek command builds this parser (tests/cli/test_main.py)
    from odradek.storage.cleaner_manager import STATUS_FILE

    out = out or sys.stdout
    up = True
    if args.bootstrap_server is not None:
        up = broker_up(args.bootstrap_server, out, security_of(args))
    path = find_status(Path(args.data_dir))
    if path is None:
        print(f"odradek: no {STATUS_FILE} under {args.data_dir} (the broker writes it "
              "there once started; --data-dir is its first log dir)", file=sys.stderr)
        return 2
    status = json.loads(path.read_text())
    if args.json:
        out.write(json.dumps(status, indent=2, sort_keys=True) + "\n")
    else:
        render(status, out, args.stale_seconds)
    return 0 if status.get("healthy") and up else 1


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "status", help="broker health: its log cleaner (from the data dir), and with -b "
                       "whether it answers on the network")
    parser.add_argument("--data-dir", default="./data",
                        help="a log dir (or its parent); default ./data, as make serve uses")
    parser.add_argument("--bootstrap-server", "-b", metavar="HOST:PORT",
                        help="also check over the network that the broker answers")
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties for a secured listener (security.protocol, "
                             "sasl.*, ssl.*), as the other verbs take them")
    parser.add_argument("--json", action="store_true", help="print the raw status JSON")
    parser.add_argument("--stale-seconds", type=float, default=60.0,
                        help="flag a status file older than this (default 60)")
    parser.set_defaults(func=run)
