"""Authentication to ZooKeeper and the ACLs of Odradek's znodes (Kafka's ``zookeeper.set.acl``).

How it works, as Kafka's ZooKeeper mode does it:

- **Who the broker is.** Kafka's brokers (and its ZooKeeper tools) find their ZooKeeper
  credentials in the JAAS file named by the JVM system property
  ``java.security.auth.login.config``, section ``Client`` (or the one named by
  ``zookeeper.sasl.clientconfig``): ``org.apache.zookeeper.server.auth.DigestLoginModule
  required username="..." password="...";`` for SASL DIGEST-MD5. Operators pass that
  property in the environment variable ``KAFKA_OPTS`` (``-Djava.security.auth.login.config=
  /etc/kafka/zk_jaas.conf``), which Kafka's start scripts hand to the JVM. Odradek reads the
  same ``-D`` properties from the same ``KAFKA_OPTS``, for the broker and for ``odradek
  zookeeper-security-migration`` alike: an existing unit file or container environment
  works unchanged, and the broker and the tool cannot disagree on where the credentials
  are (a broker config key would hold only the broker's half). ``-Dzookeeper.sasl.client=
  false`` turns SASL off, as in ZooKeeper's client. The password is never logged or shown
  in a ``repr``.
- **What every znode carries** (Kafka's ``ZkData.defaultAcls``). With
  ``zookeeper.set.acl=false``: world ALL (``OPEN_ACL_UNSAFE``). With ``true``: the creator
  (the authenticated SASL user, ZooKeeper's ``auth`` id) ALL, plus world READ, except under
  Kafka's sensitive roots (``ZkData.SensitiveRootPaths``: ``/config/users`` with SCRAM
  credentials and user quotas, ``/config/brokers`` with dynamic broker configs such as
  keystore passwords, ``/delegation_token/tokens``), where the world gets nothing. Kafka
  leaves ACL nodes (``/kafka-acl*``) world-readable, and so does Odradek; the world cannot
  write them. ``/consumers`` itself (Kafka's old consumers write under it) stays world ALL.
- **No way to authenticate** with ``zookeeper.set.acl=true`` refuses to start, as Kafka's
  ``KafkaServer.initZkClient`` does: the creator ACL would then name nobody.
- **Migrating an existing tree** (Kafka's ``ZkSecurityMigrator``): the chroot's root, then
  every Odradek root path, recursively, get the ACLs above (``secure``) or world ALL
  (``unsecure``); see :func:`migrate_acls`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.security import ACL, CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE

from odradek.cluster.store import StoreError
from odradek.security.sasl import parse_jaas_config

__all__ = [
    "JAVA_LOGIN_CONFIG",
    "ROOT_PATHS",
    "SENSITIVE_ROOT_PATHS",
    "DigestCredentials",
    "ZkClientSecurity",
    "ZooKeeperSecurityError",
    "default_acls",
    "java_system_properties",
    "migrate_acls",
    "read_jaas_sections",
    "sensitive_path",
]

JAVA_LOGIN_CONFIG = "java.security.auth.login.config"
#: ZooKeeper's client properties: the JAAS section to use, and whether to use SASL at all.
ZK_SASL_CLIENT_CONFIG = "zookeeper.sasl.clientconfig"
ZK_SASL_CLIENT = "zookeeper.sasl.client"
DEFAULT_SECTION = "Client"
DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"
KAFKA_OPTS = "KAFKA_OPTS"

#: Kafka's ZkData.SensitiveRootPaths: the world may not even read under these.
SENSITIVE_ROOT_PATHS = ("/config/users", "/config/brokers", "/delegation_token/tokens")
#: Kafka keeps the old consumers' root open to everyone (ZkData.defaultAcls).
CONSUMERS_PATH = "/consumers"
#: The top-level paths the migration walks: Kafka's ZkData.SecureRootPaths (with
#: ZkAclStore's), plus the roots Odradek itself writes.
ROOT_PATHS = (
    "/admin", "/brokers", "/cluster", "/config", "/controller", "/controller_epoch",
    "/isr_change_notification", "/latest_producer_id_block", "/log_dir_event_notification",
    "/delegation_token", "/kafka-acl", "/kafka-acl-changes", "/kafka-acl-extended",
    "/kafka-acl-extended-changes",
    # Odradek's own
    "/controlled_shutdown", "/partition_state_notification", CONSUMERS_PATH,
)
#: Requests the migration keeps in flight (a window of set_acls and get_children).
_PIPELINE = 500


class ZooKeeperSecurityError(StoreError):
    """ZooKeeper security is misconfigured (a JAAS file, ``zookeeper.set.acl``)."""


def sensitive_path(path: str) -> bool:
    return any(path == root or path.startswith(root + "/") for root in SENSITIVE_ROOT_PATHS)


def default_acls(secure: bool, path: str) -> list[ACL]:
    """Kafka's ZkData.defaultAcls: the ACLs of a znode created at ``path`` (chroot-relative)."""
    if not secure or path == CONSUMERS_PATH:
        return list(OPEN_ACL_UNSAFE)
    return list(CREATOR_ALL_ACL) + ([] if sensitive_path(path) else list(READ_ACL_UNSAFE))


