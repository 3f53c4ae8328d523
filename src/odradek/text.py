"""Small helpers for what people read: counts with their noun in the right number."""

from __future__ import annotations

__all__ = ["plural"]


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``1 partition``, ``3 partitions``, ``0 partitions`` (``plural_form`` for irregular
    nouns, e.g. ``plural(n, "index", "indexes")``)."""
    word = noun if count == 1 else plural_form or f"{noun}s"
    return f"{count:,} {word}"
