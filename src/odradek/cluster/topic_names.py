"""Topic name rules (Kafka's ``org.apache.kafka.common.internals.Topic``).

A name is 1..249 characters of ASCII letters, digits, ``.``, ``_`` and ``-``; not ``.`` or
``..``. Because metric names replace ``.`` with ``_``, two topics whose names differ only by
``.`` versus ``_`` collide, and the second is refused.
"""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")  # fullmatch: "$" would let a final "\n" through
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class InvalidTopicNameError(ValueError):
    pass


def validate(name: str) -> None:
    if not name:
        raise InvalidTopicNameError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicNameError(f"topic name cannot be {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopicNameError(
            f"topic name is {len(name)} characters, more than {MAX_NAME_LENGTH}"
        )
    if not _LEGAL.fullmatch(name):
        raise InvalidTopicNameError(
            f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_', '-'"
        )


def collision_key(name: str) -> str:
    return name.replace(".", "_")


def is_internal(name: str) -> bool:
    return name in INTERNAL_TOPICS