def java_system_properties(kafka_opts: str) -> dict[str, str]:
    """The ``-Dkey=value`` properties of a JVM command line (``KAFKA_OPTS``)."""
    props: dict[str, str] = {}
    for word in shlex.split(kafka_opts):
        if word.startswith("-D") and len(word) > 2:
            key, _, value = word[2:].partition("=")
            props[key] = value
    return props


def _strip_comments(text: str) -> str:
    """JAAS files allow ``//`` and ``/* */`` comments; quoted values keep theirs."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            end = i + 1
            while end < len(text) and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            out.append(text[i:end + 1])
            i = end + 1
        elif text.startswith("//", i):
            newline = text.find("\n", i)
            i = len(text) if newline < 0 else newline
        elif text.startswith("/*", i):
            close = text.find("*/", i + 2)
            i = len(text) if close < 0 else close + 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


_SECTION = re.compile(r"\s*([A-Za-z_][\w.$-]*)\s*\{")


def read_jaas_sections(text: str) -> dict[str, str]:
    """A JAAS file's sections, ``Name { <entries> };`` → {Name: <entries>}. ValueError when
    it is not that (naming the character, never quoting the text: it holds passwords)."""
    text = _strip_comments(text)
    sections: dict[str, str] = {}
    pos = 0
    while text[pos:].strip():
        m = _SECTION.match(text, pos)
        if m is None:
            raise ValueError(f"invalid JAAS file at character {pos + 1}: expected 'Name {{'")
        i = m.end()
        while i < len(text) and text[i] != "}":  # the body ends at the first unquoted }
            if text[i] == '"':
                i += 1
                while i < len(text) and text[i] != '"':
                    i += 2 if text[i] == "\\" else 1
            i += 1
        if i >= len(text):
            raise ValueError(f"invalid JAAS file: section {m[1]} has no closing '}}'")
        sections[m[1]] = text[m.end():i]
        pos = i + 1
        rest = text[pos:].lstrip()
        if not rest.startswith(";"):
            raise ValueError(f"invalid JAAS file: section {m[1]} must end with '}};'")
        pos = len(text) - len(rest) + 1
    return sections


@dataclass(frozen=True, slots=True)
class DigestCredentials:
    """A SASL DIGEST-MD5 user of ZooKeeper; the password stays out of ``repr``."""

    username: str
    password: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class ZkClientSecurity:
    """How a client authenticates to ZooKeeper and which ACLs its znodes get."""

    sasl: DigestCredentials | None = None
    set_acl: bool = False
    jaas_file: str | None = None  # where the credentials came from (for messages)

    @classmethod
    def from_jvm_properties(cls, props: Mapping[str, str], set_acl: bool) -> ZkClientSecurity:
        """Kafka's JaasUtils.isZkSaslEnabled: SASL when the login config names a file with
        the client section (``Client``, or ``zookeeper.sasl.clientconfig``) and
        ``zookeeper.sasl.client`` is not false. A section named explicitly but missing, an
        unreadable file or a login module other than DigestLoginModule is an error."""
        jaas_file = props.get(JAVA_LOGIN_CONFIG)
        if not jaas_file or props.get(ZK_SASL_CLIENT, "true").lower() == "false":
            return cls(None, set_acl, None)
        section = props.get(ZK_SASL_CLIENT_CONFIG, DEFAULT_SECTION)
        try:
            text = Path(jaas_file).read_text()
        except OSError as exc:
            raise ZooKeeperSecurityError(
                f"cannot read the JAAS file {jaas_file} ({JAVA_LOGIN_CONFIG}): "
                f"{exc.strerror}") from None
        try:
            sections = read_jaas_sections(text)
            body = sections.get(section)
            modules = parse_jaas_config(body) if body is not None else []
        except ValueError as exc:
            raise ZooKeeperSecurityError(f"{jaas_file}: {exc}") from None
        if body is None:
            if ZK_SASL_CLIENT_CONFIG in props:
                raise ZooKeeperSecurityError(
                    f"the JAAS file {jaas_file} has no section {section!r} "
                    f"({ZK_SASL_CLIENT_CONFIG})")
            return cls(None, set_acl, jaas_file)
        for module in modules:
            if module.login_module == DIGEST_LOGIN_MODULE:
                username = module.options.get("username")
                password = module.options.get("password")
                if not username or password is None:
                    raise ZooKeeperSecurityError(
                        f"{jaas_file}: section {section}: {DIGEST_LOGIN_MODULE} needs "
                        "username and password")
                return cls(DigestCredentials(username, password), set_acl, jaas_file)
        names = ", ".join(m.login_module for m in modules)
        raise ZooKeeperSecurityError(
            f"{jaas_file}: section {section}: Odradek authenticates to ZooKeeper with SASL "
            f"DIGEST-MD5 only ({DIGEST_LOGIN_MODULE}), not {names}")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str], set_acl: bool) -> ZkClientSecurity:
        """From the ``-D`` properties of ``KAFKA_OPTS`` (as Kafka's start scripts pass them)."""
        return cls.from_jvm_properties(java_system_properties(environ.get(KAFKA_OPTS, "")),
                                       set_acl)

    @property
    def authenticated(self) -> bool:
        return self.sasl is not None

    def require_authentication(self) -> None:
        """Refuse ``zookeeper.set.acl=true`` without credentials (Kafka's SecurityException)."""
        if self.set_acl and not self.authenticated:
            where = (f"the JAAS file {self.jaas_file} has no usable {DEFAULT_SECTION} section"
                     if self.jaas_file else
                     f"no JAAS file is named (-D{JAVA_LOGIN_CONFIG}=<file> in {KAFKA_OPTS})")
            raise ZooKeeperSecurityError(
                "zookeeper.set.acl is true, but the broker has no way to authenticate to "
                f"ZooKeeper: {where}; give it a '{DEFAULT_SECTION} {{ {DIGEST_LOGIN_MODULE} "
                "required username=\"...\" password=\"...\"; };' section (docs/operations.md)")

    def acls(self, path: str) -> list[ACL]:
        return default_acls(self.set_acl, path)

    def kazoo_options(self) -> dict[str, Any]:
        if self.sasl is None:
            return {}
        return {"sasl_options": {"mechanism": "DIGEST-MD5", "username": self.sasl.username,
                                 "password": self.sasl.password}}


def migrate_acls(client: KazooClient, secure: bool,
                 roots: Sequence[str] = ROOT_PATHS) -> tuple[int, list[str]]:
    """Kafka's ZkSecurityMigrator on ``client``'s tree (rooted at its chroot): ``/`` alone,
    then each existing root of ``roots`` and everything under it get
    :func:`default_acls`. Returns how many znodes were set and the roots that were missing.
    Nodes deleted meanwhile are skipped; any other failure raises (re-run the tool)."""
    client.set_acls("/", default_acls(secure, "/"))
    count = 1
    missing = [root for root in roots if client.exists(root) is None]
    level = [root for root in roots if root not in missing]
    while level:
        following: list[str] = []
        for start in range(0, len(level), _PIPELINE):
            window = level[start:start + _PIPELINE]
            sets = [client.set_acls_async(p, default_acls(secure, p)) for p in window]
            kids = [client.get_children_async(p) for p in window]
            for path, set_request, kid_request in zip(window, sets, kids, strict=True):
                try:
                    set_request.get()
                    count += 1
                    following.extend(f"{path}/{child}" for child in kid_request.get())
                except NoNodeError:
                    continue
        level = following
    return count, missing
