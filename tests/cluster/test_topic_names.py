"""Topic name rules (odradek.cluster.topic_names), as Kafka's ``Topic`` class."""

from __future__ import annotations

import pytest

from odradek.cluster import topic_names
from odradek.cluster.topic_names import InvalidTopicNameError


@pytest.mark.parametrize("name", [
    "a", "orders", "Orders-2024_v1.5", "__consumer_offsets", "...", "-", "x" * 249,
])
def test_legal(name: str) -> None:
    topic_names.validate(name)


@pytest.mark.parametrize(("name", "why"), [
    ("", "empty"),
    (".", "cannot be"),
    ("..", "cannot be"),
    ("x" * 250, "250 characters"),
    ("with space", "characters"),
    ("slash/no", "characters"),
    ("ünïcode", "characters"),
    ("tab\t", "characters"),
    ("line\n", "characters"),
])
def test_illegal(name: str, why: str) -> None:
    with pytest.raises(InvalidTopicNameError, match=why):
        topic_names.validate(name)


def test_collision_key() -> None:
    assert topic_names.collision_key("a.b_c") == topic_names.collision_key("a_b.c") == "a_b_c"
    assert topic_names.collision_key("a-b") != topic_names.collision_key("a_b")


def test_internal() -> None:
    assert topic_names.is_internal("__consumer_offsets")
    assert topic_names.is_internal("__transaction_state")
    assert not topic_names.is_internal("__other")
    assert not topic_names.is_internal("consumer_offsets")
