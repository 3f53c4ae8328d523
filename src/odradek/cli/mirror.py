"""``odradek mirror``: copy topics from one cluster to another (MirrorMaker 2) as a Spark
Structured Streaming job; the job itself is :mod:`odradek.spark.mirror`.

This module only parses the command line and checks that the ``spark`` extra is
installed (pyspark, pyarrow, confluent-kafka), importing them where the command runs, so
``odradek --help`` works without them. Each side takes its client security settings from
a properties file, ``--source-command-config`` / ``--target-command-config`` (the Java
client's keys or librdkafka's, as ``--command-config`` of the other verbs; MirrorMaker's
``source.`` / ``target.`` client settings).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from pathlib import Path
from typing import Any

from odradek.cli._common import librdkafka_security_of, parse_pairs

SPARK_EXTRA = "pip install 'odradek[spark]'"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "mirror",
        help="mirror topics between clusters (MirrorMaker 2) as a Spark streaming job",
        description="Copies the topics matching --include from the source cluster to the "
                    "target: same partitions, order, keys, values, headers and timestamps; "
                    "topics created with the source's partition count and configs; consumer "
                    "group offsets translated. Restart with the same --checkpoint-dir to "
                    "resume exactly where it stopped (see docs/mirror.md).",
    )
    p.add_argument("--source-bootstrap-server", required=True, metavar="HOST:PORT[,...]",
                   help="the cluster mirrored from")
    p.add_argument("--target-bootstrap-server", required=True, metavar="HOST:PORT[,...]",
                   help="the cluster mirrored to")
    p.add_argument("--include", required=True, metavar="REGEX",
                   help="topics to mirror (regex on the whole name; '__' topics never)")
    p.add_argument("--exclude", metavar="REGEX", help="topics not to mirror")
    p.add_argument("--topic-prefix", default="",
                   help="target topic = prefix + source topic (default: same name)")
    p.add_argument("--checkpoint-dir", type=Path, default=Path("odradek-mirror-checkpoint"),
                   help="Spark checkpoint and the mirror's state (default "
                        "./odradek-mirror-checkpoint); the same directory resumes")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--group", default="odradek-mirror",
                   help="group under which the mirror commits its progress on the source")
    p.add_argument("--sync-interval", type=float, default=5.0, metavar="SECONDS",
                   help="how often new topics/partitions, group offsets and topic configs "
                   "are synced (5)")
    p.add_argument("--poll-interval-ms", type=int, default=100, metavar="MS",
                   help="how often a micro-batch starts: the Spark query's processing-time "
                        "trigger (100; at most an hour); while no records flow, how often "
                        "the source is asked for new ones. 0: Spark's default trigger, "
                        "which asks again 10 ms after each empty micro-batch")
    p.add_argument("--max-records-per-batch", type=int, default=500_000,
                   help="maxOffsetsPerTrigger of the source (500000)")
    p.add_argument("--replication-factor", type=int, default=-1,
                   help="of the target topics it creates (default: the target's default)")
    p.add_argument("--source-command-config", metavar="FILE",
                   help="client properties for the source cluster (security.protocol, "
                        "sasl.*, ssl.*), as --command-config of the other verbs")
    p.add_argument("--target-command-config", metavar="FILE",
                   help="client properties for the target cluster, likewise")
    p.add_argument("--source-property", action="append", metavar="KEY=VALUE",
                   help="librdkafka property for the source clients (repeatable)")
    p.add_argument("--target-property", action="append", metavar="KEY=VALUE",
                   help="librdkafka property for the target clients (repeatable)")
    p.add_argument("--timeout", type=int, default=30_000, metavar="MS",
                   help="bound on every request to either cluster (30000)")
    p.add_argument("--isolation-level", choices=("read_committed", "read_uncommitted"),
                   default="read_committed",
                   help="how the source is read (Kafka's consumer isolation.level): "
                        "read_committed (the default) leaves out aborted transactions")
    p.add_argument("--transactional-id", metavar="PREFIX",
                   help="write the target transactionally (exactly once for read_committed "
                        "consumers of the target): each target partition is written under "
                        "the transactional.id PREFIX-<target topic>-<partition>, its "
                        "source offsets committed in the same transactions")
    p.set_defaults(func=_mirror)


#: the longest --poll-interval-ms taken: an hour, well inside what Spark's trigger parses
MAX_POLL_INTERVAL_MS = 3_600_000


def _mirror(args: argparse.Namespace) -> int:
    source_security = librdkafka_security_of(args.source_command_config,
                                             "--source-command-config")
    target_security = librdkafka_security_of(args.target_command_config,
                                             "--target-command-config")
    for module in ("pyspark", "pyarrow", "confluent_kafka"):
        try:
            importlib.import_module(module)
        except ImportError:
            print(f"odradek: mirror runs on Spark and needs {module}, which is not installed: "
                  f"{SPARK_EXTRA}", file=sys.stderr)
            return 1
    for name, value in (("--sync-interval", args.sync_interval),
                        ("--max-records-per-batch", args.max_records_per_batch),
                        ("--timeout", args.timeout)):
        if value <= 0:
            print(f"odradek: {name} must be > 0", file=sys.stderr)
            return 2
    if not 0 <= args.poll_interval_ms <= MAX_POLL_INTERVAL_MS:
        print(f"odradek: --poll-interval-ms must be from 0 to {MAX_POLL_INTERVAL_MS} (an hour)",
              file=sys.stderr)
        return 2
    if args.transactional_id is not None and not args.transactional_id.strip():
        print("odradek: --transactional-id must not be empty", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: "
                                                   "%(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from odradek.spark.mirror import MirrorConfig, MirrorError, MirrorJob

    cfg = MirrorConfig(
        source=args.source_bootstrap_server,
        target=args.target_bootstrap_server,
        include=args.include,
        exclude=args.exclude,
        topic_prefix=args.topic_prefix,
        checkpoint_dir=args.checkpoint_dir.resolve(),
        master=args.master,
        group=args.group,
        sync_interval_s=args.sync_interval,
        poll_interval_ms=args.poll_interval_ms,
        max_records_per_batch=args.max_records_per_batch,
        replication_factor=args.replication_factor,
        api_timeout_ms=args.timeout,
        isolation_level=args.isolation_level,
        transactional_id=args.transactional_id,
        source_client={**source_security,
                       **parse_pairs(args.source_property, "--source-property")},
        target_client={**target_security,
                       **parse_pairs(args.target_property, "--target-property")},
    )
    try:
        return MirrorJob(cfg).run()
    except MirrorError as exc:
        print(f"odradek: mirror: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
