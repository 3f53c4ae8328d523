"""Shared pieces of the CLI tools: the bootstrap option and running a client coroutine.

A tool's body gets a :class:`ClusterAdmin`: cluster-wide requests go to the bootstrap
broker, partition-level ones to each partition's leader and group ones to the group's
coordinator, retried while they move (client/routing.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from odradek.client.routing import ClusterAdmin
    from odradek.client.security import (
        ClientSecurity,
    )


#: Exit statuses of every ``odradek`` command (docs/operations.md, "Exit statuses")
EXIT_OK = 0
EXIT_FAILURE = 1  # the command was right, what it did failed (a broker, a Kafka error)
EXIT_USAGE = 2  # the command line or the configuration is wrong (as argparse's own)


class UsageError(SystemExit):
    """A usage or configuration error: ``main`` prints the message on stderr and the exit
    status is :data:`EXIT_USAGE`, the status argparse gives its own errors."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.code = EXIT_USAGE


def add_bootstrap(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092",
                        help="host:port of a broker (default 127.0.0.1:9092)")
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties: security.protocol, sasl.mechanism, "
                             "sasl.username/sasl.password or sasl.jaas.config, "
                             "ssl.ca.location or ssl.truststore.*, ... (as Kafka's tools)")


def security_of(args: argparse.Namespace) -> ClientSecurity:
    """The client security of ``--command-config`` (PLAINTEXT without it); exits on a
    file that cannot be read or a setting that cannot work."""
    from odradek.client.security import PLAINTEXT, client_security

    path = getattr(args, "command_config", None)
    if not path:
        return PLAINTEXT
    return _checked(str(path), "--command-config", client_security)


def librdkafka_security_of(path: Any, option: str = "--command-config") -> dict[str, str]:
    """The same client properties for the tools built on librdkafka (perf, console,
    mirror): its security settings, the Java client's keys translated (none without a
    file). Exits as :func:`security_of`; no message shows a secret."""
    from odradek.client.security import librdkafka_settings

    if not path:
        return {}
    return _checked(str(path), option, librdkafka_settings)


_T = TypeVar("_T")


def _checked(path: str, option: str, convert: Callable[[dict[str, str]], _T]) -> _T:
    from odradek.client.security import load_client_properties

    try:
        return convert(load_client_properties(path))
    except OSError as exc:
        raise UsageError(f"odradek: cannot read {option} {path}: "
                         f"{exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"odradek: {option} {path}: {exc}") from None


def parse_pairs(items: list[str] | None, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"odradek: invalid {what} {item!r}: expected key=value")
        out[key] = value
    return out


def run_with_admin(
    args: argparse.Namespace, body: Callable[[ClusterAdmin], Awaitable[int]]
) -> int:
    import asyncio

    from odradek.client.connection import ClientError
    from odradek.client.routing import ClusterAdmin

    security = security_of(args)

    async def main() -> int:
        try:
            admin = await ClusterAdmin.connect(args.bootstrap_server, client_id="odradek-cli",
                                               security=security)
        except (ClientError, TimeoutError, OSError) as exc:
            print(f"odradek: cannot reach {args.bootstrap_server}: {exc}", file=sys.stderr)
            return 1
        try:
            return await body(admin)
        except ClientError as exc:
            print(f"odradek: {exc}", file=sys.stderr)
            return 1
        finally:
            await admin.close()

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        return 130


def print_table(rows: list[list[Any]]) -> None:
    if not rows:
        return
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
