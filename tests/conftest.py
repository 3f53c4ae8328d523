"""Shared fixtures: real brokers on free loopback ports (see odradek.testing); and how the
suite is spread over pytest-xdist's workers (``make test`` runs ``pytest -n ...
--dist loadgroup``; see :func:`pytest_collection_modifyitems` and docs/testing.md).

How the spreading works: the tests that share a costly fixture (a module- or class-scoped
broker or cluster, the Spark session) form one *group*, run on one worker one after the
other; every other test is a group of its own. The groups are handed out longest first
(the longest-processing-time rule of list scheduling), their lengths taken from
``tests/durations.json``, what each test took in an earlier run, so that no long test
starts last and ends the run alone on one worker while the others are idle. A test the
file does not know is estimated (:func:`_estimate`); ``--store-durations`` rewrites the
file from the run it ends. The controller prints what each worker was busy for at the
end of a run: the busiest worker's sum is the run's critical path."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

from odradek.cluster import loop_owned
from odradek.testing import RunningBroker, odradek_broker, running_broker
from tests import _deadlines

__all__ = ["odradek_broker", "shared_broker"]

#: Session fixtures too costly to start once per worker: the tests that take them run on
#: one worker, as one group (the Spark session is a JVM of 1 GB and ~10 s to start; the
#: mirror tests run their mirrors in one of their own, tests/spark/conftest.py).
SHARED_SESSION_FIXTURES = {"spark": "spark-session", "mirror_spark": "spark-mirror-session"}

#: What each test took (setup, call and teardown, in seconds) in an earlier run; the tests
#: under :data:`STORED_MIN_S` only as their file's mean. Only the order of the run
#: depends on it.
DURATIONS = Path(__file__).with_name("durations.json")
STORED_MIN_S = 0.5
#: The key suffix of a file's entry for its other tests (their mean).
REST = "::*"

#: The estimates of a test ``tests/durations.json`` does not know (a new one): one marked
#: ``slow``, one in a directory whose tests start brokers, clusters or JVMs, any other.
#: High rather than low: a long test started early costs nothing, one started last may
#: end the run alone.
UNKNOWN_SLOW_S = 60.0
SLOW_DIRS = {"tests/spark/": 20.0, "tests/interop/": 5.0, "tests/cli/": 3.0,
             "tests/webconsole/": 3.0}
UNKNOWN_S = 0.2


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


def _estimate(item: pytest.Item, durations: dict[str, float]) -> float:
    """How long a test takes: as stored, else as the stored short tests of its file took
    on average (``<file>::*``), else the estimate of its kind (a new file's test)."""
    known = durations.get(item.nodeid)
    if known is None:
        known = durations.get(item.nodeid.split("::", 1)[0] + REST)
    if known is not None:
        return known
    if item.get_closest_marker("slow") is not None:
        return UNKNOWN_SLOW_S
    for prefix, seconds in SLOW_DIRS.items():
        if item.nodeid.startswith(prefix):
            return seconds
    return UNKNOWN_S


def _stored_durations() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError):
        return {}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Find the group of every test (the tests that share a module- or class-scoped
    fixture, or a costly session one) and order the groups longest first. Under xdist the
    worker writes the groups where the controller's scheduler (:class:`GroupScheduling`)
    reads them; with ``--no-loadscope-reorder`` work is handed out in this order. Without
    xdist the order only changes which test runs when, never what runs."""
    durations = _stored_durations()
    unit: dict[str, str] = {}  # nodeid -> its group, or itself
    cost: dict[str, float] = defaultdict(float)  # a group's estimated length
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        key = unit[item.nodeid] = _group_of(item) or item.nodeid
        cost[key] += _estimate(item, durations)
        first.setdefault(key, index)
    # a group's tests stay together (its module fixture is started once), in their order
    items.sort(key=lambda item: (-cost[unit[item.nodeid]], first[unit[item.nodeid]]))
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and GROUPS_KEY in workerinput:
        path = Path(workerinput[GROUPS_KEY]) / f"{workerinput['workerid']}.json"
        path.write_text(json.dumps(unit))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--store-durations", action="store_true",
                     help="rewrite tests/durations.json (the scheduler's estimates) from "
                          "what this run's tests took; run the whole suite for it")


class _Timings:
    """A plugin of the controller (or of a run without xdist): what the tests took, per
    test and per worker, as their reports come in."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.started = time.monotonic()
        self.test: dict[str, float] = defaultdict(float)
        self.busy: dict[str, float] = defaultdict(float)
        self.tests: dict[str, int] = defaultdict(int)
        self.done_at: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        node = getattr(report, "node", None)
        worker = node.gateway.id if node is not None else "main"
        self.test[report.nodeid] += report.duration
        self.busy[worker] += report.duration
        if report.when == "teardown":
            self.tests[worker] += 1
        self.done_at[worker] = time.monotonic() - self.started

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Each worker's load: the busiest one's sum is the run's critical path."""
        if not self.busy or "main" in self.busy:  # none without xdist's workers
            return
        terminalreporter.write_sep("-", "time per worker (the busiest one sets the wall time)")
        for worker in sorted(self.busy):
            terminalreporter.write_line(
                f"{worker}: {self.tests[worker]} tests, {self.busy[worker]:.0f} s of tests, "
                f"its last one done {self.done_at[worker]:.0f} s into the run")

    def pytest_sessionfinish(self) -> None:
        if not self.config.getoption("store_durations") or not self.test:
            return
        stored: dict[str, float] = {}
        rest: dict[str, list[float]] = defaultdict(list)
        for nodeid, seconds in self.test.items():
            if seconds >= STORED_MIN_S:
                stored[nodeid] = round(seconds, 1)
            else:
                rest[nodeid.split("::", 1)[0]].append(seconds)
        for path, values in rest.items():
            stored[path + REST] = round(sum(values) / len(values), 3)
        DURATIONS.write_text(json.dumps(dict(sorted(stored.items())), indent=0) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    # docs/architecture.md, "Threads": in every test, a loop-owned dict touched off its
    # loop's thread raises, here and in the brokers tests start as processes (they inherit
    # the variable). ODRADEK_DEBUG_THREADS=0 turns it off.
    os.environ.setdefault(loop_owned.VARIABLE, "1")
    loop_owned.DEBUG = loop_owned.debug_wanted()
    if not hasattr(config, "workerinput"):  # the controller, or a run without xdist
        config.pluginmanager.register(_Timings(config), "odradek-timings")
        # the machine's speed at the start, for the waits' deadlines (tests/_deadlines.py);
        # the workers and the processes the tests start inherit it
        os.environ.setdefault(_deadlines.ENV, f"{_deadlines.measure_speed():.2f}")
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        _lean_children(config)  # in the process that runs the tests, not xdist's controller
    if not hasattr(config, "workerinput"):
        _bytecode_cache()


#: where a run outside ``make test`` keeps the bytecode it may not write into the tree
PYCACHE = Path(__file__).resolve().parent.parent / ".venv" / "pycache"


def _bytecode_cache() -> None:
    """A run started as ``pytest`` where the environment asks for no bytecode
    (``PYTHONDONTWRITEBYTECODE``, as some sandboxes and CI images set) keeps it in
    ``.venv/pycache`` instead (``PYTHONPYCACHEPREFIX``, for this process and every one it
    starts: workers, brokers, commands, Spark's Python processes), as ``make test`` keeps
    its own under its temporary directory (scripts/test). Without it each of those
    processes compiles everything it imports: the test venv is installed without
    bytecode (``pip --no-compile``, scripts/bootstrap), so pyspark, pyarrow and kio as
    much as Odradek (a broker's imports 2.4 s of CPU instead of 1.2 s, a Spark
    streaming runner's 2.1 s instead of 0.64 s). A prefix already set is left alone."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    if not PYCACHE.parent.is_dir() or not os.access(PYCACHE.parent, os.W_OK):
        return
    os.environ["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    sys.pycache_prefix = str(PYCACHE)
    sys.dont_write_bytecode = False


def _lean_children(config: pytest.Config) -> None:
    """The processes the tests start (brokers, CLI commands, Spark's Python workers) find a
    ``hypothesis`` that fails to import, first on their PYTHONPATH: kio imports Hypothesis
    whenever it can, to register strategies for its types, and Hypothesis (with pytest and
    trio behind it) is more than half of a broker's or a command's start-up CPU here. Only
    the test process uses it; an install without the test extras has none either. A test
    that sets its own PYTHONPATH for a child only makes that child slower."""
    stub = Path(tempfile.mkdtemp(prefix="odradek-lean-"))
    config.add_cleanup(lambda: shutil.rmtree(stub, ignore_errors=True))
    (stub / "hypothesis").mkdir()
    (stub / "hypothesis" / "__init__.py").write_text(
        "raise ImportError('hypothesis is left out of the processes the tests start "
        "(tests/conftest.py)')\n")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, (str(stub), os.environ.get("PYTHONPATH"))))


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
