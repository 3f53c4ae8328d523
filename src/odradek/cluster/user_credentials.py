"""Users' SCRAM credentials, stored as Kafka stores them.

How it works: Kafka keeps a user's SCRAM credentials in the user's entity config,
``/config/users/<sanitized user>`` (JSON ``{"version":1,"config":{...}}``, the node client
quotas by user share), one key per mechanism: ``"SCRAM-SHA-256":
"salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>"`` (Kafka's
``ScramCredentialUtils``). A broker reads the node when a client authenticates (no
cache to invalidate: a change made through any broker is seen at the next
authentication), in cluster mode in ZooKeeper, on the single node in the embedded
store. Every call blocks: in cluster mode run it off the event loop.
"""

from __future__ import annotations

import contextlib
import json
import urllib.parse
from collections.abc import Mapping

from odradek.cluster.store import MetadataStore, NoNodeError, NotEmptyError

__all__ = [
    "USERS_PATH",
    "delete_scram_credential",
    "list_scram_users",
    "read_user_config",
    "scram_credential",
    "set_scram_credential",
]

USERS_PATH = "/config/users"
SCRAM_KEYS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def _path(user: str) -> str:
    return f"{USERS_PATH}/{urllib.parse.quote(user, safe='')}"


def read_user_config(store: MetadataStore, user: str) -> dict[str, str]:
    """Every config of ``user`` (SCRAM credentials and quotas alike)."""
    node = store.get(_path(user))
    if node is None or not node.data:
        return {}
    try:
        return dict(json.loads(node.data).get("config") or {})
    except (ValueError, TypeError, AttributeError):
        return {}


def scram_credential(store: MetadataStore, mechanism: str, user: str) -> str | None:
    """The stored credential text of ``user`` for ``mechanism``, or None."""
    return read_user_config(store, user).get(mechanism)


def _write(store: MetadataStore, user: str, configs: Mapping[str, str]) -> None:
    path = _path(user)
    # The node stays while quotas of the user's client ids live below it.
    if configs or store.children(path):
        store.set_or_create(path, json.dumps({"version": 1, "config": dict(configs)}).encode())
    else:
        with contextlib.suppress(NoNodeError, NotEmptyError):
            store.delete(path)


def set_scram_credential(store: MetadataStore, user: str, mechanism: str, text: str) -> None:
    configs = read_user_config(store, user)
    configs[mechanism] = text
    _write(store, user, configs)


def delete_scram_credential(store: MetadataStore, user: str, mechanism: str) -> bool:
    """Remove one mechanism's credential; False if there was none."""
    configs = read_user_config(store, user)
    if mechanism not in configs:
        return False
    del configs[mechanism]
    _write(store, user, configs)
    return True


def list_scram_users(store: MetadataStore) -> dict[str, dict[str, int]]:
    """user -> {mechanism: iterations} for every user with a SCRAM credential."""
    out: dict[str, dict[str, int]] = {}
    try:
        names = store.children(USERS_PATH)
    except NoNodeError:
        return out
    for name in names:
        user = urllib.parse.unquote(name)
        for mechanism, text in read_user_config(store, user).items():
            if mechanism in SCRAM_KEYS:
                fields = dict(p.split("=", 1) for p in text.split(",") if "=" in p)
                with contextlib.suppress(KeyError, ValueError):
                    out.setdefault(user, {})[mechanism] = int(fields["iterations"])
    return out
