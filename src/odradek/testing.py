"""Start a real Odradek broker for tests: a context manager and a pytest fixture.

The broker runs in this process, on its own event loop in a background thread, listening
on loopback port 0 (the system picks a free port as it binds, read back from
``RunningBroker.port`` or ``.ports``, and advertised), with its data in a temporary
directory. Clients talk to it over
real sockets, exactly as they would to a deployed broker::

    from odradek.testing import running_broker

    with running_broker(overrides={"num.partitions": "3"}) as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})

Unlike a broker's default, a new group's first rebalance is not delayed
(``group.initial.rebalance.delay.ms`` = 0, as Kafka's own test harness sets it).

With pytest, register this module as a plugin in your top-level ``conftest.py``::

    pytest_plugins = ["odradek.testing"]

(a string, so linters keep it; an imported fixture looks unused to them and gets removed).
Then take ``odradek_broker``, a fresh broker per test; give it config keys with a marker,
or start several with the factory::

    @pytest.mark.odradek_broker_config({"num.partitions": "3"})
    def test_three(odradek_broker): ...

    def test_two(odradek_broker_factory):
        a = odradek_broker_factory({"auto.create.topics.enable": "false"})
        b = odradek_broker_factory()
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from odradek.server.broker import Broker
from odradek.server.config import BrokerConfig

__all__ = ["RunningBroker", "odradek_broker", "odradek_broker_factory", "running_broker"]

#: the marker that gives ``odradek_broker`` config keys
CONFIG_MARKER = "odradek_broker_config"


class RunningBroker:
    def __init__(self, broker: Broker, loop: asyncio.AbstractEventLoop, data_dir: Path) -> None:
        self.broker = broker
        self.loop = loop
        self.data_dir = data_dir

    @property
    def port(self) -> int:
        return self.broker.port

    @property
    def ports(self) -> dict[str, int]:
        """Each listener's bound port by listener name (every listener of a test broker
        is on port 0 unless the test says otherwise: the system picks a free one)."""
        return self.broker.bound_ports()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def call(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` on the broker's loop thread and return its result."""
        async def run() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)


@contextmanager
def running_broker(
    overrides: Mapping[str, str] | None = None, data_dir: Path | None = None
) -> Iterator[RunningBroker]:
    own_dir = data_dir is None
    directory = Path(tempfile.mkdtemp(prefix="odradek-")) if data_dir is None else data_dir
    raw = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(directory / "data"),
        # A test's group forms at once, as in Kafka's own test harness; overridable.
        "group.initial.rebalance.delay.ms": "0",
        **(overrides or {}),
    }
    config = BrokerConfig.from_raw(raw)
    loop = asyncio.new_event_loop()
    broker = Broker(config)
    ready = threading.Event()
    failure: list[BaseException] = []
    stop = asyncio.Event()

    async def main() -> None:
        try:
            await broker.start()
        except BaseException as exc:
            failure.append(exc)
            ready.set()
            return
        ready.set()
        await stop.wait()
        await broker.stop()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True,
                              name="odradek-broker")
    thread.start()
    if not ready.wait(120):
        loop.call_soon_threadsafe(stop.set)
        raise RuntimeError("broker did not start within 120 s")
    if failure:
        thread.join(10)
        raise RuntimeError(f"broker failed to start: {failure[0]}") from failure[0]
    try:
        yield RunningBroker(broker, loop, directory)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(120)
        if not thread.is_alive():
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()
        if own_dir:
            shutil.rmtree(directory, ignore_errors=True)


try:
    import pytest
except ImportError:  # pytest is optional for users of the context manager
    pass
else:

    def pytest_configure(config: pytest.Config) -> None:
        config.addinivalue_line(
            "markers", f"{CONFIG_MARKER}(overrides): broker config keys (a dict of Kafka's "
                       "names to values) for this test's odradek_broker")

    @pytest.fixture
    def odradek_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningBroker]:
        """A fresh broker per test, data under the test's tmp_path; config keys from the
        test's ``@pytest.mark.odradek_broker_config({...})``, if any."""
        overrides: dict[str, str] = {}
        marker = request.node.get_closest_marker(CONFIG_MARKER)
        if marker is not None:
            for arg in marker.args:
                overrides.update({str(k): str(v) for k, v in dict(arg).items()})
        with running_broker(overrides=overrides, data_dir=tmp_path) as broker:
            yield broker

    @pytest.fixture
    def odradek_broker_factory(
        tmp_path: Path,
    ) -> Iterator[Callable[..., RunningBroker]]:
        """``start(overrides=None)`` starts another broker (each with its own data dir
        under tmp_path); all are stopped when the test ends."""
        numbers = itertools.count(1)
        with ExitStack() as stack:
            def start(overrides: Mapping[str, str] | None = None) -> RunningBroker:
                directory = tmp_path / f"odradek-{next(numbers)}"
                return stack.enter_context(running_broker(overrides, data_dir=directory))

            yield start
