"""``odradek console``: serve the web console (src/odradek/webconsole) for a cluster.

The ``produce``/``consume`` verbs live in :mod:`odradek.cli.console` (the console producer
and consumer, named after Kafka's kafka-console-*.sh); this module registers the web UI under
the ``console`` verb. It needs the ``console`` extra (starlette, uvicorn, jinja2,
python-multipart, confluent-kafka), imported when the command runs.
``--command-config client.properties`` gives its librdkafka clients the security settings
of a secured listener (the Java client's keys or librdkafka's, as the other verbs).

The console's own door (odradek.webconsole.guard): it will not start without a login
(``--password-file``) unless it is bound to loopback and ``--no-login`` is given; it answers
only to the host names it is bound to and ``--allowed-host``; ``--certfile``/``--keyfile``
serve it over TLS (Secure cookies); ``--read-only`` drops every state-changing route.
Refusals to start exit with status 2, as argparse's usage errors do.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING, Any

from odradek.cli._common import librdkafka_security_of

if TYPE_CHECKING:
    from odradek.webconsole.guard import Guard


def add_parser(sub: Any) -> None:
    console = sub.add_parser(
        "console", help="serve the web console (topics, messages, groups, metrics)")
    console.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                         help="any broker of the cluster (any Kafka-compatible cluster works)")
    console.add_argument("--command-config", metavar="FILE",
                         help="client properties for a secured listener (security.protocol, "
                              "sasl.*, ssl.*), as the other verbs take them")
    console.add_argument("--host", default="127.0.0.1",
                         help="address to listen on (default loopback only)")
    console.add_argument("--password-file", metavar="FILE",
                         help="file whose first line is the console's login password "
                              "(never given on the command line)")
    console.add_argument("--no-login", action="store_true",
                         help="no login: anyone who reaches the console acts with its "
                              "--command-config; allowed only on a loopback --host")
    console.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                         help="a host name the console also answers to (the name a proxy "
                              "or browser uses for it; repeatable); others get 400")
    console.add_argument("--read-only", action="store_true",
                         help="no state-changing routes (403) and no forms")
    console.add_argument("--certfile", metavar="PEM",
                         help="serve the console over TLS with this certificate (chain)")
    console.add_argument("--keyfile", metavar="PEM", help="the private key of --certfile")
    console.add_argument("--port", type=int, default=8080, help="port to listen on")
    console.add_argument("--metrics-url", action="append", default=[], metavar="URL",
                         help="a broker's Prometheus /metrics URL for the live charts "
                              "(repeatable, one per broker)")
    console.set_defaults(func=_run)


def _guard_of(args: argparse.Namespace) -> Guard:
    """The console's :class:`~odradek.webconsole.guard.Guard`, or ConsoleSetupError."""
    from odradek.webconsole.guard import (
        ConsoleSetupError,
        Guard,
        hosts_for,
        is_loopback,
        read_password_file,
    )

    if bool(args.certfile) != bool(args.keyfile):
        raise ConsoleSetupError("TLS needs both --certfile and --keyfile")
    if args.password_file and args.no_login:
        raise ConsoleSetupError("--password-file or --no-login, not both")
    if args.password_file:
        password: bytes | None = read_password_file(args.password_file)
    elif args.no_login:
        if not is_loopback(args.host):
            raise ConsoleSetupError(
                f"--no-login is allowed only on a loopback --host (127.0.0.1, ::1, "
                f"localhost), not {args.host}: give the console --password-file FILE")
        password = None
    else:
        raise ConsoleSetupError(
            "the console acts on the cluster with its --command-config's rights: give it "
            "--password-file FILE (a login), or, bound to loopback, --no-login to run it "
            "without one")
    return Guard(password=password, allowed_hosts=hosts_for(args.host, args.allowed_host),
                 read_only=args.read_only, secure=bool(args.certfile))


def _run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from odradek.webconsole.app import create_app
        from odradek.webconsole.cluster import ClusterClient
        from odradek.webconsole.guard import ConsoleSetupError, is_loopback
    except ImportError as exc:
        print(f"odradek: the web console needs the 'console' extra "
              f"(pip install 'odradek[console]'): {exc}", file=sys.stderr)
        return 1
    try:
        guard = _guard_of(args)
    except ConsoleSetupError as exc:
        print(f"odradek: {exc}", file=sys.stderr)
        return 2
    security = librdkafka_security_of(args.command_config)
    if not is_loopback(args.host) and not args.certfile:
        print(f"odradek: WARNING: the console listens on {args.host} without TLS: its "
              f"password, session cookie and pages cross the network in clear (give it "
              f"--certfile/--keyfile, or put it behind a TLS proxy)", file=sys.stderr,
              flush=True)
    # librdkafka's complaints (a broker gone away) arrive through logging, in this format
    logging.basicConfig(level=logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(args.bootstrap_server, args.metrics_url,
                     ClusterClient(args.bootstrap_server, security), guard=guard)
    scheme = "https" if args.certfile else "http"
    door = ("read-only, " if args.read_only else "") + (
        "login with --password-file" if args.password_file else "no login (--no-login)")
    print(f"odradek console for {args.bootstrap_server} on {scheme}://{args.host}:{args.port}/ "
          f"({door})", flush=True)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning",
                    ssl_certfile=args.certfile, ssl_keyfile=args.keyfile)
    except OSError as exc:
        print(f"odradek: cannot listen: {exc}", file=sys.stderr)
        return 1
    return 0
