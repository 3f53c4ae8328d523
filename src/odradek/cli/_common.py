"""Shared pieces of the CLI tools: the bootstrap option and running a client coroutine."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from odradek.client.admin import Admin
from odradek.client.connection import BrokerConnection, ClientError
from odradek.client.security import (
    PLAINTEXT,
    ClientSecurity,
    client_security,
    librdkafka_settings,
    load_client_properties,
)


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
    path = getattr(args, "command_config", None)
    if not path:
        return PLAINTEXT
    try:
        return client_security(load_client_properties(path))
    except OSError as exc:
        raise SystemExit(f"odradek: cannot read --command-config {path}: "
                         f"{exc.strerror or exc}") from None
    except ValueError as exc:
        raise SystemExit(f"odradek: --command-config {path}: {exc}") from None


def command_config_librdkafka(args: argparse.Namespace) -> dict[str, str]:
    """``--command-config`` as confluent-kafka settings (empty without it)."""
    path = getattr(args, "command_config", None)
    if not path:
        return {}
    try:
        return librdkafka_settings(load_client_properties(path))
    except OSError as exc:
        raise SystemExit(f"odradek: cannot read --command-config {path}: "
                         f"{exc.strerror or exc}") from None
    except ValueError as exc:
        raise SystemExit(f"odradek: --command-config {path}: {exc}") from None


def parse_pairs(items: list[str] | None, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"odradek: invalid {what} {item!r}: expected key=value")
        out[key] = value
    return out


def run_with_admin(
    args: argparse.Namespace, body: Callable[[Admin], Awaitable[int]]
) -> int:
    security = security_of(args)

    async def main() -> int:
        try:
            conn = await BrokerConnection.open(args.bootstrap_server, client_id="odradek-cli",
                                               security=security)
        except (ClientError, TimeoutError, OSError) as exc:
            print(f"odradek: cannot reach {args.bootstrap_server}: {exc}", file=sys.stderr)
            return 1
        try:
            return await body(Admin(conn))
        except ClientError as exc:
            print(f"odradek: {exc}", file=sys.stderr)
            return 1
        finally:
            await conn.close()

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
