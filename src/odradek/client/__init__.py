"""The small async Kafka client the broker and its tools need (replica fetcher, CLI).

The names below load on first use, not with the package: a module that needs only a
sibling (:mod:`odradek.client.security`, which Spark's planner processes import through
the connector's options) does not pay for the connection and the protocol's schemas.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from odradek.client.connection import BrokerConnection, ClientError
    from odradek.client.partitioner import murmur2, partition_for_key

__all__ = ["BrokerConnection", "ClientError", "murmur2", "partition_for_key"]

_LAZY = {"BrokerConnection": "odradek.client.connection",
         "ClientError": "odradek.client.connection",
         "murmur2": "odradek.client.partitioner",
         "partition_for_key": "odradek.client.partitioner"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        return getattr(importlib.import_module(module), name)
    try:  # a submodule (``odradek.client.connection``), as the eager package had them
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
