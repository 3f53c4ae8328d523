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
import urllib.parse

from odradek.cluster.store import MetadataStore, NoNodeError, config_of

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
    return config_of(store.get(_path(user)))


def scram_credential(store: MetadataStore, mechanism: str, user: str) -> str | None:
    """The stored credential text of ``user`` for ``mechanism``, or None."""
    return read_user_config(store, user).get(mechanism)


def set_scram_credential(store: MetadataStore, user: str, mechanism: str, text: str) -> None:
    """Store ``user``'s credential for ``mechanism``: a read-modify-write of the user's
    node, compare-and-set (:meth:`MetadataStore.update_config`), so quotas or another
    credential written meanwhile through another broker are kept."""
    store.update_config(_path(user), lambda configs: {**configs, mechanism: text})


def delete_scram_credential(store: MetadataStore, user: str, mechanism: str) -> bool:
    """Remove one mechanism's credential; False if there was none. The node goes once
    nothing is left in it and no client quotas of the user live below it."""
    if mechanism not in read_user_config(store, user):
        return False
    store.update_config(_path(user), lambda configs: {
        k: v for k, v in configs.items() if k != mechanism})
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
