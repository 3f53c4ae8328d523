"""``odradek``: the command line entry point; each sub-command lives in its own module."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from odradek import __version__


def _serve(args: argparse.Namespace) -> int:
    from odradek.server.broker import run_broker
    from odradek.server.config import BrokerConfig, ConfigError

    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        config = BrokerConfig.load(args.config, args.override or [])
    except ConfigError as exc:
        print(f"odradek: invalid configuration: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(run_broker(config, args.ready_file))
    except KeyboardInterrupt:
        pass
    except Exception as exc:
        logging.getLogger("odradek").critical("broker failed: %s", exc, exc_info=True)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="odradek", description="A Kafka-compatible broker.")
    parser.add_argument("--version", action="version", version=f"odradek {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a broker (defaults: 127.0.0.1:9092, ./data)")
    serve.add_argument("--config", type=Path, help="a server.properties file")
    serve.add_argument("--override", action="append", metavar="KEY=VALUE",
                       help="set a config key (repeatable), wins over --config")
    serve.add_argument("--log-level", default="info",
                       choices=["debug", "info", "warning", "error"])
    serve.add_argument("--ready-file", type=Path, help=argparse.SUPPRESS)
    serve.set_defaults(func=_serve)
    for module in ("dump_log", "topics", "console", "groups", "status"):
        try:
            mod = __import__(f"odradek.cli.{module}", fromlist=["add_parser"])
        except ModuleNotFoundError:
            continue
        mod.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
