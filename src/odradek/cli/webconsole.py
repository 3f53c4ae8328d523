"""``odradek console``: serve the web console (src/odradek/webconsole) for a cluster.

The ``produce``/``consume`` verbs live in :mod:`odradek.cli.console` (the console producer
and consumer, named after Kafka's kafka-console-*.sh); this module registers the web UI under
the ``console`` verb. It needs the ``console`` extra (starlette, uvicorn, jinja2,
python-multipart, confluent-kafka), imported when the command runs.
``--command-config client.properties`` gives its librdkafka clients the security settings
of a secured listener (the Java client's keys or librdkafka's, as the other verbs).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from odradek.cli._common import librdkafka_security_of


def add_parser(sub: Any) -> None:
    console = sub.add_parser(
        "console", help="serve the web console (topics, messages, groups, metrics)")
    console.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                         help="any broker of the cluster (any Kafka-compatible cluster works)")
    console.add_argument("--command-config", metavar="FILE",
                         help="client properties for a secured listener (security.protocol, "
                              "sasl.*, ssl.*), as the other verbs take them")
    console.add_argument("--host", default="127.0.0.1", help="address to listen on")
    console.add_argument("--port", type=int, default=8080, help="port to listen on")
    console.add_argument("--metrics-url", action="append", default=[], metavar="URL",
                         help="a broker's Prometheus /metrics URL for the live charts "
                              "(repeatable, one per broker)")
    console.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    security = librdkafka_security_of(args.command_config)
    try:
        import uvicorn

        from odradek.webconsole.app import create_app
        from odradek.webconsole.cluster import ClusterClient
    except ImportError as exc:
        print(f"odradek: the web console needs the 'console' extra "
              f"(pip install 'odradek[console]'): {exc}", file=sys.stderr)
        return 1
    # librdkafka's complaints (a broker gone away) arrive through logging, in this format
    logging.basicConfig(level=logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(args.bootstrap_server, args.metrics_url,
                     ClusterClient(args.bootstrap_server, security))
    print(f"odradek console for {args.bootstrap_server} on http://{args.host}:{args.port}/",
          flush=True)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    except OSError as exc:
        print(f"odradek: cannot listen: {exc}", file=sys.stderr)
        return 1
    return 0
