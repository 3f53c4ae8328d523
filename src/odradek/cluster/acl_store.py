"""ACLs in the metadata store, in Kafka's ZooKeeper layout (``ZkData``'s ACL nodes).

How it works: the entries of a LITERAL pattern live in ``/kafka-acl/<ResourceType>/<name>``,
those of a PREFIXED one in ``/kafka-acl-extended/prefixed/<ResourceType>/<name>``, each as
``{"version": 1, "acls": [{"principal": "User:alice", "permissionType": "Allow",
"operation": "Read", "host": "*"}]}``. A change rewrites the pattern's node with
compare-and-set (a pattern left without entries loses its node) and then creates a
sequential change notification naming the pattern: ``/kafka-acl-changes/acl_changes_<seq>``
holding ``Topic:name`` for a LITERAL pattern, ``/kafka-acl-extended-changes/acl_changes_<seq>``
holding ``{"version": 1, "resourceType": "Topic", "name": ..., "patternType": "PREFIXED"}``
for the others (Kafka's ``LiteralAclChangeStore`` / ``ExtendedAclChangeStore``). Every broker
watches both notification parents; a new notification makes it read the named pattern
again, so a change made through any broker is enforced by all of them as soon as the
store's watch fires. The writer removes notifications past the newest
``MAX_NOTIFICATIONS`` (Kafka purges by age instead); a broker that connects again with a
new session reads every ACL once, so none that it missed is lost.

The embedded store of a single node holds the same tree (persisted with the rest of the
metadata), so the ACLs survive a restart in both modes. Blocking: in cluster mode call
everything here off the event loop; watch callbacks run on the store's thread.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from odradek.cluster.store import (
    BadVersionError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    SessionEvent,
    StoreError,
)
from odradek.security.acl import (
    AclEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

__all__ = ["AclStore"]

log = logging.getLogger(__name__)

LITERAL_ROOT = "/kafka-acl"
EXTENDED_ROOT = "/kafka-acl-extended"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
# Notifications kept under each parent: older ones are removed by the writer.
MAX_NOTIFICATIONS = 1000
# The resource types whose ACLs are stored (those CreateAcls accepts).
STORED_TYPES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                ResourceType.TRANSACTIONAL_ID, ResourceType.DELEGATION_TOKEN,
                ResourceType.USER)

Entries = frozenset[AclEntry]
OnChange = Callable[[ResourcePattern, Entries], None]
OnReload = Callable[[dict[ResourcePattern, Entries]], None]


def _root(pattern_type: PatternType) -> str:
    if pattern_type is PatternType.LITERAL:
        return LITERAL_ROOT
    return f"{EXTENDED_ROOT}/{pattern_type.name.lower()}"


def pattern_path(pattern: ResourcePattern) -> str:
    return f"{_root(pattern.pattern_type)}/{pattern.resource_type.title}/{pattern.name}"


def encode_acls(entries: Iterable[AclEntry]) -> bytes:
    acls = [
        {"principal": e.principal, "permissionType": e.permission.title,
         "operation": e.operation.title, "host": e.host}
        for e in sorted(entries, key=lambda e: (e.principal, e.host, e.operation, e.permission))
    ]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def decode_acls(data: bytes) -> Entries:
    if not data:
        return frozenset()
    doc: Any = json.loads(data)
    return frozenset(
        AclEntry(str(a["principal"]), str(a["host"]),
                 AclOperation.from_title(str(a["operation"])),
                 AclPermissionType.from_title(str(a["permissionType"])))
        for a in doc.get("acls", ())
    )


def _encode_change(pattern: ResourcePattern) -> tuple[str, bytes]:
    if pattern.pattern_type is PatternType.LITERAL:
        return LITERAL_CHANGES, f"{pattern.resource_type.title}:{pattern.name}".encode()
    doc = {"version": 1, "resourceType": pattern.resource_type.title, "name": pattern.name,
           "patternType": pattern.pattern_type.name}
    return EXTENDED_CHANGES, json.dumps(doc, separators=(",", ":")).encode()


def _decode_change(parent: str, data: bytes) -> ResourcePattern:
    text = data.decode()
    if parent == LITERAL_CHANGES:
        kind, name = text.split(":", 1)
        return ResourcePattern(ResourceType.from_title(kind), name, PatternType.LITERAL)
    doc = json.loads(text)
    return ResourcePattern(ResourceType.from_title(doc["resourceType"]), doc["name"],
                           PatternType[doc["patternType"].upper()])


class AclStore:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._lock = threading.RLock()
        self._seen: dict[str, str] = {}  # change parent -> newest notification handled
        self._on_change: OnChange | None = None
        self._on_reload: OnReload | None = None
        self._closed = False

    # -- reading -----------------------------------------------------------------------
    def read(self, pattern: ResourcePattern) -> tuple[Entries, int]:
        """The entries of ``pattern`` and its node's version (-1: no node)."""
        node = self.store.get(pattern_path(pattern))
        if node is None:
            return frozenset(), -1
        return decode_acls(node.data), node.version

    def read_all(self) -> dict[ResourcePattern, Entries]:
        out: dict[ResourcePattern, Entries] = {}
        for ptype in (PatternType.LITERAL, PatternType.PREFIXED):
            for rtype in STORED_TYPES:
                parent = f"{_root(ptype)}/{rtype.title}"
                for name in self.store.children(parent):
                    pattern = ResourcePattern(rtype, name, ptype)
                    try:
                        entries, _ = self.read(pattern)
                    except (ValueError, KeyError, TypeError):
                        log.warning("ignoring unreadable ACLs in %s", pattern_path(pattern))
                        continue
                    if entries:
                        out[pattern] = entries
        return out

    # -- writing -----------------------------------------------------------------------
    def update(self, pattern: ResourcePattern, add: Iterable[AclEntry] = (),
               remove: Iterable[AclEntry] = ()) -> Entries:
        """Add and remove entries of ``pattern`` (compare-and-set, retried on a race) and
        announce the change; returns the entries now stored."""
        add, remove = frozenset(add), frozenset(remove)
        path = pattern_path(pattern)
        while True:
            current, version = self.read(pattern)
            wanted = (current - remove) | add
            if wanted == current:
                return current
            try:
                if not wanted:
                    self.store.delete(path, expected_version=version)
                elif version < 0:
                    self.store.create(path, encode_acls(wanted))
                else:
                    self.store.set(path, encode_acls(wanted), expected_version=version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # changed meanwhile: read again
            break
        self._notify(pattern)
        return wanted

    def _notify(self, pattern: ResourcePattern) -> None:
        parent, data = _encode_change(pattern)
        self.store.create(f"{parent}/{CHANGE_PREFIX}", data, sequential=True)
        names = self.store.children(parent)
        for stale in names[:-MAX_NOTIFICATIONS]:
            with contextlib.suppress(NoNodeError):
                self.store.delete(f"{parent}/{stale}")

    # -- following changes ---------------------------------------------------------------
    def follow(self, on_change: OnChange, on_reload: OnReload) -> None:
        """Read every ACL, hand them to ``on_reload(all)``, and watch the change
        notifications: ``on_change(pattern, entries)`` for each pattern changed anywhere
        since, ``on_reload(all)`` again after a new session. The callbacks come in the
        order of the changes, on the store's thread (or the writer's)."""
        self._on_change = on_change
        self._on_reload = on_reload
        self.store.add_session_listener(self._on_session)
        with self._lock:
            for parent in (LITERAL_CHANGES, EXTENDED_CHANGES):
                # notifications already there describe ACLs read below
                self._seen[parent] = max(self.store.children(parent), default="")
            on_reload(self.read_all())
            for parent in (LITERAL_CHANGES, EXTENDED_CHANGES):
                self._watch(parent)

    def close(self) -> None:
        self._closed = True
        self.store.remove_session_listener(self._on_session)

    def _watch(self, parent: str, _path: str = "") -> None:
        if self._closed:
            return
        with self._lock:
            try:
                names = sorted(self.store.children(
                    parent, watch=lambda path: self._watch(parent, path)))
            except StoreError:
                log.exception("cannot read %s", parent)
                return
            last = self._seen.get(parent, "")
            for name in names:
                if name <= last:
                    continue
                self._seen[parent] = name
                node = self.store.get(f"{parent}/{name}")
                if node is None:
                    continue  # purged already; its pattern was re-read by a later one or a reload
                try:
                    pattern = _decode_change(parent, node.data)
                    entries, _ = self.read(pattern)
                except (ValueError, KeyError, TypeError, StoreError):
                    log.exception("cannot read the ACL change %s/%s", parent, name)
                    continue
                if self._on_change is not None:
                    self._on_change(pattern, entries)

    def _on_session(self, event: SessionEvent) -> None:
        if event is not SessionEvent.NEW_SESSION or self._closed:
            return
        with self._lock:
            try:
                acls = self.read_all()
                for parent in (LITERAL_CHANGES, EXTENDED_CHANGES):
                    self._seen[parent] = max(self.store.children(parent), default="")
            except StoreError:
                log.exception("cannot read the ACLs again after a new session")
                return
            if self._on_reload is not None:
                self._on_reload(acls)
            for parent in (LITERAL_CHANGES, EXTENDED_CHANGES):
                self._watch(parent)
