"""``odradek zookeeper-security-migration`` (Kafka's zookeeper-security-migration.sh,
``ZkSecurityMigrator``).

How it works: the tool authenticates to ZooKeeper as a broker does, with the JAAS file's
``Client`` section named by ``-Djava.security.auth.login.config`` in ``KAFKA_OPTS`` (Kafka's
tool reads the same JVM property), or with a TLS client certificate, or both. Its TLS keys
come as Kafka's tool takes them: ``--zk-tls-config-file`` names a properties file whose
``zookeeper.ssl.*`` and ``zookeeper.clientCnxnSocket`` keys (Kafka's names; any other key
is ignored, and said to be) win over the ZooKeeper client's properties in ``KAFKA_OPTS``
(``-Dzookeeper.client.secure=true`` ...). It refuses to run without SASL or a client
certificate, in either direction: the secured nodes allow ACL changes to their creator
only. It opens
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
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from odradek.cluster.zk_security_names import (
    JAVA_LOGIN_CONFIG,
    KAFKA_OPTS,
    ZK_TLS_SYSTEM_PROPERTIES,
)

if TYPE_CHECKING:
    from odradek.cluster.zk_security import ZkClientSecurity

# odradek.cluster.zk_security, zk_store, store and odradek.server.config are imported
# where the tool runs: kazoo, the store and the broker's whole package, and every
# ``odradek`` command builds this sub-command's parser (tests/cli/test_main.py)

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
    p.add_argument("--zk-tls-config-file", dest="tls_config_file", metavar="FILE",
                   help="a properties file with the ZooKeeper client's TLS keys ("
                        + ", ".join(ZK_TLS_SYSTEM_PROPERTIES) + "); other keys are ignored")
    p.set_defaults(func=_run)


class _UsageError(Exception):
    pass


def _tls_config_file(path: str) -> dict[str, str]:
    """The ZooKeeper TLS keys of ``--zk-tls-config-file`` (Kafka's names), as strings."""
    from odradek.server.config import parse_properties

    try:
        props = parse_properties(Path(path).read_text())
    except OSError as exc:
        raise _UsageError(f"cannot read --zk-tls-config-file {path}: "
                          f"{exc.strerror or exc}") from None
    kept = {key: value for key, value in props.items() if key in ZK_TLS_SYSTEM_PROPERTIES}
    ignored = sorted(set(props) - set(kept))
    if ignored:  # a camelCase ZooKeeper name is the usual mistake: say so
        print(f"odradek zookeeper-security-migration: ignoring {', '.join(ignored)} in "
              f"{path}: it reads only {', '.join(ZK_TLS_SYSTEM_PROPERTIES)}", file=sys.stderr)
    return kept


def _security(args: argparse.Namespace, environ: Mapping[str, str]) -> ZkClientSecurity:
    """SASL from KAFKA_OPTS, TLS from the file (else KAFKA_OPTS); a _UsageError when the
    tool could not authenticate (Kafka's tool refuses then too)."""
    from odradek.cluster.store import StoreError
    from odradek.cluster.zk_security import ZkClientSecurity
    from odradek.server.config import BrokerConfig, ConfigError

    file_values = _tls_config_file(args.tls_config_file) if args.tls_config_file else {}
    try:
        config = BrokerConfig.from_raw(file_values)
        security = ZkClientSecurity.for_tool(config.values, file_values, environ,
                                             set_acl=args.acl == "secure")
    except (ConfigError, StoreError) as exc:
        where = f" ({args.tls_config_file})" if args.tls_config_file else ""
        raise _UsageError(f"{exc}{where}") from None
    if not security.authenticated:
        jaas = (f"the JAAS file {security.jaas_file} has no Client section"
                if security.jaas_file else "no JAAS configuration file has been specified")
        tls = ("the TLS settings name no client certificate" if security.tls is not None
               else "no TLS client certificate has been specified")
        raise _UsageError(
            f"{jaas} and {tls}: set -D{JAVA_LOGIN_CONFIG}=<file> in {KAFKA_OPTS}, or give "
            "a ZooKeeper client TLS configuration with --zk-tls-config-file <file> naming "
            "at least zookeeper.ssl.client.enable, zookeeper.clientCnxnSocket and "
            "zookeeper.ssl.keystore.location")
    return security


def _run(args: argparse.Namespace) -> int:
    from odradek.cluster.store import StoreError
    from odradek.cluster.zk_security import migrate_acls
    from odradek.cluster.zk_store import ZooKeeperStore

    secure = args.acl == "secure"
    try:
        security = _security(args, os.environ)
    except _UsageError as exc:
        print(f"odradek zookeeper-security-migration: {exc}", file=sys.stderr)
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
