"""``odradek zookeeper-security-migration`` (Kafka's zookeeper-security-migration.sh,
``ZkSecurityMigrator``).

How it works: the tool authenticates to ZooKeeper as a broker does, with the JAAS file's
``Client`` section named by ``-Djava.security.auth.login.config`` in ``KAFKA_OPTS`` (Kafka's
tool reads the same JVM property; it refuses to run without credentials, in either
direction: the secured nodes allow ACL changes to their creator only). It opens
``--zookeeper.connect`` (with its chroot), then sets the ACLs of the chroot's root and of
every node under Kafka's and Odradek's root paths
(:func:`odradek.cluster.zk_security.migrate_acls`): ``secure`` gives Kafka's ACLs (the
authenticated user ALL, the world READ except on credentials), ``unsecure`` gives the world
ALL. Kafka's order for securing a running cluster (docs/operations.md): restart the brokers
with the JAAS file, then again with ``zookeeper.set.acl=true``, then run this tool;
unsecuring is the reverse.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from odradek.cluster.store import StoreError
from odradek.cluster.zk_security import (
    JAVA_LOGIN_CONFIG,
    KAFKA_OPTS,
    ZkClientSecurity,
    migrate_acls,
)
from odradek.cluster.zk_store import ZooKeeperStore

__all__ = ["add_parser"]

ACL_MODES = ("secure", "unsecure")
DEFAULT_TIMEOUT_MS = 30_000  # Kafka's tool: both timeouts 30 s


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "zookeeper-security-migration",
        help="set Kafka's ACLs on (or take them off) an existing cluster's znodes "
             "(zookeeper-security-migration.sh)",
        description="Credentials: the Client section of the JAAS file named by "
                    f"-D{JAVA_LOGIN_CONFIG}=<file> in {KAFKA_OPTS}, as for Kafka's tool.")
    p.add_argument("--zookeeper.acl", dest="acl", required=True, choices=ACL_MODES,
                   help="secure: creator ALL, world READ except credentials; "
                        "unsecure: world ALL")
    p.add_argument("--zookeeper.connect", dest="connect", default="localhost:2181",
                   help="host:port[,host:port...][/chroot] (default localhost:2181)")
    p.add_argument("--zookeeper.session.timeout", dest="session_timeout", type=int,
                   default=DEFAULT_TIMEOUT_MS, help="ms (default 30000)")
    p.add_argument("--zookeeper.connection.timeout", dest="connection_timeout", type=int,
                   default=DEFAULT_TIMEOUT_MS, help="ms (default 30000)")
    p.add_argument("--enable.path.check", dest="path_check", action="store_true",
                   help="exit with an error, changing nothing, if the chroot holds no "
                        "cluster (no /brokers)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    secure = args.acl == "secure"
    try:
        security = ZkClientSecurity.from_environment(os.environ, set_acl=secure)
    except StoreError as exc:
        print(f"odradek zookeeper-security-migration: {exc}", file=sys.stderr)
        return 2
    if not security.authenticated:
        print("odradek zookeeper-security-migration: no JAAS configuration file with a "
              f"Client section has been specified: set -D{JAVA_LOGIN_CONFIG}=<file> in "
              f"{KAFKA_OPTS}", file=sys.stderr)
        return 2
    try:
        store = ZooKeeperStore(args.connect, args.session_timeout, args.connection_timeout,
                               security=security)
    except StoreError as exc:
        print(f"odradek zookeeper-security-migration: {exc}", file=sys.stderr)
        return 1
    try:
        if store.client.exists("/brokers") is None:
            # Odradek makes /brokers at its first start; Kafka's other roots may be absent
            print(f"Warning: no /brokers under {args.connect}: no cluster there? That might "
                  "be due to an incorrect chroot.")
            if args.path_check:
                print("Exit the command.")
                return 1
        count, _ = migrate_acls(store.client, secure)
    except Exception as exc:  # a kazoo error: say which, the user re-runs the tool
        print(f"odradek zookeeper-security-migration: failed ({type(exc).__name__}: {exc}); "
              "re-run it", file=sys.stderr)
        return 1
    finally:
        store.close()
    print(f"set {args.acl} ACLs on {count} znodes under {args.connect}")
    return 0
