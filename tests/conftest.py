"""Shared fixtures: real brokers on free loopback ports (see odradek.testing); and how the
suite is spread over pytest-xdist's workers (``make test`` runs ``pytest -n ...
--dist loadgroup``; see :func:`pytest_collection_modifyitems`)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

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
    """The group of a test: the tests sharing a costly fixture run on one worker,
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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Find the group of every test (the tests that share a module- or class-scoped
    fixture, or a costly session one) and put the slowest tiers first. Under xdist the
    worker writes the groups where the controller's scheduler (:class:`GroupScheduling`)
    reads them; with ``--no-loadscope-reorder`` work is handed out in this order. Without
    xdist the order only changes which test runs when, never what runs."""
    unit: dict[str, str] = {}  # nodeid -> its group, or itself
    tier: dict[str, int] = {}  # a group's tier: its slowest test's
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        group = _group_of(item)
        key = unit[item.nodeid] = group or item.nodeid
        tier[key] = min(tier.get(key, _tier(item, group)), _tier(item, group))
        first.setdefault(key, index)
    # a group's tests stay together (its module fixture is started once), in their order
    items.sort(key=lambda item: (tier[unit[item.nodeid]], first[unit[item.nodeid]]))
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and GROUPS_KEY in workerinput:
        path = Path(workerinput[GROUPS_KEY]) / f"{workerinput['workerid']}.json"
        path.write_text(json.dumps(unit))


GROUPS_KEY = "odradek_xdist_groups"


class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """xdist's load-scope scheduling with our groups as the scopes: every test of a group
    goes to the same worker, one after the other, so its fixture starts once.

    xdist's own ``loadgroup`` reads ``xdist_group`` marks from node ids that a mark
    rewrites, which pytest 9 no longer lets a plugin do; the workers here write each
    test's group to a file instead (:func:`pytest_collection_modifyitems`), and the
    scheduler reads them once every worker has collected (all collect the same tests)."""

    def __init__(self, config: pytest.Config, log: Any, groups_dir: Path) -> None:
        super().__init__(config, log)
        self._groups_dir = groups_dir
        self._groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:
            self._groups = {}
            for path in sorted(self._groups_dir.glob("*.json")):
                self._groups.update(json.loads(path.read_text()))
        return self._groups.get(nodeid, nodeid)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """The controller tells each worker where to write its tests' groups."""
    node.workerinput[GROUPS_KEY] = str(_groups_dir(node.config))


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None  # xdist's own schedulers
    return GroupScheduling(config, log, _groups_dir(config))


def _groups_dir(config: pytest.Config) -> Path:
    found: Path | None = config.stash.get(_GROUPS_DIR, None)
    if found is None:
        found = Path(tempfile.mkdtemp(prefix="odradek-xdist-groups-"))
        config.stash[_GROUPS_DIR] = found
        config.add_cleanup(lambda: shutil.rmtree(found, ignore_errors=True))
    return found


_GROUPS_DIR = pytest.StashKey[Path]()
