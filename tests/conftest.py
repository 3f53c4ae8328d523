"""Shared fixtures: real brokers on free loopback ports (see odradek.testing); and how the
suite is spread over pytest-xdist's workers (``make test`` runs ``pytest -n ...
--dist loadgroup``; see :func:`pytest_collection_modifyitems`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from odradek.testing import RunningBroker, odradek_broker, running_broker

__all__ = ["odradek_broker", "shared_broker"]

#: Session fixtures too costly to start once per worker: the tests that take them run on
#: one worker, as one group (the Spark session is a JVM of 1 GB and ~10 s to start).
SHARED_SESSION_FIXTURES = {"spark": "spark-session"}

#: Tests that take longest, started first so that they do not end the run alone on one
#: worker while the others are idle: the Spark session's group (minutes, on one worker),
#: tests marked ``slow``, then whole directories. Within a tier the collection order is
#: kept.
SLOW_FIRST = ("tests/spark/", "tests/interop/", "tests/cli/", "tests/webconsole/")


@pytest.fixture(scope="session")
def shared_broker() -> Iterator[RunningBroker]:
    """One broker for the whole run, for tests that only need their own topics."""
    with running_broker() as broker:
        yield broker


def _group_of(item: pytest.Item) -> str | None:
    """The xdist group of a test: the tests sharing a costly fixture run on one worker,
    one after the other (a module's cluster is started once, not once per worker)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for name in info.names_closure:
        if name in SHARED_SESSION_FIXTURES:
            return SHARED_SESSION_FIXTURES[name]
    for name in info.names_closure:
        defs = info.name2fixturedefs.get(name, ())
        if any(d.scope in ("module", "package", "class") for d in defs):
            return item.nodeid.split("::", 1)[0]
    return None


def _tier(item: pytest.Item, group: str | None) -> int:
    if group in SHARED_SESSION_FIXTURES.values():
        return -1
    if item.get_closest_marker("slow") is not None:
        return 0
    path = item.nodeid.split("::", 1)[0]
    for n, prefix in enumerate(SLOW_FIRST):
        if path.startswith(prefix):
            return 1 + n
    return 1 + len(SLOW_FIRST)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group the tests that share a module- (or class-) scoped fixture, or a costly
    session one, with xdist_group marks (used by ``--dist loadgroup``), and put the
    slowest tiers first (with ``--no-loadscope-reorder``, xdist hands out work in this
    order). Without xdist the marks do nothing and the order only changes which test
    runs when, never what runs.

    NOT YET EFFECTIVE: xdist 3.8 turns the marks into groups by setting ``Item._nodeid``,
    which pytest 9 no longer reads (its node ids come from ``Item._id``), so today each
    test is its own unit: a module's cluster, or the Spark session, may start once per
    worker that gets one of its tests. Still correct (each worker sets up what its tests
    need), only slower; the fix is a scheduler of our own (``pytest_xdist_make_scheduler``)."""
    unit: dict[str, str] = {}  # nodeid -> its group, or itself
    tier: dict[str, int] = {}  # a group's tier: its slowest test's
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        group = _group_of(item)
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
        key = unit[item.nodeid] = group or item.nodeid
        tier[key] = min(tier.get(key, _tier(item, group)), _tier(item, group))
        first.setdefault(key, index)
    # a group's tests stay together (its module fixture is started once), in their order
    items.sort(key=lambda item: (tier[unit[item.nodeid]], first[unit[item.nodeid]]))
