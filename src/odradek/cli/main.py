"""``odradek``: the command line entry point; each sub-command lives in its own module.

``serve`` is defined here; every other sub-command is a module of this package, listed in
:data:`SUBCOMMAND_MODULES`, with an ``add_parser(subparsers)`` function. A listed module
that fails to import is an error of the whole command line, naming the module and the
error (exit status 1): a broken install must not quietly lose a sub-command. A sub-command
that needs an optional extra (mirror: spark) imports it where it runs, not at module
level, and says which extra to install when it is missing. Every command builds every
sub-command's parser, so a sub-command module imports at module level only what its
parser needs: the client, asyncio, the record and storage modules, kazoo are imported
where the command runs (tests/cli/test_main.py checks it).

Exit statuses, the same for every sub-command (``_common.EXIT_*``): 0 success; 1 a
runtime failure (a broker unreachable or refusing, a Kafka error, a port or log dir
taken, a sub-command module that fails to import); 2 a usage or configuration error (a
flag missing, unknown or in conflict, an invalid value or config key, an input file that
cannot be read or parsed: argparse's own status, and :class:`UsageError`); 128 + N when
signal N stopped ``consume`` (130 Ctrl-C, 143 SIGTERM), as Kafka's tools do.
"""

from __future__ import annotations

import argparse
import difflib
import errno
import importlib
import logging
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from odradek import __version__
from odradek.cli._common import UsageError

#: Modules of ``odradek.cli`` that register sub-commands, in the order ``--help`` lists them.
SUBCOMMAND_MODULES = ("dump_log", "topics", "configs", "acls", "console", "groups",
                      "transactions", "leader_election", "status", "dev_cluster", "reassign",
                      "perf", "webconsole", "mirror", "zookeeper_security_migration")


SERVE_EPILOG = """\
configuration:
  Keys are Kafka's server.properties names, with Kafka's defaults (listeners, log.dirs,
  num.partitions, log.retention.hours, zookeeper.connect, ...).
  config/server.properties  an example in Kafka's layout, each key explained (make serve)
  src/odradek/server/config.py  every key the broker knows, its type, default and meaning
  A key the broker does not know is reported at start-up with the nearest known one; an
  invalid value refuses to start, naming the type Kafka expects.
"""


class SubcommandImportError(Exception):
    """A sub-command's module failed to import; the original error is ``__cause__``."""

    def __init__(self, module: str, error: BaseException) -> None:
        self.module = module
        self.error = error
        super().__init__(
            f"the sub-command module {module} failed to import: "
            f"{type(error).__name__}: {error}{_where(error)}"
        )


def _where(error: BaseException) -> str:
    """`` (at file:line)``: the last frame of the error outside importlib, if any."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if not f.filename.startswith("<frozen ")]
    if not frames or isinstance(error, SyntaxError):  # a SyntaxError names its own line
        return ""
    return f" (at {frames[-1].filename}:{frames[-1].lineno})"


def _serve(args: argparse.Namespace) -> int:
    import asyncio

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
    from odradek.cluster.store import StoreError
    from odradek.server.broker_stats import MetricsError
    from odradek.storage.errors import StorageError

    try:
        asyncio.run(run_broker(config, args.ready_file))
    except KeyboardInterrupt:
        pass
    except StoreError as exc:  # cluster mode: ZooKeeper unreachable, broker.id taken, ...
        print(f"odradek: cannot join the cluster: {exc}", file=sys.stderr)
        return 1
    except StorageError as exc:  # e.g. the log dir is locked by a broker already running
        print(f"odradek: cannot start: {exc}", file=sys.stderr)
        return 1
    except MetricsError as exc:  # metrics.listener: no prometheus_client, port taken
        print(f"odradek: cannot start: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        # Start-up failures an operator can fix (a port in use, a log dir that is a file,
        # not writable, on a full disk): one line naming the file, no traceback.
        print(f"odradek: {_os_error_line(exc)}", file=sys.stderr)
        logging.getLogger("odradek").debug("start-up failed", exc_info=True)
        return 1
    except Exception as exc:
        logging.getLogger("odradek").critical("broker failed: %s", exc, exc_info=True)
        return 1
    return 0


def _os_error_line(exc: OSError) -> str:
    """``cannot listen: ...`` for the listeners (their bind names the address), else
    ``cannot start: <reason>: <file>``."""
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL) or "(binding " in reason:
        return f"cannot listen: {reason}"
    if exc.errno == errno.EEXIST and exc.filename and not Path(exc.filename).is_dir():
        reason = "not a directory"  # a log dir that is a file
    where = f": {exc.filename}" if exc.filename else ""
    return f"cannot start: {reason}{where}"


class OdradekArgumentParser(argparse.ArgumentParser):
    """argparse, with a mistyped flag named under the usage of the (sub)command it was given
    to, and the nearest known flag suggested (``--topc`` -> ``--topic``). Sub-commands get
    this class too (argparse makes sub-parsers of the parent's class). A flag is unknown
    when it is not a prefix of any of the command's flags (argparse takes unique
    prefixes); a command with sub-commands checks its own flags, up to the sub-command."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if args is not None:
            known = [o for o in self._option_string_actions if o.startswith("--")]
            verbs = self._verbs()
            for token in args:
                if token == "--" or token in verbs:  # the rest is the sub-command's
                    break
                flag = token.split("=", 1)[0]
                if flag.startswith("--") and not any(o.startswith(flag) for o in known):
                    close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
                    hint = f" (did you mean {close[0]}?)" if close else ""
                    self.error(f"unrecognized argument {flag}{hint}")
        return super().parse_known_args(args, namespace)

    def _verbs(self) -> set[str]:
        """The names of this parser's sub-commands (none for a leaf command)."""
        return {name for action in self._actions
                if isinstance(action, argparse._SubParsersAction) for name in action.choices}


def build_parser() -> argparse.ArgumentParser:
    parser = OdradekArgumentParser(prog="odradek", description="A Kafka-compatible broker.")
    parser.add_argument("--version", action="version", version=f"odradek {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve", help="run a broker (defaults: 127.0.0.1:9092, ./data)",
        description="Run a broker until SIGTERM or Ctrl-C. Without --config it listens on\n"
                    "127.0.0.1:9092 with its logs in ./data and Kafka's defaults.",
        epilog=SERVE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--config", type=Path, metavar="FILE",
                       help="a server.properties file (Kafka's keys; e.g. the repository's "
                            "config/server.properties, which make serve uses)")
    serve.add_argument("--override", action="append", metavar="KEY=VALUE",
                       help="set a config key (repeatable), wins over --config")
    serve.add_argument("--log-level", default="info",
                       choices=["debug", "info", "warning", "error"],
                       help="the broker's log level (default info; debug adds per-log "
                            "details)")
    serve.add_argument("--ready-file", type=Path, help=argparse.SUPPRESS)
    serve.set_defaults(func=_serve)
    for name in SUBCOMMAND_MODULES:
        module = f"odradek.cli.{name}"
        try:
            mod = importlib.import_module(module)
        except Exception as exc:
            raise SubcommandImportError(module, exc) from exc
        mod.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
    except SubcommandImportError as exc:
        print(f"odradek: {exc}", file=sys.stderr)
        return 1
    args = parser.parse_args(argv)
    try:
        result: int = args.func(args)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        raise
    return result


if __name__ == "__main__":
    sys.exit(main())
